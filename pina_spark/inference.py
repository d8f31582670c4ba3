"""Stage 2a: sharded Phi_pre embeddings and top-K neighbour prediction (``mapInArrow``).

Two stages (docs/design.md):

* ``embed`` (:func:`run_embed_stage`) writes ``embeddings``: Phi_pre of every node (instances of
  every split, new ones included, and labels).
* ``neighbors`` (:func:`run_neighbors_stage`) writes ``neighbors`` partitioned by ``variant``:
  for every instance node, the top-K output nodes of g with normalised weights.

Driver / executor split
-----------------------
``run_*_stage``, ``embed_frame`` and ``neighbors_frame`` run on the driver: they resolve paths,
model versions, node-index maps and the fault plan into plain values, then build the executor
functions (``_make_*_fn``) that close over only those values. The executor functions import
numpy / pyarrow / torch / PECOS inside, load models through the per-worker cache
(:mod:`pina_spark.runtime`), and process Arrow record batches in chunks of
``inference.batch_size`` rows with vectorised numpy (no per-row Python math).

Determinism
-----------
* Embeddings: rows are cut into global blocks ``node_index div batch_size`` (range-partitioned,
  a block never straddles two tasks, rows sorted inside a task), so every encoder call sees the
  same texts whatever the number of partitions.
* Neighbours: PECOS scores each row independently; candidates are ordered by (score desc,
  node_index asc). Rows are grouped by ``route``, the g model a row needs (``-1`` = full,
  ``f`` = fold f, ``out_of_fold`` only), so a task needs only a few models (the cache holds
  4): with ``files`` task t of P takes the t-th of P equal contiguous slices of the instance
  nodes in (route, node_index) order (:func:`task_rows`); with ``shuffle`` rows are
  range-partitioned by (route, instance_index) (``out_of_fold``) or hash-partitioned by
  instance_index (``in_sample``). Either way each published file holds its rows in
  instance_index order.

Models of an earlier run (new instances)
----------------------------------------
Both stages need only ``nodes`` (+ ``embeddings`` for neighbours) and the models folder
``ctx.models``. g's ``output_nodes.npy`` are node indices of the run that trained it; when
``ctx.models`` is another run's, they are mapped through ``(kind, node_id)`` of that run's
``nodes`` (``<models>/../nodes``) into this run's ``nodes`` (identity when the pipeline keeps
the models run's indices, as ``pipeline.prepare_nodes_from_models`` does). This run's ``nodes``
must therefore contain the models run's train instances and labels (their embeddings are the
neighbours' Phi_pre in the aggregate stage); new instances may have any index and split
(``new`` rows use the full g, like ``test``).

X for g is rebuilt from the ``embeddings`` table (``hstack([dense, sparse])`` =
``PhiPre.features``): the encoder is not run twice and the stage needs no text.
``inference.embeddings_via`` (:func:`choose_embeddings_via`):

* ``files`` -- the job is ``spark.range(P)``: nothing but task ids goes through Spark. Each
  task takes its slice of the instance nodes, and their rows of X, from the memory-mapped copy
  of ``embeddings`` + the node facts of ``nodes`` that its machine builds once
  (:mod:`pina_spark.embstore`, shared with the aggregate stage), and writes its neighbour rows
  itself as Parquet (pyarrow) into the staging folder, which the driver publishes;
* ``shuffle`` -- the embedding rows are joined to the instance rows, shuffled by Spark, and
  written by Spark's Parquet writer (``hdfs://``, ``s3a://``... where pyarrow does not reach).

Examples
--------
>>> from pina_spark.pipeline import run_pipeline                     # doctest: +SKIP
>>> run_pipeline(spark, cfg, ["embed", "neighbors"])                 # doctest: +SKIP
{'embed': 'ran', 'neighbors': 'ran'}
"""

import io as _pyio
import json
import logging
import math
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import embstore, faults, io, runtime

log = logging.getLogger(__name__)

__all__ = [
    "run_embed_stage",
    "run_neighbors_stage",
    "embed_frame",
    "neighbors_frame",
    "g_model_dir",
    "fold_route_expr",
    "VARIANTS",
    "topk_neighbors",
    "normalize_scores",
    "features_from_arrow",
    "load_vectorizer",
    "load_g_model",
    "choose_embeddings_via",
]

#: g variants, in output order
VARIANTS = ("pina", "pina_naive")
VECTORIZER_DIR = "vectorizer"
G_DIR = "g"
FOLDS_JSON = "folds.json"
OUTPUT_NODES = "output_nodes.npy"
ENCODER_JSON = "encoder.json"
ROUTE = "_route"
BLOCK = "_block"
DEAL = "_deal"
TWIN = "_twin"
FULL_ROUTE = -1
#: accumulator key: instance rows without an embedding row (``embeddings_via: files``)
MISSING_KEY = "missing|embeddings"
#: the neighbours stage broadcasts (instance_index, node_id, split, twin) up to this many rows
BROADCAST_INSTANCES_MAX_ROWS = 2_000_000

EMBED_SCHEMA = (
    f"{io.NODE_INDEX} long, {io.DENSE} array<float>, "
    f"{io.SPARSE_INDICES} array<int>, {io.SPARSE_VALUES} array<float>"
)
NEIGHBORS_SCHEMA = (
    f"{io.INSTANCE_INDEX} long, {io.NEIGHBOR} array<long>, "
    f"{io.SCORE} array<float>, {io.VARIANT} string"
)


# --------------------------------------------------------------------------- model layout
def g_model_dir(models_root: str, variant: str, fold: Optional[int] = None) -> str:
    """``<models>/g/<variant>/full`` or ``<models>/g/<variant>/fold=<f>`` (docs/design.md).

    Examples
    --------
    >>> g_model_dir("/r/models", "pina", 2)
    '/r/models/g/pina/fold=2'
    """
    leaf = "full" if fold is None else f"fold={int(fold)}"
    return f"{models_root.rstrip('/')}/{G_DIR}/{variant}/{leaf}"


def _model_name(variant: str, route: int) -> str:
    return f"{variant}/{'full' if route == FULL_ROUTE else f'fold={route}'}"


def _require_models(spark, models_root: str) -> None:
    marker = models_root.rstrip("/") + "/_SUCCESS"
    if not io.path_exists(spark, marker):
        raise io.InputError(
            f"models folder {models_root} is missing or incomplete (no "
            f"{marker}); run the pretrain stage or point run.models at a "
            f"complete run"
        )


def _read_json(uri: str) -> Dict[str, Any]:
    raw = io.read_bytes(uri)
    if raw is None:
        raise io.InputError(f"model artifact missing: {uri}")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise io.InputError(f"model artifact {uri} is not valid JSON: {e}")


def _read_output_nodes(model_uri: str):
    import numpy as np

    uri = f"{model_uri}/{OUTPUT_NODES}"
    raw = io.read_bytes(uri)
    if raw is None:
        raise io.InputError(f"model artifact missing: {uri}")
    try:
        arr = np.load(_pyio.BytesIO(raw), allow_pickle=False)
    except Exception as e:
        raise io.InputError(f"model artifact {uri} is corrupt: {type(e).__name__}: {e}")
    return np.asarray(arr, dtype=np.int64).ravel()


def _version(spark, uri: str) -> str:
    """Fingerprint of a model folder's files (part of the executor cache key): listed with
    pyarrow where it reaches the folder, else through Spark's Hadoop filesystem."""
    return io.files_fingerprint(uri) or io.input_fingerprint(spark, [uri])


