"""Executor side: Algorithm 1 of PINA on numpy/scipy blocks, shared by both strategies.

For instances with neighbours ``h_j`` and weights ``P_ij``: ``V0 = Phi_pre(x_i) / ||.||``,
``V1 = sum_j P_ij Phi_pre(h_j) / ||.||``, ``V = [V0, a * V1] / ||.||``, every norm over the
whole ``[dense ; sparse]`` vector; a zero vector stays zero (never NaN). Neighbours are summed
in their stored order, so reruns and both strategies give identical numbers.

Examples
--------
>>> import numpy as np, scipy.sparse as sp
>>> task = ReduceTask(v1_weight=1.0, with_v1=False, dense_dim=2, sparse_dim=3)
>>> d, s = combine(np.array([[3.0, 0.0]], np.float32), sp.csr_matrix([[0.0, 4.0, 0.0]]),
...                None, None, None, None, task)
>>> d.tolist(), s.toarray().tolist()
([[0.6000000238418579, 0.0]], [[0.0, 0.800000011920929, 0.0]])
"""

import dataclasses as dc

from pina_spark import storage
from pina_spark.runtime import embstore
from pina_spark.runtime.arrowkit import arr, list_array

__all__ = ["ReduceTask", "CHUNK_ROWS", "combine", "weights", "out_batch"]

#: instance rows per numpy chunk in the reduction (bounds the gathered neighbour rows)
CHUNK_ROWS = 4096


@dc.dataclass(frozen=True)
class ReduceTask:
    """What one reduction (one variant) needs on the executors.

    Attributes:
        v1_weight: ``a``, the weight of V1 in ``V = [V0, a * V1]``.
        with_v1: ``False`` for ``vectorizer_only`` (V0 alone, no neighbours).
        dense_dim, sparse_dim: D and S of the embeddings.
        fault_plan: :func:`pina_spark.runtime.faults.fault_plan` of the stage (checked per task).
    """

    v1_weight: float
    with_v1: bool
    dense_dim: int
    sparse_dim: int
    fault_plan: tuple | None = None


def weights(ln, lw, nb_ptr, w_col):
    """The weight of every neighbour (stored order); a missing weight (score array shorter
    than the neighbour array) is 0."""
    import numpy as np

    wf = embstore.flat(w_col, np.float32)
    if np.array_equal(ln, lw):
        return wf
    n = int(nb_ptr[-1])
    row = np.repeat(np.arange(ln.size), ln)
    rank = np.arange(n) - nb_ptr[:-1][row]
    wptr = np.zeros(lw.size + 1, dtype=np.int64)
    np.cumsum(lw, out=wptr[1:])
    ok = rank < lw[row]
    w = np.zeros(n, dtype=np.float32)
    w[ok] = wf[wptr[:-1][row[ok]] + rank[ok]]
    return w


def _row_sq(dense, ptr, data):
    """Squared norms of the rows of [dense ; csr] in float64."""
    import numpy as np

    sq = (
        np.einsum("ij,ij->i", dense, dense, dtype=np.float64)
        if dense.shape[1]
        else np.zeros(dense.shape[0])
    )
    if data.size:
        rows = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
        d = data.astype(np.float64)
        sq = sq + np.bincount(rows, weights=d * d, minlength=ptr.size - 1)
    return sq


