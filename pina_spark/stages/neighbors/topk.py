"""The top-k maths of the neighbours stage: pure numpy on PECOS' score matrices.

Which output columns of g may be neighbours (:func:`col_map`), the top ``k`` of each row in a
fixed order (score desc, node_index asc; :func:`topk_neighbors`) and their weights
(:func:`normalize_scores`).
"""

__all__ = ["col_map", "topk_neighbors", "normalize_scores"]


def col_map(output_nodes, remap, label_idx, node_kinds: str):
    """Output column -> node_index of this run, ``-1`` where the node may not be a neighbour.

    Examples
    --------
    >>> import numpy as np
    >>> col_map(np.array([0, 5, 6]), None, np.array([5, 6]), "labels").tolist()
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