# --------------------------------------------------------------------------- loaders (executor)
def load_vectorizer(local_dir: str, device: str):
    """Executor side: ``PhiPre.load`` with the task's threads for the tf-idf part.

    Examples
    --------
    >>> phi = load_vectorizer("/run/models/vectorizer", "cpu")   # doctest: +SKIP
    """
    from .vectorizer import TFIDF_DIR, PhiPre

    # PECOS' C++ tf-idf loader aborts the worker on a corrupt file: check first, naming it
    runtime.check_artifacts(
        local_dir,
        required=[ENCODER_JSON],
        counted_text=("tfidf-model.txt", "vocab.txt"),
        counted_under=TFIDF_DIR,
    )
    return PhiPre.load(local_dir, device=device)


def load_g_model(local_dir: str, device: str = "cpu", mmap: bool = False):
    """Executor side: a predict-only PECOS XR-Linear g (``device`` is ignored: CPU model).

    ``mmap``: load PECOS' memory-mapped form of the model (:func:`g_mmap_copy`), compiled once
    per machine: the machine's workers then share one copy of the weights in the page cache
    and each load takes milliseconds; predictions are the same.

    Examples
    --------
    >>> g = load_g_model("/run/models/g/pina/full")   # doctest: +SKIP
    """
    from pecos.xmc.xlinear.model import XLinearModel

    # PECOS' C++ loader aborts the worker on a truncated file: check first, naming the file
    runtime.check_artifacts(local_dir, required=["param.json", "ranker/param.json"])
    if mmap:
        return XLinearModel.load(g_mmap_copy(local_dir), is_predict_only=True)
    return XLinearModel.load(local_dir, is_predict_only=True)


def _load_g_mmap(local_dir: str, device: str = "cpu"):
    return load_g_model(local_dir, device, mmap=True)


def g_mmap_copy(local_dir: str) -> str:
    """Executor side: a folder holding PECOS' memory-mapped form of the XR-Linear model in
    ``local_dir`` (``XLinearModel.compile_mmap_model``), compiled once per machine under a
    file lock into the executor's local dirs (:func:`pina_spark.embstore.mapped_root`); named
    by a hash of the model files' paths, sizes and times, so a retrained model is never served
    stale.

    Examples
    --------
    >>> g = XLinearModel.load(g_mmap_copy("/tmp/g"), is_predict_only=True)  # doctest: +SKIP
    """
    import hashlib
    import os

    from pecos.xmc.xlinear.model import XLinearModel

    runtime.require_executor("g_mmap_copy")
    h = hashlib.sha1(os.path.abspath(local_dir).encode())
    for base, dirs, files in sorted(os.walk(local_dir)):
        dirs.sort()
        for f in sorted(files):
            st = os.stat(os.path.join(base, f))
            h.update(
                f"\x1e{os.path.relpath(os.path.join(base, f), local_dir)}\x1f{st.st_size}"
                f"\x1f{st.st_mtime_ns}".encode()
            )
    return embstore.build_once(
        embstore.mapped_root("pina-g-mmap"),
        h.hexdigest()[:20],
        lambda tmp: XLinearModel.compile_mmap_model(local_dir, tmp),
        f"g {local_dir} compiled to memory-mapped form",
    )


# --------------------------------------------------------------------------- arrow helpers
def _iter_chunks(
    batches: Iterator[Any], key_of: Callable[[Any], Any], max_rows: int
) -> Iterator[Tuple[Any, Any]]:
    """Executor side: regroup sorted Arrow record batches into ``(key, pa.Table)`` chunks of
    at most ``max_rows`` rows sharing one key (keys must be non-decreasing)."""
    import numpy as np
    import pyarrow as pa

    pend: List[Any] = []
    pend_key = None
    pend_n = 0
    for rb in batches:
        if rb.num_rows == 0:
            continue
        keys = np.asarray(key_of(rb))
        if len(keys) > 1 and np.any(keys[1:] < keys[:-1]):
            raise RuntimeError("inference: rows of a task are not sorted by their chunk key")
        if pend_key is not None and keys[0] < pend_key:
            raise RuntimeError("inference: rows of a task are not sorted by their chunk key")
        change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [len(keys)]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            k = keys[s].item()
            if pend and k != pend_key:
                yield pend_key, pa.Table.from_batches(pend).combine_chunks()
                pend, pend_n = [], 0
            pend_key = k
            piece = rb.slice(s, e - s)
            while piece.num_rows:
                take = piece.slice(0, max_rows - pend_n)
                pend.append(take)
                pend_n += take.num_rows
                piece = piece.slice(take.num_rows)
                if pend_n >= max_rows:
                    yield k, pa.Table.from_batches(pend).combine_chunks()
                    pend, pend_n = [], 0
    if pend:
        yield pend_key, pa.Table.from_batches(pend).combine_chunks()


def _list_parts(col) -> Tuple[Any, Any, Any]:
    """(row_ids, positions, values) of a list column (nulls = empty lists)."""
    import numpy as np
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(arr)
    offs = arr.offsets.to_numpy().astype(np.int64)
    lens = np.diff(offs)
    if arr.null_count:
        lens = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, lens)
    vals = arr.values.to_numpy(zero_copy_only=False)
    total = int(lens.sum())
    rows = np.repeat(np.arange(n, dtype=np.int64), lens)
    first = np.cumsum(lens) - lens
    pos = np.arange(total, dtype=np.int64) - np.repeat(first, lens)
    src = np.repeat(offs[:-1], lens) + pos
    return rows, pos, vals[src]


def features_from_arrow(table, dense_dim: int, n_features: int):
    """Executor side: X = ``hstack([dense, sparse])`` (csr float32, sorted indices) from the
    ``dense`` / ``sparse_indices`` / ``sparse_values`` columns of an Arrow table — the same
    matrix as ``PhiPre.features`` of the rows' texts.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"dense": [[1.0, 0.0]], "sparse_indices": [[1]], "sparse_values": [[2.0]]})
    >>> features_from_arrow(t, 2, 4).toarray().tolist()
    [[1.0, 0.0, 0.0, 2.0]]
    """
    import numpy as np
    import scipy.sparse as sp

    n = table.num_rows
    dr, dp, dv = _list_parts(table.column(io.DENSE))
    if len(dp) and int(dp.max()) >= dense_dim:
        raise ValueError(f"embeddings: dense vectors longer than dense_dim={dense_dim}")
    sr, _, si = _list_parts(table.column(io.SPARSE_INDICES))
    _, _, sv = _list_parts(table.column(io.SPARSE_VALUES))
    if len(si) != len(sv):
        raise ValueError("embeddings: sparse_indices and sparse_values differ in length")
    cols = np.concatenate([dp, si.astype(np.int64) + dense_dim])
    if len(cols) and int(cols.max()) >= n_features:
        raise ValueError(
            f"embeddings: feature index {int(cols.max())} out of range for g "
            f"(nr_features={n_features}, dense_dim={dense_dim}): embeddings and "
            f"g come from different vectorizers"
        )
    rows = np.concatenate([dr, sr])
    vals = np.concatenate([dv, sv]).astype(np.float32)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, n_features), dtype=np.float32)
    X.sum_duplicates()
    X.sort_indices()
    return X


def _nonzero_rows(X):
    """Rows of a csr matrix with a nonzero value (an all-zero Phi_pre row has no neighbours)."""
    import numpy as np

    nz = X.data != 0
    return (
        np.bincount(np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[nz], minlength=X.shape[0])
        > 0
    )


def _list_array(counts, values, value_type):
    import numpy as np
    import pyarrow as pa

    offs = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offs[1:])
    return pa.ListArray.from_arrays(pa.array(offs, pa.int32()), pa.array(values, value_type))


