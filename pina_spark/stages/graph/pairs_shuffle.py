"""The ``shuffle`` pair strategy: pair counts by a Spark aggregation, for logs that do not fit
the driver.

:func:`~pina_spark.stages.graph.baskets.capped_baskets` (a window per basket) puts every row of a
basket in one partition; each partition counts its pairs in numpy (:func:`co_counts`, executor
side), a Spark aggregation merges the partial counts, and the scores come from joins
(:func:`pina_spark.stages.graph.scoring._score`). Every unordered pair of kept items counts once
per basket: ``count`` = number of baskets in which both items were kept.
"""

from pina_spark import storage
from pina_spark.runtime import faults
from pina_spark.stages.graph.baskets import _SIZE, capped_baskets
from pina_spark.stages.graph.scoring import _ITEM_A, _ITEM_B, _score


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

    Example::

        co_counts(capped_baskets(events, 100)).filter("count >= 2")
    """
    from pyspark.sql import functions as F

    src = capped.filter(F.col(_SIZE) >= 2).select(storage.BASKET_ID, storage.ITEM_ID)
    partial = src.mapInPandas(
        _make_pair_counter(fault_plan), f"{_ITEM_A} string, {_ITEM_B} string, {storage.COUNT} long"
    )
    return partial.groupBy(_ITEM_A, _ITEM_B).agg(
        F.sum(storage.COUNT).cast("long").alias(storage.COUNT)
    )


def _shuffle_pairs(events, graph_cfg, fault_plan=None, capped=None):
    """``_item_a, _item_b, count, score`` with ``count >= min_count`` (shuffle strategy)."""
    from pyspark.sql import functions as F

    if capped is None:
        capped = capped_baskets(events, graph_cfg.max_basket_size)
    pairs = co_counts(capped, fault_plan).filter(F.col(storage.COUNT) >= graph_cfg.min_count)
    return _score(pairs, capped, graph_cfg.measure)
