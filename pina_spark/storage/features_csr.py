"""Reading ``features`` back as CSR matrices ``X = [dense | sparse]`` (dense block first,
sparse column ``c`` at ``dense_width + c``): :func:`read_variant` reads one variant with
pyarrow alone (a train task's own inputs, and the train stage's driver wherever pyarrow reaches
and lists the variant: :func:`variant_listing`, the one rule both follow),
:func:`features_to_csr` one (variant, split) through Spark (the driver elsewhere, and
:func:`export_csr`), both through :func:`csr_from_batches`; :func:`export_csr` writes a matrix
as a PECOS/scipy ``.npz``, :func:`frame_to_csr` converts rows already in pandas.

Examples
--------
>>> import numpy as np, pandas as pd
>>> f32 = np.float32
>>> pdf = pd.DataFrame({"dense": [np.array([0.6, 0.8], f32), np.zeros(2, f32)],
...                     "sparse_indices": [np.array([3, 1], np.int32), np.array([], np.int32)],
...                     "sparse_values": [np.array([1., 2.], f32), np.array([], f32)]})
>>> frame_to_csr(pdf, sparse_dim=4).toarray().tolist()
[[0.6000000238418579, 0.800000011920929, 0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
"""

import dataclasses as dc
import logging
import time
from typing import Any

from pina_spark import storage
from pina_spark.runtime import embstore
from pina_spark.storage import features as layout

log = logging.getLogger(__name__)

__all__ = [
    "ROW_COLUMNS",
    "FeatureMatrix",
    "features_to_csr",
    "variant_listing",
    "read_variant",
    "csr_from_batches",
    "export_csr",
    "frame_to_csr",
]

#: the columns of a ``features`` row that make its matrix row, in the order the readers use
ROW_COLUMNS = (storage.INSTANCE_ID, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES)


@dc.dataclass(frozen=True)
class FeatureMatrix:
    """Rows of ``features`` as a matrix: one (variant, split) through Spark
    (:func:`features_to_csr`), or one variant with pyarrow (:func:`read_variant`).

    Attributes:
        ids: ``instance_id`` of every row (ascending from :func:`features_to_csr`, file order
            from :func:`read_variant`).
        X: float32 CSR ``[dense | sparse]`` with sorted indices, no explicit zeros.
        dense_width, sparse_width: widths of the two blocks (``X.shape[1]`` is their sum).
    """

    ids: list[str]
    X: Any
    dense_width: int
    sparse_width: int


def features_to_csr(
    spark, features_uri_or_df, variant: str, split: str, sparse_width: int | None = None
) -> FeatureMatrix:
    """One (variant, split) of ``features`` as a :class:`FeatureMatrix`. Driver side.

    The rows are sorted by ``instance_id`` in Spark (range partitioning) and brought to the
    driver one partition at a time (the RDD's ``toLocalIterator`` over Arrow IPC blobs made by
    the executors), never with one big ``collect``; no partition stays in the driver's heap
    once read.

    Parameters
    ----------
    features_uri_or_df : str or DataFrame
        The published ``features`` folder, or a DataFrame with its columns.
    sparse_width : int, optional
        Number of sparse columns (2*S, or S for ``vectorizer_only``). Default: from
        :data:`~pina_spark.storage.features.FEATURES_META` in the features folder, else max
        index + 1 (warned).

    Example::

        m = features_to_csr(spark, "/run/features", "pina", "test")
        m.X.shape == (len(m.ids), m.dense_width + m.sparse_width)  # True
    """
    import pyarrow as pa
    from pyspark.sql import functions as F

    if isinstance(features_uri_or_df, str):
        df = spark.read.parquet(features_uri_or_df)
        if sparse_width is None:
            sparse_width = layout.read_sparse_width(features_uri_or_df, variant)
    else:
        df = features_uri_or_df
    for c in (
        storage.VARIANT,
        storage.SPLIT,
        storage.INSTANCE_ID,
        storage.DENSE,
        storage.SPARSE_INDICES,
        storage.SPARSE_VALUES,
    ):
        if c not in df.columns:
            raise ValueError(f"export_csr: column {c!r} missing (found {df.columns})")
    sel = (
        df.where((F.col(storage.VARIANT) == variant) & (F.col(storage.SPLIT) == split))
        .select(*ROW_COLUMNS)
        .orderBy(storage.INSTANCE_ID)
    )
    blobs = sel.mapInArrow(_ipc_blobs, "blob binary")

    def batches():
        # the RDD's iterator, not the DataFrame's: pyspark 4's DataFrame.toLocalIterator submits
        # each partition's job after its SQL execution has ended, and the DAG scheduler then
        # keeps every such job, with the partition it returned, for the life of the session
        # (activeQueryToJobs; a `pina-spark select` ran out of driver heap on it)
        for row in blobs.rdd.toLocalIterator(prefetchPartitions=False):
            with pa.ipc.open_stream(row["blob"]) as reader:
                yield from reader

    return csr_from_batches(batches(), f"{variant}/{split}", sparse_width)


