"""The node index space of a run of another run's models (``run.models``): the ``nodes``
pre-step of a daily run.

Every node of the models run keeps its index, so ``output_nodes.npy`` of the models' g still
points at the right nodes; an existing instance takes its text from the day's input when
present there; instances not seen before are appended after the largest index, sorted by
``instance_id``, with ``split`` as given or ``new`` (:func:`extend_nodes`). A daily input is a
delta: the products earlier daily runs of the same output appended are carried forward while
those runs extended the same index space, the same models run's ``nodes`` (:func:`carry_of`,
:func:`prepare_nodes_from_models`).

Example::

    prepare_nodes_from_models(spark, cfg, paths)["instances_appended"]  # 3
"""

import dataclasses as dc
import logging
from collections.abc import Sequence
from typing import Any

from pina_spark import storage, validate
from pina_spark.config import PinaConfig
from pina_spark.orchestration.resume import (
    NODES_STEP,
    index_space_token,
    models_run_root,
    settings_token,
)
from pina_spark.storage.manifest import Manifest

log = logging.getLogger(__name__)

#: split given to instances appended by :func:`extend_nodes` when the input has none
SPLIT_NEW = "new"


def extend_nodes(prev_nodes, instances, new_split: str = SPLIT_NEW, settled_through=None):
    """The node index space of a run that reuses ``prev_nodes``' models.

    Every row of ``prev_nodes`` keeps its ``node_index`` and ``kind``, and its ``split`` up to
    ``settled_through``; an instance present in ``instances`` takes its (new) text from there,
    and, above ``settled_through`` (a product an earlier day appended), its split when given.
    Instances not in ``prev_nodes`` are appended with indices ``max(node_index)+1 ...`` in
    ``instance_id`` order, ``split`` as given (non-null) or ``new_split``. Rows with a null/blank
    id are dropped; a duplicated id keeps the smallest (text, split) so the result does not
    depend on partitioning.

    Parameters
    ----------
    prev_nodes : DataFrame in the ``nodes`` schema (see docs/design.md).
    instances : DataFrame with ``instance_id``, ``text`` and optionally ``split``.
    settled_through : the largest ``node_index`` of the models run (its rows' splits are the
        ones g was trained with); ``None``: every row of ``prev_nodes``.

    Example::

        extend_nodes(prev, spark.createDataFrame([("z", "new item", None)],
                     "instance_id string, text string, split string")).show()
    """
    from pyspark.sql import functions as F

    inst = instances
    if storage.SPLIT not in inst.columns:
        inst = inst.withColumn(storage.SPLIT, F.lit(None).cast("string"))
    if storage.CORRUPT in inst.columns:
        inst = inst.where(F.col(storage.CORRUPT).isNull())
    inst = (
        inst.where(
            F.col(storage.INSTANCE_ID).isNotNull() & (F.trim(F.col(storage.INSTANCE_ID)) != "")
        )
        .groupBy(storage.INSTANCE_ID)
        .agg(F.min(F.struct(storage.TEXT, storage.SPLIT)).alias("_v"))
        .select(
            F.col(storage.INSTANCE_ID).alias("_id"),
            F.col("_v." + storage.TEXT).alias("_text"),
            F.col("_v." + storage.SPLIT).alias("_split"),
        )
    )
    prev = prev_nodes.select(
        storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.TEXT, storage.SPLIT
    )
    prev_inst = prev.where(F.col(storage.KIND) == storage.KIND_INSTANCE)
    kept = prev.join(
        inst,
        (prev[storage.KIND] == F.lit(storage.KIND_INSTANCE))
        & (prev[storage.NODE_ID] == inst["_id"]),
        "left",
    )
    split = F.col(storage.SPLIT)
    if settled_through is not None:  # a product an earlier day appended takes the day's split
        split = F.when(
            (F.col(storage.NODE_INDEX) > F.lit(int(settled_through))) & F.col("_split").isNotNull(),
            F.col("_split"),
        ).otherwise(split)
    kept = kept.select(
        storage.NODE_INDEX,
        storage.KIND,
        storage.NODE_ID,
        F.coalesce(F.col("_text"), F.col(storage.TEXT)).alias(storage.TEXT),
        split.alias(storage.SPLIT),
    )
    new = inst.join(prev_inst, inst["_id"] == prev_inst[storage.NODE_ID], "left_anti")
    start = prev.agg(F.max(storage.NODE_INDEX)).collect()[0][0]
    start = -1 if start is None else int(start)
    spark = prev_nodes.sparkSession
    ordered = new.orderBy("_id")
    indexed = ordered.rdd.zipWithIndex().map(
        lambda t: (
            start + 1 + t[1],
            storage.KIND_INSTANCE,
            t[0]["_id"],
            t[0]["_text"],
            t[0]["_split"] if t[0]["_split"] is not None else new_split,
        )
    )
    from pyspark.sql import types as T

    new_df = spark.createDataFrame(
        indexed,
        T.StructType(
            [
                T.StructField(storage.NODE_INDEX, T.LongType()),
                T.StructField(storage.KIND, T.StringType()),
                T.StructField(storage.NODE_ID, T.StringType()),
                T.StructField(storage.TEXT, T.StringType()),
                T.StructField(storage.SPLIT, T.StringType()),
            ]
        ),
    )
    return kept.unionByName(new_df)