# --------------------------------------------------------------------------- neighbour math
def normalize_scores(scores, counts, weighting: str, temperature: float = 1.0):
    """Normalise the kept scores of each row (``scores`` is ``(n, K)``, the first ``counts[i]``
    entries of row ``i`` are valid).

    ``l1``: rows with a negative score get a softmax first, then each row is divided by its sum
    (all-zero rows stay zero). ``softmax``: ``exp((s - max) / temperature)`` normalised. ``raw``:
    unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> normalize_scores(np.array([[3.0, 1.0]]), np.array([2]), "l1").round(3).tolist()
    [[0.75, 0.25]]
    >>> normalize_scores(np.array([[1.0, -1.0]]), np.array([2]), "l1").round(3).tolist()
    [[0.881, 0.119]]
    """
    import numpy as np

    s = np.asarray(scores, dtype=np.float64)
    n, k = s.shape
    valid = np.arange(k)[None, :] < np.asarray(counts)[:, None]
    if weighting == "raw":
        return np.where(valid, s, 0.0)

    def _softmax(x, t):
        m = np.max(np.where(valid, x, -np.inf), axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.where(valid, np.exp((x - m) / t), 0.0)
        z = e.sum(axis=1, keepdims=True)
        return np.divide(e, z, out=np.zeros_like(e), where=z > 0)

    if weighting == "softmax":
        return _softmax(s, float(temperature))
    if weighting != "l1":
        raise ValueError(f"neighbors.weighting: expected l1|softmax|raw, got {weighting!r}")
    neg = np.any(valid & (s < 0), axis=1, keepdims=True)
    base = np.where(neg, _softmax(s, 1.0), np.where(valid, s, 0.0))
    z = np.abs(base).sum(axis=1, keepdims=True)
    return np.divide(base, z, out=np.zeros_like(base), where=z > 0)


def topk_neighbors(Y, col_map, own, twin, k: int):
    """Top-``k`` neighbours of each row of a PECOS prediction matrix.

    Parameters
    ----------
    Y : scipy.sparse.csr_matrix
        ``(n, n_outputs)`` scores of g's output columns.
    col_map : np.ndarray int64
        Output column -> node_index, ``-1`` for columns that may not be neighbours.
    own, twin : np.ndarray int64
        Excluded node indices per row (``-1`` = none): the row's own node and its twin (the
        label node of the same item); pass ``-1`` everywhere when self may be returned.
    k : int
        Neighbours kept.

    Returns
    -------
    (nodes ``(n, k)`` int64, scores ``(n, k)`` float64, counts ``(n,)``): sorted by score desc,
    node_index asc; entries past ``counts[i]`` are padding.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> Y = sp.csr_matrix(np.array([[0.5, 0.9, 0.5, 0.1]], dtype=np.float32))
    >>> nodes, scores, counts = topk_neighbors(Y, np.array([7, 3, 5, 4]), np.array([3]),
    ...                                        np.array([-1]), 2)
    >>> nodes.tolist(), counts.tolist()
    ([[5, 7]], [2])
    """
    import numpy as np

    Y = Y.tocsr()
    n = Y.shape[0]
    lens = np.diff(Y.indptr)
    width = max(int(lens.max()) if n else 0, k)
    big = np.iinfo(np.int64).max
    nodes = np.full((n, width), big, dtype=np.int64)
    scores = np.full((n, width), -np.inf, dtype=np.float64)
    if Y.nnz:
        rows = np.repeat(np.arange(n, dtype=np.int64), lens)
        pos = np.arange(Y.nnz, dtype=np.int64) - np.repeat(Y.indptr[:-1].astype(np.int64), lens)
        cand = np.asarray(col_map, dtype=np.int64)[Y.indices]
        ok = (cand >= 0) & (cand != own[rows]) & (cand != twin[rows]) & np.isfinite(Y.data)
        nodes[rows[ok], pos[ok]] = cand[ok]
        scores[rows[ok], pos[ok]] = Y.data[ok].astype(np.float64)
    order = np.lexsort((nodes, -scores), axis=1)[:, :k]
    nodes = np.take_along_axis(nodes, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    counts = np.isfinite(scores).sum(axis=1)
    return nodes, scores, counts


# --------------------------------------------------------------------------- partitioning
def _n_partitions(n_rows: int, rows_per_task: int, slots: int = 1) -> int:
    """Tasks for ``n_rows``: about ``rows_per_task`` rows each, rounded up to a multiple of the
    task slots (every slot busy to the end of the stage), never more tasks than rows.

    Examples
    --------
    >>> _n_partitions(11688, 4000, 2), _n_partitions(11688, 4000, 1), _n_partitions(3, 4000, 8)
    (4, 3, 3)
    """
    base = int(math.ceil(n_rows / float(max(1, rows_per_task))))
    slots = max(1, int(slots))
    return max(1, min(int(math.ceil(base / slots)) * slots, max(1, int(n_rows))))


def fold_route_expr(node_id_col: str, folds: int):
    """Spark column: ``folds.fold_of(node_id, folds)`` computed in SQL (sha1 of
    ``"pina-fold\\x1f" + id``, first 12 hex digits / 16**12 * F), used only to co-locate rows
    that need the same fold model; executors re-check it against :func:`folds.fold_of`.

    Examples
    --------
    >>> spark.createDataFrame([("a",)], "id string").select(fold_route_expr("id", 5)).first()[0] \\
    ...     == __import__("pina_spark.folds").folds.fold_of("a", 5)        # doctest: +SKIP
    True
    """
    from pyspark.sql import functions as F

    h = F.sha1(F.concat(F.lit("pina-fold\x1f"), F.col(node_id_col)))
    unit = F.conv(F.substring(h, 1, 12), 16, 10).cast("double") / F.lit(float(16**12))
    return F.least(F.floor(unit * F.lit(float(folds))).cast("int"), F.lit(folds - 1))


# --------------------------------------------------------------------------- embed
def _make_embed_fn(
    vec_uri: str,
    version: str,
    device_cfg: str,
    threads_cfg: int,
    batch_size: int,
    plan,
    acc,
    load_fn: Callable[[str, str], Any],
):
    """Driver side: build the executor function of the embed stage (closes over plain values)."""

    def embed_partition(batches):
        """Executor side: Arrow batches (node_index, text) -> embedding record batches."""
        faults.maybe_fail(plan)
        tc = runtime.require_executor("embed_partition")
        import numpy as np
        import pyarrow as pa

        device = runtime.resolve_device(device_cfg, threads_cfg)
        threads = runtime.task_threads(threads_cfg, tc)
        phi = None
        rows = 0
        schema = pa.schema(
            [
                (io.NODE_INDEX, pa.int64()),
                (io.DENSE, pa.list_(pa.float32())),
                (io.SPARSE_INDICES, pa.list_(pa.int32())),
                (io.SPARSE_VALUES, pa.list_(pa.float32())),
            ]
        )

        def block_of(rb):
            return rb.column(io.NODE_INDEX).to_numpy() // batch_size

        for _, tbl in _iter_chunks(batches, block_of, batch_size):
            if phi is None:
                phi = runtime.get_model(vec_uri, load_fn, version, device, acc, "vectorizer")
                if hasattr(phi, "tfidf_threads"):
                    phi.tfidf_threads = threads
            texts = tbl.column(io.TEXT).to_pylist()
            dense, sparse = phi.transform(texts, batch_size=batch_size)
            dense = np.ascontiguousarray(dense, dtype=np.float32)
            sparse = sparse.tocsr().astype(np.float32)
            sparse.sort_indices()
            if dense.shape[0] != tbl.num_rows or sparse.shape[0] != tbl.num_rows:
                raise RuntimeError(
                    f"vectorizer returned {dense.shape[0]}/{sparse.shape[0]} "
                    f"rows for {tbl.num_rows} texts"
                )
            n, d = dense.shape
            rows += n
            yield pa.RecordBatch.from_arrays(
                [
                    tbl.column(io.NODE_INDEX).combine_chunks(),
                    _list_array(np.full(n, d, dtype=np.int64), dense.ravel(), pa.float32()),
                    _list_array(
                        np.diff(sparse.indptr), sparse.indices.astype(np.int32), pa.int32()
                    ),
                    _list_array(np.diff(sparse.indptr), sparse.data, pa.float32()),
                ],
                schema=schema,
            )
        if acc is not None and rows:
            acc.add({"rows|embed": rows})

    return embed_partition


def embed_frame(
    nodes_df,
    vectorizer_uri: str,
    inference_cfg,
    n_rows: int,
    fault_plan=None,
    version: str = "",
    accumulator=None,
    load_fn: Optional[Callable[[str, str], Any]] = None,
    slots: int = 1,
):
    """Driver side: the lazy ``embeddings`` DataFrame of ``nodes_df`` (node_index, text).

    Parameters
    ----------
    nodes_df : DataFrame
        At least ``node_index`` and ``text``.
    vectorizer_uri : str
        The saved ``PhiPre`` folder.
    inference_cfg : config.InferenceConfig
        ``rows_per_task``, ``batch_size``, ``device``, ``torch_threads``.
    n_rows : int
        Row count of ``nodes_df`` (sizes the partitions).
    fault_plan : tuple, optional
        ``faults.fault_plan(cfg, "embed")``.
    version : str
        Fingerprint of the vectorizer folder (cache key).
    accumulator : Accumulator, optional
        :class:`runtime.LoadStatsParam` accumulator for loads and rows.
    load_fn : callable, optional
        ``load_fn(local_dir, device) -> object with .transform(texts, batch_size)``;
        default :func:`load_vectorizer` (``PhiPre.load``).
    slots : int
        Task slots of the application (:func:`runtime.task_slots`); the task count is a
        multiple of it.

    Examples
    --------
    >>> df = embed_frame(nodes, "/r/models/vectorizer", cfg.inference,
    ...                  nodes.count())  # doctest: +SKIP
    >>> df.columns  # doctest: +SKIP
    ['node_index', 'dense', 'sparse_indices', 'sparse_values']
    """
    from pyspark.sql import functions as F

    inf = inference_cfg
    bs = int(inf.batch_size)
    parts = _n_partitions(n_rows, inf.rows_per_task, slots)
    # Blocks of ``batch_size`` consecutive node indices are the encoder's batches (the same
    # batches on any partitioning, hence identical numbers); they are dealt to the tasks round
    # robin (block mod parts, then block), so that every task gets a mix of long instance texts
    # and short label texts (node indices put instances first): contiguous ranges made the
    # label-heavy last task finish early and leave a core idle while the others ran.
    df = (
        nodes_df.select(F.col(io.NODE_INDEX).cast("long").alias(io.NODE_INDEX), F.col(io.TEXT))
        .withColumn(BLOCK, F.expr(f"{io.NODE_INDEX} div {bs}"))
        .withColumn(DEAL, F.expr(f"pmod({BLOCK}, {parts})"))
        .repartitionByRange(parts, DEAL, BLOCK)
        .sortWithinPartitions(io.NODE_INDEX)
        .drop(BLOCK, DEAL)
    )
    fn = _make_embed_fn(
        vectorizer_uri,
        version,
        inf.device,
        int(inf.torch_threads),
        bs,
        fault_plan,
        accumulator,
        load_fn or load_vectorizer,
    )
    return df.mapInArrow(fn, EMBED_SCHEMA)


def run_embed_stage(ctx) -> Dict[str, Any]:
    """Driver side: write ``embeddings`` for every node of ``nodes``.

    Returns
    -------
    dict
        ``rows``, ``partitions``, ``rows_per_s``, ``seconds``, ``model_loads``,
        ``worker_processes``, ``max_loads_per_worker_model``, ``loads_per_worker``.

    Examples
    --------
    >>> run_embed_stage(ctx)["rows"]          # doctest: +SKIP
    1200
    """
    spark, cfg = ctx.spark, ctx.cfg
    _require_models(spark, ctx.models)
    vec_uri = f"{ctx.models.rstrip('/')}/{VECTORIZER_DIR}"
    if not io.path_exists(spark, f"{vec_uri}/{ENCODER_JSON}"):
        raise io.InputError(f"model artifact missing: {vec_uri}/{ENCODER_JSON}")
    nodes = io.read_table(spark, ctx.paths, io.NODES).select(io.NODE_INDEX, io.TEXT)
    n = nodes.count()
    acc = spark.sparkContext.accumulator({}, runtime.LoadStatsParam())
    plan = faults.fault_plan(cfg, "embed")
    slots = runtime.task_slots(spark)
    df = embed_frame(
        nodes, vec_uri, cfg.inference, n, plan, _version(spark, vec_uri), acc, slots=slots
    )
    t0 = time.time()
    io.write_table(df, ctx.paths, io.EMBEDDINGS)
    dt = time.time() - t0
    counters = dict(acc.value)
    stats: Dict[str, Any] = {
        "rows": n,
        "rows_written": int(counters.get("rows|embed", 0)),
        "partitions": _n_partitions(n, cfg.inference.rows_per_task, slots),
        "seconds": round(dt, 3),
        "rows_per_s": round(n / dt, 2) if dt else None,
        "vectorizer": vec_uri,
    }
    stats.update(runtime.summarize_loads(counters))
    log.info(
        "embed: %d rows in %.1fs (%.1f rows/s), %d model loads in %d workers",
        n,
        dt,
        n / max(dt, 1e-9),
        stats["model_loads"],
        stats["worker_processes"],
    )
    return stats


# --------------------------------------------------------------------------- neighbours
def _neighbors_arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            (io.INSTANCE_INDEX, pa.int64()),
            (io.NEIGHBOR, pa.list_(pa.int64())),
            (io.SCORE, pa.list_(pa.float32())),
            (io.VARIANT, pa.string()),
        ]
    )


