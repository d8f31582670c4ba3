"""The ``embeddings`` table as arrays: Parquet footer statistics, Arrow list helpers, and a
memory-mapped copy on each executor machine that its Python workers share (the ``files``
transport of the aggregate stage, and where the neighbours stage gathers g's input rows).

Memory-mapped copy (:func:`open_store`)
--------------------------------------
The driver names the exact table files with :func:`tables_key` (paths, sizes, mtimes, widths)
and ships a small spec (:class:`StoreSpec`). On an
executor, the first Python worker that needs it reads the two Parquet tables with
``pyarrow.parquet`` (one record batch at a time) into ``.npy`` files and an Arrow IPC file of node
ids under :func:`mapped_root` (the executor's local dirs, removed when the application ends),
holding an ``fcntl`` lock; the machine's other workers wait for it and map the same files, so a
machine holds one copy in its page cache and nothing is collected on the driver. The copy also
holds per node index the node facts the neighbours stage draws its rows from
(:func:`node_facts`: kind, twin label node, fold hash). A republished
table gets a new key, so a stale copy is never served. The build avoids ``pyarrow.dataset``
(its import costs ~0.3 s in a fresh Python worker).

Example::

    spec = store_spec("/r/embeddings", "/r/nodes", 384, 60965)  # driver side
    E = open_store(spec)  # executor side only
    X = features(E, store_rows(E, [3, 17]), 384 + 60965)
"""

import dataclasses as dc
import logging
import time
from typing import Any

from pina_spark import storage
from pina_spark.runtime.arrow import concat_ranges, features_csr

log = logging.getLogger(__name__)

__all__ = [
    "footer_stats",
    "estimate_mb",
    "tables_key",
    "choose_embeddings_via",
    "StoreSpec",
    "store_spec",
    "open_store",
    "store_rows",
    "features",
    "features_of_nodes",
    "mapped_root",
    "lengths",
    "flat",
    "dense_block",
    "sparse_parts",
    "check_sparse_range",
    "concat_nullable",
    "node_lookup",
]

#: executor-side cache of memory-mapped embeddings, per Python worker: key -> arrays
_MAPPED: dict[str, dict[str, Any]] = {}
_MAPPED_FILES = ("dense", "lookup", "sp_ptr", "sp_idx", "sp_val", "kind", "twin", "fold_unit")
#: bumped when the files of a store change (part of :func:`tables_key`)
STORE_FORMAT = 2
#: ``kind`` codes of the store (per node index)
KIND_NONE, KIND_INSTANCE, KIND_LABEL, KIND_OTHER = 0, 1, 2, 3


# =========================================================================== driver side
def footer_stats(uri: str) -> dict[str, Any] | None:
    """Rows, dense values, sparse values and max sparse index from Parquet footers only."""
    dset = storage.parquet_dataset(uri)
    if dset is None:
        return None
    rows = dense_vals = sparse_vals = 0
    dense_clean = True  # no null / empty dense list anywhere (footer statistics)
    max_idx = -1
    have_max = True
    try:
        for frag in dset.get_fragments():
            md = frag.metadata
            rows += md.num_rows
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                for c in range(rg.num_columns):
                    col = rg.column(c)
                    top = col.path_in_schema.split(".")[0]
                    if top == storage.DENSE:
                        dense_vals += col.num_values
                        st = col.statistics
                        if st is None or not st.has_null_count or st.null_count:
                            dense_clean = False
                    elif top in (storage.SPARSE_INDICES, storage.SPARSE_VALUES):
                        sparse_vals += col.num_values
                        if top == storage.SPARSE_INDICES:
                            st = col.statistics
                            if st is not None and st.has_min_max:
                                max_idx = max(max_idx, int(st.max))
                            elif col.num_values:
                                have_max = False
    except Exception as e:
        log.info("Parquet footers of %s unreadable (%s)", uri, e)
        return None
    # D: exact when every row stores a non-empty dense list (all of length D)
    dense_dim = dense_vals // rows if (rows and dense_clean and dense_vals % rows == 0) else None
    return {
        "rows": rows,
        "dense_values": dense_vals,
        "sparse_values": sparse_vals // 2,
        "max_index": max_idx if have_max else None,
        "dense_dim": dense_dim,
    }