@dc.dataclass(frozen=True)
class Carry:
    """Where this run's ``nodes`` continue from, decided once before the step (its
    fingerprint holds :attr:`token`, so a rerun sees an earlier day republished).

    Attributes:
        base: the latest earlier daily root of the same output whose ``nodes`` step is complete
            (``None``: none).
        same_index_space: ``base`` extended the node index space this run extends (the
            ``index_space`` its nodes step recorded,
            :func:`~pina_spark.orchestration.resume.index_space_token`: the same models run and
            the same version of its ``nodes``; a refit of that run's g or vectorizer in place
            keeps it), so its products carry forward. A root from before that record: its
            nodes step's ``settings`` (the same models root and model versions).
        skipped: earlier daily roots passed over on the way back: their nodes step did not
            complete (a failed day) -- their products are not in ``base``.
        later: daily roots after this run's date (a backfill or a rerun of an earlier day):
            they carried from the ``nodes`` this run replaces.
        token: ``base``'s root and its nodes step's version (``""``: no base).
        index_space: this run's index space
            (:func:`~pina_spark.orchestration.resume.index_space_token`), read once with the
            decision and recorded by the nodes step for the next day's.
    """

    base: storage.RunPaths | None = None
    same_index_space: bool = False
    skipped: tuple[str, ...] = ()
    later: tuple[str, ...] = ()
    token: str = ""
    index_space: str = ""


def carry_of(cfg: PinaConfig, run_dates: Sequence[str]) -> Carry:
    """The :class:`Carry` of a run of ``cfg`` given the ``run_date=`` roots under its output
    (:func:`~pina_spark.orchestration.runs.list_run_dates`). A daily root is one whose manifest
    holds the nodes pre-step; walking back from ``run.run_date``, roots that are not (a
    retraining sharing the output, the models run) are passed over, as are daily roots whose
    nodes step did not complete (counted in ``skipped``). Reads manifests only: the pre-flight
    (``pina-spark check``) decides as the run does.

    >>> from pina_spark.config import config_from_dict
    >>> carry_of(config_from_dict({"output": "/nonexistent/daily"}), ["2026-11-01"])
    Carry(base=None, same_index_space=False, skipped=(), later=(), token='', index_space='')
    """
    if not cfg.run.run_date or not cfg.run.models:
        return Carry()
    later, skipped, space = [], [], index_space_token(cfg)
    for d in sorted(run_dates):
        if d > cfg.run.run_date and Manifest(storage.RunPaths(cfg.output, d).manifest).stage(
            NODES_STEP
        ):
            later.append(d)
    for d in sorted(run_dates, reverse=True):
        if d >= cfg.run.run_date:
            continue
        p = storage.RunPaths(cfg.output, d)
        entry = Manifest(p.manifest).stage(NODES_STEP)
        if not entry:
            continue
        if entry.get("status") != "complete":
            skipped.append(d)
            continue
        version = entry.get("version", entry.get("finished"))
        recorded = (entry.get("stats") or {}).get("index_space")
        return Carry(
            base=p,
            same_index_space=(
                recorded == space
                if recorded is not None
                else entry.get("settings") == settings_token(cfg, NODES_STEP)
            ),
            skipped=tuple(skipped),
            later=tuple(later),
            token=f"carry:{p.root}:{entry.get('fingerprint')}:{version}",
            index_space=space,
        )
    return Carry(skipped=tuple(skipped), later=tuple(later), index_space=space)


