"""The ``shuffle`` strategy, for embeddings too large to broadcast: the neighbour lists are
exploded into ``(instance, pos, neighbour, weight)`` rows (plus one ``pos = -1`` row for the
instance itself), joined to the embeddings on the neighbour index (sort-merge join; AQE's
skew join splits hub partitions), repartitioned by instance, sorted by ``(instance, pos)``
within partitions and reduced by a ``mapInArrow`` that cuts each Arrow batch into
per-instance segments (rows of an instance that straddle two batches are carried over).
"""

from collections.abc import Iterator

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.runtime import embstore, faults
from pina_spark.stages.aggregate.kernels import CHUNK_ROWS, ReduceTask, combine, out_batch
from pina_spark.stages.aggregate.plan import AggregateInputs, AggregatePlan

__all__ = ["ShufflePath"]

# internal column names of the shuffle strategy
_POS = "_pos"
_NIDX = "_nidx"
_W = "_w"


class ShufflePath:
    """Driver side: the ``shuffle`` strategy of a plan. :meth:`rows` gives the joined rows of
    a variant (``instance_index, _pos, _w, instance_id, split, node_id, dense,
    sparse_indices, sparse_values``, grouped and sorted by instance), :meth:`reducer` the
    executor function over them; :meth:`release` has nothing to free."""

    def __init__(self, spark, inputs: AggregateInputs, plan: AggregatePlan):
        from pyspark.sql import functions as F

        self._inputs = inputs
        self._parts = plan.partitions
        self._inst = inputs.instances()
        self._ids = inputs.nodes.select(
            F.col(storage.NODE_INDEX).cast("long").alias(storage.NODE_INDEX), storage.NODE_ID
        )
        self._vecs = inputs.embeddings.select(
            F.col(storage.NODE_INDEX).cast("long").alias(storage.NODE_INDEX),
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
        )
        self._self_rows = self._inst.select(
            storage.INSTANCE_INDEX,
            F.lit(-1).alias(_POS),
            F.col(storage.INSTANCE_INDEX).alias(_NIDX),
            F.lit(1.0).cast("float").alias(_W),
            storage.INSTANCE_ID,
            storage.SPLIT,
        )

    def rows(self, variant: str):
        pairs = self._self_rows
        if variant != V.VECTORIZER_ONLY:
            pairs = pairs.unionByName(self._neighbor_rows(variant))
        ids, vecs = self._ids, self._vecs
        # two joins on the same key: the pairs are shuffled by _nidx once
        joined = pairs.join(ids, pairs[_NIDX] == ids[storage.NODE_INDEX], "left").drop(
            ids[storage.NODE_INDEX]
        )
        joined = joined.join(vecs, joined[_NIDX] == vecs[storage.NODE_INDEX], "left").select(
            storage.INSTANCE_INDEX,
            _POS,
            _W,
            storage.INSTANCE_ID,
            storage.SPLIT,
            storage.NODE_ID,
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
        )
        return joined.repartition(self._parts, storage.INSTANCE_INDEX).sortWithinPartitions(
            storage.INSTANCE_INDEX, _POS
        )

    def _neighbor_rows(self, variant: str):
        """One row per stored neighbour of ``variant`` (``pos`` = its rank)."""
        from pyspark.sql import functions as F

        nb = (
            self._inputs.neighbors.where(F.col(storage.VARIANT) == variant)
            .select(F.col(storage.INSTANCE_INDEX).cast("long"), storage.NEIGHBOR, storage.SCORE)
            .join(self._inst.select(storage.INSTANCE_INDEX), storage.INSTANCE_INDEX, "left_semi")
        )
        # arrays_zip pads the shorter array with nulls: keep neighbour positions only
        return (
            nb.select(
                storage.INSTANCE_INDEX,
                F.size(storage.NEIGHBOR).alias("_k"),
                F.posexplode(
                    F.arrays_zip(
                        F.col(storage.NEIGHBOR).alias("n"), F.col(storage.SCORE).alias("s")
                    )
                ).alias(_POS, "_z"),
            )
            .where(F.col(_POS) < F.col("_k"))
            .select(
                storage.INSTANCE_INDEX,
                _POS,
                F.col("_z.n").cast("long").alias(_NIDX),
                F.coalesce(F.col("_z.s").cast("float"), F.lit(0.0).cast("float")).alias(_W),
                F.lit(None).cast("string").alias(storage.INSTANCE_ID),
                F.lit(None).cast("string").alias(storage.SPLIT),
            )
        )

    def reducer(self, task: ReduceTask):
        return make_reducer(task)

    def release(self) -> None:
        """Nothing to free."""


