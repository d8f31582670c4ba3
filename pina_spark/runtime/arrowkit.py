"""Small Arrow helpers for executor code: one whole array from a chunked one, and list arrays
built from numpy offsets (the shape every reduction hands back to Spark's ``mapInArrow``).

Examples
--------
>>> import numpy as np, pyarrow as pa
>>> list_array([0, 2, 2, 3], np.array([1.0, 2.0, 3.0], np.float32), pa.float32()).to_pylist()
[[1.0, 2.0], [], [3.0]]
>>> arr(pa.chunked_array([[1], [2, 3]])).to_pylist()
[1, 2, 3]
"""

__all__ = ["arr", "list_array", "list_array_from_counts"]


def arr(x):
    """A pyarrow Array from an Array or a ChunkedArray (chunks combined when there are several)."""
    import pyarrow as pa

    if isinstance(x, pa.ChunkedArray):
        return x.combine_chunks() if x.num_chunks != 1 else x.chunk(0)
    return x


def list_array(ptr, values, value_type):
    """Arrow ListArray from int offsets ``ptr`` (n + 1, int32 range) and the flat ``values``
    (numpy, Array or ChunkedArray; numpy values are converted to ``value_type``)."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.array(np.asarray(ptr, dtype=np.int32), pa.int32())
    if isinstance(values, pa.ChunkedArray):
        values = arr(values)
    elif not isinstance(values, pa.Array):
        values = pa.array(values, value_type)
    return pa.ListArray.from_arrays(offsets, values)


def list_array_from_counts(counts, values, value_type):
    """An Arrow list array: row ``i`` holds the next ``counts[i]`` entries of ``values``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> list_array_from_counts([2, 0, 1], [1, 2, 3], pa.int64()).to_pylist()
    [[1, 2], [], [3]]
    """
    import numpy as np

    offs = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offs[1:])
    return list_array(offs, values, value_type)
