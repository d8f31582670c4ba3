"""The graph stage: node indices, the co-purchase (I2I) graph, the downstream targets and B_pre.

Driver side, except the functions documented as executor side. ``run(ctx)`` validates the
inputs (:mod:`pina_spark.validate`), publishes ``quarantine/<table>`` for every configured input
(always, even when empty), then ``nodes``, ``graph/i2i_edges`` (when events are given),
``graph/instance_labels`` and ``graph/pretrain_edges`` (partitioned by ``variant``) exactly as
``docs/design.md`` describes. The transforms are pure DataFrame -> DataFrame functions that tests
and notebooks call directly.

I2I graph (:func:`i2i_edges`)
-----------------------------
* Events are reduced to distinct (basket, item). Baskets with fewer than 2 items contribute
  nothing (counted in the stats, never quarantined).
* Baskets with more than ``graph.max_basket_size`` distinct items are down-sampled
  deterministically: items are ranked by ``sha1(basket_id + "\\x1f" + item_id)`` (hex string,
  ascending; ties by item id) and the first ``max_basket_size`` are kept. No ``rand()``: the same
  ids give the same sample on any partitioning and on task retries.
* Every unordered pair of kept items counts once per basket: ``count`` = number of baskets in
  which both items were kept. Event weights are validated but not summed (a count of baskets is
  what min_count thresholds and what the measures below are defined on).
* Edges with ``count >= graph.min_count`` are kept, scored by ``graph.measure`` with
  ``N`` = baskets with >= 2 items (after capping) and ``n_a`` = those baskets containing ``a``:
  ``count``: c; ``jaccard``: c / (n_a + n_b - c); ``pmi``: ln(c * N / (n_a * n_b));
  ``llr``: Dunning's G^2 exactly as Mahout's ``LogLikelihood.logLikelihoodRatio(k11, k12, k21,
  k22)`` with k11 = c, k12 = n_a - c, k21 = n_b - c, k22 = N - n_a - n_b + c. Then
  ``score >= graph.min_score`` when set.
* ``graph.top_n``: each item ranks its neighbours by (score desc, neighbour id asc); an edge is
  kept when EITHER endpoint has the other in its top-n (union, so the output stays symmetric and
  no item loses its best neighbours). ``graph.max_degree`` (hub cap, applied after top_n on the
  remaining graph, same ranking): an edge is kept only when BOTH endpoints rank each other within
  max_degree, which guarantees that no item has more than max_degree neighbours.
* The output has both directions of every edge and no self loops. It is the raw graph over ALL
  items (train and test): it defines the graph labels of test instances.

Pair counting (``graph.strategy``, decided once on the driver: :func:`pair_plan`)
--------------------------------------------------------------------------------
Both strategies give the same edges (tests/test_graph.py checks both against brute force).

* ``broadcast`` (``auto`` up to ``graph.broadcast_max_events`` input events): the events are
  validated on their way to the driver, in one pass (:mod:`pina_spark.validate.events`: read by
  pyarrow where it reaches Parquet input, else one Spark collect; the row rules, unknown items
  and duplicates on the driver), and the driver codes items by sorted id, drops duplicate rows,
  applies the cap (hashing only the rows of baskets over the cap) and builds the basket x item
  incidence matrix X (CSR) with n_a and N (:func:`basket_matrix`). One Spark job of
  ``defaultParallelism`` tasks gets X as a broadcast; task t counts the pairs (a, b), a < b, of
  its contiguous range of item codes (ranges of about equal work) as ``X[:, lo:hi].T @ X[:,
  lo:]`` (scipy's sparse product accumulates each row in a dense buffer: no sort of the pair
  occurrences), keeps ``count >= min_count`` and scores them in numpy. No shuffle; only
  thresholded edges leave the tasks. The train-only graph is built from the same collected rows
  (train items kept before the cap), not from a second pass over the events.
* ``shuffle``: :func:`capped_baskets` (a window per basket), per-partition pair counts
  (:func:`co_counts`, numpy) merged by a Spark aggregation, scores by joins
  (:func:`_score`). For logs that do not fit the driver.

Leak policy (``task.labels: graph`` and the ``A`` block)
--------------------------------------------------------
Anything that trains a model is built from a second graph over TRAIN items only (events whose item
is a train instance; capping, counts, N and n_a computed on those events alone):

* the ``A`` block of B_pre (train instance -> train instance),
* the graph labels of TRAIN instances (their neighbours in the train-only graph).

The graph labels of TEST instances are their neighbours in the all-items graph that are TRAIN
items. Test items are never labels. Label nodes are the train items that are a label of at least
one instance. B_pre only uses train instances and the labels carried by train instances
(``I_label``/``BT`` exist only for labels in ``B``), so removing every test row from the inputs
leaves ``graph/pretrain_edges`` unchanged as (node_id, node_id) pairs (tests/test_graph.py proves
it).

Small inputs on the driver
--------------------------
``instances``, ``labels`` and ``instance_labels`` of at most
:data:`pina_spark.validate.DRIVER_MAX_ROWS` rows (and ``DRIVER_MAX_BYTES``) are validated on the
driver in one pyarrow pass
(:mod:`pina_spark.validate.tables`); with labels given, ``nodes``, ``graph/instance_labels``
and (``side_info`` ``label_text`` / ``naive``) ``graph/pretrain_edges`` are then built there
with numpy (:mod:`pina_spark.stages.graph.driver`), by the definitions below, and written by
pyarrow. Same tables as the Spark path (tests/test_graph.py); no Spark job per table.

Node indices (:func:`assign_node_indices`)
------------------------------------------
Instances sorted by id get ``0..n-1``, then labels sorted by id. The global rank is computed
without a single-partition window: range-partition by id, number rows inside each partition, add
the partition's offset (sizes of the partitions before it, collected on the driver). Range
partitions hold consecutive key ranges, so the result is the same for any partitioning.

B_pre (:func:`pretrain_edges`), all weights 1.0 (binary B_pre, the paper's setting)
-----------------------------------------------------------------------------------
``label_text``: B (train inst -> label), I_inst (every train inst -> itself), I_label (label in B
-> itself), BT (label -> train inst). ``i2i``: A (train inst <-> train inst, both directions, no
self loops) plus I_inst for the train instances without any A edge (so every train instance is a
row of B_pre). ``both``: label_text union A. ``naive``: B only. ``variant=pina_naive`` (B only)
is always written as well.

Examples
--------
>>> from pina_spark.config import GraphConfig
>>> ev = spark.createDataFrame([("o1", "a"), ("o1", "b"), ("o2", "a"), ("o2", "b")],
...                            "basket_id string, item_id string")              # doctest: +SKIP
>>> i2i_edges(ev, GraphConfig(min_count=2)).show()                              # doctest: +SKIP
+------+------+-----+-----+
|src_id|dst_id|count|score|
+------+------+-----+-----+
|     a|     b|    2|  2.0|
|     b|     a|    2|  2.0|
+------+------+-----+-----+
"""