def make_reducer(task: ReduceTask):
    """Driver side: the executor function of the ``shuffle`` strategy.

    The returned ``reduce(batches)`` runs on the executors (mapInArrow) over the rows of
    :meth:`ShufflePath.rows`, sorted by ``(instance_index, _pos)`` within the partition; the
    ``_pos = -1`` row of an instance is the instance itself. Rows of the last instance of a
    batch are carried over to the next batch, so every instance is reduced exactly once with
    all its rows.
    """

    def reduce(batches: Iterator) -> Iterator:
        """Executor side (mapInArrow)."""
        faults.maybe_fail(task.fault_plan)
        import numpy as np
        import pyarrow as pa

        carry = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            tbl = pa.Table.from_batches([batch])
            if carry is not None:
                tbl = pa.concat_tables([carry, tbl])
            tbl = tbl.combine_chunks()
            key = tbl.column(0).to_numpy()
            last = key[-1]
            start = (
                int(np.searchsorted(key, last, side="left"))
                if _is_sorted(key)
                else int(np.flatnonzero(key != last)[-1] + 1 if (key != last).any() else 0)
            )
            carry = tbl.slice(start)
            if start:
                yield from _reduce_groups(tbl.slice(0, start), task)
        if carry is not None and carry.num_rows:
            yield from _reduce_groups(carry, task)

    return reduce


def _is_sorted(key) -> bool:
    import numpy as np

    return bool(np.all(key[1:] >= key[:-1]))


def _reduce_groups(tbl, task: ReduceTask):
    """Executor side: reduce complete instance groups of a sorted table (chunked)."""
    import numpy as np
    import scipy.sparse as sp

    D, S = task.dense_dim, task.sparse_dim
    tbl = tbl.combine_chunks()
    key = tbl.column(0).to_numpy()
    pos = tbl.column(1).to_numpy()
    n = key.size
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    if not np.all(pos[starts] == -1):
        raise RuntimeError(
            "aggregate: an instance group does not start with its own row "
            "(input not sorted by instance, pos)"
        )
    # chunk by whole groups so that gathered rows stay bounded
    bounds = list(range(0, starts.size, CHUNK_ROWS)) + [starts.size]
    for g0, g1 in zip(bounds[:-1], bounds[1:]):
        r0 = int(starts[g0])
        r1 = int(starts[g1]) if g1 < starts.size else n
        part = tbl.slice(r0, r1 - r0).combine_chunks()
        st = starts[g0:g1] - r0
        m = r1 - r0
        dense_all, _ = embstore.dense_block(part.column(6).chunk(0), D)
        ptr, idx, val = embstore.sparse_parts(part.column(7).chunk(0), part.column(8).chunk(0))
        sp_all = sp.csr_matrix((val, idx, ptr), shape=(m, S))
        self_dense, self_sp = dense_all[st], sp_all[st]
        st_arr = _np_take(st)
        inst_id, split = part.column(3).take(st_arr), part.column(4).take(st_arr)
        if not task.with_v1:
            dense, sparse = combine(self_dense, self_sp, None, None, None, None, task)
            yield out_batch(inst_id, split, dense, sparse, None, None, None)
            continue
        is_self = np.zeros(m, dtype=bool)
        is_self[st] = True
        nb_rows = np.flatnonzero(~is_self)
        counts = np.diff(np.r_[st, m]) - 1
        nb_ptr = np.zeros(st.size + 1, dtype=np.int64)
        np.cumsum(counts, out=nb_ptr[1:])
        w = part.column(2).to_numpy(zero_copy_only=False).astype(np.float32)[nb_rows]
        dense, sparse = combine(
            self_dense, self_sp, nb_ptr, w, dense_all[nb_rows], sp_all[nb_rows], task
        )
        nb_ids = part.column(5).take(_np_take(nb_rows))
        yield out_batch(inst_id, split, dense, sparse, nb_ptr, nb_ids, w)


def _np_take(ix):
    import numpy as np
    import pyarrow as pa

    return pa.array(np.asarray(ix, dtype=np.int64), pa.int64())