def variant_listing(features_uri: str, variant: str):
    """The listing (``(pyarrow filesystem, [FileInfo])``, as
    :func:`pina_spark.storage.parquet_files` gives it) of one variant's folder of ``features``
    where this process's pyarrow reaches and lists it, else ``None``: the one test of whether
    :func:`read_variant` can read the variant here. A URI pyarrow reaches by its scheme may still
    not list: an ``s3://`` table whose credentials are the JVM's (``None``: read it with
    :func:`features_to_csr`).

    Examples
    --------
    >>> variant_listing("/no/such/features", "pina") is None
    True
    >>> variant_listing("hdfs://nn/run/features", "pina") is None  # the JVM's, never pyarrow's
    True
    """
    if not storage.pyarrow_reaches(features_uri):
        return None
    return storage.parquet_files(layout.variant_dir(features_uri, variant))


def read_variant(
    features_uri: str, variant: str, sparse_width: int | None, listing=None
) -> FeatureMatrix:
    """Every row of one variant of ``features`` (all its splits but a null one, as the train
    stage reads them), read file by file with ``pyarrow.parquet``, without Spark: executor side
    (a model-fitting task reads its own inputs, so the driver holds no matrix), or wherever
    :func:`variant_listing` finds the variant. Rows in file order; the matrix of each row is the one
    :func:`features_to_csr` gives. ``listing``: the variant's :func:`variant_listing`, when the
    caller has it already (the folder is not listed again).

    Raises
    ------
    ValueError
        When pyarrow cannot list the variant's folder here.

    Example::

        read_variant("/run/features", "pina", 40000).X.shape  # (24000, 40768)
    """
    import pyarrow.parquet as pq

    folder = layout.variant_dir(features_uri, variant)
    if listing is None:
        listing = variant_listing(features_uri, variant)
    if listing is None:
        raise ValueError(f"features: {folder} is not a Parquet folder pyarrow reads here")
    fs, files = listing
    null_split = f"/{storage.SPLIT}={layout.escape_partition_value(None)}/"

    def batches():
        for fi in files:
            if null_split in fi.path:
                continue
            pf = pq.ParquetFile(fs.open_input_file(fi.path))
            try:
                yield from pf.iter_batches(batch_size=16384, columns=list(ROW_COLUMNS))
            finally:
                pf.close()

    return csr_from_batches(batches(), variant, sparse_width)


