"""Executor side: Arrow record batches in and out of the inference stages.

Chunking sorted batches by a key, the X of g from ``embeddings`` columns, list columns from
numpy counts and values, and the schemas of the stages' outputs. Vectorised numpy throughout (no
per-row Python).
"""

from collections.abc import Callable, Iterator
from typing import Any

from pina_spark import storage
from pina_spark.runtime.arrowkit import list_array_from_counts

__all__ = [
    "EMBED_SCHEMA",
    "NEIGHBORS_SCHEMA",
    "embed_arrow_schema",
    "neighbors_arrow_schema",
    "iter_chunks",
    "features_from_arrow",
    "features_csr",
    "concat_ranges",
    "nonzero_rows",
    "list_array",
]

#: Spark DDL of the embed stage's rows
EMBED_SCHEMA = (
    f"{storage.NODE_INDEX} long, {storage.DENSE} array<float>, "
    f"{storage.SPARSE_INDICES} array<int>, {storage.SPARSE_VALUES} array<float>"
)
#: Spark DDL of the neighbours stage's rows
NEIGHBORS_SCHEMA = (
    f"{storage.INSTANCE_INDEX} long, {storage.NEIGHBOR} array<long>, "
    f"{storage.SCORE} array<float>, {storage.VARIANT} string"
)


def embed_arrow_schema():
    """The Arrow schema of :data:`EMBED_SCHEMA`."""
    import pyarrow as pa

    return pa.schema(
        [
            (storage.NODE_INDEX, pa.int64()),
            (storage.DENSE, pa.list_(pa.float32())),
            (storage.SPARSE_INDICES, pa.list_(pa.int32())),
            (storage.SPARSE_VALUES, pa.list_(pa.float32())),
        ]
    )


def neighbors_arrow_schema():
    """The Arrow schema of :data:`NEIGHBORS_SCHEMA`."""
    import pyarrow as pa

    return pa.schema(
        [
            (storage.INSTANCE_INDEX, pa.int64()),
            (storage.NEIGHBOR, pa.list_(pa.int64())),
            (storage.SCORE, pa.list_(pa.float32())),
            (storage.VARIANT, pa.string()),
        ]
    )


def iter_chunks(
    batches: Iterator[Any], key_of: Callable[[Any], Any], max_rows: int
) -> Iterator[tuple[Any, Any]]:
    """Regroup sorted Arrow record batches into ``(key, pa.Table)`` chunks of at most
    ``max_rows`` rows sharing one key (keys must be non-decreasing).

    Examples
    --------
    >>> import pyarrow as pa
    >>> rb = pa.record_batch({"k": [0, 0, 0, 1]})
    >>> [(k, t.num_rows) for k, t in iter_chunks([rb], lambda b: b.column("k").to_numpy(), 2)]
    [(0, 2), (0, 1), (1, 1)]
    """
    import numpy as np
    import pyarrow as pa

    pend: list[Any] = []
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


def concat_ranges(starts, lens):
    """``starts[i], starts[i] + 1, ..., starts[i] + lens[i] - 1`` for every ``i``, concatenated
    (int64): the flat positions of variable-length segments, without a Python loop.

    Examples
    --------
    >>> import numpy as np
    >>> concat_ranges(np.array([5, 0, 2]), np.array([2, 0, 3])).tolist()
    [5, 6, 2, 3, 4]
    """
    import numpy as np

    lens = np.asarray(lens, dtype=np.int64)
    first = np.cumsum(lens) - lens
    shift = np.asarray(starts, dtype=np.int64) - first
    return np.repeat(shift, lens) + np.arange(int(lens.sum()), dtype=np.int64)


def _list_parts(col) -> tuple[Any, Any]:
    """(lengths, values in row order) of a list column (nulls = empty lists): the values of
    row ``r`` are ``values[sum(lengths[:r]) : sum(lengths[:r + 1])]``. No copy of the values
    where the column is one contiguous run (no null with values behind it), else one gather."""
    import numpy as np
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offs = arr.offsets.to_numpy().astype(np.int64)
    spans = np.diff(offs)
    lens = spans
    if arr.null_count:
        lens = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, spans)
    vals = arr.values.to_numpy(zero_copy_only=False)
    if lens is spans or np.array_equal(lens, spans):  # one run, in row order
        return lens, vals[offs[0] : offs[-1]]
    return lens, vals[concat_ranges(offs[:-1], lens)]


