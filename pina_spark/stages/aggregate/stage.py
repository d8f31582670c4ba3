"""The aggregate stage: plan, build the lazy ``features`` job of every variant, write and
publish it, record the widths and the plan.

The job composes two choices of the plan: the strategy (:class:`BroadcastPath` or
:class:`ShufflePath`: ``rows`` of a variant and the ``reducer`` over them) and the writer
(:class:`ArrowSink` or :class:`SparkSink`: how the reducer's output is written).
"""

import dataclasses as dc
import logging
import time

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.models import artifacts
from pina_spark.runtime import faults
from pina_spark.stages.aggregate import labelfeatures
from pina_spark.stages.aggregate.broadcast import BroadcastPath
from pina_spark.stages.aggregate.kernels import ReduceTask
from pina_spark.stages.aggregate.plan import (
    AggregateInputs,
    AggregatePlan,
    measure_embeddings,
    plan_aggregate,
    resolve_sparse_dim,
)
from pina_spark.stages.aggregate.shuffle import ShufflePath
from pina_spark.stages.aggregate.sink import make_sink
from pina_spark.stages.aggregate.stats import AggregateStats, LabelFeaturesStats
from pina_spark.storage import features as layout

log = logging.getLogger(__name__)

__all__ = ["run", "build_features", "make_path"]


def make_path(spark, inputs: AggregateInputs, plan: AggregatePlan):
    """Driver side: the strategy object of the plan (for ``broadcast`` this ships the
    embeddings: release it after the write)."""
    if plan.strategy == "broadcast":
        return BroadcastPath(spark, inputs, plan)
    return ShufflePath(spark, inputs, plan)


def build_features(spark, inputs: AggregateInputs, plan: AggregatePlan, sink, fault_plan=None):
    """The lazy job of every variant, one ``mapInArrow`` per variant, and the strategy object
    (call its ``release()`` after the job ran). Driver side.

    With a :class:`~pina_spark.stages.aggregate.sink.SparkSink` the DataFrame has the columns of
    ``storage.schema(storage.FEATURES)`` plus ``variant``; with an
    :class:`~pina_spark.stages.aggregate.sink.ArrowSink` it lists the files the executors wrote
    (``variant, split, rows, path``).
    """
    path = make_path(spark, inputs, plan)
    parts = []
    for v in plan.variants:
        task = ReduceTask(
            v1_weight=plan.v1_weight,
            with_v1=v != V.VECTORIZER_ONLY,
            dense_dim=plan.dense_dim,
            sparse_dim=plan.sparse_dim,
            fault_plan=fault_plan,
        )
        out_v = path.rows(v).mapInArrow(sink.wrap(path.reducer(task), v), sink.schema)
        parts.append(sink.label(out_v, v))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out, path


def run(ctx) -> AggregateStats:
    """Pipeline entry point: read ``nodes``, ``embeddings``, ``neighbors``; publish
    ``features`` partitioned by ``(variant, split)``; return statistics (the plan's
    :meth:`~pina_spark.stages.aggregate.plan.AggregatePlan.to_dict`, ``rows`` per variant and split,
    ``widths``, timings). Driver side.

    Example::

        run(ctx)["rows"]  # {'pina': {'test': 5195, 'train': 20780}, ...}
    """
    t0 = time.time()
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    inputs, sparse_dim = _inputs(ctx)
    lf_stats: LabelFeaturesStats | None = None
    scratch = None
    try:
        if cfg.aggregate.label_features != "text" and inputs.neighbors is not None:
            inputs, scratch, lf_stats = _with_label_features(ctx, inputs, sparse_dim)
        t_plan = time.time()
        staging = paths.staging(storage.FEATURES)
        plan = plan_aggregate(spark, inputs, cfg.aggregate, staging, sparse_dim)
        sink = make_sink(spark, plan.writer, staging)
        df, path = build_features(spark, inputs, plan, sink, faults.fault_plan(cfg, "aggregate"))
        plan_s = time.time() - t_plan
        t1 = time.time()
        try:
            final = sink.publish(spark, df, paths)
        finally:
            path.release()
        write_s = time.time() - t1
    finally:
        if scratch is not None:
            storage.delete_path(spark, scratch)
    meta = layout.write_meta(final, plan.dense_dim, plan.sparse_dim, plan.variants)
    counts = layout.partition_counts(spark, final)
    stats = AggregateStats(
        **plan.to_dict(),
        label_features_built=lf_stats,
        plan_s=round(plan_s, 3),
        rows=counts,
        widths=meta["widths"],
        write_s=round(write_s, 2),
        time_s=round(time.time() - t0, 2),
    )
    log.info("aggregate: %s in %.1fs (%s)", counts, stats.time_s, plan.reason)
    return stats


