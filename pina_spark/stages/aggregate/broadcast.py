"""The ``broadcast`` strategy: every Python worker sees the whole embeddings table as
numpy/CSR arrays and a ``mapInArrow`` over the instance rows gathers the neighbour rows and
reduces them per Arrow batch, with no join of vector rows.

The arrays reach the workers through one of two transports (``AggregatePlan.broadcast_via``),
each an :class:`EmbeddingsSource` with one executor-side ``open()``: :class:`FilesSource` --
the first worker of each machine reads the Parquet tables itself into memory-mapped files
shared by the machine's workers (nothing collected on the driver); :class:`SparkSource` --
the driver reads them and ships a Spark broadcast variable (one copy per Python worker).
"""

import dataclasses as dc
import logging
from collections.abc import Iterator
from typing import Any

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.runtime import embstore, faults
from pina_spark.stages.aggregate.kernels import CHUNK_ROWS, ReduceTask, combine, out_batch, weights
from pina_spark.stages.aggregate.plan import AggregateInputs, AggregatePlan

log = logging.getLogger(__name__)

__all__ = ["BroadcastPath", "BroadcastTask", "FilesSource", "SparkSource"]


@dc.dataclass(frozen=True)
class FilesSource(embstore.StoreSpec):
    """The tables each executor machine memory-maps (a
    :class:`~pina_spark.runtime.embstore.StoreSpec`; ``key`` names the exact table files)."""

    def open(self) -> dict[str, Any]:
        """Executor side: the memory-mapped store (cached per worker)."""
        return embstore.open_store(self)

    def release(self) -> None:
        """Driver side: nothing to free (the mapped files stay for the next run)."""


@dc.dataclass(frozen=True)
class SparkSource:
    """A Spark broadcast variable of the arrays (see :func:`broadcast_payload`)."""

    broadcast: Any

    def open(self) -> dict[str, Any]:
        """Executor side: the broadcast arrays (cached per worker by Spark)."""
        return self.broadcast.value

    def release(self) -> None:
        """Driver side: unpersist the broadcast once the features are written."""
        self.broadcast.unpersist()


@dc.dataclass(frozen=True)
class BroadcastTask:
    """What the ``broadcast`` reduction of one variant needs on the executors.

    Attributes:
        source: where the embeddings come from (:class:`FilesSource` or :class:`SparkSource`).
        reduce: the reduction (:class:`~pina_spark.stages.aggregate.kernels.ReduceTask`).
    """

    source: Any
    reduce: ReduceTask


class BroadcastPath:
    """Driver side: the ``broadcast`` strategy of a plan. :meth:`rows` gives the instance rows
    of a variant (``instance_index, instance_id, split, neighbor, score``), :meth:`reducer`
    the executor function over them, :meth:`release` frees the transport after the write."""

    def __init__(self, spark, inputs: AggregateInputs, plan: AggregatePlan):
        self._inputs = inputs
        self._parts = plan.partitions
        self._inst = inputs.instances()
        self._inst_p = self._inst.repartition(plan.partitions, storage.INSTANCE_INDEX)
        self.source = _source(spark, inputs, plan)

    def rows(self, variant: str):
        from pyspark.sql import functions as F

        if variant == V.VECTORIZER_ONLY:
            rows = self._inst_p.select(
                storage.INSTANCE_INDEX,
                storage.INSTANCE_ID,
                storage.SPLIT,
                F.lit(None).cast("array<long>").alias(storage.NEIGHBOR),
                F.lit(None).cast("array<float>").alias(storage.SCORE),
            )
        else:
            nb = self._inputs.neighbors.where(F.col(storage.VARIANT) == variant).select(
                F.col(storage.INSTANCE_INDEX).cast("long"), storage.NEIGHBOR, storage.SCORE
            )
            rows = self._inst.join(nb, storage.INSTANCE_INDEX, "left").repartition(
                self._parts, storage.INSTANCE_INDEX
            )
        return rows.sortWithinPartitions(storage.INSTANCE_INDEX)

    def reducer(self, task: ReduceTask):
        return make_reducer(BroadcastTask(self.source, task))

    def release(self) -> None:
        self.source.release()


def _source(spark, inputs: AggregateInputs, plan: AggregatePlan):
    """Driver side: the transport the plan chose."""
    D, S = plan.dense_dim, plan.sparse_dim
    if plan.broadcast_via == "files":
        # choose_broadcast_via returns "files" only when both tables are given
        assert inputs.embeddings_uri is not None and inputs.nodes_uri is not None
        e, n, x = inputs.embeddings_uri, inputs.nodes_uri, inputs.label_features_uri
        return FilesSource(e, n, D, S, embstore.tables_key(e, n, D, S, x), x)
    emb_tbl = _read_arrow(
        inputs.embeddings,
        inputs.uris(inputs.embeddings_uri),
        [storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES],
    )
    ids_tbl = _read_arrow(
        inputs.nodes, inputs.uris(inputs.nodes_uri), [storage.NODE_INDEX, storage.NODE_ID]
    )
    payload = broadcast_payload(emb_tbl, ids_tbl, D, S)
    del emb_tbl, ids_tbl
    return SparkSource(spark.sparkContext.broadcast(payload))