def _predict_chunk(
    models,
    chunk_specs,
    col_maps,
    X,
    idx,
    own,
    twin,
    k: int,
    weighting: str,
    temperature: float,
    threads: int,
):
    """Executor side: ``(variant, spec, record batch)`` per g model for the rows of ``X`` (node
    indices ``idx``; ``own`` / ``twin``: the nodes each row may not get, -1 = none)."""
    import numpy as np
    import pyarrow as pa

    schema = _neighbors_arrow_schema()
    has_x = _nonzero_rows(X)
    n = len(idx)
    for (variant, spec), g in zip(chunk_specs, models):
        Y = g.predict(X, only_topk=spec["topk"], threads=threads)
        cmap = col_maps[spec["name"]]
        if Y.shape != (n, len(cmap)):
            raise runtime.ModelLoadError(
                f"g model {spec['uri']} gave predictions of shape {Y.shape} for {n} rows, but "
                f"its output_nodes.npy maps {len(cmap)} outputs: the model and output_nodes.npy "
                f"come from different trainings; rerun the pretrain stage"
            )
        nodes, scores, counts = topk_neighbors(Y, cmap, own, twin, k)
        counts = np.where(has_x, counts, 0)  # an all-zero Phi_pre row has no neighbours
        weights = normalize_scores(scores, counts, weighting, temperature)
        keep = np.arange(k)[None, :] < counts[:, None]
        yield (
            variant,
            spec,
            pa.RecordBatch.from_arrays(
                [
                    pa.array(idx, pa.int64()),
                    _list_array(counts, nodes[keep], pa.int64()),
                    _list_array(counts, weights[keep].astype(np.float32), pa.float32()),
                    pa.array([variant] * n, pa.string()),
                ],
                schema=schema,
            ),
        )