import dataclasses as dc
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from pina_spark import storage, validate
from pina_spark.config import variants as V
from pina_spark.runtime import faults
from pina_spark.stages.graph import driver as collected_graph
from pina_spark.storage.manifest import StepTimer

log = logging.getLogger(__name__)

__all__ = [
    "run",
    "assign_node_indices",
    "capped_baskets",
    "basket_stats",
    "co_counts",
    "i2i_edges",
    "pair_plan",
    "PairPlan",
    "basket_matrix",
    "graph_labels",
    "index_instance_labels",
    "pretrain_edges",
    "basket_hash",
]

BLOCKS = ("B", "BT", "I_inst", "I_label", "A")
HASH_SEP = "\x1f"

# internal column names (never published)
_SIZE = "_basket_size"
_ITEM_A = "_item_a"
_ITEM_B = "_item_b"


def basket_hash(basket_id: str, item_id: str) -> str:
    """The down-sampling key of an item in a basket (the same as the Spark expression used by
    :func:`capped_baskets`), for reference implementations and tests.

    Examples
    --------
    >>> basket_hash("o1", "a")
    '4ab133fe21657ecf9d16e820d757edfd57b2f0e0'
    """
    import hashlib

    return hashlib.sha1(f"{basket_id}{HASH_SEP}{item_id}".encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- node indices
#: up to this many rows (when the caller knows the count) a table is ranked in one sorted
#: partition: no sampling job, no partition-size job (the rank is the same either way)
SINGLE_PARTITION_RANK_MAX = 2_000_000


def _global_rank(
    df,
    key: str,
    offset: int = 0,
    persisted: Optional[List[Any]] = None,
    n_rows: Optional[int] = None,
):
    """Add ``node_index`` = ``offset`` + rank of ``key`` (unique) in ascending order; returns
    (frame, n). With ``n_rows`` (the known row count) up to :data:`SINGLE_PARTITION_RANK_MAX`:
    a window over one sorted partition, no job here. Otherwise one small driver action
    (partition sizes): the ranked frame is persisted so the partition sizes and the rows come
    from the same evaluation (range bounds come from a sample); it is appended to
    ``persisted`` for the caller to unpersist."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if n_rows is not None and n_rows <= SINGLE_PARTITION_RANK_MAX:
        w = Window.orderBy(F.col(key))
        return df.withColumn(
            storage.NODE_INDEX, (F.row_number().over(w) - 1 + offset).cast("long")
        ), n_rows
    ranged = df.repartitionByRange(F.col(key)).withColumn("_pid", F.spark_partition_id())
    w = Window.partitionBy("_pid").orderBy(F.col(key))
    ranked = ranged.withColumn("_local", F.row_number().over(w) - 1).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    if persisted is not None:
        persisted.append(ranked)
    sizes = sorted(
        (int(r["_pid"]), int(r["n"]))
        for r in ranked.groupBy("_pid").agg(F.count(F.lit(1)).alias("n")).collect()
    )
    offsets, acc = [], offset
    for pid, n in sizes:
        offsets += [F.lit(pid), F.lit(acc)]
        acc += n
    if not offsets:
        return ranked.withColumn(storage.NODE_INDEX, F.lit(None).cast("long")).drop(
            "_pid", "_local"
        ), 0
    omap = F.create_map(*offsets)
    out = ranked.withColumn(
        storage.NODE_INDEX, (omap[F.col("_pid")] + F.col("_local")).cast("long")
    )
    return out.drop("_pid", "_local"), acc - offset


def assign_node_indices(
    instances,
    labels,
    persisted: Optional[List[Any]] = None,
    n_rows: Tuple[Optional[int], Optional[int]] = (None, None),
):
    """The ``nodes`` table: instances sorted by id get ``0..n_inst-1``, then labels sorted by id.

    Parameters
    ----------
    instances : DataFrame
        ``instance_id, text, split`` with unique ids (validated).
    labels : DataFrame
        ``label_id, text`` with unique ids.
    persisted : list, optional
        receives the two persisted rank frames (unpersist them once the result is written).
    n_rows : (int or None, int or None)
        the row counts of ``instances`` and ``labels`` when known (small tables are then
        ranked without extra jobs).

    Returns
    -------
    DataFrame
        ``node_index, kind, node_id, text, split`` (split null for labels).

    Examples
    --------
    >>> inst = spark.createDataFrame([("b", "B", "train"), ("a", "A", "test")],
    ...                              "instance_id string, text string, split string"
    ...                              )  # doctest: +SKIP
    >>> lab = spark.createDataFrame([("x", "X")], "label_id string, text string")  # doctest: +SKIP
    >>> assign_node_indices(inst, lab).orderBy("node_index").show()                # doctest: +SKIP
    +----------+--------+-------+----+-----+
    |node_index|    kind|node_id|text|split|
    +----------+--------+-------+----+-----+
    |         0|instance|      a|   A| test|
    |         1|instance|      b|   B|train|
    |         2|   label|      x|   X| null|
    +----------+--------+-------+----+-----+
    """
    from pyspark.sql import functions as F

    inst, n_inst = _global_rank(
        instances.select(storage.INSTANCE_ID, storage.TEXT, storage.SPLIT),
        storage.INSTANCE_ID,
        persisted=persisted,
        n_rows=n_rows[0],
    )
    lab, _ = _global_rank(
        labels.select(storage.LABEL_ID, storage.TEXT),
        storage.LABEL_ID,
        offset=n_inst,
        persisted=persisted,
        n_rows=n_rows[1],
    )
    inst = inst.select(
        storage.NODE_INDEX,
        F.lit(storage.KIND_INSTANCE).alias(storage.KIND),
        F.col(storage.INSTANCE_ID).alias(storage.NODE_ID),
        storage.TEXT,
        storage.SPLIT,
    )
    lab = lab.select(
        storage.NODE_INDEX,
        F.lit(storage.KIND_LABEL).alias(storage.KIND),
        F.col(storage.LABEL_ID).alias(storage.NODE_ID),
        storage.TEXT,
        F.lit(None).cast("string").alias(storage.SPLIT),
    )
    return inst.unionByName(lab)


# --------------------------------------------------------------------------- i2i graph
def capped_baskets(events, max_basket_size: int):
    """Distinct (basket, item) with baskets down-sampled to ``max_basket_size`` items.

    Parameters
    ----------
    events : DataFrame
        validated events (``basket_id``, ``item_id`` non-null); duplicates are allowed.
    max_basket_size : int
        items kept per basket: the first ones by ``basket_hash`` (then item id).

    Returns
    -------
    DataFrame
        ``basket_id, item_id, _basket_size`` (distinct items of the basket BEFORE the cap),
        hash-partitioned by ``basket_id`` (what :func:`co_counts` relies on).

    Examples
    --------
    >>> capped_baskets(events, 100).filter("_basket_size >= 2")                  # doctest: +SKIP
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    b, i = F.col(storage.BASKET_ID), F.col(storage.ITEM_ID)
    df = (
        events.select(storage.BASKET_ID, storage.ITEM_ID)
        .repartition(storage.BASKET_ID)
        .withColumn("_h", F.sha1(F.concat_ws(HASH_SEP, b, i)))
    )
    w = Window.partitionBy(storage.BASKET_ID).orderBy(F.col("_h"), i)
    # duplicates of (basket, item) share the hash, hence are adjacent in the window order
    df = df.withColumn("_prev", F.lag(i).over(w)).filter(
        F.col("_prev").isNull() | (F.col("_prev") != i)
    )
    df = df.withColumn("_rank", F.row_number().over(w)).withColumn(
        _SIZE, F.count(F.lit(1)).over(Window.partitionBy(storage.BASKET_ID))
    )
    return df.filter(F.col("_rank") <= max_basket_size).select(
        storage.BASKET_ID, storage.ITEM_ID, _SIZE
    )


def basket_stats(capped, max_basket_size: int) -> Dict[str, int]:
    """Basket counts of a :func:`capped_baskets` frame (one driver action).

    Returns ``baskets``, ``baskets_one_item`` (contribute nothing), ``baskets_capped`` (had more
    than ``max_basket_size`` items), ``baskets_used`` (N: >= 2 items), ``events_distinct_kept``.

    Examples
    --------
    >>> basket_stats(capped_baskets(events, 100), 100)["baskets_used"]         # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    per_basket = capped.groupBy(storage.BASKET_ID).agg(
        F.first(_SIZE).alias("s"), F.count(F.lit(1)).alias("k")
    )
    r = per_basket.agg(
        F.count(F.lit(1)).alias("baskets"),
        F.sum(F.when(F.col("s") == 1, 1).otherwise(0)).alias("baskets_one_item"),
        F.sum(F.when(F.col("s") > max_basket_size, 1).otherwise(0)).alias("baskets_capped"),
        F.sum(F.when(F.col("s") >= 2, 1).otherwise(0)).alias("baskets_used"),
        F.sum("k").alias("events_distinct_kept"),
    ).collect()[0]
    return {k: int(r[k] or 0) for k in r.asDict()}


def _make_pair_counter(fault_plan, max_pairs_per_chunk: int = 4_000_000):
    """Driver side: build the executor-side pair counter for ``mapInPandas`` (closes over plain
    values only)."""
    basket_col, item_col = storage.BASKET_ID, storage.ITEM_ID

    def count_pairs(batches):
        """Executor side: the rows of one partition (whole baskets, already capped) -> partial
        counts ``(_item_a, _item_b, count)`` with ``_item_a < _item_b``, one row per distinct pair
        of the partition. Vectorised with numpy (no Python loop over pairs); baskets are
        processed in chunks of at most ~``max_pairs_per_chunk`` pairs."""
        import numpy as np
        import pandas as pd

        faults.maybe_fail(fault_plan)
        frames = [f for f in batches if len(f)]
        if not frames:
            return
        df = pd.concat(frames, ignore_index=True)
        bcode, _ = pd.factorize(df[basket_col])
        icode, items = pd.factorize(df[item_col], sort=True)  # code order == string order
        items = np.asarray(items, dtype=object)
        n_items = np.int64(len(items))
        order = np.lexsort((icode, bcode))
        b = bcode[order]
        it = icode[order].astype(np.int64)
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        sizes = np.diff(np.r_[starts, len(b)])
        npairs = sizes.astype(np.int64) * (sizes - 1) // 2
        cum = np.cumsum(npairs)
        keys, counts = [], []
        g0 = 0
        while g0 < len(starts):  # chunks of whole baskets bound the memory of the pair arrays
            base = cum[g0 - 1] if g0 else 0
            g1 = max(int(np.searchsorted(cum, base + max_pairs_per_chunk, side="right")), g0 + 1)
            lo = starts[g0]
            hi = starts[g1] if g1 < len(starts) else len(b)
            key = _pairs_of_sorted_groups(it[lo:hi], sizes[g0:g1], n_items)
            g0 = g1
            if key.size:
                uk, cnt = np.unique(key, return_counts=True)
                keys.append(uk)
                counts.append(cnt.astype(np.int64))
        if not keys:
            return
        if len(keys) > 1:  # merge the chunks: one row per distinct pair of the partition
            uk, inv = np.unique(np.concatenate(keys), return_inverse=True)
            cnt = np.bincount(inv.ravel(), weights=np.concatenate(counts)).astype(np.int64)
        else:
            uk, cnt = keys[0], counts[0]
        yield pd.DataFrame(
            {_ITEM_A: items[uk // n_items], _ITEM_B: items[uk % n_items], storage.COUNT: cnt}
        )

    return count_pairs


def _pairs_of_sorted_groups(codes, sizes, n_items):
    """Executor side helper: ``codes`` are consecutive groups of the given ``sizes``, each sorted
    ascending and distinct; returns ``a * n_items + b`` for every pair a < b within a group."""
    import numpy as np

    n = len(codes)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.repeat(np.cumsum(sizes), sizes)
    pos = np.arange(n, dtype=np.int64)
    after = ends - pos - 1  # later elements of the same group
    total = int(after.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    left = np.repeat(pos, after)
    seg_start = np.repeat(np.cumsum(after) - after, after)
    right = left + 1 + (np.arange(total, dtype=np.int64) - seg_start)
    return codes[left] * n_items + codes[right]


def co_counts(capped, fault_plan=None):
    """Basket co-occurrence counts of unordered item pairs.

    Parameters
    ----------
    capped : DataFrame
        :func:`capped_baskets` output (all rows of a basket in one partition).
    fault_plan : tuple, optional
        ``faults.fault_plan(cfg, "graph")`` computed on the driver; the executor function calls
        ``faults.maybe_fail`` with it.

    Returns
    -------
    DataFrame
        ``_item_a, _item_b, count`` with ``_item_a < _item_b`` (one row per pair).

    Examples
    --------
    >>> co_counts(capped_baskets(events, 100)).filter("count >= 2")           # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    src = capped.filter(F.col(_SIZE) >= 2).select(storage.BASKET_ID, storage.ITEM_ID)
    partial = src.mapInPandas(
        _make_pair_counter(fault_plan), f"{_ITEM_A} string, {_ITEM_B} string, {storage.COUNT} long"
    )
    return partial.groupBy(_ITEM_A, _ITEM_B).agg(
        F.sum(storage.COUNT).cast("long").alias(storage.COUNT)
    )


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


def i2i_edges(events, graph_cfg, fault_plan=None, capped=None, plan: Optional["PairPlan"] = None):
    """The thresholded, scored, symmetric co-purchase graph (see the module docstring).

    Parameters
    ----------
    events : DataFrame
        validated events: ``basket_id, item_id`` (other columns ignored).
    graph_cfg : pina_spark.config.GraphConfig
    fault_plan : tuple, optional
        from ``faults.fault_plan(cfg, "graph")`` (driver side).
    capped : DataFrame, optional
        a (persisted) :func:`capped_baskets` of ``events`` to reuse (implies the ``shuffle``
        strategy).
    plan : PairPlan, optional
        how to count the pairs; by default :func:`pair_plan` of ``graph_cfg`` (``auto`` counts
        the events first).

    Returns
    -------
    DataFrame
        ``src_id, dst_id, count (long), score (double)``, both directions, no self loops. Both
        strategies give the same rows.

    Examples
    --------
    >>> from pina_spark.config import GraphConfig
    >>> i2i_edges(events, GraphConfig(min_count=2, measure="jaccard"))        # doctest: +SKIP
    """
    if capped is not None:
        plan = PairPlan("shuffle", 0, "a capped frame was given")
    elif plan is None:
        plan = pair_plan(
            events.sparkSession, graph_cfg, events.count() if graph_cfg.strategy == "auto" else None
        )
    if plan.strategy == "broadcast":
        tbl = storage.collect_arrow(events.select(storage.BASKET_ID, storage.ITEM_ID))
        m, _ = basket_matrix(tbl, graph_cfg.max_basket_size)
        return _broadcast_edges(events.sparkSession, m, graph_cfg, fault_plan, plan.tasks)[0]
    return _finish_pairs(_shuffle_pairs(events, graph_cfg, fault_plan, capped), graph_cfg)


def _shuffle_pairs(events, graph_cfg, fault_plan=None, capped=None):
    """``_item_a, _item_b, count, score`` with ``count >= min_count`` (shuffle strategy)."""
    from pyspark.sql import functions as F

    if capped is None:
        capped = capped_baskets(events, graph_cfg.max_basket_size)
    pairs = co_counts(capped, fault_plan).filter(F.col(storage.COUNT) >= graph_cfg.min_count)
    return _score(pairs, capped, graph_cfg.measure)


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


# --------------------------------------------------------------------------- broadcast strategy
@dc.dataclass(frozen=True)
class PairPlan:
    """How the pairs of the co-purchase graph are counted, decided once on the driver.

    Attributes:
        strategy: ``broadcast`` | ``shuffle`` (see ``GraphConfig.strategy``).
        tasks: number of pair-counting tasks (``broadcast``: each takes a range of items).
        reason: why (logged and written to the manifest).
    """

    strategy: str
    tasks: int
    reason: str


def pair_plan(spark, graph_cfg, n_events: Optional[int]) -> PairPlan:
    """Resolve ``graph.strategy`` (``auto``: ``broadcast`` up to ``broadcast_max_events``).

    Examples
    --------
    >>> from pina_spark.config import GraphConfig
    >>> pair_plan(spark, GraphConfig(strategy="shuffle"), None).strategy       # doctest: +SKIP
    'shuffle'
    """
    tasks = max(1, int(spark.sparkContext.defaultParallelism))
    if graph_cfg.strategy != "auto":
        return PairPlan(graph_cfg.strategy, tasks, f"graph.strategy={graph_cfg.strategy}")
    if n_events is not None and n_events <= graph_cfg.broadcast_max_events:
        return PairPlan(
            "broadcast",
            tasks,
            f"{n_events} events <= graph.broadcast_max_events=" f"{graph_cfg.broadcast_max_events}",
        )
    return PairPlan(
        "shuffle",
        tasks,
        f"{n_events} events > graph.broadcast_max_events=" f"{graph_cfg.broadcast_max_events}",
    )


def basket_matrix(tbl, max_basket_size: int, keep_items=None):
    """Driver side: the capped basket x item incidence matrix of a (basket_id, item_id) Arrow
    table, with the same distinct rows, the same cap and the same statistics as
    :func:`capped_baskets` + :func:`basket_stats`.

    Parameters
    ----------
    tbl : pyarrow.Table
        ``basket_id, item_id`` strings (duplicates allowed).
    max_basket_size : int
    keep_items : pyarrow.Array, optional
        only rows whose item is in it are used (the train-only graph), before the cap.

    Returns
    -------
    (matrix, stats) : (dict, dict)
        ``matrix``: ``indptr`` (int64), ``indices`` (int32 item codes, ascending in each
        basket) of the baskets with >= 2 items, ``items`` (pyarrow string array, sorted: code ->
        id), ``n_a`` (baskets per item code), ``n_baskets`` (N); ``stats`` as
        :func:`basket_stats`.
    """
    import numpy as np
    import pyarrow.compute as pc

    b = tbl.column(storage.BASKET_ID).combine_chunks()
    i = tbl.column(storage.ITEM_ID).combine_chunks()
    if keep_items is not None:
        m = pc.is_in(i, value_set=keep_items)
        b, i = b.filter(m), i.filter(m)
    items = pc.unique(i)
    items = items.take(pc.sort_indices(items))  # code order == string (UTF-8 byte) order
    n_items = len(items)
    icode = pc.index_in(i, value_set=items).to_numpy(zero_copy_only=False).astype(np.int64)
    enc = pc.dictionary_encode(b)
    bcode = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = np.unique(bcode * max(n_items, 1) + icode)  # distinct (basket, item), basket-major
    bc, ic = key // max(n_items, 1), key % max(n_items, 1)
    sizes = np.bincount(bc, minlength=len(enc.dictionary)).astype(np.int64)
    keep = np.ones(len(key), dtype=bool)
    big = np.flatnonzero(sizes > max_basket_size)
    if len(big):  # the documented cap: first max_basket_size items by (sha1, item id)
        names, ids = enc.dictionary.to_pylist(), items.to_pylist()
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        for bb in big:
            lo, hi = int(starts[bb]), int(starts[bb] + sizes[bb])
            codes = ic[lo:hi].tolist()
            ranked = sorted(codes, key=lambda c: (basket_hash(names[bb], ids[c]), c))
            keep[lo:hi] = np.isin(ic[lo:hi], ranked[:max_basket_size])
    kept = np.minimum(sizes, max_basket_size)
    stats = {
        "baskets": int(len(sizes)),
        "baskets_one_item": int((sizes == 1).sum()),
        "baskets_capped": int((sizes > max_basket_size).sum()),
        "baskets_used": int((sizes >= 2).sum()),
        "events_distinct_kept": int(kept.sum()),
    }
    used = keep & (sizes[bc] >= 2)
    indptr = np.r_[0, np.cumsum(kept[sizes >= 2])].astype(np.int64)
    indices = ic[used].astype(np.int32)
    matrix = {
        "indptr": indptr,
        "indices": indices,
        "items": items,
        "n_a": np.bincount(indices, minlength=n_items).astype(np.int64),
        "n_baskets": stats["baskets_used"],
    }
    return matrix, stats


def _item_bounds(matrix, tasks: int) -> Tuple[int, ...]:
    """Item-code bounds of ``tasks`` contiguous ranges of about equal work (an item's work: the
    basket items at or after it, summed over its baskets)."""
    import numpy as np

    indptr, indices = matrix["indptr"], matrix["indices"]
    n_items = len(matrix["items"])
    sizes = np.diff(indptr)
    pos = np.arange(len(indices)) - np.repeat(indptr[:-1], sizes)
    work = np.bincount(indices, weights=np.repeat(sizes, sizes) - pos, minlength=n_items)
    cum = np.cumsum(work)
    total = float(cum[-1]) if len(cum) else 0.0
    cuts = [int(np.searchsorted(cum, total * k / tasks)) for k in range(1, tasks)]
    return tuple(sorted({0, n_items, *[min(max(c, 0), n_items) for c in cuts]}))


@dc.dataclass(frozen=True)
class PairTask:
    """What every broadcast pair-counting task needs (executor side reads ``matrix.value``).

    Attributes:
        matrix: Spark broadcast of :func:`basket_matrix`'s ``matrix``.
        bounds: item-code bounds; task t counts the pairs (a, b), a < b, with
            ``bounds[t] <= a < bounds[t+1]``.
        min_count: pairs with a smaller count are dropped in the task.
        measure: ``count`` | ``jaccard`` | ``pmi`` | ``llr``.
        fault_plan: ``faults.fault_plan(cfg, "graph")``.
        seconds: Spark accumulator of the tasks' compute seconds (pair counting, scoring and
            threshold, summed over tasks; read on the driver after the job).
        directed: the task writes both directions (``src_id, dst_id, ...``) itself, so that the
            pairs are counted once (a union of two projections of the task's output would run
            the tasks twice); only without ``top_n`` / ``max_degree``, which rank undirected
            pairs.
    """

    matrix: Any
    bounds: Tuple[int, ...]
    min_count: int
    measure: str
    fault_plan: Optional[tuple] = None
    seconds: Any = None
    directed: bool = False


def _broadcast_edges(spark, matrix, graph_cfg, fault_plan, tasks: int):
    """(the i2i edges as :func:`i2i_edges` returns them, the :class:`PairTask`) with the
    ``broadcast`` strategy. Without ``top_n`` / ``max_degree`` the tasks write both directions
    (counted once); with them, the undirected pairs go through :func:`_finish_pairs`."""
    from pyspark.sql import functions as F

    directed = graph_cfg.top_n is None and graph_cfg.max_degree is None
    pairs, task = _broadcast_pairs(spark, matrix, graph_cfg, fault_plan, tasks, directed)
    if not directed:
        return _finish_pairs(pairs, graph_cfg), task
    if graph_cfg.min_score is not None:
        pairs = pairs.filter(F.col(storage.SCORE) >= graph_cfg.min_score)
    return pairs, task


def _broadcast_pairs(spark, matrix, graph_cfg, fault_plan, tasks: int, directed: bool = False):
    """(``_item_a, _item_b, count, score`` with ``count >= min_count``, or with ``directed``
    both directions as ``src_id, dst_id, count, score``; its :class:`PairTask`): one Spark job
    of up to ``tasks`` tasks over a broadcast basket x item matrix, no shuffle. The caller may
    ``unpersist()`` ``task.matrix`` once the frame was written."""
    if graph_cfg.measure not in ("count", "jaccard", "pmi", "llr"):
        raise ValueError(
            f"graph.measure: unknown measure {graph_cfg.measure!r} "
            "(expected count, jaccard, pmi, llr)"
        )
    bounds = _item_bounds(matrix, tasks) if len(matrix["items"]) else (0, 0)
    sc = spark.sparkContext
    task = PairTask(
        sc.broadcast(matrix),
        bounds,
        graph_cfg.min_count,
        graph_cfg.measure,
        fault_plan,
        sc.accumulator(0.0),
        directed,
    )
    n = len(bounds) - 1
    a, b = (storage.SRC_ID, storage.DST_ID) if directed else (_ITEM_A, _ITEM_B)
    return spark.range(0, n, 1, n).mapInArrow(
        _make_range_counter(task),
        f"{a} string, {b} string, {storage.COUNT} long, {storage.SCORE} double",
    ), task


def _make_range_counter(task: PairTask):
    """Driver side: the executor function of :func:`_broadcast_pairs` (closes over ``task``)."""

    def count_range(batches):
        """Executor side: for each task id t of the batches, the pairs (a, b) with a in t's item
        range and b > a as ``X[:, lo:hi].T @ X[:, lo:]`` (scipy, per-row accumulation), kept
        when count >= min_count, scored."""
        import numpy as np
        import pyarrow as pa
        import scipy.sparse as sp

        faults.maybe_fail(task.fault_plan)
        t0 = time.perf_counter()
        m = task.matrix.value
        items, n_a, big_n = m["items"], m["n_a"], float(m["n_baskets"])
        n_items = len(items)
        x = sp.csr_matrix(
            (np.ones(len(m["indices"]), dtype=np.int32), m["indices"], m["indptr"]),
            shape=(len(m["indptr"]) - 1, n_items),
        )
        xc = x.tocsc()
        for batch in batches:
            for t in batch.column(0).to_pylist():
                lo, hi = task.bounds[t], task.bounds[t + 1]
                if hi <= lo:
                    continue
                c = (xc[:, lo:hi].T @ x[:, lo:]).tocoo()
                keep = (c.col > c.row) & (c.data >= task.min_count)
                a = c.row[keep].astype(np.int64) + lo
                b = c.col[keep].astype(np.int64) + lo
                cnt = c.data[keep].astype(np.int64)
                order = np.lexsort((b, a))
                a, b, cnt = a[order], b[order], cnt[order]
                score = _score_np(
                    cnt.astype(np.float64),
                    n_a[a].astype(np.float64),
                    n_a[b].astype(np.float64),
                    big_n,
                    task.measure,
                )
                ids_a, ids_b = items.take(pa.array(a)), items.take(pa.array(b))
                cnt_s = [pa.array(cnt), pa.array(score, pa.float64())]
                if task.directed:
                    names = [storage.SRC_ID, storage.DST_ID, storage.COUNT, storage.SCORE]
                    outs = [
                        pa.RecordBatch.from_arrays([ids_a, ids_b, *cnt_s], names),
                        pa.RecordBatch.from_arrays([ids_b, ids_a, *cnt_s], names),
                    ]
                else:
                    names = [_ITEM_A, _ITEM_B, storage.COUNT, storage.SCORE]
                    outs = [pa.RecordBatch.from_arrays([ids_a, ids_b, *cnt_s], names)]
                task.seconds.add(time.perf_counter() - t0)
                yield from outs
                t0 = time.perf_counter()

    return count_range


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


# --------------------------------------------------------------------------- labels
def graph_labels(instances, i2i_all, i2i_train=None):
    """Graph labels (``task.labels: graph``), leak-guarded (see the module docstring).

    Parameters
    ----------
    instances : DataFrame
        clean ``instance_id, text, split``.
    i2i_all : DataFrame
        :func:`i2i_edges` over all items (gives the labels of TEST instances).
    i2i_train : DataFrame, optional
        :func:`i2i_edges` over train items only (gives the labels of TRAIN instances); defaults
        to ``i2i_all`` restricted to train items.

    Returns
    -------
    (labels, instance_labels) : (DataFrame, DataFrame)
        ``label_id, text`` (train items that label at least one instance; label text = item
        text) and ``instance_id, label_id``.

    Examples
    --------
    >>> labels, il = graph_labels(instances, edges_all, edges_train)            # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    split = instances.select(
        F.col(storage.INSTANCE_ID).alias("_id"), F.col(storage.SPLIT).alias("_split")
    )
    train = split.filter(F.col("_split") == storage.SPLIT_TRAIN).select("_id")
    test = split.filter(F.col("_split") == storage.SPLIT_TEST).select("_id")
    if i2i_train is None:
        i2i_train = i2i_all

    def restrict(edges, src_ids):
        e = edges.select(
            F.col(storage.SRC_ID).alias(storage.INSTANCE_ID),
            F.col(storage.DST_ID).alias(storage.LABEL_ID),
        )
        e = e.join(
            src_ids.withColumnRenamed("_id", storage.INSTANCE_ID), storage.INSTANCE_ID, "left_semi"
        )
        return e.join(
            train.withColumnRenamed("_id", storage.LABEL_ID), storage.LABEL_ID, "left_semi"
        ).select(storage.INSTANCE_ID, storage.LABEL_ID)

    il = restrict(i2i_train, train).unionByName(restrict(i2i_all, test)).distinct()
    labels = (
        il.select(storage.LABEL_ID)
        .distinct()
        .join(
            instances.select(F.col(storage.INSTANCE_ID).alias(storage.LABEL_ID), storage.TEXT),
            storage.LABEL_ID,
        )
    )
    return labels, il


def index_instance_labels(nodes, instance_labels):
    """``instance_id, label_id`` -> ``instance_index, label_index`` through the ``nodes`` table.

    Examples
    --------
    >>> index_instance_labels(nodes, il).columns                                 # doctest: +SKIP
    ['instance_index', 'label_index']
    """
    from pyspark.sql import functions as F

    inst = nodes.filter(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
        F.col(storage.NODE_ID).alias(storage.INSTANCE_ID),
        F.col(storage.NODE_INDEX).alias(storage.INSTANCE_INDEX),
    )
    lab = nodes.filter(F.col(storage.KIND) == storage.KIND_LABEL).select(
        F.col(storage.NODE_ID).alias(storage.LABEL_ID),
        F.col(storage.NODE_INDEX).alias(storage.LABEL_INDEX),
    )
    return (
        instance_labels.join(inst, storage.INSTANCE_ID)
        .join(lab, storage.LABEL_ID)
        .select(storage.INSTANCE_INDEX, storage.LABEL_INDEX)
    )


# --------------------------------------------------------------------------- B_pre
def pretrain_edges(nodes, instance_labels, i2i, side_info: str, task_labels: str = "given"):
    """B_pre as an edge list for both variants (see the module docstring and docs/design.md).

    Parameters
    ----------
    nodes : DataFrame
        the ``nodes`` table.
    instance_labels : DataFrame
        ``instance_index, label_index`` (train and test rows; only train rows are used).
    i2i : DataFrame or None
        ``src_id, dst_id`` edges over train items (the train-only graph); needed for i2i/both.
    side_info : str
        ``label_text`` | ``i2i`` | ``both`` | ``naive``.
    task_labels : str
        ``given`` | ``graph``; with ``graph`` label nodes whose item is a test instance are
        refused (defence in depth: :func:`graph_labels` never makes them).

    Returns
    -------
    DataFrame
        ``src_index, dst_index, weight (float), block, variant`` with variant ``pina`` (the
        configured side_info) and ``pina_naive`` (B only).

    Examples
    --------
    >>> edges = pretrain_edges(nodes, il_idx, None, "label_text")  # doctest: +SKIP
    >>> edges.groupBy("variant", "block").count()  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    if side_info not in ("label_text", "i2i", "both", "naive"):
        raise ValueError(f"side_info: unknown value {side_info!r}")
    if side_info in ("i2i", "both") and i2i is None:
        raise ValueError(f"side_info={side_info} needs the i2i edges (input.events)")
    train = nodes.filter(
        (F.col(storage.KIND) == storage.KIND_INSTANCE)
        & (F.col(storage.SPLIT) == storage.SPLIT_TRAIN)
    )
    train_idx = train.select(F.col(storage.NODE_INDEX).alias(storage.SRC_INDEX))
    labels = nodes.filter(F.col(storage.KIND) == storage.KIND_LABEL)
    if task_labels == "graph":
        test_ids = nodes.filter(
            (F.col(storage.KIND) == storage.KIND_INSTANCE)
            & (F.col(storage.SPLIT) != storage.SPLIT_TRAIN)
        ).select(storage.NODE_ID)
        labels = labels.join(test_ids, storage.NODE_ID, "left_anti")
    label_idx = labels.select(F.col(storage.NODE_INDEX).alias(storage.DST_INDEX))

    def block(df, name):
        return df.select(
            F.col(storage.SRC_INDEX).cast("long"),
            F.col(storage.DST_INDEX).cast("long"),
            F.lit(1.0).cast("float").alias(storage.WEIGHT),
            F.lit(name).alias(storage.BLOCK),
        )

    b = (
        instance_labels.select(
            F.col(storage.INSTANCE_INDEX).alias(storage.SRC_INDEX),
            F.col(storage.LABEL_INDEX).alias(storage.DST_INDEX),
        )
        .join(train_idx, storage.SRC_INDEX, "left_semi")
        .join(label_idx, storage.DST_INDEX, "left_semi")
        .distinct()
    )
    blk_b = block(b, "B")
    parts = {"B": blk_b}
    if side_info in ("label_text", "both"):
        in_b = b.select(storage.DST_INDEX).distinct()
        parts["I_inst"] = block(
            train_idx.withColumn(storage.DST_INDEX, F.col(storage.SRC_INDEX)), "I_inst"
        )
        parts["I_label"] = block(
            in_b.withColumn(storage.SRC_INDEX, F.col(storage.DST_INDEX)), "I_label"
        )
        parts["BT"] = block(
            b.select(
                F.col(storage.DST_INDEX).alias(storage.SRC_INDEX),
                F.col(storage.SRC_INDEX).alias(storage.DST_INDEX),
            ),
            "BT",
        )
    if side_info in ("i2i", "both"):
        ids = train.select(F.col(storage.NODE_ID), F.col(storage.NODE_INDEX))
        a = (
            i2i.select(storage.SRC_ID, storage.DST_ID)
            .join(
                ids.select(
                    F.col(storage.NODE_ID).alias(storage.SRC_ID),
                    F.col(storage.NODE_INDEX).alias(storage.SRC_INDEX),
                ),
                storage.SRC_ID,
            )
            .join(
                ids.select(
                    F.col(storage.NODE_ID).alias(storage.DST_ID),
                    F.col(storage.NODE_INDEX).alias(storage.DST_INDEX),
                ),
                storage.DST_ID,
            )
            .filter(F.col(storage.SRC_INDEX) != F.col(storage.DST_INDEX))
            .select(storage.SRC_INDEX, storage.DST_INDEX)
            .distinct()
        )
        parts["A"] = block(a, "A")
        if side_info == "i2i":
            lonely = train_idx.join(
                a.select(storage.SRC_INDEX).distinct(), storage.SRC_INDEX, "left_anti"
            )
            parts["I_inst"] = block(
                lonely.withColumn(storage.DST_INDEX, F.col(storage.SRC_INDEX)), "I_inst"
            )
            del parts["B"]
    pina = None
    for name in BLOCKS:
        if name in parts:
            pina = parts[name] if pina is None else pina.unionByName(parts[name])
    if pina is None:  # B, or A with I_inst, is always there
        raise ValueError(f"pretrain_edges: no block for side_info={side_info!r}")
    return pina.withColumn(storage.VARIANT, F.lit(V.PINA)).unionByName(
        blk_b.withColumn(storage.VARIANT, F.lit(V.PINA_NAIVE))
    )


# --------------------------------------------------------------------------- the stage
def _degree_stats(spark, uri: str) -> Tuple[int, Dict[str, float]]:
    """(directed edge rows, degree quantiles) of the published edges at ``uri``: degrees per
    ``src_id`` (:func:`pina_spark.storage.group_counts`), quantiles with linear interpolation (as
    Spark's ``percentile``)."""
    import numpy as np

    deg = storage.group_counts(spark, uri, [storage.SRC_ID]).column("count").to_numpy()
    if not len(deg):
        return 0, {"items_with_edges": 0}
    q = np.percentile(deg.astype(np.float64), [50, 90, 99, 100])
    return int(deg.sum()), {
        "items_with_edges": int(len(deg)),
        "p50": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": float(q[3]),
    }


def _build_graphs(
    spark,
    events,
    instances,
    graph_cfg,
    gplan: PairPlan,
    fault_plan,
    need_train: bool,
    persisted: List[Any],
    timer,
    tasks: List[PairTask],
):
    """(all-items edges, their basket stats, train-only edges or None when every instance is a
    train instance, their basket stats); ``None, None`` for the last two without
    ``need_train``. Frames are lazy except what the steps materialise. With ``broadcast`` the
    (basket, item) rows are collected once and both graphs come from them; ``tasks`` receives
    their :class:`PairTask` (all items first). ``events``: with ``broadcast`` the clean rows
    already on the driver (a pyarrow Table, :mod:`pina_spark.validate.events`), else a
    DataFrame."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    train_only = False
    if need_train:
        with timer.step("train.items"):
            train_only = (
                instances.filter(F.col(storage.SPLIT) != storage.SPLIT_TRAIN).limit(1).count() > 0
            )
    train_ids = (
        instances.filter(F.col(storage.SPLIT) == storage.SPLIT_TRAIN).select(
            F.col(storage.INSTANCE_ID).alias(storage.ITEM_ID)
        )
        if train_only
        else None
    )
    out: List[Any] = []
    if gplan.strategy == "broadcast":
        tbl = events.select([storage.BASKET_ID, storage.ITEM_ID])
        with timer.step("train.collect_ids"):
            keep = storage.collect_arrow(train_ids).column(0) if train_only else None
        for prefix, k in [("", None)] + ([("train.", keep)] if train_only else []):
            with timer.step(prefix + "i2i.basket_matrix"):
                m, st = basket_matrix(tbl, graph_cfg.max_basket_size, keep_items=k)
            edges, task = _broadcast_edges(spark, m, graph_cfg, fault_plan, gplan.tasks)
            persisted.append(task.matrix)
            tasks.append(task)
            out += [edges, st]
    else:
        parts = [("", events)]
        if train_only:
            parts.append(("train.", events.join(train_ids, storage.ITEM_ID, "left_semi")))
        for prefix, ev in parts:
            with timer.step(prefix + "i2i.capped_baskets"):
                capped = capped_baskets(ev, graph_cfg.max_basket_size).persist(
                    StorageLevel.MEMORY_AND_DISK
                )
                persisted.append(capped)
                st = basket_stats(capped, graph_cfg.max_basket_size)
            out += [_finish_pairs(_shuffle_pairs(ev, graph_cfg, fault_plan, capped), graph_cfg), st]
    if not need_train:
        return out[0], out[1], None, None
    if not train_only:
        return out[0], out[1], None, out[1]
    return tuple(out)


def run(ctx) -> Dict[str, Any]:
    """Validate inputs, publish quarantine, nodes, i2i_edges, instance_labels, pretrain_edges.

    Returns the statistics recorded in the manifest: ``inputs`` (rows in/used/quarantined and
    reasons per table), ``baskets`` (+ ``baskets_train``), ``i2i_edges`` (directed rows) and
    ``degree``, ``nodes``, ``instance_labels``, ``pretrain_edges`` (per variant and block),
    ``steps_s`` (wall seconds per step, in run order here; the manifest stores its keys
    sorted) and ``time_s``.

    Examples
    --------
    >>> from pina_spark.orchestration.pipeline import make_context
    >>> run(make_context(spark, cfg))["nodes"]                           # doctest: +SKIP
    {'instances': 120, 'labels': 40}
    """
    t0 = time.time()
    timer = StepTimer("graph")
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    persisted: List[Any] = []
    stats: Dict[str, Any] = {}
    in_stats: Dict[str, Any] = {}
    with timer.step("inputs.read"):  # paths, columns and types of every input (no rows)
        raw = validate.read_inputs(spark, cfg)
    rows_in: Dict[str, int] = {}
    gplan: Optional[PairPlan] = None
    if "events" in raw:  # the pair plan decides how the events are validated, too
        with timer.step("events.rows_in"):
            rows_in["events"] = validate.count_input(raw["events"], cfg.input.events)
        gplan = pair_plan(spark, cfg.graph, rows_in["events"])
        stats["pair_plan"] = dc.asdict(gplan)
        log.info("graph stage: pair counting %s", gplan)
    with timer.step("driver_tables.rows_in"):
        on_driver = validate.driver_tables(spark, cfg, raw, rows_in)
    if gplan is not None and gplan.strategy == "broadcast":
        on_driver += ("events",)
    stats["validated_on_driver"] = list(on_driver)
    clean_arrow: Dict[str, Any] = {}
    tables, quarantine = validate.validate_inputs(
        spark,
        cfg,
        in_stats,
        persisted,
        timer,
        raw=raw,
        rows_in=rows_in,
        on_driver=on_driver,
        clean_arrow=clean_arrow,
    )
    stats["inputs"] = in_stats
    for name, q in quarantine.items():
        with timer.step(f"quarantine.{name}"):
            written = storage.write_quarantine(
                q, paths, name, in_stats[name]["rows_quarantined"], spark=spark
            )
        if written != in_stats[name]["reasons"]:
            raise validate.ValidationInvariantError(
                f"quarantine/{name}: wrote {written}, counted {in_stats[name]['reasons']}"
            )
    if in_stats["instances"]["rows_used"] == 0:
        raise storage.InputError(
            f"input.instances: all {in_stats['instances']['rows_in']} rows were "
            f"quarantined {in_stats['instances']['reasons']}; see "
            f"{paths.table(storage.QUARANTINE + '/instances')}"
        )
    validate.check_quality(in_stats, cfg.quality, paths.table(storage.QUARANTINE))

    def frame(name: str):
        """The clean rows of an input table as a DataFrame (made from the driver's rows on
        first use: the driver path of the graph tables needs none)."""
        if name not in tables:
            tables[name] = storage.frame_from_arrow(spark, clean_arrow[name], name)
        return tables[name]

    plan = faults.fault_plan(cfg, "graph")
    events = tables.get("events")
    i2i_all = i2i_train = None
    if events is not None:
        assert gplan is not None
        need_train = cfg.side_info in ("i2i", "both") or cfg.task.labels == "graph"
        pair_tasks: List[PairTask] = []
        built = _build_graphs(
            spark,
            events,
            frame("instances") if need_train or gplan.strategy != "broadcast" else None,
            cfg.graph,
            gplan,
            plan,
            need_train,
            persisted,
            timer,
            pair_tasks,
        )
        edges, stats["baskets"] = built[0], built[1]
        with timer.step("i2i.publish"):
            storage.write_table(edges, paths, storage.I2I_EDGES)
        i2i_all = storage.read_table(spark, paths, storage.I2I_EDGES)
        with timer.step("i2i.degree_stats"):
            stats["i2i_edges"], stats["degree"] = _degree_stats(
                spark, paths.table(storage.I2I_EDGES)
            )
        if need_train:
            tr, stats["baskets_train"] = built[2], built[3]
            if tr is None:
                i2i_train = i2i_all
            else:
                with timer.step("train.i2i.edges"):
                    i2i_train = tr.persist()
                    persisted.append(i2i_train)
                    stats["i2i_edges_train"] = i2i_train.count()
        if pair_tasks:  # executor seconds inside the steps above, summed over tasks
            stats["pair_tasks_s"] = dict(
                zip(("all", "train"), (round(t.seconds.value, 3) for t in pair_tasks))
            )
    if cfg.task.labels == "graph":
        with timer.step("graph_labels"):
            labels, il = graph_labels(frame("instances"), i2i_all, i2i_train)
            if labels.limit(1).count() == 0:
                g = cfg.graph
                raise storage.InputError(
                    f"task.labels=graph: no graph labels: no edge of the co-purchase graph "
                    f"reaches a train item (graph.min_count={g.min_count}, measure={g.measure}, "
                    f"min_score={g.min_score}, top_n={g.top_n}, max_degree={g.max_degree}; "
                    f"{stats.get('i2i_edges', 0)} directed i2i edges over all items). Lower "
                    f"graph.min_count / min_score or give more events; nothing to learn "
                    f"otherwise"
                )
    else:
        labels = il = None  # the given tables: frame("labels"), frame("instance_labels")
    # labels given and every table on the driver: nodes, instance_labels and (without the i2i
    # graph) B_pre are built there too (collected_graph), else by Spark
    on_arrow = cfg.task.labels == "given" and set(validate.DRIVER_TABLES) <= set(clean_arrow)
    stats["built_on_driver"] = on_arrow
    with timer.step("nodes.publish"):
        if on_arrow:
            nodes_a = collected_graph.nodes_table(clean_arrow["instances"], clean_arrow["labels"])
            storage.write_arrow(spark, nodes_a, paths, storage.NODES)
        else:
            n_lab = in_stats["labels"]["rows_used"] if cfg.task.labels == "given" else None
            storage.write_table(
                assign_node_indices(
                    frame("instances"),
                    frame("labels") if labels is None else labels,
                    persisted,
                    (in_stats["instances"]["rows_used"], n_lab),
                ),
                paths,
                storage.NODES,
            )
    nodes = storage.read_table(spark, paths, storage.NODES)
    with timer.step("nodes.count"):
        kinds = {
            r[storage.KIND]: int(r["count"])
            for r in storage.group_counts(
                spark, paths.table(storage.NODES), [storage.KIND]
            ).to_pylist()
        }
    stats["nodes"] = {
        "instances": kinds.get(storage.KIND_INSTANCE, 0),
        "labels": kinds.get(storage.KIND_LABEL, 0),
    }
    if not stats["nodes"]["labels"]:
        log.warning(
            "graph stage: no label nodes (task.labels=%s); B_pre has no B block", cfg.task.labels
        )
    with timer.step("instance_labels.publish"):
        if on_arrow:
            il_a = collected_graph.index_instance_labels(nodes_a, clean_arrow["instance_labels"])
            storage.write_arrow(spark, il_a, paths, storage.INSTANCE_LABELS)
        else:
            il = frame("instance_labels") if il is None else il
            storage.write_table(index_instance_labels(nodes, il), paths, storage.INSTANCE_LABELS)
    il_idx = storage.read_table(spark, paths, storage.INSTANCE_LABELS)
    with timer.step("pretrain_edges.publish"):
        if on_arrow and cfg.side_info in collected_graph.SIDE_INFO:
            pe_a = collected_graph.pretrain_edges(nodes_a, il_a, cfg.side_info)
            storage.write_arrow(
                spark, pe_a, paths, storage.PRETRAIN_EDGES, partition_by=storage.VARIANT
            )
        else:
            pe = pretrain_edges(nodes, il_idx, i2i_train, cfg.side_info, cfg.task.labels)
            storage.write_table(pe, paths, storage.PRETRAIN_EDGES, partition_by=[storage.VARIANT])
    with timer.step("counts"):
        n_il = storage.count_rows_arrow(paths.table(storage.INSTANCE_LABELS))
        stats["instance_labels"] = il_idx.count() if n_il is None else n_il
        per: Dict[str, Dict[str, int]] = {}
        for r in storage.group_counts(
            spark, paths.table(storage.PRETRAIN_EDGES), [storage.VARIANT, storage.BLOCK]
        ).to_pylist():
            per.setdefault(r[storage.VARIANT], {})[r[storage.BLOCK]] = int(r["count"])
    stats["pretrain_edges"] = {v: dict(sorted(b.items())) for v, b in sorted(per.items())}
    for df in persisted:
        df.unpersist()
    stats["steps_s"] = timer.as_dict()
    stats["time_s"] = round(time.time() - t0, 3)
    log.info("graph stage: %s", {k: v for k, v in stats.items() if k != "inputs"})
    return stats
