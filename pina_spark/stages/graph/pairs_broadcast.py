"""The ``broadcast`` pair strategy: pair counts over a broadcast basket x item matrix, no shuffle.

The events are validated on their way to the driver, in one pass
(:mod:`pina_spark.validate.events`: read by pyarrow where it reaches Parquet input, else one
Spark collect; the row rules, unknown items and duplicates on the driver), and the driver codes
items by sorted id, drops duplicate rows, applies the cap (hashing only the rows of baskets over
the cap) and builds the basket x item incidence matrix X (CSR) with n_a and N
(:func:`pina_spark.stages.graph.baskets.basket_matrix`). One Spark job of ``defaultParallelism``
tasks gets X as a broadcast; task t counts the pairs (a, b), a < b, of its contiguous range of
item codes (ranges of about equal work) as ``X[:, lo:hi].T @ X[:, lo:]`` (scipy's sparse product
accumulates each row in a dense buffer: no sort of the pair occurrences), keeps ``count >=
min_count`` and scores them in numpy. Only thresholded edges leave the tasks. The train-only
graph is built from the same collected rows (train items kept before the cap), not from a second
pass over the events.
"""

import dataclasses as dc
import time
from typing import Any

from pina_spark import storage
from pina_spark.runtime import faults
from pina_spark.stages.graph.scoring import _ITEM_A, _ITEM_B, _finish_pairs, _score_np


def _item_bounds(matrix, tasks: int) -> tuple[int, ...]:
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
    bounds: tuple[int, ...]
    min_count: int
    measure: str
    fault_plan: tuple | None = None
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