def estimate_mb(stats: dict[str, Any]) -> float:
    """In-memory size of the embeddings as shipped to tasks: 4 bytes per dense value, 8 per
    sparse non-zero (int32 index + float32 value), 12 per row (lookup + CSR pointer).

    Examples
    --------
    >>> round(estimate_mb({"rows": 1000, "dense_values": 384000, "sparse_values": 20000}), 2)
    1.63
    """
    return (
        4.0 * stats["dense_values"] + 8.0 * stats["sparse_values"] + 12.0 * stats["rows"]
    ) / 2**20


def tables_key(
    embeddings_uri: str,
    nodes_uri: str,
    dense_dim: int,
    sparse_dim: int,
    extra_uri: str | None = None,
) -> str:
    """Driver side: a key of the exact table files (path, size, mtime) and widths, so that an
    executor never serves a memory-mapped copy of an earlier version of the tables.
    ``extra_uri``: a table that adds both embeddings and nodes rows (the aggregate stage's
    label features, :mod:`pina_spark.stages.aggregate.labelfeatures`)."""
    import hashlib

    h = hashlib.sha1(
        f"{STORE_FORMAT}\x1f{embeddings_uri}\x1f{nodes_uri}\x1f{dense_dim}\x1f"
        f"{sparse_dim}\x1f{extra_uri or ''}".encode()
    )
    for uri in (embeddings_uri, nodes_uri) + ((extra_uri,) if extra_uri else ()):
        found = storage.parquet_files(uri)
        if found is None:
            raise ValueError(
                f"embeddings store: {uri} is not a Parquet table pyarrow can read "
                f"here; use aggregate.broadcast_via: spark / "
                f"inference.embeddings_via: shuffle"
            )
        for fi in found[1]:
            h.update(f"\x1e{fi.path}\x1f{fi.size}\x1f{fi.mtime_ns}".encode())
    return h.hexdigest()[:20]


def choose_embeddings_via(
    value: str,
    embeddings_uri: str,
    nodes_uri: str,
    mmap_max_mb: float,
    selection_uri: str | None = None,
    section: str = "inference",
) -> tuple[str, str]:
    """``(via, reason)`` for ``inference.embeddings_via`` = ``auto`` | ``files`` | ``shuffle``
    (see :class:`pina_spark.config.InferenceConfig`): whether the executors map the tables
    (``files``: :func:`open_store`) or get their rows through Spark. ``files`` needs pyarrow to
    reach the tables (and an incremental run's ``selection_uri``) on the executors. The
    neighbours stage (``section`` ``inference``) and, with fits as tasks, the pretrain stage
    (``pretrain``: ``value`` ``auto`` and its own ``mmap_max_mb``) decide with it.

    Examples
    --------
    >>> choose_embeddings_via("auto", "hdfs:///r/embeddings", "hdfs:///r/nodes", 8192)[0]
    'shuffle'
    >>> choose_embeddings_via("shuffle", "/r/embeddings", "/r/nodes", 8192)[0]
    'shuffle'
    """
    value = (value or "auto").strip().lower()
    if value not in ("auto", "files", "shuffle"):
        raise ValueError(
            f"{section}.embeddings_via: {value!r} is not one of auto, files, " f"shuffle"
        )
    reach = all(storage.pyarrow_reaches(u) for u in (embeddings_uri, nodes_uri, selection_uri) if u)
    if value == "files":
        if not reach:
            raise ValueError(
                f"{section}.embeddings_via=files: executors cannot read "
                f"{embeddings_uri} with pyarrow; use embeddings_via: shuffle"
            )
        return "files", f"{section}.embeddings_via=files"
    if value == "shuffle":
        return "shuffle", f"{section}.embeddings_via=shuffle"
    if not reach:
        return "shuffle", "auto: the tables are not file tables pyarrow reads here"
    stats = footer_stats(embeddings_uri)
    if stats is None:
        return "shuffle", "auto: the embeddings' Parquet footers are not readable here"
    size_mb = estimate_mb(stats)
    if size_mb > mmap_max_mb:
        return "shuffle", (
            f"auto: embeddings ~{size_mb:.1f} MB > {section}.mmap_max_mb {mmap_max_mb}"
        )
    return "files", f"auto: embeddings ~{size_mb:.1f} MB <= {section}.mmap_max_mb {mmap_max_mb}"


