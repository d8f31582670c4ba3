"""Numpy ``.npz`` bytes of sparse matrices and arrays (no pickles): the inputs the driver hands
to model-fitting Spark tasks (:mod:`pina_spark.stages.pretrain.fits`,
:mod:`pina_spark.stages.train.tasks`).

Examples
--------
>>> import numpy as np, scipy.sparse as sp
>>> raw = dumps({"X": sp.csr_matrix(np.eye(2, dtype=np.float32))}, {"ids": np.arange(2)})
>>> mats, arrays = loads(raw, ["X"])
>>> mats["X"].toarray().tolist(), arrays["ids"].tolist()
([[1.0, 0.0], [0.0, 1.0]], [0, 1])
"""

import io as _pyio
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["dumps", "loads", "pack_strings", "unpack_strings"]


def dumps(matrices: dict[str, Any], arrays: dict[str, Any]) -> bytes:
    """One ``.npz`` of CSR ``matrices`` (float32 data) and plain ``arrays``."""
    out = dict(arrays)
    for name, m in matrices.items():
        M = m.tocsr()
        out.update(
            {
                f"{name}_data": M.data.astype(np.float32),
                f"{name}_indices": M.indices,
                f"{name}_indptr": M.indptr,
                f"{name}_shape": np.asarray(M.shape, dtype=np.int64),
            }
        )
    buf = _pyio.BytesIO()
    np.savez(buf, **out)
    return buf.getvalue()


def loads(
    raw: bytes, matrices: Sequence[str], optional: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(matrices, arrays)`` of :func:`dumps`' bytes; ``matrices`` names the CSR ones (their
    indices sorted), ``optional`` CSR ones that may be absent (then not in ``matrices``' dict).

    Examples
    --------
    >>> raw = dumps({}, {"n": np.arange(1)})
    >>> loads(raw, [], optional=["X"])[0]
    {}
    """
    import scipy.sparse as sp

    z = np.load(_pyio.BytesIO(raw), allow_pickle=False)
    matrices = list(matrices) + [m for m in optional if f"{m}_shape" in z.files]
    mats = {}
    for name in matrices:
        M = sp.csr_matrix(
            (z[f"{name}_data"], z[f"{name}_indices"], z[f"{name}_indptr"]),
            shape=tuple(int(x) for x in z[f"{name}_shape"]),
        )
        M.sort_indices()
        mats[name] = M
    parts = {f"{n}_{k}" for n in matrices for k in ("data", "indices", "indptr", "shape")}
    return mats, {k: z[k] for k in z.files if k not in parts}


def pack_strings(name: str, strings: Sequence[str]) -> dict[str, Any]:
    """Arrays of :func:`dumps` holding ``strings`` as UTF-8 bytes and their end offsets (no
    pickle, no fixed-width padding to the longest string).

    Examples
    --------
    >>> unpack_strings(pack_strings("ids", ["a", "", "\u00e9t\u00e9"]), "ids")
    ['a', '', 'été']
    """
    raw = [s.encode("utf-8") for s in strings]
    ends = np.cumsum([len(b) for b in raw], dtype=np.int64) if raw else np.zeros(0, np.int64)
    return {
        f"{name}_utf8": np.frombuffer(b"".join(raw), dtype=np.uint8),
        f"{name}_ends": ends,
    }


def unpack_strings(arrays: dict[str, Any], name: str) -> list:
    """The strings :func:`pack_strings` packed under ``name``."""
    buf = arrays[f"{name}_utf8"].tobytes()
    ends = arrays[f"{name}_ends"].tolist()
    starts = [0] + ends[:-1]
    return [buf[a:b].decode("utf-8") for a, b in zip(starts, ends)]