def _make_neighbors_fn(
    specs: Dict[Tuple[str, int], Dict[str, Any]],
    col_maps_bc,
    variants: Sequence[str],
    n_folds: int,
    out_of_fold: bool,
    leave_self_out: bool,
    k: int,
    weighting: str,
    temperature: float,
    dense_dim: int,
    threads_cfg: int,
    batch_size: int,
    plan,
    acc,
    g_loader: Callable[[str, str], Any] = load_g_model,
):
    """Driver side: the executor function of ``embeddings_via: shuffle``: the instance rows
    arrive with their embedding columns, sorted by (route, instance_index)."""

    def neighbors_partition(batches):
        """Executor side: Arrow batches of instance rows + embeddings -> neighbour batches."""
        faults.maybe_fail(plan)
        tc = runtime.require_executor("neighbors_partition")
        import numpy as np

        from .folds import fold_of

        threads = runtime.task_threads(threads_cfg, tc)
        col_maps = col_maps_bc.value
        counters: Dict[str, int] = {}

        def route_of(rb):
            return rb.column(ROUTE).to_numpy(zero_copy_only=False)

        for route, tbl in _iter_chunks(batches, route_of, batch_size):
            chunk_specs = [(v, specs[(v, route)]) for v in variants]
            models = [
                runtime.get_model(sp["uri"], g_loader, sp["version"], "cpu", acc, sp["name"])
                for _, sp in chunk_specs
            ]
            n = tbl.num_rows
            idx = tbl.column(io.INSTANCE_INDEX).to_numpy()
            if route != FULL_ROUTE:  # re-check the SQL routing against folds.fold_of
                ids = tbl.column(io.NODE_ID).to_pylist()
                bad = [i for i in ids if fold_of(i, n_folds) != route]
                if bad:
                    raise RuntimeError(
                        f"fold routing mismatch for {bad[:3]}: SQL route {route} "
                        f"!= folds.fold_of"
                    )
            if leave_self_out:
                own = idx.astype(np.int64)
                twin = tbl.column(TWIN).fill_null(-1).to_numpy().astype(np.int64)
            else:
                own = np.full(n, -1, dtype=np.int64)
                twin = own
            X = features_from_arrow(tbl, dense_dim, int(models[0].model.nr_features))
            for _, spec, rb in _predict_chunk(
                models, chunk_specs, col_maps, X, idx, own, twin, k, weighting, temperature, threads
            ):
                yield rb
                key = f"rows|{spec['name']}"
                counters[key] = counters.get(key, 0) + n
        if acc is not None and counters:
            acc.add(counters)

    return neighbors_partition


#: executor side, per Python worker: :func:`task_order` of the latest store (one entry)
_TASK_ORDER: Dict[Tuple[Any, ...], Tuple[Any, Any]] = {}


def _read_node_indices(uri: str):
    """Executor side: the sorted distinct ``node_index`` values of a Parquet table (pyarrow)."""
    import numpy as np
    import pyarrow.parquet as pq

    found = io.parquet_files(uri)
    if found is None:
        raise RuntimeError(
            f"neighbors: cannot read the selection {uri} with pyarrow here; set "
            f"inference.embeddings_via: shuffle"
        )
    fs, files = found
    parts = [np.zeros(0, np.int64)]
    for fi in files:
        with fs.open_input_file(fi.path) as fh:
            col = pq.read_table(fh, columns=[io.NODE_INDEX]).column(0)
        parts.append(col.drop_null().to_numpy().astype(np.int64))
    return np.unique(np.concatenate(parts))


def task_order(E: Dict[str, Any], n_folds: int = 0, selection=None):
    """Executor side (``embeddings_via: files``): ``(node indices, routes)`` of every instance
    node of the store ``E`` (:func:`pina_spark.embstore.open_store`), optionally only those in
    ``selection`` (sorted node indices), ordered by (route, node index) -- route = the fold of
    a train instance when ``n_folds`` > 0, else ``-1`` (the full g)."""
    import numpy as np

    from .folds import fold_of_unit

    nodes = np.flatnonzero(np.asarray(E["kind"]) == embstore.KIND_INSTANCE).astype(np.int64)
    if selection is not None:
        nodes = nodes[np.isin(nodes, selection, assume_unique=True)]
    if n_folds:
        routes = fold_of_unit(np.asarray(E["fold_unit"])[nodes], n_folds)
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


def _cached_task_order(E: Dict[str, Any], key: str, n_folds: int, selection: Optional[str]):
    """Executor side: :func:`task_order` of a store, computed once per worker (the latest
    one is kept): the tasks of a stage that a worker runs share it."""
    ck = (key, n_folds, selection)
    got = _TASK_ORDER.get(ck)
    if got is None:
        sel = _read_node_indices(selection) if selection else None
        got = task_order(E, n_folds, sel)
        _TASK_ORDER.clear()
        _TASK_ORDER[ck] = got
    return got


def _route_chunks(routes, batch_size: int):
    """``(start, end)`` of chunks of at most ``batch_size`` rows sharing one route (``routes``
    non-decreasing)."""
    import numpy as np

    n = len(routes)
    if not n:
        return []
    cut = np.flatnonzero(routes[1:] != routes[:-1]) + 1
    out: List[Tuple[int, int]] = []
    for s, e in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [n]]).tolist()):
        out.extend((a, min(a + batch_size, e)) for a in range(s, e, batch_size))
    return out


def _make_neighbors_task_fn(
    specs: Dict[Tuple[str, int], Dict[str, Any]],
    col_maps_bc,
    variants: Sequence[str],
    n_folds: int,
    out_of_fold: bool,
    leave_self_out: bool,
    use_twin: bool,
    k: int,
    weighting: str,
    temperature: float,
    threads_cfg: int,
    batch_size: int,
    plan,
    acc,
    store: Dict[str, Any],
    n_tasks: int,
    selection: Optional[str],
    sink: Optional[Dict[str, Any]],
    g_loader: Callable[[str, str], Any] = load_g_model,
):
    """Driver side: the executor function of ``embeddings_via: files``. Its input is one row
    per task (``spark.range(n_tasks)``): each task takes its slice of the instance nodes from
    the memory-mapped store (:func:`task_order`, :func:`task_rows`), gathers X there, and
    either yields neighbour batches (``sink`` None) or writes them as Parquet into
    ``sink["uri"]`` with pyarrow and yields one ``variant, rows, path`` row per file
    (:func:`_write_task_files`). Nothing but task ids goes through Spark."""

    def neighbors_task(batches):
        """Executor side: task ids -> neighbours of their slices (batches or written files)."""
        faults.maybe_fail(plan)
        tc = runtime.require_executor("neighbors_task")
        import numpy as np
        import pyarrow as pa

        threads = runtime.task_threads(threads_cfg, tc)
        col_maps = col_maps_bc.value
        # the memory-mapped embeddings open (or are built, by the first worker of the machine)
        # in a thread while the full g models load: both mostly wait on I/O or C++
        opening = _StoreOpener(store)

        def models_of(route):
            chunk_specs = [(v, specs[(v, route)]) for v in variants]
            return chunk_specs, [
                runtime.get_model(sp["uri"], g_loader, sp["version"], "cpu", acc, sp["name"])
                for _, sp in chunk_specs
            ]

        if not out_of_fold:
            models_of(FULL_ROUTE)
        E = opening.result()
        order = _cached_task_order(E, store["key"], n_folds if out_of_fold else 0, selection)
        counters: Dict[str, int] = {}
        for rb in batches:
            for task in rb.column(0).to_pylist():
                nodes, routes = task_rows(order, n_tasks, int(task))
                rows = embstore.store_rows(E, nodes)
                have = rows >= 0
                if not have.all():  # instances without an embedding row: counted, skipped
                    counters[MISSING_KEY] = counters.get(MISSING_KEY, 0) + int((~have).sum())
                    nodes, routes, rows = nodes[have], routes[have], rows[have]
                out: Dict[str, List[Any]] = {v: [] for v in variants}
                for s, e in _route_chunks(routes, batch_size):
                    chunk_specs, models = models_of(int(routes[s]))
                    idx = nodes[s:e]
                    if leave_self_out:
                        own = idx
                        twin = (
                            np.asarray(E["twin"][idx], dtype=np.int64)
                            if use_twin
                            else np.full(len(idx), -1, dtype=np.int64)
                        )
                    else:
                        own = twin = np.full(len(idx), -1, dtype=np.int64)
                    X = embstore.features(E, rows[s:e], int(models[0].model.nr_features))
                    for v, spec, b in _predict_chunk(
                        models,
                        chunk_specs,
                        col_maps,
                        X,
                        idx,
                        own,
                        twin,
                        k,
                        weighting,
                        temperature,
                        threads,
                    ):
                        out[v].append(b)
                        key = f"rows|{spec['name']}"
                        counters[key] = counters.get(key, 0) + (e - s)
                # rows of a task in instance_index order, as the shuffle path writes them
                tables = {}
                for v in variants:
                    t = (
                        pa.Table.from_batches(out[v])
                        if out[v]
                        else _neighbors_arrow_schema().empty_table()
                    )
                    tables[v] = t.take(
                        pa.array(np.argsort(t.column(io.INSTANCE_INDEX).to_numpy(), kind="stable"))
                    )
                if sink is None:
                    for v in variants:
                        for b in tables[v].to_batches():
                            yield b
                else:
                    yield _write_task_files(tables, sink, int(task), tc.attemptNumber())
        if acc is not None and counters:
            acc.add(counters)

    return neighbors_task


