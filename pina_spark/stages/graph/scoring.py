"""Scores of item pairs and the filters on scored pairs, shared by both pair strategies.

Edges with ``count >= graph.min_count`` are scored by ``graph.measure`` with ``N`` = baskets with
>= 2 items (after capping) and ``n_a`` = those baskets containing ``a``: ``count``: c;
``jaccard``: c / (n_a + n_b - c); ``pmi``: ln(c * N / (n_a * n_b)); ``llr``: Dunning's G^2
exactly as Mahout's ``LogLikelihood.logLikelihoodRatio(k11, k12, k21, k22)`` with k11 = c, k12 =
n_a - c, k21 = n_b - c, k22 = N - n_a - n_b + c. The same formulas exist as Spark expressions
(:func:`_score`, scores by joins) and in numpy on the executors (:func:`_score_np`).

Then (:func:`_finish_pairs`) ``score >= graph.min_score`` when set. ``graph.top_n``: each item
ranks its neighbours by (score desc, neighbour id asc); an edge is kept when EITHER endpoint has
the other in its top-n (union, so the output stays symmetric and no item loses its best
neighbours). ``graph.max_degree`` (hub cap, applied after top_n on the remaining graph, same
ranking): an edge is kept only when BOTH endpoints rank each other within max_degree, which
guarantees that no item has more than max_degree neighbours. The result has both directions of
every edge.
"""

from pina_spark import storage
from pina_spark.stages.graph.baskets import _SIZE

# internal column names of undirected pairs, ``_item_a < _item_b`` (never published)
_ITEM_A = "_item_a"
_ITEM_B = "_item_b"


def _xlogx(c):
    from pyspark.sql import functions as F

    return F.when(c > 0, c * F.log(c)).otherwise(F.lit(0.0))


def _llr_parts(xlogx, k11, k12, k21, k22):
    """Mahout LogLikelihood's row, column and matrix entropies over any arithmetic (Spark
    columns or numpy arrays, with the matching ``xlogx``)."""

    def entropy(*ks):
        total = ks[0]
        for k in ks[1:]:
            total = total + k
        out = xlogx(total)
        for k in ks:
            out = out - xlogx(k)
        return out

    return (
        entropy(k11 + k12, k21 + k22),
        entropy(k11 + k21, k12 + k22),
        entropy(k11, k12, k21, k22),
    )


def _llr(k11, k12, k21, k22):
    """Mahout LogLikelihood.logLikelihoodRatio as a Spark expression (doubles)."""
    from pyspark.sql import functions as F

    row, col, mat = _llr_parts(_xlogx, k11, k12, k21, k22)
    return F.when(row + col < mat, F.lit(0.0)).otherwise(F.lit(2.0) * (row + col - mat))


def _score(pairs, capped, measure: str):
    """Add ``score`` to ``_item_a, _item_b, count``."""
    from pyspark.sql import functions as F

    c = F.col(storage.COUNT).cast("double")
    if measure == "count":
        return pairs.withColumn(storage.SCORE, c)
    used = capped.filter(F.col(_SIZE) >= 2)
    n_item = used.groupBy(storage.ITEM_ID).agg(F.count(F.lit(1)).cast("double").alias("_n"))
    big_n = used.agg(F.countDistinct(storage.BASKET_ID).cast("double").alias("_N"))
    df = (
        pairs.join(
            n_item.select(F.col(storage.ITEM_ID).alias(_ITEM_A), F.col("_n").alias("_na")), _ITEM_A
        )
        .join(
            n_item.select(F.col(storage.ITEM_ID).alias(_ITEM_B), F.col("_n").alias("_nb")), _ITEM_B
        )
        .crossJoin(F.broadcast(big_n))
    )
    na, nb, nn = F.col("_na"), F.col("_nb"), F.col("_N")
    if measure == "jaccard":
        s = c / (na + nb - c)
    elif measure == "pmi":
        s = F.log(c * nn / (na * nb))
    elif measure == "llr":
        s = _llr(c, na - c, nb - c, nn - na - nb + c)
    else:
        raise ValueError(
            f"graph.measure: unknown measure {measure!r} " "(expected count, jaccard, pmi, llr)"
        )
    return df.withColumn(storage.SCORE, s).drop("_na", "_nb", "_N")


