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


def _list_parts(col) -> tuple[Any, Any, Any]:
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
    """X = ``hstack([dense, sparse])`` (csr float32, sorted indices) from the ``dense`` /
    ``sparse_indices`` / ``sparse_values`` columns of an Arrow table — the same matrix as
    ``PhiPre.features`` of the rows' texts.

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
    dr, dp, dv = _list_parts(table.column(storage.DENSE))
    if len(dp) and int(dp.max()) >= dense_dim:
        raise ValueError(f"embeddings: dense vectors longer than dense_dim={dense_dim}")
    sr, _, si = _list_parts(table.column(storage.SPARSE_INDICES))
    _, _, sv = _list_parts(table.column(storage.SPARSE_VALUES))
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