#: the rows a ``files`` task yields with a sink: one per Parquet file it wrote
SINK_SCHEMA = "variant string, rows long, path string"


def _write_task_files(tables: Dict[str, Any], sink: Dict[str, Any], task: int, attempt: int):
    """Executor side: write each variant's rows of a task to
    ``<sink uri>/variant=<v>/part-<task>.parquet`` (pyarrow; a hidden temporary name renamed when
    complete, so a retried or speculative attempt replaces the same file with the same rows) and
    return one ``variant, rows, path`` record batch. A variant without rows still gets its
    (empty) file, so the table has a schema even with no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, base = io.pyarrow_fs(sink["uri"])
    codec = io.parquet_codec(sink.get("compression"))
    done = []
    for v, t in tables.items():
        d = f"{base}/{io.VARIANT}={v}"
        fs.create_dir(d, recursive=True)
        name = f"part-{task:05d}.parquet"
        tmp, final = f"{d}/.{name}.attempt{attempt}.tmp", f"{d}/{name}"
        try:
            with fs.open_output_stream(tmp) as stream:
                pq.write_table(t.drop_columns([io.VARIANT]), stream, compression=codec)
            fs.move(tmp, final)
        except BaseException:
            try:
                fs.delete_file(tmp)
            except Exception:
                pass
            raise
        done.append((v, t.num_rows, final))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([x[0] for x in done], pa.string()),
            pa.array([x[1] for x in done], pa.int64()),
            pa.array([x[2] for x in done], pa.string()),
        ],
        ["variant", "rows", "path"],
    )


class _StoreOpener:
    """Executor side: :func:`pina_spark.embstore.open_store` in a background thread;
    :meth:`result` waits for it and re-raises its error in the task's thread."""

    def __init__(self, spec: Dict[str, Any]):
        import threading

        self._out: Dict[str, Any] = {}
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


