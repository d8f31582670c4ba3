"""Executor side of ``inference.embeddings_via: files``: task slices, the store, the writer.

The job is ``spark.range(P)``: only task ids go through Spark. Task t of P takes the t-th of P
equal contiguous slices of the instance nodes in (route, node_index) order (:func:`task_order`,
:func:`task_rows`), so a task needs few fold models whatever Spark's scheduling; it reads their
X from the memory-mapped store of its machine (:mod:`pina_spark.runtime.embstore`, opened by
:class:`StoreOpener` while the models load) and writes its rows itself as Parquet
(:func:`write_task_files`), which the driver publishes.
"""

from typing import Any

from pina_spark import storage
from pina_spark.runtime import embstore
from pina_spark.stages.neighbors.plan import FULL_ROUTE, Sink

__all__ = [
    "SINK_SCHEMA",
    "task_order",
    "task_rows",
    "cached_task_order",
    "route_chunks",
    "write_task_files",
    "StoreOpener",
]


#: executor side, per Python worker: :func:`task_order` of the latest store (one entry)
_TASK_ORDER: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def read_node_indices(uri: str):
    """Executor side: the sorted distinct ``node_index`` values of a Parquet table (pyarrow)."""
    import numpy as np
    import pyarrow.parquet as pq

    found = storage.parquet_files(uri)
    if found is None:
        raise RuntimeError(
            f"neighbors: cannot read the selection {uri} with pyarrow here; set "
            f"inference.embeddings_via: shuffle"
        )
    fs, files = found
    parts = [np.zeros(0, np.int64)]
    for fi in files:
        with fs.open_input_file(fi.path) as fh:
            col = pq.read_table(fh, columns=[storage.NODE_INDEX]).column(0)
        parts.append(col.drop_null().to_numpy().astype(np.int64))
    return np.unique(np.concatenate(parts))


def task_order(E: dict[str, Any], n_folds: int = 0, selection=None, fold_seed: int = 0):
    """Executor side (``embeddings_via: files``): ``(node indices, routes)`` of every instance
    node of the store ``E`` (:func:`~pina_spark.runtime.embstore.open_store`), optionally only those
    in ``selection`` (sorted node indices), ordered by (route, node index) -- route = the fold of
    a train instance (split ``fold_seed``) when ``n_folds`` > 0, else ``-1`` (the full g)."""
    import numpy as np

    from pina_spark.storage.folds import fold_of_unit

    nodes = np.flatnonzero(np.asarray(E["kind"]) == embstore.KIND_INSTANCE).astype(np.int64)
    if selection is not None:
        nodes = nodes[np.isin(nodes, selection, assume_unique=True)]
    if n_folds:
        routes = fold_of_unit(np.asarray(E["fold_unit"])[nodes], n_folds, fold_seed)
        order = np.lexsort((nodes, routes))
        return nodes[order], routes[order]
    return nodes, np.full(len(nodes), FULL_ROUTE, dtype=np.int64)


def task_rows(order, n_tasks: int, task: int):
    """Executor side (``embeddings_via: files``): ``(node indices, routes)`` of task ``task`` of
    ``n_tasks``: the t-th of ``n_tasks`` contiguous slices of equal size (+-1) of ``order``
    (:func:`task_order`). A task therefore needs few fold models, and the slices do not depend
    on how Spark schedules the tasks.

    Examples
    --------
    >>> import numpy as np
    >>> E = {"kind": np.array([1, 2, 1, 1, 0, 1], np.int8), "fold_unit": np.full(6, np.nan)}
    >>> [task_rows(task_order(E), 2, t)[0].tolist() for t in (0, 1)]
    [[0, 2], [3, 5]]
    >>> task_rows(task_order(E, selection=np.array([2, 3])), 2, 1)[0].tolist()
    [3]
    """
    nodes, routes = order
    n = len(nodes)
    lo, hi = n * task // n_tasks, n * (task + 1) // n_tasks
    return nodes[lo:hi], routes[lo:hi]


def cached_task_order(
    E: dict[str, Any], key: str, n_folds: int, selection: str | None, fold_seed: int = 0
):
    """Executor side: :func:`task_order` of a store, computed once per worker (the latest
    one is kept): the tasks of a stage that a worker runs share it."""
    ck = (key, n_folds, selection, fold_seed)
    got = _TASK_ORDER.get(ck)
    if got is None:
        sel = read_node_indices(selection) if selection else None
        got = task_order(E, n_folds, sel, fold_seed)
        _TASK_ORDER.clear()
        _TASK_ORDER[ck] = got
    return got


def route_chunks(routes, batch_size: int):
    """``(start, end)`` of chunks of at most ``batch_size`` rows sharing one route (``routes``
    non-decreasing)."""
    import numpy as np

    n = len(routes)
    if not n:
        return []
    cut = np.flatnonzero(routes[1:] != routes[:-1]) + 1
    out: list[tuple[int, int]] = []
    for s, e in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [n]]).tolist()):
        out.extend((a, min(a + batch_size, e)) for a in range(s, e, batch_size))
    return out


#: the rows a ``files`` task yields with a sink: one per Parquet file it wrote
SINK_SCHEMA = "variant string, rows long, path string"


def write_task_files(tables: dict[str, Any], sink: Sink, task: int, attempt: int):
    """Executor side: write each variant's rows of a task to
    ``<sink.uri>/variant=<v>/part-<task>.parquet`` (pyarrow; a hidden temporary name renamed when
    complete, so a retried or speculative attempt replaces the same file with the same rows) and
    return one ``variant, rows, path`` record batch. A variant without rows still gets its
    (empty) file, so the table has a schema even with no rows."""
    import pyarrow as pa

    from pina_spark.storage.partfile import PartFile

    fs, base = storage.pyarrow_fs(sink.uri)
    codec = storage.parquet_codec(sink.compression)
    done = []
    for v, t in tables.items():
        rows = t.drop_columns([storage.VARIANT])
        d, name = f"{base}/{storage.VARIANT}={v}", f"part-{task:05d}.parquet"
        with PartFile(fs, d, name, attempt, rows.schema, codec) as f:
            f.write_table(rows)
        done.append((v, t.num_rows, f.path))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([x[0] for x in done], pa.string()),
            pa.array([x[1] for x in done], pa.int64()),
            pa.array([x[2] for x in done], pa.string()),
        ],
        ["variant", "rows", "path"],
    )


class StoreOpener:
    """Executor side: :func:`pina_spark.runtime.embstore.open_store` in a background thread;
    :meth:`result` waits for it and re-raises its error in the task's thread."""

    def __init__(self, spec: embstore.StoreSpec):
        import threading

        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._run, args=(spec,), daemon=True, name="pina-open-store"
        )
        self._thread.start()

    def _run(self, spec):
        try:
            self._out["E"] = embstore.open_store(spec)
        except BaseException as e:  # re-raised by result()
            self._out["error"] = e

    def result(self):
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["E"]