def prepare_nodes_from_models(
    spark, cfg: PinaConfig, paths: storage.RunPaths, carry: Carry | None = None
) -> dict[str, Any]:
    """The ``nodes`` pre-step of a ``run.models`` run: publish this run's ``nodes`` as
    :func:`extend_nodes` of the models run's ``nodes`` and ``input.instances`` (when given).

    A daily input is a delta (the products new or changed that day), so the products earlier
    days appended are carried forward: where ``carry`` (:func:`carry_of`) names an earlier
    daily root of the same index space, this run extends ITS ``nodes`` (same indices, the
    latest text) instead of the models run's. After a retraining the new models run's
    ``nodes`` are the catalogue again: the products of the earlier daily root that it lacks
    and today's input does not name are counted (``instances_not_carried``) and logged. A
    split the input gives a product of the models run is not taken (g was trained with its
    split): counted (``splits_not_taken``) and logged."""
    from pyspark.sql import functions as F

    root = models_run_root(cfg)
    if root is None:
        raise ValueError("prepare_nodes_from_models: the config has no run.models")
    carry = carry or Carry()
    models_nodes = storage.read_table(spark, storage.RunPaths(root), storage.NODES)
    checked: dict[str, Any] = {}
    persisted: list[Any] = []
    inst = (
        _validated_instances(spark, cfg, paths, checked, persisted) if cfg.input.instances else None
    )
    n_models, settled = models_nodes.agg(F.count(F.lit(1)), F.max(storage.NODE_INDEX)).first()
    models_inst = models_nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE)
    prev, carried_from, not_carried = models_nodes, None, 0
    if carry.skipped:
        log.warning(
            "nodes: the earlier daily runs %s did not finish their nodes step: their products "
            "are not carried forward (rerun them, then the days after them in order)",
            ", ".join(carry.skipped),
        )
    if carry.later:
        log.warning(
            "nodes: the later daily runs %s carried from the nodes this run replaces: rerun "
            "them in order to carry its products forward (their nodes step reruns by itself)",
            ", ".join(carry.later),
        )
    if carry.base is not None:
        base_nodes = storage.read_table(spark, carry.base, storage.NODES)
        if carry.same_index_space:
            prev, carried_from = base_nodes, carry.base.root
        else:
            gone = base_nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE).join(
                models_inst.select(storage.NODE_ID), storage.NODE_ID, "left_anti"
            )
            if inst is not None:
                gone = gone.join(
                    inst.select(F.col(storage.INSTANCE_ID).alias(storage.NODE_ID)),
                    storage.NODE_ID,
                    "left_anti",
                )
            not_carried = gone.count()
            if not_carried:
                log.warning(
                    "nodes: %d products of the earlier daily run %s are not carried forward: it "
                    "extended another node index space, and the models run %s (a retraining "
                    "since) does not hold them; name them in a daily input to add them again",
                    not_carried,
                    carry.base.root,
                    root,
                )
    splits_not_taken = 0
    if inst is not None:
        splits_not_taken = (
            inst.where(F.col(storage.SPLIT).isNotNull())
            .join(
                models_inst.select(
                    F.col(storage.NODE_ID).alias(storage.INSTANCE_ID),
                    F.col(storage.SPLIT).alias("_model_split"),
                ),
                storage.INSTANCE_ID,
            )
            .where(F.col(storage.SPLIT) != F.col("_model_split"))
            .select(storage.INSTANCE_ID)
            .distinct()
            .count()
        )
        if splits_not_taken:
            log.warning(
                "nodes: %d products of the models run %s are given another split by %s: "
                "not taken (g's models were trained with their split; retrain to change it)",
                splits_not_taken,
                root,
                cfg.input.instances,
            )
    n_prev = prev.count() if carried_from else n_models
    nodes = (
        extend_nodes(prev, inst, settled_through=settled if carried_from else None)
        if inst is not None
        else prev
    )
    storage.write_table(
        nodes.repartition(max(1, spark.sparkContext.defaultParallelism)).sortWithinPartitions(
            storage.NODE_INDEX
        ),
        paths,
        storage.NODES,
    )
    out = storage.read_table(spark, paths, storage.NODES)
    n = out.count()
    n_new = n - n_prev
    for df in persisted:
        df.unpersist()
    log.info(
        "nodes from models run %s: %d nodes kept (%d carried from %s), %d new instances appended",
        root,
        n_prev,
        n_prev - n_models,
        carried_from
        or (
            f"no earlier daily run: {carry.base.root} extended another index space"
            if carry.base is not None
            else "no earlier daily run"
        ),
        n_new,
    )
    out_stats = {
        "models_run": root,
        "nodes_kept": n_prev,
        "instances_appended": n_new,
        "nodes": n,
        "instances_carried": n_prev - n_models,
        "carried_from": carried_from,
        "instances_not_carried": not_carried,
        "splits_not_taken": splits_not_taken,
        "daily_runs_skipped": list(carry.skipped),
        "later_daily_runs": list(carry.later),
        "index_space": carry.index_space or index_space_token(cfg),
    }
    return {**out_stats, **({"inputs": checked} if checked else {})}