def _read_arrow(df, uris: tuple[str, ...], columns: list[str]):
    """Read ``columns`` of a table on the driver: pyarrow straight from the Parquet files when
    ``uris`` (the file tables ``df`` is the union of) are readable (fast, multi-threaded), else
    through Spark."""
    dsets = [storage.parquet_dataset(u) for u in uris]
    if dsets and all(d is not None and all(c in d.schema.names for c in columns) for d in dsets):
        return embstore.concat_nullable([d.to_table(columns=columns) for d in dsets])
    return storage.collect_arrow(df.select(*columns))


def broadcast_payload(emb_tbl, ids_tbl, dense_dim: int, sparse_dim: int) -> dict[str, Any]:
    """Driver side: numpy/Arrow arrays of the embeddings, indexed by a node-index lookup (the
    keys of :func:`pina_spark.runtime.embstore.open_store`)."""
    import numpy as np
    import pyarrow as pa

    emb_tbl = emb_tbl.combine_chunks()
    node = emb_tbl.column(storage.NODE_INDEX).to_numpy().astype(np.int64)
    dense, _ = embstore.dense_block(
        emb_tbl.column(storage.DENSE).chunk(0)
        if emb_tbl.num_rows
        else pa.array([], pa.list_(pa.float32())),
        dense_dim,
    )
    sp_ptr, sp_idx, sp_val = embstore.sparse_parts(
        emb_tbl.column(storage.SPARSE_INDICES).combine_chunks(),
        emb_tbl.column(storage.SPARSE_VALUES).combine_chunks(),
    )
    embstore.check_sparse_range(sp_idx, sparse_dim)
    lookup, ids_by_index = embstore.node_lookup(node, ids_tbl)
    return {
        "dense": dense,
        "sp_ptr": sp_ptr,
        "sp_idx": sp_idx,
        "sp_val": sp_val,
        "lookup": lookup,
        "ids": ids_by_index,
        "dense_dim": dense_dim,
        "sparse_dim": sparse_dim,
    }


def make_reducer(btask: BroadcastTask):
    """Driver side: the executor function of the ``broadcast`` strategy.

    The returned ``reduce(batches)`` runs on the executors (mapInArrow over the instance rows
    of :meth:`BroadcastPath.rows`); it opens the embeddings once per Python worker
    (``spark.python.worker.reuse``) and gathers neighbour rows with numpy fancy indexing.
    """

    def reduce(batches: Iterator) -> Iterator:
        """Executor side (mapInArrow)."""
        task = btask.reduce
        faults.maybe_fail(task.fault_plan)
        import numpy as np
        import pyarrow as pa
        import scipy.sparse as sp

        E = btask.source.open()
        dense_e, lookup, ids = E["dense"], E["lookup"], E["ids"]
        S = int(E["sparse_dim"])
        esp = E.get("_csr")
        if esp is None:  # built once per worker (E is cached per worker in both transports)
            esp = E["_csr"] = sp.csr_matrix(
                (E["sp_val"], E["sp_idx"], E["sp_ptr"]), shape=(dense_e.shape[0], S)
            )
        D = dense_e.shape[1]
        zero_d = np.zeros((1, D), dtype=np.float32)

        def gather(node):
            """rows of the embeddings for node indices (missing -> zero rows)."""
            node = np.asarray(node, dtype=np.int64)
            inside = (node >= 0) & (node < lookup.size)
            pos = np.full(node.size, -1, dtype=np.int64)
            pos[inside] = lookup[node[inside]]
            ok = pos >= 0
            if ok.all():
                return dense_e[pos], esp[pos]
            safe = np.where(ok, pos, 0)
            dn = dense_e[safe] if dense_e.shape[0] else np.repeat(zero_d, node.size, 0)
            dn[~ok] = 0
            spm = esp[safe] if esp.shape[0] else sp.csr_matrix((node.size, S), dtype=np.float32)
            spm = sp.diags(ok.astype(np.float32)) @ spm
            return dn, spm.tocsr()

        def id_lookup(node):
            node = np.asarray(node, dtype=np.int64)
            inside = (node >= 0) & (node < len(ids))
            take = pa.array(np.where(inside, node, 0), mask=~inside)
            return ids.take(take)

        for batch in batches:
            for off in range(0, batch.num_rows, CHUNK_ROWS):
                part = batch.slice(off, CHUNK_ROWS)
                inst = part.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
                self_dense, self_sp = gather(inst)
                if not task.with_v1:
                    dense, sparse = combine(self_dense, self_sp, None, None, None, None, task)
                    yield out_batch(part.column(1), part.column(2), dense, sparse, None, None, None)
                    continue
                nb_col, w_col = part.column(3), part.column(4)
                ln, lw = embstore.lengths(nb_col), embstore.lengths(w_col)
                nb_ptr = np.zeros(inst.size + 1, dtype=np.int64)
                np.cumsum(ln, out=nb_ptr[1:])
                nb = embstore.flat(nb_col, np.int64, fill=-1)
                w = weights(ln, lw, nb_ptr, w_col)
                nb_dense, nb_sp = gather(nb)
                dense, sparse = combine(self_dense, self_sp, nb_ptr, w, nb_dense, nb_sp, task)
                yield out_batch(
                    part.column(1), part.column(2), dense, sparse, nb_ptr, id_lookup(nb), w
                )

    return reduce