def _score_np(c, na, nb, big_n, measure: str):
    """Executor side: the measures of :func:`_score` in numpy (same formulas, same order)."""
    import numpy as np

    if measure == "count":
        return c
    if measure == "jaccard":
        return c / (na + nb - c)
    if measure == "pmi":
        return np.log(c * big_n / (na * nb))

    def xlogx(v):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v > 0, v * np.log(np.where(v > 0, v, 1.0)), 0.0)

    row, col, mat = _llr_parts(xlogx, c, na - c, nb - c, big_n - na - nb + c)
    return np.where(row + col < mat, 0.0, 2.0 * (row + col - mat))


def _directed(undirected):
    """``_item_a, _item_b, count, score`` -> both directions as ``src_id, dst_id, ...``."""
    from pyspark.sql import functions as F

    cols = [storage.COUNT, storage.SCORE]
    fwd = undirected.select(
        F.col(_ITEM_A).alias(storage.SRC_ID), F.col(_ITEM_B).alias(storage.DST_ID), *cols
    )
    bwd = undirected.select(
        F.col(_ITEM_B).alias(storage.SRC_ID), F.col(_ITEM_A).alias(storage.DST_ID), *cols
    )
    return fwd.unionByName(bwd)


def _mutual_ranks(directed):
    """Undirected pairs with each endpoint's rank of the other: ``_item_a, _item_b, count, score,
    _r_ab`` (rank of b among a's neighbours) and ``_r_ba``. Ranking: score desc, id asc."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(storage.SRC_ID).orderBy(
        F.col(storage.SCORE).desc(), F.col(storage.DST_ID).asc()
    )
    r = directed.withColumn("_r", F.row_number().over(w))
    fwd = r.filter(F.col(storage.SRC_ID) < F.col(storage.DST_ID)).select(
        F.col(storage.SRC_ID).alias(_ITEM_A),
        F.col(storage.DST_ID).alias(_ITEM_B),
        storage.COUNT,
        storage.SCORE,
        F.col("_r").alias("_r_ab"),
    )
    bwd = r.filter(F.col(storage.SRC_ID) > F.col(storage.DST_ID)).select(
        F.col(storage.DST_ID).alias(_ITEM_A),
        F.col(storage.SRC_ID).alias(_ITEM_B),
        F.col("_r").alias("_r_ba"),
    )
    return fwd.join(bwd, [_ITEM_A, _ITEM_B])


def _finish_pairs(pairs, graph_cfg):
    """min_score, top_n and max_degree on scored pairs; both directions as ``src_id, dst_id``."""
    from pyspark.sql import functions as F

    if graph_cfg.min_score is not None:
        pairs = pairs.filter(F.col(storage.SCORE) >= graph_cfg.min_score)
    if graph_cfg.top_n is not None:
        m = _mutual_ranks(_directed(pairs))
        pairs = m.filter((F.col("_r_ab") <= graph_cfg.top_n) | (F.col("_r_ba") <= graph_cfg.top_n))
    if graph_cfg.max_degree is not None:
        m = _mutual_ranks(_directed(pairs.select(_ITEM_A, _ITEM_B, storage.COUNT, storage.SCORE)))
        pairs = m.filter(
            (F.col("_r_ab") <= graph_cfg.max_degree) & (F.col("_r_ba") <= graph_cfg.max_degree)
        )
    pairs = pairs.select(
        _ITEM_A,
        _ITEM_B,
        F.col(storage.COUNT).cast("long").alias(storage.COUNT),
        F.col(storage.SCORE).cast("double").alias(storage.SCORE),
    )
    return _directed(pairs)
