"""Driver side: the facts about ``nodes`` that the neighbours stage plans with.

The instance count (it sizes the tasks), the sorted label node indices (``neighbors.node_kinds``)
and, when g comes from another run, the map from that run's node indices to this run's. Read
with pyarrow from the files where it reaches them, else with one Spark job.
"""

import logging

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = ["node_maps"]


def node_maps(spark, ctx, nodes_df, need_labels: bool = True):
    """Driver side: ``(old->new remap or None, sorted label node indices, instance count)``
    (``nodes_df``: a function returning this run's ``nodes`` DataFrame, called only when
    needed).

    When ``ctx.models_root`` is another run's models, g's output nodes are indices of THAT run's
    ``nodes``; they are remapped through ``(kind, node_id)`` into this run's ``nodes`` (the
    identity when the pipeline kept the models run's indices, as ``prepare_nodes_from_models``
    does); output nodes absent from this run's ``nodes`` are never returned. That run's test
    rows are filtered out in the scan: g never has a test instance among its outputs (no test
    row reaches pretraining), so the map needs none, and a ``pina-spark select`` run, whose
    models root is the run it selects for, reads no test row here either.
    """
    import numpy as np
    from pyspark.sql import functions as F

    n_inst, label_idx = _node_counts_arrow(
        ctx.paths.table(storage.NODES), need_labels
    ) or _node_counts_spark(nodes_df(), need_labels)
    own_models = storage.norm(ctx.paths.table(storage.MODELS))
    models = storage.norm(ctx.models_root)
    if models == own_models:
        return None, label_idx, n_inst
    if not models.endswith("/" + storage.MODELS):
        log.warning(
            "neighbors: models %s are not under a run root; assuming its node indices "
            "match this run's nodes",
            models,
        )
        return None, label_idx, n_inst
    old_nodes_uri = models[: -len(storage.MODELS)] + storage.NODES
    if not storage.is_complete(spark, old_nodes_uri):
        log.warning(
            "neighbors: %s not found; assuming the node indices of the models' run "
            "match this run's nodes",
            old_nodes_uri,
        )
        return None, label_idx, n_inst
    old = (
        spark.read.parquet(old_nodes_uri)
        .where(F.col(storage.SPLIT).isNull() | (F.col(storage.SPLIT) != storage.SPLIT_TEST))
        .select(F.col(storage.NODE_INDEX).alias("old"), storage.KIND, storage.NODE_ID)
    )
    pairs = (
        old.join(
            nodes_df().select(
                F.col(storage.NODE_INDEX).alias("new"), storage.KIND, storage.NODE_ID
            ),
            [storage.KIND, storage.NODE_ID],
            "inner",
        )
        .select("old", "new")
        .toPandas()
    )
    n_old, n_candidates = old.agg(F.max("old"), F.count(F.lit(1))).first()
    remap = np.full(int(n_old or 0) + 1, -1, dtype=np.int64)
    remap[pairs["old"].to_numpy(np.int64)] = pairs["new"].to_numpy(np.int64)
    log.info(
        "neighbors: %d of the %d train instances and labels of %s (g's possible outputs; "
        "its test rows never are) found in this run's nodes",
        len(pairs),
        n_candidates,
        old_nodes_uri,
    )
    return remap, label_idx, n_inst


def _node_counts_spark(nodes_df, need_labels: bool):
    """Driver side: ``(instance count, sorted label node indices)`` with one Spark job."""
    import numpy as np
    from pyspark.sql import functions as F

    if need_labels:  # one pass: instance count + label indices
        pdf = (
            nodes_df.select(storage.KIND, storage.NODE_INDEX)
            .filter(F.col(storage.KIND).isin(storage.KIND_LABEL, storage.KIND_INSTANCE))
            .groupBy(storage.KIND)
            .agg(
                F.count("*").alias("n"),
                F.sort_array(
                    F.collect_list(
                        F.when(F.col(storage.KIND) == storage.KIND_LABEL, F.col(storage.NODE_INDEX))
                    )
                ).alias("idx"),
            )
            .collect()
        )
        label_idx = np.asarray(
            [i for r in pdf if r[storage.KIND] == storage.KIND_LABEL for i in r["idx"]],
            dtype=np.int64,
        )
    else:
        pdf = nodes_df.groupBy(storage.KIND).agg(F.count("*").alias("n")).collect()
        label_idx = np.zeros(0, dtype=np.int64)
    return int(sum(r["n"] for r in pdf if r[storage.KIND] == storage.KIND_INSTANCE)), label_idx


def _node_counts_arrow(nodes_uri: str, need_labels: bool):
    """Driver side: ``(instance count, sorted label node indices)`` read with pyarrow from the
    ``kind`` and ``node_index`` columns of a file table (no Spark job), or ``None`` where
    pyarrow does not reach it."""
    if not storage.pyarrow_reaches(nodes_uri):
        return None
    dset = storage.parquet_dataset(nodes_uri)
    if dset is None:
        return None
    import numpy as np
    import pyarrow.dataset as ds

    try:
        n_inst = int(dset.count_rows(filter=ds.field(storage.KIND) == storage.KIND_INSTANCE))
        label_idx = np.zeros(0, dtype=np.int64)
        if need_labels:
            col = dset.to_table(
                columns=[storage.NODE_INDEX], filter=ds.field(storage.KIND) == storage.KIND_LABEL
            ).column(0)
            label_idx = np.sort(col.to_numpy().astype(np.int64))
    except Exception as e:  # e.g. a table without the contract's columns: Spark reports it
        log.info("neighbors: %s not readable with pyarrow (%s); counting with Spark", nodes_uri, e)
        return None
    return n_inst, label_idx