@dc.dataclass(frozen=True)
class StoreSpec:
    """The tables an executor machine memory-maps, as :func:`open_store` takes them.

    Attributes:
        embeddings: the ``embeddings`` table.
        nodes: the ``nodes`` table.
        dense_dim: Phi_dnn width D.
        sparse_dim: tf-idf width S.
        key: names the exact table files (:func:`tables_key`): the folder of the mapped copy.
        extra: one more folder holding both tables' rows (the aggregate stage's label rows).
    """

    embeddings: str
    nodes: str
    dense_dim: int
    sparse_dim: int
    key: str
    extra: str | None = None

    @property
    def width(self) -> int:
        """Columns of a feature row ``[dense ; sparse]``."""
        return self.dense_dim + self.sparse_dim


def store_spec(embeddings_uri: str, nodes_uri: str, dense_dim: int, sparse_dim: int) -> StoreSpec:
    """Driver side: the spec of :func:`open_store` for these tables (:func:`tables_key` names
    their exact files, so two stages of one application that ask for the same tables share one
    copy per machine). Raises ``ValueError`` when pyarrow cannot read a table here.

    Examples
    --------
    >>> try:
    ...     store_spec("/no/such/embeddings", "/no/such/nodes", 4, 8)
    ... except ValueError as e:
    ...     print(str(e)[:54])
    embeddings store: /no/such/embeddings is not a Parquet
    """
    return StoreSpec(
        embeddings=embeddings_uri,
        nodes=nodes_uri,
        dense_dim=int(dense_dim),
        sparse_dim=int(sparse_dim),
        key=tables_key(embeddings_uri, nodes_uri, int(dense_dim), int(sparse_dim)),
    )


# =========================================================================== Arrow helpers
def lengths(list_arr):
    """Executor/driver helper: lengths of an Arrow list array (nulls -> 0), int64 numpy."""
    import numpy as np
    import pyarrow.compute as pc

    if isinstance(list_arr, type(None)):
        return np.zeros(0, dtype=np.int64)
    lens = pc.list_value_length(list_arr).fill_null(0)
    return lens.to_numpy(zero_copy_only=False).astype(np.int64)


def flat(list_arr, dtype, fill=0):
    import numpy as np
    import pyarrow.compute as pc

    flat = pc.list_flatten(list_arr)
    if flat.null_count:
        flat = flat.fill_null(fill)
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype=dtype)


def dense_block(list_arr, dense_dim: int):
    """Arrow list<float> -> (n, dense_dim) float32; null/empty lists give zero rows."""
    import numpy as np

    lens = lengths(list_arr)
    n = lens.size
    bad = (lens != 0) & (lens != dense_dim)
    if bad.any():
        raise ValueError(f"dense array of length {int(lens[bad][0])}, expected {dense_dim}")
    values = flat(list_arr, np.float32)
    full = lens == dense_dim
    if dense_dim == 0:
        return np.zeros((n, 0), dtype=np.float32), full
    if full.all():
        return values.reshape(n, dense_dim), full
    out = np.zeros((n, dense_dim), dtype=np.float32)
    out[full] = values.reshape(-1, dense_dim)
    return out, full


def sparse_parts(idx_arr, val_arr):
    """Arrow list<int>, list<float> -> CSR (indptr int64, indices int32, data float32)."""
    import numpy as np

    li, lv = lengths(idx_arr), lengths(val_arr)
    if not np.array_equal(li, lv):
        raise ValueError("sparse_indices and sparse_values have different lengths")
    ptr = np.zeros(li.size + 1, dtype=np.int64)
    np.cumsum(li, out=ptr[1:])
    return ptr, flat(idx_arr, np.int32), flat(val_arr, np.float32)


def concat_nullable(tables):
    """Concatenate Arrow tables with the same column names and types whose fields may differ in
    nullability (a Spark-written table marks ``node_index`` not null, others do not).

    Examples
    --------
    >>> import pyarrow as pa
    >>> a = pa.table({"x": pa.array([1], pa.int64())},
    ...              schema=pa.schema([pa.field("x", pa.int64(), nullable=False)]))
    >>> concat_nullable([a, pa.table({"x": pa.array([2], pa.int64())})]).column(0).to_pylist()
    [1, 2]
    """
    import pyarrow as pa

    schema = pa.schema([f.with_nullable(True) for f in tables[0].schema])
    return pa.concat_tables([t.select(schema.names).cast(schema) for t in tables])