def _validated_instances(spark, cfg: PinaConfig, paths: storage.RunPaths, counts, persisted):
    """The clean rows of ``input.instances`` for the nodes pre-step, validated as the graph
    stage validates them (:func:`pina_spark.validate.validate_inputs`: the same reasons, the
    quarantine published under ``quarantine/instances``, the counts into ``counts`` and
    ``quality.*`` gates), so a daily input's bad rows (a blank text, an id with a control
    character, a split that is neither train nor test) never reach ``nodes`` and features.
    A row without a split keeps none here (:func:`extend_nodes` makes a new product ``new``,
    where the graph stage's rule makes it ``train``)."""
    from pyspark.sql import functions as F

    raw = storage.read_input(spark, str(cfg.input.instances), "instances")
    n_in = validate.count_input(raw, str(cfg.input.instances))  # once: validation takes it
    if n_in == 0:  # a day without new or changed products
        log.info("nodes: %s has no rows: no product to add or update", cfg.input.instances)
        counts["instances"] = {"rows_in": 0, "rows_used": 0, "rows_quarantined": 0, "reasons": {}}
        rows = raw.select(storage.INSTANCE_ID, storage.TEXT, storage.SPLIT)
        # an empty quarantine (validation's columns) replaces an earlier run's of this date
        none = F.lit(None).cast("string")
        empty = rows.select("*", none.alias(storage.CORRUPT), none.alias(storage.REASON))
        storage.write_quarantine(empty, paths, "instances", 0, spark=spark)
        return rows
    checked = validate.validate_inputs(
        spark, cfg, raw={"instances": raw}, rows_in={"instances": n_in}
    )
    persisted += checked.persisted
    validate.publish_quarantine(spark, checked, paths, cfg.quality)
    counts["instances"] = checked.counts["instances"]
    from pina_spark.validate.rules import CHECKS

    # validation's own blank rule (Unicode-aware) and its default: a blank split is train
    is_blank = CHECKS["blank"].spark(storage.SPLIT, cfg.quality.max_text_chars)
    blank = raw.where(is_blank).select(storage.INSTANCE_ID)
    given = raw.where(F.col(storage.SPLIT) == storage.SPLIT_TRAIN).select(storage.INSTANCE_ID)
    unsplit = blank.join(given, storage.INSTANCE_ID, "left_anti").distinct()
    clean = checked.tables["instances"]
    return clean.join(
        unsplit.withColumn("_unsplit", F.lit(True)), storage.INSTANCE_ID, "left"
    ).select(
        storage.INSTANCE_ID,
        storage.TEXT,
        F.when(
            F.col("_unsplit") & (F.col(storage.SPLIT) == storage.SPLIT_TRAIN),
            F.lit(None).cast("string"),
        )
        .otherwise(F.col(storage.SPLIT))
        .alias(storage.SPLIT),
    )