def csr_from_batches(batches, what: str, sparse_width: int | None) -> FeatureMatrix:
    """Arrow record batches of :data:`ROW_COLUMNS` -> :class:`FeatureMatrix` (rows in batch
    order): the one conversion of :func:`features_to_csr` and :func:`read_variant`.
    ``sparse_width`` ``None``: max index + 1 (warned).

    Examples
    --------
    >>> import pyarrow as pa
    >>> b = pa.record_batch([pa.array(["i1"]), pa.array([[0.6, 0.8]], pa.list_(pa.float32())),
    ...                      pa.array([[1]], pa.list_(pa.int32())),
    ...                      pa.array([[2.0]], pa.list_(pa.float32()))], names=list(ROW_COLUMNS))
    >>> m = csr_from_batches([b], "pina/train", 3)
    >>> m.ids, m.X.toarray().astype(float).round(2).tolist()
    (['i1'], [[0.6, 0.8, 0.0, 2.0, 0.0]])
    """
    import numpy as np
    import pyarrow as pa
    import scipy.sparse as sp

    ids: list[Any] = []
    parts: list[Any] = []  # per batch: its finished block, or (dense, sparse parts) to finish
    dense_w: int | None = None  # set by the first batch with a dense value
    max_sp = -1
    for batch in batches:
        if batch.num_rows == 0:
            continue
        dcol = batch.column(1)
        lens = embstore.lengths(dcol)
        w = int(lens.max(initial=0))
        if dense_w is None and w:
            dense_w = w
        if w and np.any((lens != dense_w) & (lens != 0)):
            raise ValueError(f"features: dense arrays of different lengths in {what}")
        dense, _ = embstore.dense_block(dcol, dense_w or 0)
        ptr, idx, val = embstore.sparse_parts(batch.column(2), batch.column(3))
        if idx.size:
            max_sp = max(max_sp, int(idx.max()))
        if sparse_width is not None:  # finished now: one batch's arrays alive at a time
            if max_sp >= sparse_width:
                raise ValueError(
                    f"features: sparse index {max_sp} >= sparse_width {sparse_width} in {what}"
                )
            parts.append(_block(sp.csr_matrix(dense), val, idx, ptr, sparse_width))
        else:
            parts.append((sp.csr_matrix(dense), (val, idx, ptr)))
        ids.append(batch.column(0))
    dense_w = dense_w or 0
    if sparse_width is None:
        sparse_width = max_sp + 1
        log.warning(
            "features: sparse width unknown (no %s); using max index + 1 = %d",
            layout.FEATURES_META,
            sparse_width,
        )
        parts = [_block(d, vip[0], vip[1], vip[2], sparse_width) for d, vip in parts]
    # a batch read before the first dense value has a zero-width dense block: widen it
    blocks = [
        b if b.shape[1] == dense_w + sparse_width else _widen_dense(b, dense_w, sparse_width)
        for b in parts
    ]
    del parts
    n_cols = dense_w + sparse_width
    X = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, n_cols), dtype=np.float32)
    del blocks
    X = X.astype(np.float32)
    X.eliminate_zeros()
    X.sort_indices()
    id_list = pa.chunked_array(ids, pa.string()).to_pylist() if ids else []
    return FeatureMatrix(id_list, X, int(dense_w), int(sparse_width))


def _block(dense_csr, val, idx, ptr, sparse_width: int):
    """One batch's rows: ``[dense | sparse]`` as CSR."""
    import scipy.sparse as sp

    scsr = sp.csr_matrix((val, idx, ptr), shape=(dense_csr.shape[0], sparse_width))
    return sp.hstack([dense_csr, scsr], format="csr")


def _widen_dense(block, dense_w: int, sparse_width: int):
    """A block built with no dense column (its batch had no dense value) as ``dense_w`` zero
    dense columns followed by its sparse ones."""
    import scipy.sparse as sp

    zeros = sp.csr_matrix((block.shape[0], dense_w), dtype=block.dtype)
    return sp.hstack([zeros, block[:, block.shape[1] - sparse_width :]], format="csr")