def features_csr(
    dense_lens, dense_vals, sparse_lens, sparse_idx, sparse_vals, dense_dim: int, n_features: int
):
    """X = ``hstack([dense, sparse])`` as csr float32 (canonical: sorted indices, no
    duplicates), built in place from per-row lists: row ``r`` holds its ``dense_lens[r]`` dense
    values at columns ``0..dense_lens[r]-1`` (zeros kept), then its sparse values at columns
    ``sparse_idx + dense_dim``. The one place X's layout is written: the ``embeddings`` table's
    rows (:func:`features_from_arrow`) and the memory-mapped store
    (:func:`pina_spark.runtime.embstore.features`) both build it here. Rows whose sparse indices
    are not strictly increasing are made canonical (duplicates summed).

    Raises
    ------
    ValueError
        When a dense list is longer than ``dense_dim``, or a column is outside
        ``[0, n_features)``.

    Examples
    --------
    >>> import numpy as np
    >>> X = features_csr(np.array([2, 0]), np.array([1.0, 0.0]), np.array([1, 2]),
    ...                  np.array([1, 0, 1]), np.array([2.0, 3.0, 4.0]), 2, 4)
    >>> X.toarray().tolist()
    [[1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 3.0, 4.0]]
    """
    import numpy as np
    import scipy.sparse as sp

    d_lens = np.asarray(dense_lens, dtype=np.int64)
    s_lens = np.asarray(sparse_lens, dtype=np.int64)
    n = len(d_lens)
    if len(s_lens) != n:
        raise ValueError(f"features_csr: {n} dense rows but {len(s_lens)} sparse rows")
    if len(sparse_idx) != len(sparse_vals):
        raise ValueError("embeddings: sparse_indices and sparse_values differ in length")
    if n and int(d_lens.max()) > dense_dim:
        raise ValueError(f"embeddings: dense vectors longer than dense_dim={dense_dim}")
    top = max(
        int(d_lens.max()) - 1 if n else -1,
        int(np.max(sparse_idx)) + dense_dim if len(sparse_idx) else -1,
    )
    if top >= n_features or (len(sparse_idx) and int(np.min(sparse_idx)) < 0):
        raise ValueError(
            f"embeddings: feature index {top} out of range for g "
            f"(nr_features={n_features}, dense_dim={dense_dim}): embeddings and "
            f"g come from different vectorizers"
        )
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(d_lens + s_lens, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    for lens, start, cols, vals, shift in (
        (d_lens, indptr[:-1], None, dense_vals, 0),
        (s_lens, indptr[:-1] + d_lens, sparse_idx, sparse_vals, dense_dim),
    ):
        total = int(lens.sum())
        if not total:
            continue
        within = concat_ranges(np.zeros(len(lens), dtype=np.int64), lens)
        pos = np.repeat(start, lens) + within
        indices[pos] = within if cols is None else np.asarray(cols, dtype=np.int64) + shift
        data[pos] = vals
    X = sp.csr_matrix((data, indices, indptr), shape=(n, n_features))
    X.sum_duplicates()  # no-ops when every row's columns already increase (checked in C)
    X.sort_indices()
    return X


def features_from_arrow(table, dense_dim: int, n_features: int):
    """X = ``hstack([dense, sparse])`` (csr float32, sorted indices) from the ``dense`` /
    ``sparse_indices`` / ``sparse_values`` columns of an Arrow table — the same matrix as
    ``PhiPre.features`` of the rows' texts (:func:`features_csr`; a null list has no entries).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"dense": [[1.0, 0.0]], "sparse_indices": [[1]], "sparse_values": [[2.0]]})
    >>> features_from_arrow(t, 2, 4).toarray().tolist()
    [[1.0, 0.0, 0.0, 2.0]]
    """
    d_lens, d_vals = _list_parts(table.column(storage.DENSE))
    s_lens, s_idx = _list_parts(table.column(storage.SPARSE_INDICES))
    v_lens, s_vals = _list_parts(table.column(storage.SPARSE_VALUES))
    if (v_lens != s_lens).any():  # per row (features_csr checks the totals)
        raise ValueError("embeddings: sparse_indices and sparse_values differ in length")
    return features_csr(d_lens, d_vals, s_lens, s_idx, s_vals, dense_dim, n_features)


def nonzero_rows(X):
    """Rows of a csr matrix with a nonzero value (an all-zero Phi_pre row has no neighbours)."""
    import numpy as np

    nz = X.data != 0
    return (
        np.bincount(np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[nz], minlength=X.shape[0])
        > 0
    )


#: list arrays from per-row counts (the shared Arrow helper)
list_array = list_array_from_counts