def check_sparse_range(sp_idx, sparse_dim: int) -> None:
    """Refuse tf-idf indices outside ``[0, sparse_dim)`` (driver and executor side)."""
    if sp_idx.size and (sp_idx.min() < 0 or sp_idx.max() >= sparse_dim):
        raise ValueError(
            f"embeddings: sparse index out of range [0, {sparse_dim}) "
            f"(min {sp_idx.min()}, max {sp_idx.max()}); wrong sparse_dim?"
        )


def node_lookup(node, ids_tbl):
    """``(lookup, ids_by_index)`` (driver and executor side): ``lookup[node_index]`` = row of
    the embeddings (-1 when absent), ``ids_by_index[node_index]`` = ``node_id`` (null when
    absent), from the embeddings' ``node`` indices and a ``node_index, node_id`` table."""
    import numpy as np
    import pyarrow as pa

    ids_tbl = ids_tbl.combine_chunks()
    id_node = ids_tbl.column(storage.NODE_INDEX).to_numpy().astype(np.int64)
    size = int(max(node.max(initial=-1), id_node.max(initial=-1)) + 1)
    lookup = np.full(size, -1, dtype=np.int64)
    lookup[node] = np.arange(node.size, dtype=np.int64)
    id_pos = np.full(size, -1, dtype=np.int64)
    id_pos[id_node] = np.arange(id_node.size, dtype=np.int64)
    ids = ids_tbl.column(storage.NODE_ID).combine_chunks().cast(pa.string())
    return lookup, ids.take(pa.array(id_pos, mask=id_pos < 0))