def export_csr(
    spark,
    features_uri_or_df,
    variant: str,
    split: str,
    out_path: str,
    sparse_width: int | None = None,
) -> dict[str, Any]:
    """Write one (variant, split) of ``features`` (:func:`features_to_csr`) as a PECOS/scipy
    CSR ``.npz`` at ``out_path`` and its row order (``instance_id`` ascending, one per line) at
    ``<out_path without .npz>.ids.txt``. Driver side.

    Returns
    -------
    dict
        ``rows``, ``cols``, ``nnz``, ``dense_width``, ``sparse_width``, ``path``, ``ids_path``,
        ``time_s``.

    Example::

        export_csr(spark, "/run/features", "pina", "train", "/tmp/X.trn.npz")
        # {'rows': 20780, 'cols': 40064, 'nnz': ..., 'path': '/tmp/X.trn.npz', ...}
    """
    import io as _pyio

    import scipy.sparse as sp

    t0 = time.time()
    m = features_to_csr(spark, features_uri_or_df, variant, split, sparse_width)
    buf = _pyio.BytesIO()
    sp.save_npz(buf, m.X, compressed=False)
    storage.write_bytes(out_path, buf.getvalue())
    ids_path = (out_path[:-4] if out_path.endswith(".npz") else out_path) + ".ids.txt"
    storage.write_bytes(ids_path, ("\n".join(m.ids) + ("\n" if m.ids else "")).encode("utf-8"))
    out = {
        "rows": int(m.X.shape[0]),
        "cols": int(m.dense_width + m.sparse_width),
        "nnz": int(m.X.nnz),
        "dense_width": m.dense_width,
        "sparse_width": m.sparse_width,
        "path": out_path,
        "ids_path": ids_path,
        "time_s": round(time.time() - t0, 2),
    }
    log.info("export_csr %s/%s: %s", variant, split, out)
    return out


def frame_to_csr(pdf, dense_dim: int | None = None, sparse_dim: int | None = None):
    """Rows of a ``features`` frame already in pandas (``dense``, ``sparse_indices``,
    ``sparse_values``) -> float32 CSR ``[dense | sparse]`` with sorted indices, duplicates
    summed and no explicit zeros.

    Parameters
    ----------
    pdf : pandas.DataFrame with the three array columns (``None`` entries count as empty).
    dense_dim : width of the dense block (default: the longest ``dense`` array).
    sparse_dim : width of the sparse block (default: max index + 1). Use the same value for the
        train and the test matrix.
    """
    import numpy as np
    import scipy.sparse as sp

    n = len(pdf)
    dense_col = [
        np.asarray(d if d is not None else [], dtype=np.float32)
        for d in pdf[storage.DENSE].tolist()
    ]
    D = dense_dim if dense_dim is not None else max((len(d) for d in dense_col), default=0)
    dense = np.zeros((n, D), dtype=np.float32)
    for i, d in enumerate(dense_col):
        if len(d):
            if len(d) != D:
                raise ValueError(f"features row {i}: dense has {len(d)} values, expected {D}")
            dense[i] = d
    idx = [
        np.asarray(a if a is not None else [], dtype=np.int64)
        for a in pdf[storage.SPARSE_INDICES].tolist()
    ]
    val = [
        np.asarray(a if a is not None else [], dtype=np.float32)
        for a in pdf[storage.SPARSE_VALUES].tolist()
    ]
    lens = np.array([len(a) for a in idx], dtype=np.int64)
    if np.any(lens != np.array([len(v) for v in val], dtype=np.int64)):
        raise ValueError("features: sparse_indices and sparse_values differ in length")
    indptr = np.concatenate([[0], np.cumsum(lens)])
    indices = np.concatenate(idx) if n and lens.sum() else np.zeros(0, dtype=np.int64)
    data = np.concatenate(val) if n and lens.sum() else np.zeros(0, dtype=np.float32)
    S = sparse_dim if sparse_dim is not None else (int(indices.max()) + 1 if len(indices) else 0)
    if len(indices) and (indices.min() < 0 or indices.max() >= S):
        raise ValueError(f"features: sparse index out of range [0, {S})")
    sparse = sp.csr_matrix((data, indices.astype(np.int32), indptr), shape=(n, S))
    sparse.sum_duplicates()
    X = sp.hstack([sp.csr_matrix(dense), sparse], format="csr", dtype=np.float32)
    X.eliminate_zeros()
    X.sort_indices()
    return X


def _ipc_blobs(batches):
    """Executor side: one Arrow IPC stream per partition, as a one-row ``blob`` batch."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    writer = None
    for b in batches:
        if writer is None:
            writer = pa.ipc.new_stream(sink, b.schema)
        writer.write_batch(b)
    if writer is None:
        return
    writer.close()
    yield pa.RecordBatch.from_arrays(
        [pa.array([sink.getvalue().to_pybytes()], pa.binary())], ["blob"]
    )