def combine(self_dense, self_sp, nb_ptr, nb_w, nb_dense, nb_sp, task: ReduceTask):
    """Algorithm 1 for a chunk of instances, fully vectorised.

    ``self_dense`` (b, D) / ``self_sp`` (CSR b x S): Phi_pre of the instances. Neighbour rows
    ``nb_dense`` (m, D) / ``nb_sp`` (CSR m x S) in stored order, instance ``r`` owning rows
    ``nb_ptr[r]:nb_ptr[r+1]`` with weights ``nb_w`` (all unused when ``task.with_v1`` is
    false). Returns ``(dense (b, W) float32, csr (b x S or 2S) float32 with sorted indices)``.
    The weighted sums are one CSR product ``P @ rows`` (P: b x m, one stored entry per
    neighbour), accumulated in stored order.
    """
    import numpy as np
    import scipy.sparse as sp

    a, sparse_dim = task.v1_weight, task.sparse_dim
    b, D = self_dense.shape
    self_sp.sum_duplicates()  # canonical: sorted, no duplicates
    n0 = np.sqrt(_row_sq(self_dense, self_sp.indptr, self_sp.data))
    if not task.with_v1:
        s0 = np.divide(1.0, n0, out=np.zeros(b), where=n0 > 0)
        dense = (self_dense * s0[:, None]).astype(np.float32)
        out = self_sp.copy()
        out.data = (out.data * np.repeat(s0, np.diff(out.indptr))).astype(np.float32)
        out.eliminate_zeros()
        return dense, out
    m = nb_w.size
    P = sp.csr_matrix((nb_w.astype(np.float32), np.arange(m, dtype=np.int64), nb_ptr), shape=(b, m))
    v1d = np.asarray(P @ nb_dense, dtype=np.float32) if D else np.zeros((b, 0), np.float32)
    v1s = (P @ nb_sp).tocsr()
    v1s.sum_duplicates()
    n1 = np.sqrt(_row_sq(v1d, v1s.indptr, v1s.data))
    z0, z1 = (n0 > 0).astype(np.float64), (n1 > 0).astype(np.float64)
    nv = np.sqrt(z0 + a * a * z1)
    ok = nv > 0
    s0 = np.divide(1.0, n0 * nv, out=np.zeros(b), where=ok & (n0 > 0))
    s1 = np.divide(a, n1 * nv, out=np.zeros(b), where=ok & (n1 > 0))
    dense = np.empty((b, 2 * D), dtype=np.float32)
    dense[:, :D] = self_dense * s0[:, None]
    dense[:, D:] = v1d * s1[:, None]
    p0 = self_sp.indptr.astype(np.int64)
    p1 = v1s.indptr.astype(np.int64)
    c0, c1 = np.diff(p0), np.diff(p1)
    ptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(c0 + c1, out=ptr[1:])
    nnz = int(ptr[-1])
    idx = np.empty(nnz, dtype=np.int32)
    val = np.empty(nnz, dtype=np.float32)
    # V0 entries first in each row, then V1's (offset by S): ascending when both are sorted
    pos0 = np.repeat(ptr[:-1] - p0[:-1], c0) + np.arange(p0[-1])
    pos1 = np.repeat(ptr[:-1] + c0 - p1[:-1], c1) + np.arange(p1[-1])
    idx[pos0] = self_sp.indices
    val[pos0] = self_sp.data * np.repeat(s0, c0)
    idx[pos1] = v1s.indices.astype(np.int64) + sparse_dim
    val[pos1] = v1s.data * np.repeat(s1, c1)
    out = sp.csr_matrix((val, idx, ptr), shape=(b, 2 * sparse_dim))
    out.eliminate_zeros()
    return dense, out


def out_batch(instance_id, split, dense, sparse, nb_ptr, nb_ids, nb_w):
    """The output Arrow batch (schema ``storage.schema(storage.FEATURES)``); ``nb_ptr`` = ``None``
    for no neighbour columns (``vectorizer_only``: empty lists)."""
    import numpy as np
    import pyarrow as pa

    b, W = dense.shape
    if nb_ptr is None:
        nb_ptr = np.zeros(b + 1, np.int64)
        nb_ids, nb_w = pa.array([], pa.string()), np.zeros(0, np.float32)
    dptr = np.arange(b + 1, dtype=np.int64) * W
    cols = [
        arr(instance_id).cast(pa.string()),
        arr(split).cast(pa.string()),
        list_array(dptr, dense.reshape(-1), pa.float32()),
        list_array(sparse.indptr, sparse.indices.astype(np.int32, copy=False), pa.int32()),
        list_array(sparse.indptr, sparse.data.astype(np.float32, copy=False), pa.float32()),
        list_array(nb_ptr, arr(nb_ids).cast(pa.string()), pa.string()),
        list_array(nb_ptr, np.asarray(nb_w, dtype=np.float32), pa.float32()),
    ]
    return pa.RecordBatch.from_arrays(
        cols,
        [
            storage.INSTANCE_ID,
            storage.SPLIT,
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
            storage.NEIGHBOR_IDS,
            storage.NEIGHBOR_WEIGHTS,
        ],
    )