def node_facts(nodes_tbl, size: int):
    """``(kind, twin, fold_unit)`` per node index ``[0, size)`` from a ``node_index, node_id,
    kind, split`` table (executor side, at the store build):

    * ``kind`` int8: :data:`KIND_INSTANCE`, :data:`KIND_LABEL`, :data:`KIND_OTHER`, or
      :data:`KIND_NONE` where no node has the index;
    * ``twin`` int64: for an instance node, the label node with the same ``node_id`` (an item
      that is also a label, ``task.labels: graph``), else -1;
    * ``fold_unit`` float64: for a ``train`` instance, the id-hash unit of
      :func:`pina_spark.storage.folds.fold_of` (its fold = ``folds.fold_of_unit(u, F, seed)``
      for any F and split), else NaN.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"node_index": [0, 1, 2], "node_id": ["a", "b", "a"],
    ...               "kind": ["instance", "instance", "label"], "split": ["train", None, None]})
    >>> k, tw, u = node_facts(t, 4)
    >>> k.tolist(), tw.tolist(), bool(u[0] < 1), bool(u[1] == u[1])
    ([1, 1, 2, 0], [2, -1, -1, -1], True, False)
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from pina_spark.storage.folds import fold_unit

    t = nodes_tbl.combine_chunks()
    idx = t.column(storage.NODE_INDEX).to_numpy(zero_copy_only=False).astype(np.int64)
    kind_s = t.column(storage.KIND)
    is_inst = pc.fill_null(pc.equal(kind_s, storage.KIND_INSTANCE), False).to_numpy(
        zero_copy_only=False
    )
    is_label = pc.fill_null(pc.equal(kind_s, storage.KIND_LABEL), False).to_numpy(
        zero_copy_only=False
    )
    kind = np.zeros(size, dtype=np.int8)
    kind[idx] = np.where(is_inst, KIND_INSTANCE, np.where(is_label, KIND_LABEL, KIND_OTHER))
    ids = t.column(storage.NODE_ID).cast(pa.string())
    twin = np.full(size, -1, dtype=np.int64)
    if is_inst.any() and is_label.any():
        lab = np.flatnonzero(is_label)
        pos = pc.index_in(ids.filter(pa.array(is_inst)), value_set=ids.take(pa.array(lab)))
        pos = pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        twin[idx[is_inst]] = np.where(pos >= 0, idx[lab][np.maximum(pos, 0)], -1)
    unit = np.full(size, np.nan, dtype=np.float64)
    train = is_inst & pc.fill_null(
        pc.equal(t.column(storage.SPLIT), storage.SPLIT_TRAIN), False
    ).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(train)
    unit[idx[rows]] = [
        np.nan if x is None else fold_unit(x) for x in ids.take(pa.array(rows)).to_pylist()
    ]
    return kind, twin, unit


# =========================================================================== executor side
def mapped_root(name: str = "pina-embeddings") -> str:
    """Executor side: the folder ``name`` for memory-mapped copies: under the first of the
    executor's local dirs (``SPARK_LOCAL_DIRS``, removed with the application), else the temp
    dir."""
    import os
    import tempfile

    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return os.path.join(dirs[0] if dirs else tempfile.gettempdir(), name)


def open_store(spec: StoreSpec) -> dict[str, Any]:
    """Executor side: the embeddings of ``spec`` as memory-mapped arrays: ``dense`` (rows x D
    float32), the tf-idf part as CSR (``sp_ptr``, ``sp_idx``, ``sp_val``), ``lookup``
    (node_index -> row, -1 = none), ``ids`` (node_index -> node_id, Arrow), ``dense_dim``,
    ``sparse_dim`` (the keys of ``aggregate.broadcast.broadcast_payload``), and per node index
    the node facts of :func:`node_facts` (``kind``, ``twin``, ``fold_unit``) that the
    neighbours stage draws its rows from.

    The first Python worker of a machine reads the Parquet tables (``spec.embeddings``,
    ``spec.nodes``) with pyarrow, batch by batch, into ``.npy`` files (and the node ids into
    an Arrow IPC file) under :func:`mapped_root`, holding a file lock; the other workers wait
    for it and map the same files, so the machine holds one copy in its page cache. The folder
    is named by ``spec.key`` (:func:`tables_key`: file sizes and times), so a republished
    table is never served stale. Cached per worker process.
    """
    from pina_spark.runtime.device import require_executor

    require_executor("open_store")
    key = spec.key
    got = _MAPPED.get(key)
    if got is not None:
        return got
    import os

    import numpy as np
    import pyarrow as pa

    final = build_once(mapped_root(), key, lambda tmp: _build(spec, tmp), "embeddings mapped")
    E: dict[str, Any] = {
        name: np.load(os.path.join(final, name + ".npy"), mmap_mode="r") for name in _MAPPED_FILES
    }
    with pa.memory_map(os.path.join(final, "ids.arrow")) as src:
        E["ids"] = pa.ipc.open_file(src).read_all().column(0).combine_chunks()
    E["dense_dim"], E["sparse_dim"] = spec.dense_dim, spec.sparse_dim
    _MAPPED[key] = E
    return E


def build_once(root: str, key: str, build, what: str) -> str:
    """Executor side: the folder ``root/key``, built by ``build(tmp_folder)`` by the first
    process of the machine that needs it (holding a file lock; the others wait, then use it),
    into a temporary folder renamed when complete; a crashed build is redone."""
    import os
    import shutil

    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, key)
    done = os.path.join(final, "_DONE")
    if not os.path.exists(done):
        with _file_lock(final + ".lock"):
            if not os.path.exists(done):
                shutil.rmtree(final, ignore_errors=True)  # a crashed build
                tmp = f"{final}.tmp-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                t0 = time.time()
                try:
                    build(tmp)
                    os.replace(tmp, final)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                open(done, "w").close()
                log.info("%s into %s in %.1fs", what, final, time.time() - t0)
    return final


class _file_lock:
    """Executor side: an exclusive ``fcntl`` lock on ``path`` (no-op where fcntl is missing:
    the build then may run twice, each into its own temp folder)."""

    def __init__(self, path):
        self.path, self.fh = path, None

    def __enter__(self):
        self.fh = open(self.path, "a")
        try:
            import fcntl

            fcntl.flock(self.fh, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - non-POSIX
            pass
        return self

    def __exit__(self, *exc):
        self.fh.close()  # releases the lock
        return False


def _build(spec: StoreSpec, out: str) -> None:
    """Executor side: stream the Parquet tables of ``spec`` into the ``.npy`` / Arrow IPC files
    that :func:`open_store` maps (memory: one record batch at a time, plus the sparse
    part and the node ids)."""
    import os

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    D, S = spec.dense_dim, spec.sparse_dim
    os.makedirs(out)
    extra = (spec.extra,) if spec.extra else ()
    emb = [storage.parquet_files(u) for u in (spec.embeddings,) + extra]
    nodes = [storage.parquet_files(u) for u in (spec.nodes,) + extra]
    if any(x is None for x in emb + nodes):
        raise RuntimeError(
            f"embeddings store: cannot read {spec.embeddings} / "
            f"{spec.nodes} with pyarrow on this executor; set "
            f"aggregate.broadcast_via: spark / inference.embeddings_via: shuffle"
        )
    cols = [storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES]
    emb_files = [pq.ParquetFile(fs.open_input_file(fi.path)) for fs, fis in emb for fi in fis]
    n = sum(f.metadata.num_rows for f in emb_files)
    dense = np.lib.format.open_memmap(
        os.path.join(out, "dense.npy"), mode="w+", dtype=np.float32, shape=(n, D)
    )
    node = np.empty(n, dtype=np.int64)
    ptrs, idxs, vals = [np.zeros(1, np.int64)], [], []
    r = 0
    for pf in emb_files:
        for batch in pf.iter_batches(batch_size=16384, columns=cols):
            m = batch.num_rows
            if not m:
                continue
            if r + m > n:
                raise RuntimeError(
                    f"embeddings store: {spec.embeddings} holds more rows "
                    f"than its footers say ({n})"
                )
            node[r : r + m] = batch.column(0).to_numpy(zero_copy_only=False)
            dense[r : r + m], _ = dense_block(batch.column(1), D)
            ptr, idx, val = sparse_parts(batch.column(2), batch.column(3))
            check_sparse_range(idx, S)
            ptrs.append(ptr[1:] + ptrs[-1][-1])
            idxs.append(idx)
            vals.append(val)
            r += m
        pf.close()
    if r != n:
        raise RuntimeError(
            f"embeddings store: read {r} rows of {spec.embeddings}, the " f"footers say {n}"
        )
    dense.flush()
    del dense
    tables = []
    for fs, fi in [(fs, fi) for fs, fis in nodes for fi in fis]:
        pf = pq.ParquetFile(fs.open_input_file(fi.path))
        have = set(pf.schema_arrow.names)
        cols = [
            c
            for c in (storage.NODE_INDEX, storage.NODE_ID, storage.KIND, storage.SPLIT)
            if c in have
        ]
        t = pf.read(columns=cols)
        for c in (
            storage.KIND,
            storage.SPLIT,
        ):  # a table without them: no node facts (aggregate only)
            if c not in have:
                t = t.append_column(c, pa.nulls(t.num_rows, pa.string()))
        tables.append(t.select([storage.NODE_INDEX, storage.NODE_ID, storage.KIND, storage.SPLIT]))
        pf.close()
    ids_tbl = (
        concat_nullable(tables)
        if tables
        else pa.table(
            {
                storage.NODE_INDEX: pa.array([], pa.int64()),
                storage.NODE_ID: pa.array([], pa.string()),
                storage.KIND: pa.array([], pa.string()),
                storage.SPLIT: pa.array([], pa.string()),
            }
        )
    )
    lookup, ids_by_index = node_lookup(node, ids_tbl)
    kind, twin, unit = node_facts(ids_tbl, len(lookup))
    np.save(os.path.join(out, "kind.npy"), kind)
    np.save(os.path.join(out, "twin.npy"), twin)
    np.save(os.path.join(out, "fold_unit.npy"), unit)
    np.save(os.path.join(out, "lookup.npy"), lookup)
    np.save(os.path.join(out, "sp_ptr.npy"), np.concatenate(ptrs))
    np.save(
        os.path.join(out, "sp_idx.npy"), np.concatenate(idxs) if idxs else np.zeros(0, np.int32)
    )
    np.save(
        os.path.join(out, "sp_val.npy"), np.concatenate(vals) if vals else np.zeros(0, np.float32)
    )
    tbl = pa.table({"id": ids_by_index})
    with pa.OSFile(os.path.join(out, "ids.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, tbl.schema) as w:
            w.write_table(tbl)


def store_rows(E: dict[str, Any], node_index):
    """Executor side: the rows of ``node_index`` in a store (:func:`open_store`), -1 where the
    node has no embedding row.

    Examples
    --------
    >>> import numpy as np
    >>> store_rows({"lookup": np.array([1, -1, 0])}, [0, 1, 2, 7]).tolist()
    [1, -1, 0, -1]
    """
    import numpy as np

    node_index = np.asarray(node_index, dtype=np.int64)
    lookup = E["lookup"]
    inside = (node_index >= 0) & (node_index < len(lookup))
    r = np.full(len(node_index), -1, dtype=np.int64)
    r[inside] = lookup[node_index[inside]]
    return r


def features(E: dict[str, Any], rows, n_features: int):
    """Executor side: X = ``hstack([dense, sparse])`` (csr float32, canonical) of the store
    ``rows`` (:func:`store_rows`, all >= 0): every dense value is stored (zeros included) and
    the tf-idf columns follow, shifted by D (:func:`pina_spark.runtime.arrow.features_csr`) --
    the matrix :func:`pina_spark.runtime.arrow.features_from_arrow` builds from the same
    ``embeddings`` rows
    (a null dense list reads as D zeros here, as no entries there: the same products).

    Examples
    --------
    >>> import numpy as np
    >>> E = {"dense": np.array([[1.0, 0.0]], np.float32), "sp_ptr": np.array([0, 1]),
    ...      "sp_idx": np.array([1], np.int32), "sp_val": np.array([2.0], np.float32),
    ...      "dense_dim": 2, "sparse_dim": 2}
    >>> features(E, np.array([0]), 4).toarray().tolist()
    [[1.0, 0.0, 0.0, 2.0]]
    """
    import numpy as np

    r = np.asarray(rows, dtype=np.int64)
    if r.size and r.min() < 0:
        raise ValueError("embeddings store: rows must be >= 0 (see store_rows)")
    D, S = int(E["dense_dim"]), int(E["sparse_dim"])
    if D + S > n_features:
        raise ValueError(
            f"embeddings: {D} dense + {S} sparse features, g expects {n_features}:"
            f" embeddings and g come from different vectorizers"
        )
    n = len(r)
    dense = np.asarray(E["dense"][r], dtype=np.float32).reshape(n, D)
    ptr = E["sp_ptr"]
    s0 = np.asarray(ptr[r], dtype=np.int64)
    lens = np.asarray(ptr[r + 1], dtype=np.int64) - s0
    src = concat_ranges(s0, lens)
    return features_csr(
        np.full(n, D, dtype=np.int64),
        dense.ravel(),
        lens,
        E["sp_idx"][src],
        E["sp_val"][src],
        D,
        n_features,
    )


def features_of_nodes(E: dict[str, Any], node_index, n_features: int, what: str):
    """Executor side: :func:`features` of the nodes ``node_index`` (row ``r`` is node
    ``node_index[r]``); a ``ValueError`` naming ``what`` when a node has no embedding row.

    Examples
    --------
    >>> import numpy as np
    >>> E = {"dense": np.array([[1.0, 0.0]], np.float32), "sp_ptr": np.array([0, 1]),
    ...      "sp_idx": np.array([1], np.int32), "sp_val": np.array([2.0], np.float32),
    ...      "dense_dim": 2, "sparse_dim": 2, "lookup": np.array([-1, 0])}
    >>> features_of_nodes(E, [1], 4, "g").toarray().tolist()
    [[1.0, 0.0, 0.0, 2.0]]
    >>> try:
    ...     features_of_nodes(E, [0, 1], 4, "g")
    ... except ValueError as e:
    ...     print(str(e)[:68])
    g: 1 of its 2 input nodes have no row in embeddings (e.g. node_index
    """
    import numpy as np

    node_index = np.asarray(node_index, dtype=np.int64)
    rows = store_rows(E, node_index)
    missing = node_index[rows < 0]
    if len(missing):
        raise ValueError(
            f"{what}: {len(missing)} of its {len(node_index)} input nodes have no row in "
            f"embeddings (e.g. node_index {missing[:5].tolist()}): run the embed stage on "
            "this run's nodes first"
        )
    return features(E, rows, n_features)