def choose_embeddings_via(
    value: str,
    embeddings_uri: str,
    nodes_uri: str,
    mmap_max_mb: float,
    selection_uri: Optional[str] = None,
) -> Tuple[str, str]:
    """Driver side: ``(via, reason)`` for ``inference.embeddings_via`` = ``auto`` | ``files`` |
    ``shuffle`` (see :class:`pina_spark.config.InferenceConfig`). ``files`` needs pyarrow to
    reach the tables (and an incremental run's ``selection_uri``) on the executors.

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
            f"inference.embeddings_via: {value!r} is not one of auto, files, " f"shuffle"
        )
    reach = all(io.pyarrow_reaches(u) for u in (embeddings_uri, nodes_uri, selection_uri) if u)
    if value == "files":
        if not reach:
            raise ValueError(
                f"inference.embeddings_via=files: executors cannot read "
                f"{embeddings_uri} with pyarrow; use embeddings_via: shuffle"
            )
        return "files", "inference.embeddings_via=files"
    if value == "shuffle":
        return "shuffle", "inference.embeddings_via=shuffle"
    if not reach:
        return "shuffle", "auto: the tables are not file tables pyarrow reads here"
    stats = embstore.footer_stats(embeddings_uri)
    if stats is None:
        return "shuffle", "auto: the embeddings' Parquet footers are not readable here"
    size_mb = embstore.estimate_mb(stats)
    if size_mb > mmap_max_mb:
        return "shuffle", (
            f"auto: embeddings ~{size_mb:.1f} MB > aggregate.mmap_max_mb " f"{mmap_max_mb}"
        )
    return "files", f"auto: embeddings ~{size_mb:.1f} MB <= aggregate.mmap_max_mb {mmap_max_mb}"


def _node_maps(spark, ctx, nodes_df, need_labels: bool = True):
    """Driver side: ``(old->new remap or None, sorted label node indices, instance count)``
    (``nodes_df``: a function returning this run's ``nodes`` DataFrame, called only when
    needed).

    When ``ctx.models`` is another run's models, g's output nodes are indices of THAT run's
    ``nodes``; they are remapped through ``(kind, node_id)`` into this run's ``nodes`` (the
    identity when the pipeline kept the models run's indices, as ``prepare_nodes_from_models``
    does); output nodes absent from this run's ``nodes`` are never returned.
    """
    import numpy as np
    from pyspark.sql import functions as F

    n_inst, label_idx = _node_counts_arrow(
        ctx.paths.table(io.NODES), need_labels
    ) or _node_counts_spark(nodes_df(), need_labels)
    own_models = ctx.paths.table(io.MODELS).rstrip("/")
    models = ctx.models.rstrip("/")
    if models == own_models:
        return None, label_idx, n_inst
    if not models.endswith("/" + io.MODELS):
        log.warning(
            "neighbors: models %s are not under a run root; assuming its node indices "
            "match this run's nodes",
            models,
        )
        return None, label_idx, n_inst
    old_nodes_uri = models[: -len(io.MODELS)] + io.NODES
    if not io.is_complete(spark, old_nodes_uri):
        log.warning(
            "neighbors: %s not found; assuming the node indices of the models' run "
            "match this run's nodes",
            old_nodes_uri,
        )
        return None, label_idx, n_inst
    old = spark.read.parquet(old_nodes_uri).select(
        F.col(io.NODE_INDEX).alias("old"), io.KIND, io.NODE_ID
    )
    pairs = (
        old.join(
            nodes_df().select(F.col(io.NODE_INDEX).alias("new"), io.KIND, io.NODE_ID),
            [io.KIND, io.NODE_ID],
            "inner",
        )
        .select("old", "new")
        .toPandas()
    )
    n_old = old.agg(F.max("old")).first()[0]
    remap = np.full(int(n_old or 0) + 1, -1, dtype=np.int64)
    remap[pairs["old"].to_numpy(np.int64)] = pairs["new"].to_numpy(np.int64)
    log.info(
        "neighbors: %d of %d nodes of %s found in this run's nodes",
        len(pairs),
        len(remap),
        old_nodes_uri,
    )
    return remap, label_idx, n_inst


def _node_counts_spark(nodes_df, need_labels: bool):
    """Driver side: ``(instance count, sorted label node indices)`` with one Spark job."""
    import numpy as np
    from pyspark.sql import functions as F

    if need_labels:  # one pass: instance count + label indices
        pdf = (
            nodes_df.select(io.KIND, io.NODE_INDEX)
            .filter(F.col(io.KIND).isin(io.KIND_LABEL, io.KIND_INSTANCE))
            .groupBy(io.KIND)
            .agg(
                F.count("*").alias("n"),
                F.sort_array(
                    F.collect_list(F.when(F.col(io.KIND) == io.KIND_LABEL, F.col(io.NODE_INDEX)))
                ).alias("idx"),
            )
            .collect()
        )
        label_idx = np.asarray(
            [i for r in pdf if r[io.KIND] == io.KIND_LABEL for i in r["idx"]], dtype=np.int64
        )
    else:
        pdf = nodes_df.groupBy(io.KIND).agg(F.count("*").alias("n")).collect()
        label_idx = np.zeros(0, dtype=np.int64)
    return int(sum(r["n"] for r in pdf if r[io.KIND] == io.KIND_INSTANCE)), label_idx


def _node_counts_arrow(nodes_uri: str, need_labels: bool):
    """Driver side: ``(instance count, sorted label node indices)`` read with pyarrow from the
    ``kind`` and ``node_index`` columns of a file table (no Spark job), or ``None`` where
    pyarrow does not reach it."""
    if not io.pyarrow_reaches(nodes_uri):
        return None
    dset = io.parquet_dataset(nodes_uri)
    if dset is None:
        return None
    import numpy as np
    import pyarrow.dataset as ds

    try:
        n_inst = int(dset.count_rows(filter=ds.field(io.KIND) == io.KIND_INSTANCE))
        label_idx = np.zeros(0, dtype=np.int64)
        if need_labels:
            col = dset.to_table(
                columns=[io.NODE_INDEX], filter=ds.field(io.KIND) == io.KIND_LABEL
            ).column(0)
            label_idx = np.sort(col.to_numpy().astype(np.int64))
    except Exception as e:  # e.g. a table without the contract's columns: Spark reports it
        log.info("neighbors: %s not readable with pyarrow (%s); counting with Spark", nodes_uri, e)
        return None
    return n_inst, label_idx


def _col_map(output_nodes, remap, label_idx, node_kinds: str):
    """Output column -> node_index of this run, ``-1`` where the node may not be a neighbour.

    Examples
    --------
    >>> import numpy as np
    >>> _col_map(np.array([0, 5, 6]), None, np.array([5, 6]), "labels").tolist()
    [-1, 5, 6]
    """
    import numpy as np

    out = np.asarray(output_nodes, dtype=np.int64).copy()
    if remap is not None:
        inside = (out >= 0) & (out < len(remap))
        out = np.where(inside, remap[np.clip(out, 0, max(len(remap) - 1, 0))], -1)
    if node_kinds != "both":
        pos = np.searchsorted(label_idx, out)
        is_label = (
            (pos < len(label_idx)) & (label_idx[np.minimum(pos, len(label_idx) - 1)] == out)
            if len(label_idx)
            else np.zeros(len(out), bool)
        )
        out[(~is_label) if node_kinds == "labels" else is_label] = -1
    return out


def neighbors_frame(
    spark,
    ctx,
    variants: Optional[Sequence[str]] = None,
    fault_plan=None,
    accumulator=None,
    sink: Optional[Dict[str, Any]] = None,
):
    """Driver side: the lazy ``neighbors`` DataFrame (with a ``variant`` column) and a dict of
    plain facts about it (variants, folds, rows, model names, candidates per row, ``writer``).

    ``sink`` (``{"uri", "compression"}``, used by :func:`run_neighbors_stage`): with
    ``embeddings_via: files`` the tasks write the neighbour rows themselves as Parquet under
    ``sink["uri"]`` (``variant=<v>/part-<task>.parquet``) and the frame holds one
    ``variant, rows, path`` row per file (``info["writer"] == "arrow"``); with ``shuffle`` the
    sink is ignored (``info["writer"] == "spark"``).

    Examples
    --------
    >>> df, info = neighbors_frame(spark, ctx)      # doctest: +SKIP
    >>> info["variants"]                            # doctest: +SKIP
    ['pina', 'pina_naive']
    """
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    nb, inf = cfg.neighbors, cfg.inference
    models = ctx.models.rstrip("/")
    _require_models(spark, models)
    if variants is None:
        variants = [v for v in VARIANTS if io.path_exists(spark, g_model_dir(models, v))]
    if not variants:
        raise io.InputError(
            f"no g model found: expected {g_model_dir(models, 'pina')} and/or "
            f"{g_model_dir(models, 'pina_naive')}"
        )
    out_of_fold = nb.train_mode == "out_of_fold"
    n_folds = 0
    if out_of_fold:
        n_folds = int(_read_json(f"{models}/{FOLDS_JSON}").get("folds") or 0)
        if n_folds < 2:
            raise io.InputError(
                f"neighbors.train_mode=out_of_fold but {models}/{FOLDS_JSON} "
                f"lists no fold models (folds={n_folds}): the models were "
                f"trained in_sample; set neighbors.train_mode=in_sample or "
                f"retrain them"
            )
        if n_folds != nb.folds:
            log.warning(
                "neighbors.folds=%d but the models were trained with %d folds; using %d",
                nb.folds,
                n_folds,
                n_folds,
            )
    enc = _read_json(f"{models}/{VECTORIZER_DIR}/{ENCODER_JSON}")
    dense_dim = int(enc["dense_dim"])

    for rel in (io.NODES, io.EMBEDDINGS):  # both complete, whichever way they are read
        io.require_complete(spark, ctx.paths, rel)
    read: List[Any] = []

    def nodes():  # read with Spark only where needed (shuffle, remap, no pyarrow)
        if not read:
            read.append(io.read_table(spark, ctx.paths, io.NODES, contract=True))
        return read[0]

    remap, label_idx, n_inst = _node_maps(spark, ctx, nodes, nb.node_kinds != "both")
    emb_uri, nodes_uri = ctx.paths.table(io.EMBEDDINGS), ctx.paths.table(io.NODES)
    via, via_reason = choose_embeddings_via(
        inf.embeddings_via, emb_uri, nodes_uri, cfg.aggregate.mmap_max_mb, ctx.selection or None
    )
    routes = [FULL_ROUTE] + (list(range(n_folds)) if out_of_fold else [])
    specs: Dict[Tuple[str, int], Dict[str, Any]] = {}
    col_maps: Dict[str, Any] = {}
    extra = 2 if nb.leave_self_out else 0
    for v in variants:
        for r in routes:
            uri = g_model_dir(models, v, None if r == FULL_ROUTE else r)
            if not io.path_exists(spark, uri):
                raise io.InputError(f"model artifact missing: {uri} (train_mode={nb.train_mode})")
            name = _model_name(v, r)
            cmap = _col_map(_read_output_nodes(uri), remap, label_idx, nb.node_kinds)
            n_out, n_bad = len(cmap), int((cmap < 0).sum())
            cap = max(100, 10 * (nb.k + extra))
            topk = int(max(1, min(n_out, nb.k + extra + n_bad, cap)))
            if nb.k + extra + n_bad > cap:
                log.warning(
                    "neighbors: %s: %d of %d outputs are excluded by node_kinds=%s; "
                    "candidates capped at %d, some rows may get fewer than k",
                    name,
                    n_bad,
                    n_out,
                    nb.node_kinds,
                    cap,
                )
            specs[(v, r)] = {
                "uri": uri,
                "version": _version(spark, uri),
                "name": name,
                "topk": topk,
            }
            col_maps[name] = cmap
    bc = spark.sparkContext.broadcast(col_maps)

    use_twin = bool(nb.leave_self_out and cfg.task.labels_are_items)
    g_loader = _load_g_mmap if inf.g_mmap else load_g_model
    if via == "files":
        # one row per task: each task takes its slice of the instance nodes (every one, or an
        # incremental run's selection) and their X from the memory-mapped store of its machine
        # (embstore); instances without an embedding row are skipped and counted
        sparse_dim = int(enc["sparse_dim"])
        store = {
            "embeddings": emb_uri,
            "nodes": nodes_uri,
            "dense_dim": dense_dim,
            "sparse_dim": sparse_dim,
            "key": embstore.tables_key(emb_uri, nodes_uri, dense_dim, sparse_dim),
        }
        n_rows = n_inst
        if ctx.selection:
            n_sel = io.count_rows_arrow(ctx.selection)
            n_rows = min(n_inst, n_sel) if n_sel is not None else n_inst
        parts = _n_partitions(n_rows, inf.rows_per_task, runtime.task_slots(spark))
        fn = _make_neighbors_task_fn(
            specs,
            bc,
            list(variants),
            n_folds,
            out_of_fold,
            nb.leave_self_out,
            use_twin,
            nb.k,
            nb.weighting,
            nb.temperature,
            int(inf.torch_threads),
            int(inf.batch_size),
            fault_plan,
            accumulator,
            store,
            parts,
            ctx.selection or None,
            sink,
            g_loader,
        )
        out = spark.range(0, parts, 1, parts).mapInArrow(
            fn, SINK_SCHEMA if sink is not None else NEIGHBORS_SCHEMA
        )
    else:
        # driven by the embeddings (an incremental run hands this stage a subset of them);
        # every instance with an embedding gets a row, with empty arrays when it has no
        # neighbour. The narrow instance table goes to the embeddings (broadcast while it is
        # small), so the wide embedding rows are shuffled once, by the repartition below
        inst = (
            nodes()
            .filter(F.col(io.KIND) == io.KIND_INSTANCE)
            .select(F.col(io.NODE_INDEX).alias(io.INSTANCE_INDEX), io.NODE_ID, io.SPLIT)
        )
        if use_twin:
            # an item's label node ("twin", same node_id) is excluded like self
            twins = (
                nodes()
                .filter(F.col(io.KIND) == io.KIND_LABEL)
                .select(io.NODE_ID, F.col(io.NODE_INDEX).alias(TWIN))
            )
            inst = inst.join(twins, io.NODE_ID, "left")
        else:
            inst = inst.withColumn(TWIN, F.lit(None).cast("long"))
        vec_cols = [io.DENSE, io.SPARSE_INDICES, io.SPARSE_VALUES]
        emb = io.read_table(spark, ctx.paths, io.EMBEDDINGS, contract=True).select(
            F.col(io.NODE_INDEX).alias(io.INSTANCE_INDEX), *vec_cols
        )
        if n_inst <= BROADCAST_INSTANCES_MAX_ROWS:
            inst = F.broadcast(inst)
        df = emb.join(inst, io.INSTANCE_INDEX, "inner")
        if out_of_fold:
            route = F.when(
                F.col(io.SPLIT) == io.SPLIT_TRAIN, fold_route_expr(io.NODE_ID, n_folds)
            ).otherwise(F.lit(FULL_ROUTE))
        else:
            route = F.lit(FULL_ROUTE)
        parts = _n_partitions(n_inst, inf.rows_per_task, runtime.task_slots(spark))
        df = df.withColumn(ROUTE, route.cast("int"))
        if out_of_fold:  # co-locate rows of one model: a task needs few models (cache: 4)
            df = df.repartitionByRange(parts, ROUTE, io.INSTANCE_INDEX)
        else:  # one model per variant: hash partitioning needs no sampling pass
            df = df.repartition(parts, io.INSTANCE_INDEX)
        df = df.sortWithinPartitions(ROUTE, io.INSTANCE_INDEX).select(
            io.INSTANCE_INDEX, io.NODE_ID, TWIN, ROUTE, *vec_cols
        )
        fn = _make_neighbors_fn(
            specs,
            bc,
            list(variants),
            n_folds,
            out_of_fold,
            nb.leave_self_out,
            nb.k,
            nb.weighting,
            nb.temperature,
            dense_dim,
            int(inf.torch_threads),
            int(inf.batch_size),
            fault_plan,
            accumulator,
            g_loader,
        )
        out = df.mapInArrow(fn, NEIGHBORS_SCHEMA).sortWithinPartitions(
            io.VARIANT, io.INSTANCE_INDEX
        )
    info = {
        "variants": list(variants),
        "folds": n_folds,
        "instance_nodes": n_inst,
        "partitions": parts,
        "embeddings_via": via,
        "embeddings_via_reason": via_reason,
        "train_mode": nb.train_mode,
        "models": sorted(s["name"] for s in specs.values()),
        "candidates_per_row": {s["name"]: s["topk"] for s in specs.values()},
        "remapped_nodes": remap is not None,
        "writer": "arrow" if (via == "files" and sink is not None) else "spark",
        "g_mmap": bool(inf.g_mmap),
    }
    return out, info


def run_neighbors_stage(ctx) -> Dict[str, Any]:
    """Driver side: write ``neighbors`` (partitioned by ``variant``) for every instance node.

    Returns
    -------
    dict
        ``rows``, ``seconds``, ``rows_per_s`` (all variants are predicted in one pass: per
        variant, rows / pass time), ``variants: {v: {rows, rows_per_s, rows_per_model}}``,
        ``model_loads``, ``worker_processes``, ``max_loads_per_worker_model``.

    Examples
    --------
    >>> run_neighbors_stage(ctx)["variants"]["pina"]["rows"]     # doctest: +SKIP
    1000
    """
    spark, cfg = ctx.spark, ctx.cfg
    acc = spark.sparkContext.accumulator({}, runtime.LoadStatsParam())
    plan = faults.fault_plan(cfg, "neighbors")
    staging = ctx.paths.staging(io.NEIGHBORS)
    sink = None
    if io.pyarrow_reaches(staging):
        sink = {
            "uri": staging,
            "compression": spark.conf.get("spark.sql.parquet.compression.codec", "snappy"),
        }
    df, info = neighbors_frame(spark, ctx, fault_plan=plan, accumulator=acc, sink=sink)
    t0 = time.time()
    if info["writer"] == "arrow":  # the tasks wrote the files: mark complete and publish
        io.publish_written(spark, df, staging, ctx.paths.table(io.NEIGHBORS), "neighbors")
    else:
        io.write_table(df, ctx.paths, io.NEIGHBORS, partition_by=[io.VARIANT])
    dt = time.time() - t0
    counters = dict(acc.value)
    per_variant: Dict[str, Any] = {}
    for v in info["variants"]:
        per_model = {
            k.split("|", 1)[1].split("/", 1)[1]: int(c)
            for k, c in counters.items()
            if k.startswith(f"rows|{v}/")
        }
        rows = int(sum(per_model.values()))
        per_variant[v] = {
            "rows": rows,
            "rows_per_s": round(rows / dt, 2) if dt else None,
            "rows_per_model": per_model,
        }
    rows = per_variant[info["variants"][0]]["rows"]  # instance rows (each variant has them all)
    stats: Dict[str, Any] = dict(info)
    stats.update(
        {
            "rows": rows,
            "seconds": round(dt, 3),
            "rows_per_s": round(rows / dt, 2) if dt else None,
            "variants": per_variant,
            "k": cfg.neighbors.k,
            "weighting": cfg.neighbors.weighting,
            "node_kinds": cfg.neighbors.node_kinds,
        }
    )
    stats.update(runtime.summarize_loads(counters))
    missing = int(counters.get(MISSING_KEY, 0))
    if info["embeddings_via"] == "files":
        stats["instances_without_embeddings"] = missing
        if missing:
            log.warning(
                "neighbors: %d instance nodes have no row in %s: no neighbours for "
                "them (run the embed stage for them)",
                missing,
                ctx.paths.table(io.EMBEDDINGS),
            )
    log.info(
        "neighbors: %d instance rows x %d variants in %.1fs, %d model loads (embeddings " "via %s)",
        rows,
        len(info["variants"]),
        dt,
        stats["model_loads"],
        info["embeddings_via"],
    )
    return stats