def _with_label_features(ctx, inputs: AggregateInputs, sparse_dim: int | None):
    """``aggregate.label_features`` ``pifa`` / ``text_pifa``: write the virtual label-feature
    rows to a scratch folder of the run's staging area and return ``(inputs that aggregate
    them, the scratch folder, statistics)``."""
    from pyspark.sql import functions as F

    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    t = time.time()
    _, dense_dim, sparse_dim = measure_embeddings(inputs, sparse_dim)
    # g's folds where g has them (a run with run.models follows the models' folds.json, as
    # the neighbours stage does), so an instance's centroids leave out the rows of its g fold;
    # g trained in sample (or no g folder): still out of fold, by the config
    by_config = int(cfg.neighbors.folds), int(cfg.neighbors.fold_seed)
    folds, fold_seed = artifacts.g_folds(storage.norm(ctx.models_root), default=by_config)
    if folds < 2:
        folds, fold_seed = by_config
    # a run with run.models and no graph stage (the daily runs) has no instance labels of its
    # own: the labels' train members are the models run's, whose node indices its nodes keep
    labels_of = paths
    if cfg.run.models and not storage.is_complete(spark, paths.table(storage.INSTANCE_LABELS)):
        labels_of = storage.RunPaths(cfg.run.models)
    scratch = paths.staging("aggregate_label_features")
    try:
        task = labelfeatures.build(
            spark,
            inputs.nodes,
            inputs.embeddings,
            storage.read_table(spark, labels_of, storage.INSTANCE_LABELS),
            dict(
                mode=cfg.aggregate.label_features,
                folds=folds,
                fold_seed=fold_seed,
                dense_dim=dense_dim,
                sparse_dim=sparse_dim,
                max_nnz=int(cfg.aggregate.label_features_max_nnz),
            ),
            scratch,
        )
    except BaseException:
        storage.discard_staging(spark, scratch)
        raise
    extra = spark.read.parquet(scratch)
    emb_cols = [storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES]
    nodes = inputs.nodes.select(
        storage.NODE_INDEX, storage.NODE_ID, storage.KIND, storage.SPLIT
    ).unionByName(
        extra.select(
            storage.NODE_INDEX,
            storage.NODE_ID,
            storage.KIND,
            F.lit(None).cast("string").alias(storage.SPLIT),
        )
    )
    augmented = dc.replace(
        inputs,
        nodes=nodes,
        embeddings=inputs.embeddings.select(*emb_cols).unionByName(extra.select(*emb_cols)),
        neighbors=labelfeatures.route_neighbors(inputs.nodes, inputs.neighbors, task),
        label_features_uri=scratch,
    )
    stats = LabelFeaturesStats(
        label_features_rows=storage.count_rows_arrow(scratch),
        label_features_s=round(time.time() - t, 2),
    )
    log.info("aggregate: label features %s", stats.to_dict())
    return augmented, scratch, stats


def _inputs(ctx) -> tuple[AggregateInputs, int | None]:
    """The published input tables of the run and S (``None`` when the models do not say)."""
    spark, paths = ctx.spark, ctx.paths
    nodes = storage.read_table(spark, paths, storage.NODES)
    embeddings = storage.read_table(spark, paths, storage.EMBEDDINGS)
    # no variant trained reads neighbours (a run following a vectorizer_only selection): the
    # pipeline ran no neighbours stage, and only vectorizer_only is aggregated
    neighbors = None
    if V.needs_neighbors(ctx.cfg.train.variants):
        neighbors = storage.read_table(spark, paths, storage.NEIGHBORS)
    incremental_rows = None
    if ctx.incremental_rows:
        incremental_rows = spark.read.parquet(ctx.incremental_rows)
    inputs = AggregateInputs(
        nodes=nodes,
        embeddings=embeddings,
        neighbors=neighbors,
        embeddings_uri=paths.table(storage.EMBEDDINGS),
        nodes_uri=paths.table(storage.NODES),
        incremental_rows=incremental_rows,
    )
    sparse_dim = resolve_sparse_dim(ctx.models_root, None)
    if sparse_dim is None:
        log.warning("aggregate: no sparse_dim in the vectorizer of %s", ctx.models_root)
    return inputs, sparse_dim
