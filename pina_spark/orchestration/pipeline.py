"""Stage order, resume/skip, run dates, reuse of an earlier run's models, incremental runs,
progress logging and manifest writes.

Stage modules never import each other (the train stage reads ``features`` through
:mod:`pina_spark.storage.features_csr`, the table's owner): each exposes
``run(ctx)``, returning its statistics (a :class:`pina_spark.stages.StageStats`), and
reads/writes published tables through :mod:`pina_spark.storage`; this module runs them in the
order of :data:`pina_spark.stages.STAGES` and records each one's statistics in the manifest in
their plain form (:func:`pina_spark.stages.stats_dict`).

Resume
    Decided by :mod:`pina_spark.orchestration.resume` (shared with ``pina-spark check``, and
    logged as the plan when a run starts): a stage is skipped when its manifest entry is
    ``complete`` for the same fingerprint and its outputs are complete on storage
    (``_SUCCESS``); ``run.force`` (``--force``) redoes everything.
    The fingerprint of a stage hashes: the input files (path, size, mtime), ``run.models`` (and
    the models run's vectorizer and pretrain entries), the config sections of the stage, and the
    manifest entries (fingerprint + finish time) of every stage before it. So a stage that is
    redone invalidates every later stage, whichever subset of stages a command names
    (``jobs/<stage>.py`` steps and ``pina-spark run`` agree).

Run dates
    With ``run.run_date`` every output goes under ``<output>/run_date=<date>/`` (its own manifest
    too); rerunning a date republishes that date's tables (staging + atomic swap, so no duplicate
    rows), other dates are never touched.

Models of an earlier run (``run.models``)
    When ``run.models`` names an earlier run root and this command does not run the ``graph``
    stage, a ``nodes`` pre-step (:mod:`pina_spark.orchestration.daily`) builds this run's node
    index space from the models run's ``nodes``: every node keeps its index (so
    ``output_nodes.npy`` of the models' g still points at the right nodes), an existing instance
    takes its text from the new instances table when present there, instances not seen before
    are appended after the largest index, and the products earlier daily runs of the same
    output appended over the same models run's nodes are carried forward (a daily input is a
    delta).

Runs without neighbours
    When ``train.variants`` holds neither ``pina`` nor ``pina_naive`` (a production run that
    follows a ``vectorizer_only`` selection, :mod:`pina_spark.selection.follow`), the
    ``pretrain`` and ``neighbors`` stages are not run (:func:`resume.stage_names`) and
    aggregate writes ``vectorizer_only`` alone.

Incremental (``run.incremental``, needs ``run.models``)
    The embed, neighbors and aggregate stages recompute only new or changed nodes (a hash of
    ``node_id`` + ``text`` + ``split`` compared with a base run: the latest earlier ``run_date``
    of the same output with complete outputs, else the models run). See :func:`select_changed`
    and :data:`INCREMENTAL`. The stage runs on a subset view of its input table (a path
    overlay); the pipeline then publishes recomputed rows + the base run's rows for everything
    else.

Examples
--------
>>> from pina_spark.config import config_from_dict
>>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
...     "labels": "l.csv", "instance_labels": "il.csv"}})
>>> [s.name for s in plan(cfg, ("graph", "pretrain"))]
['graph', 'pretrain']
"""

import dataclasses as dc
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, PinaConfig
from pina_spark.config import variants as V
from pina_spark.orchestration.daily import Carry, carry_of, prepare_nodes_from_models
from pina_spark.orchestration.promotion import resolve_models
from pina_spark.orchestration.resume import (
    NODES_STEP,
    SKIP,
    base_token,
    decide,
    forces,
    full_root_problem,
    g_lacking,
    models_run_root,
    nodes_token,
    plan_problem,
    plan_steps,
    runs_nodes_step,
    settings_token,
    stage_fingerprint,
    stage_names,
    stale_message,
    stale_upstream,
    step_outputs,
)
from pina_spark.orchestration.runs import list_run_dates
from pina_spark.runtime import termination
from pina_spark.runtime.progress import StageProgress
from pina_spark.stages import STAGES, StageContext, StageSpec, StageStats, stats_dict
from pina_spark.storage.manifest import Manifest

log = logging.getLogger(__name__)

#: what a step runs: a stage's ``run`` (its :class:`~pina_spark.stages.StageStats`) or one of
#: the pipeline's own steps (the nodes pre-step, an incremental run: a plain mapping)
StepFn = Callable[[StageContext], Mapping[str, Any] | None]


#: outputs that are folders of files, not Parquet tables (no row counts)
NON_TABLE_OUTPUTS = (storage.VECTORIZER, storage.MODELS, storage.DOWNSTREAM_MODELS, storage.EVAL)


def plan(cfg: PinaConfig, stages: Sequence[str]) -> list[StageSpec]:
    """The stages to consider, in pipeline order (:func:`resume.stage_names`: no ``pretrain``
    or ``neighbors`` when no variant trained has neighbours)."""
    return [STAGES[s] for s in stage_names(cfg, stages)]


def _models_root(cfg: PinaConfig, paths: storage.RunPaths) -> str:
    """Where the run's models are: ``run.models``' models folder, else the run's own."""
    return (
        storage.RunPaths(cfg.run.models).table(storage.MODELS)
        if cfg.run.models
        else paths.table(storage.MODELS)
    )


def make_context(spark, cfg: PinaConfig) -> StageContext:
    paths = storage.RunPaths(cfg.output, cfg.run.run_date)
    manifest = Manifest(paths.manifest)
    models_root = _models_root(cfg, paths)
    return StageContext(
        spark=spark, cfg=cfg, paths=paths, manifest=manifest, models_root=models_root
    )


def open_run(spark, root: str, allow_uncommitted: bool = False) -> StageContext:
    """A context over an existing run root (``<output>`` or ``<output>/run_date=D``), with the
    config recorded in its manifest: for notebooks and ad-hoc inspection.

    Like a stage, it refuses a root where a step's tables were published by a run of that step
    that never committed (they may not belong together); ``allow_uncommitted=True`` opens it
    anyway, for looking into what a crashed run left.

    Raises
    ------
    pina_spark.storage.UncommittedError
        Names the steps and their uncommitted tables.

    Example::

        ctx = open_run(spark, "runs/demo/run")
        storage.read_table(ctx.spark, ctx.paths, storage.NODES).count()
    """
    from pina_spark.config import ConfigError, config_from_dict

    paths = storage.RunPaths(root)
    manifest = Manifest(paths.manifest)
    if "config" not in manifest.data:
        raise ConfigError(
            f"{paths.manifest}: no run manifest with a config (is {root} a run "
            "root? e.g. runs/demo/run or <output>/run_date=YYYY-MM-DD)"
        )
    cfg = config_from_dict(manifest.data["config"], paths.manifest)
    models_root = _models_root(cfg, paths)
    ctx = StageContext(
        spark=spark, cfg=cfg, paths=paths, manifest=manifest, models_root=models_root
    )
    if not allow_uncommitted:
        _refuse_uncommitted(
            _uncommitted(ctx, _stage_outputs()),
            f"{root} holds tables published by a run that did not commit",
            "they may not belong together",
            "or pass allow_uncommitted=True to look at them anyway",
        )
    return ctx


# --------------------------------------------------------------------------- the runner
def run_pipeline(
    spark, cfg: PinaConfig, stages: Sequence[str] | None = None, force: bool | None = None
) -> dict[str, Any]:
    """Run ``stages`` (all by default) in order; returns ``{stage: "ran"|"skipped"}`` (plus
    ``"nodes"`` when the pre-step of a ``run.models`` run was considered).

    Example::

        run_pipeline(spark, cfg, ["graph"])  # {'graph': 'ran'}
    """
    if force is not None and force != cfg.run.force:  # one decision: the plan reads run.force
        cfg = cfg.replace(run=dc.replace(cfg.run, force=force))
    force = cfg.run.force
    stages = tuple(stages or STAGE_NAMES)
    cfg = resolve_models(cfg, stages)  # run.models: latest -> the promoted run, decided once
    ctx = make_context(spark, cfg)
    run_id = storage.held_run_id(ctx.paths.root) or uuid.uuid4().hex[:12]
    with storage.acquire_lease(
        ctx.paths.root, run_id, stale_s=cfg.run.lease_stale_s, heartbeat_s=cfg.run.lease_heartbeat_s
    ):
        return _run_leased(ctx, run_id, stages, force)


def _run_leased(
    ctx: StageContext, run_id: str, stages: tuple[str, ...], force: bool
) -> dict[str, Any]:
    """The body of :func:`run_pipeline`, run while this process holds the root's lease."""
    spark, cfg = ctx.spark, ctx.cfg
    refused = full_root_problem(cfg, ctx.manifest, ctx.paths.root, stages)
    if refused:  # before anything is written, the manifest included
        raise storage.InputError(refused)
    storage.recover(spark, ctx.paths, [o for s in STAGES.values() for o in s.outputs])
    input_fp = storage.input_fingerprint(spark, dc.astuple(cfg.input))
    base = base_token(cfg, input_fp)
    complete = lambda uri: storage.is_complete(spark, uri)  # noqa: E731
    carry, nodes_fp = Carry(), ""
    if runs_nodes_step(cfg, ctx.paths.root, stages):  # the nodes pre-step reads the instances
        carry = carry_of(cfg, list_run_dates(spark, cfg.output))
        instances_fp = storage.input_fingerprint(spark, [cfg.input.instances])
        nodes_fp = nodes_token(instances_fp, carry.token)
    steps = plan_steps(cfg, stages, ctx.manifest, input_fp, complete, nodes_fp)
    problem = plan_problem(cfg, stages, ctx.manifest, steps, complete)
    if problem:  # before the manifest records the run: nothing ran
        raise storage.InputError(problem)
    names = stage_names(cfg, stages)
    if (
        {"train", "evaluate"} & set(names)
        and "graph" not in names
        and complete(ctx.paths.table(storage.NODES))
    ):  # a step of its own (the EMR step lists, the DAGs): stopped before it starts
        _require_test_rows(ctx)
    ctx.manifest.set_run_info(cfg.to_dict())
    ctx.manifest.start_run(
        run_id,
        list(stages),
        spark_version=spark.version,
        run_date=cfg.run.run_date,
        models=cfg.run.models,
    )
    log.info(
        "run %s: stages %s, output %s%s",
        run_id,
        ",".join(stages),
        ctx.paths.root,
        f", models of {cfg.run.models}" if cfg.run.models else "",
    )
    for step in steps:
        log.info("plan: %s %s (%s)", step.step, step.action, step.reason)
    result: dict[str, str] = {}
    try:
        if runs_nodes_step(cfg, ctx.paths.root, stages):
            result[NODES_STEP] = _run_step(
                ctx,
                NODES_STEP,
                stage_fingerprint(cfg, ctx.manifest, base, NODES_STEP, nodes_fp),
                (storage.NODES,),
                forces(cfg, NODES_STEP, stages),
                lambda c: prepare_nodes_from_models(c.spark, c.cfg, c.paths, carry),
                run_id,
            )
        elif cfg.run.models:  # with the graph stage (resolve_models refused the own root)
            log.info(
                "run.models with the graph stage: this run builds its own nodes; g's "
                "output nodes (those of %s) are mapped into them by (kind, node_id)",
                models_run_root(cfg),
            )
        for spec in plan(cfg, stages):
            fp = stage_fingerprint(cfg, ctx.manifest, base, spec.name)
            fn: StepFn
            if cfg.run.incremental and spec.name in INCREMENTAL:
                fn = _incremental_runner(spec)
            else:
                fn = spec.load()
            ran = [s for s, r in result.items() if r == "ran"]
            result[spec.name] = _run_step(
                ctx, spec.name, fp, step_outputs(spec.name, cfg), force, fn, run_id, ran, stages
            )
            if spec.name == "graph" and {"train", "evaluate"} & set(stages):
                _require_test_rows(ctx)
    except BaseException as e:
        ctx.manifest.finish_run(run_id, result, status="failed", error=termination.reason(e))
        raise
    ctx.manifest.finish_run(run_id, result, status="complete")
    return result


def _require_test_rows(ctx: StageContext) -> None:
    """Stop a run whose stages train or evaluate the downstream model when the graph stage
    found no test instance (no ``split`` column: every instance is train), before the stages
    in between spend their time: the report scores test instances only. A run of the stages
    through ``aggregate`` (features for every product) needs none."""
    counts = storage.group_counts(
        ctx.spark, ctx.paths.table(storage.NODES), [storage.KIND, storage.SPLIT]
    ).to_pylist()
    if any(
        r[storage.KIND] == storage.KIND_INSTANCE and r[storage.SPLIT] == storage.SPLIT_TEST
        for r in counts
    ):
        return
    raise storage.InputError(
        storage.no_test_rows_message(
            ctx.cfg.input.instances or "", "no instance kept by the graph stage has split='test'"
        )
    )


def _stage_outputs() -> dict[str, tuple[str, ...]]:
    """Outputs of every step, keyed by name, in pipeline order (the nodes pre-step first)."""
    out: dict[str, tuple[str, ...]] = {NODES_STEP: (storage.NODES,)}
    out.update({name: spec.outputs for name, spec in STAGES.items()})
    return out


def _uncommitted(ctx: StageContext, owners: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """``{step: [tables]}`` of ``owners`` whose published version no commit lists, counting a
    never-listed table only for a step the manifest shows unfinished
    (storage.uncommitted_tables)."""
    unfinished = set()
    for st in owners:
        e = ctx.manifest.stage(st)
        if e and e.get("status") in ("running", "failed"):
            unfinished.add(st)
    return storage.uncommitted_tables(ctx.paths, owners, unfinished)


def _refuse_uncommitted(bad: dict[str, list[str]], what: str, why: str, fix: str) -> None:
    """Raise :class:`~pina_spark.storage.UncommittedError` listing ``bad`` (step -> tables), if
    any."""
    if bad:
        tables = "; ".join(f"{st}: {', '.join(rels)}" for st, rels in bad.items())
        raise storage.UncommittedError(f"{what} ({tables}): {why}. Rerun {', '.join(bad)} {fix}")


def require_upstream_committed(ctx: StageContext, name: str) -> None:
    """Refuse to run ``name`` on outputs of an earlier step (in :data:`STAGES` order) that were
    published by a run of that step which never committed (e.g. a driver killed after ``nodes``
    was published but before ``graph/pretrain_edges``): the tables would not belong together.

    Raises
    ------
    pina_spark.storage.UncommittedError
        Names the upstream step, its uncommitted tables and the fix (rerun that step).
    """
    owners = _stage_outputs()
    order = list(owners)
    upstream = {
        st: rels
        for st, rels in owners.items()
        if st != name and order.index(st) < order.index(name)
    }
    _refuse_uncommitted(
        _uncommitted(ctx, upstream),
        f"stage {name} refuses to read upstream tables of {ctx.paths.root} that were "
        f"published by a run that did not commit",
        "the stage did not finish, so its tables may not belong together",
        "first",
    )


def require_upstream_current(ctx: StageContext, name: str, stages: Sequence[str]) -> None:
    """Refuse to run ``name`` on upstream outputs of this root that were made with other
    models or settings than this command's (:func:`~pina_spark.orchestration.resume.
    stale_upstream`): e.g. embeddings of yesterday's promoted models, read by a neighbours step
    whose ``--models latest`` now names the run promoted since. The fix is to rerun from the
    first stale stage.

    Raises
    ------
    pina_spark.storage.InputError
        Names each stale step, both settings tokens and the stages to run.
    """
    stale = stale_upstream(ctx.cfg, ctx.manifest, name, stages)
    if stale:
        raise storage.InputError(stale_message(ctx.cfg, ctx.paths.root, name, stale, stages))


def _run_step(
    ctx: StageContext,
    name: str,
    fp: str,
    outputs: Sequence[str],
    force: bool,
    fn: StepFn,
    run_id: str = "",
    earlier_runs: Sequence[str] = (),
    stages: Sequence[str] | None = None,
) -> str:
    """Run step ``name`` unless :func:`~pina_spark.orchestration.resume.decide` skips it
    (``stages``: the command's, to refuse upstream outputs made with other models or
    settings, :func:`require_upstream_current`)."""
    spark = ctx.spark
    # every output folder (Spark tables and model folders alike) ends with a _SUCCESS file
    missing = [o for o in outputs if not storage.is_complete(spark, ctx.paths.table(o))]
    entry = ctx.manifest.stage(name)
    lacking = g_lacking(ctx.cfg, name, entry)
    decision = decide(name, fp, entry, missing, force, earlier_runs, lacking)
    if decision.action == SKIP:
        log.info("stage %s: %s, skipped", name, decision.reason)
        return "skipped"
    require_upstream_committed(ctx, name)
    if stages is not None:
        require_upstream_current(ctx, name, stages)
    log.info(
        "stage %s: start (%s; fingerprint %s, root %s)", name, decision.reason, fp, ctx.paths.root
    )
    ctx.manifest.mark_started(name, fp)
    t0 = time.time()
    try:
        with StageProgress(spark, name, run_id, ctx.cfg.run.progress_s):
            result = fn(ctx)
            stats = stats_dict(result)
    except BaseException as e:  # a SIGTERM's SystemExit too: the stage did not finish
        ctx.manifest.mark_failed(name, termination.reason(e))
        log.error("stage %s failed after %.1fs: %s", name, time.time() - t0, e)
        raise
    dt = time.time() - t0
    commit = storage.commit_stage(ctx.paths, name, outputs, run_id)
    rows = _output_rows(spark, ctx.paths, outputs)
    if isinstance(result, StageStats):
        rows.update(result.optional_rows())
    total = sum(rows.values())
    rate = round(total / dt, 1) if dt > 0 and rows else None
    ctx.manifest.record_stage(
        name,
        stats,
        fp,
        dt,
        rows_out=rows,
        rows_per_s=rate,
        committed=commit["tables"],
        models_version=models_version(ctx, name),
        settings=settings_token(ctx.cfg, name),
    )
    log.info(
        "stage %s: done in %.1fs, rows out %s%s %s",
        name,
        dt,
        rows or "-",
        f" ({rate} rows/s)" if rate is not None else "",
        _brief(stats),
    )
    return "ran"


def _output_rows(spark, paths: storage.RunPaths, outputs: Sequence[str]) -> dict[str, int]:
    """Row counts of the published output tables, from the Parquet footers read by the driver
    where pyarrow reaches them (:func:`~pina_spark.storage.count_rows_arrow`: local paths,
    ``s3://``; no Spark job), else a Spark count (also footer-only for Parquet)."""
    rows = {}
    for rel in outputs:
        if rel in NON_TABLE_OUTPUTS:
            continue
        uri = paths.table(rel)
        try:
            n = storage.count_rows_arrow(uri) if storage.pyarrow_reaches(uri) else None
            rows[rel] = int(spark.read.parquet(uri).count()) if n is None else n
        except Exception as e:  # an empty folder, a non-table output
            log.debug("no row count for %s: %s", rel, e)
    return rows


def models_version(ctx: StageContext, stage: str) -> str | None:
    """Version of the model folder ``stage``'s outputs are computed with (its
    :attr:`StageSpec.model_folder`: the vectorizer for embed, g's models after), or ``None``."""
    from pina_spark.models.artifacts import vectorizer_dir

    folder = STAGES[stage].model_folder if stage in STAGES else None
    if folder == storage.VECTORIZER:
        return storage.table_version(vectorizer_dir(ctx.models_root))
    if folder == storage.MODELS:
        return storage.table_version(ctx.models_root)
    return None


def _brief(stats: dict[str, Any]) -> str:
    items = [(k, v) for k, v in stats.items() if isinstance(v, int | float | str)][:8]
    return " ".join(f"{k}={v}" for k, v in items)


# --------------------------------------------------------------------------- incremental runs
def row_hash(df):
    """``df`` with a ``_row_hash`` column: sha256 of ``node_id`` + US + ``text`` + US +
    ``split`` (a product appended as ``new`` that a later input gives a split is recomputed:
    its neighbours' route and its features' partition follow the split)."""
    from pyspark.sql import functions as F

    return df.withColumn(
        "_row_hash",
        F.sha2(
            F.concat_ws(
                "\u001f",
                F.col(storage.NODE_ID),
                F.coalesce(F.col(storage.TEXT), F.lit("")),
                F.coalesce(F.col(storage.SPLIT), F.lit("")),
            ),
            256,
        ),
    )


def select_changed(current_nodes, previous_nodes):
    """Nodes of ``current_nodes`` that are new or changed against ``previous_nodes``.

    Both are ``nodes`` tables of the same index space
    (:func:`pina_spark.orchestration.daily.extend_nodes`). A node is
    ``new`` when its ``(node_index, kind)`` is absent from ``previous_nodes`` and ``changed`` when
    the hash of ``node_id`` + ``text`` + ``split`` differs. Returns ``node_index, kind,
    node_id, reason``.

    Example::

        select_changed(today, yesterday).groupBy("reason").count().show()
    """
    from pyspark.sql import functions as F

    cur = row_hash(current_nodes).select(
        storage.NODE_INDEX, storage.KIND, storage.NODE_ID, "_row_hash"
    )
    prev = row_hash(previous_nodes).select(
        storage.NODE_INDEX, storage.KIND, F.col("_row_hash").alias("_prev_hash")
    )
    j = cur.join(prev, [storage.NODE_INDEX, storage.KIND], "left")
    return j.where(
        F.col("_prev_hash").isNull() | (F.col("_prev_hash") != F.col("_row_hash"))
    ).select(
        storage.NODE_INDEX,
        storage.KIND,
        storage.NODE_ID,
        F.when(F.col("_prev_hash").isNull(), F.lit("new"))
        .otherwise(F.lit("changed"))
        .alias("reason"),
    )


def incremental_base(spark, cfg: PinaConfig, rel: str) -> storage.RunPaths | None:
    """Where unchanged rows of ``rel`` are copied from: the latest earlier ``run_date`` of the
    same output whose ``nodes`` and ``rel`` are complete, else the models run (when complete)."""
    if cfg.run.run_date:
        for d in reversed(list_run_dates(spark, cfg.output)):
            if d >= cfg.run.run_date:
                continue
            p = storage.RunPaths(cfg.output, d)
            if storage.is_complete(spark, p.table(storage.NODES)) and storage.is_complete(
                spark, p.table(rel)
            ):
                return p
    root = models_run_root(cfg)
    if root:
        p = storage.RunPaths(root)
        if storage.is_complete(spark, p.table(storage.NODES)) and storage.is_complete(
            spark, p.table(rel)
        ):
            return p
    return None


def _base_used_other_models(ctx: StageContext, base: storage.RunPaths, stage: str) -> str | None:
    """Why the rows of ``base`` cannot be merged with rows computed now (``None`` when they
    can): its ``stage`` ran with another version of the model folder it reads (the vectorizer
    or g's models: a retrain in between), or recorded none (a run older than model versions)."""
    now = models_version(ctx, stage)
    entry = Manifest(base.manifest).stage(stage) or {}
    then = entry.get("models_version")
    if then is None and now is None:
        return None
    if then != now:
        return (
            f"the base run {base.root} computed {stage} with models version {then or 'unknown'}"
            f", the models of {ctx.models_root} are version {now or 'unknown'} (retrained since)"
        )
    return None


def _base_used_other_settings(ctx: StageContext, base: storage.RunPaths, stage: str) -> str | None:
    """Why the rows of ``base`` cannot be merged with rows ``stage`` computes now because of
    its settings (``None`` when they can): the config ``base``'s manifest records gives the
    sections of the stage and of the incremental stages before it
    (:meth:`StageSpec.fingerprint_sections`) another fingerprint than this run's (a selection
    since, or a ``--set neighbors.k=10``: merged rows would mix five and ten neighbours), or
    cannot be read (a base recording no config is not judged)."""
    from pina_spark.config import config_from_dict

    recorded = Manifest(base.manifest).data.get("config")
    if not recorded:  # every run records its config when it starts: not a run's root
        return None
    try:
        then = config_from_dict(recorded, base.manifest)
    except Exception as e:  # a config of another version of this package
        return f"the settings the base run {base.root} records cannot be read ({e})"
    # the stage's own sections and those of the incremental stages before it: features merged
    # from a base made on five neighbours would mix with today's ten though aggregate's own
    # section did not change
    upto = STAGE_NAMES[: STAGE_NAMES.index(stage) + 1]
    sections = tuple(
        dict.fromkeys(
            x for s in upto if s in INCREMENTAL for x in STAGES[s].fingerprint_sections(ctx.cfg)
        )
    )
    if then.fingerprint(*sections) != ctx.cfg.fingerprint(*sections):
        return (
            f"the base run {base.root} computed {stage} with other settings of "
            f"{', '.join(sections)}"
        )
    return None


def _variants_written(cfg: PinaConfig, stage: str) -> tuple[str, ...] | None:
    """The ``variant`` partitions ``stage`` writes for ``cfg`` (``None``: its output has none):
    the neighbours of the g variants ``train.variants`` trains, and their features plus
    ``vectorizer_only``'s.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/r", "train": {"variants": ["pina", "baseline"]}})
    >>> _variants_written(cfg, "neighbors"), _variants_written(cfg, "aggregate")
    (('pina',), ('pina', 'vectorizer_only'))
    >>> _variants_written(cfg, "embed") is None
    True
    """
    g = V.g_variants(cfg.train.variants)
    if stage == "neighbors":
        return g
    if stage == "aggregate":
        return g + (V.VECTORIZER_ONLY,)
    return None


def _base_lacks_variants(spark, uri: str, stage: str, wanted: Sequence[str]) -> str | None:
    """Why the base's ``stage`` output at ``uri`` cannot serve an incremental run that writes
    the variants ``wanted``: it has no rows of one of their g variants (its run trained other
    variants), so the rows of its unchanged instances would be missing; ``None`` when it has
    them all (``vectorizer_only``'s features come with every aggregate run)."""
    have = set(storage.partition_values(spark.read.parquet(uri), storage.VARIANT))
    lacking = sorted(set(V.g_variants(wanted)) - have)
    if lacking:
        return f"the base run's {stage} output {uri} has no rows of {', '.join(lacking)}"
    return None


@dc.dataclass(frozen=True)
class IncrementalSpec:
    """How a stage runs incrementally: ``subset`` is the input table handed to the stage as a
    subset view (rows of the selected nodes; ``key`` is its node column), ``output`` the table
    merged afterwards (recomputed rows + base rows of the unselected nodes, matched on
    ``output_key``; ``output_by_id``: the key is ``instance_id``, mapped through ``nodes``)."""

    subset: str
    key: str
    output: str
    output_key: str
    partition_by: tuple[str, ...] = ()
    output_by_id: bool = False
    kinds: tuple[str, ...] = (storage.KIND_INSTANCE, storage.KIND_LABEL)
    #: more rows to recompute, beyond the changed nodes of ``kinds``:
    #: ``(spark, paths, changed node indices) -> DataFrame of node_index``
    also_select: Callable[[Any, storage.RunPaths, Any], Any] | None = None


def _instances_touching(spark, paths: storage.RunPaths, changed):
    """Instances whose (recomputed) neighbour lists hold a changed node: their aggregated
    features change although their own text did not."""
    from pyspark.sql import functions as F

    nb = storage.read_table(spark, paths, storage.NEIGHBORS)
    return (
        nb.select(storage.INSTANCE_INDEX, F.explode(storage.NEIGHBOR).alias("_n"))
        .join(changed.select(F.col(storage.NODE_INDEX).alias("_n")), "_n", "left_semi")
        .select(F.col(storage.INSTANCE_INDEX).alias(storage.NODE_INDEX))
    )


#: embed: every new/changed node; neighbors: new/changed instances (g is unchanged, so an
#: instance's neighbours depend only on its own text); aggregate: instances recomputed by
#: neighbors or with a new/changed neighbour.
INCREMENTAL: dict[str, IncrementalSpec] = {
    "embed": IncrementalSpec(
        storage.NODES, storage.NODE_INDEX, storage.EMBEDDINGS, storage.NODE_INDEX
    ),
    "neighbors": IncrementalSpec(
        storage.EMBEDDINGS,
        storage.NODE_INDEX,
        storage.NEIGHBORS,
        storage.INSTANCE_INDEX,
        (storage.VARIANT,),
        kinds=(storage.KIND_INSTANCE,),
    ),
    "aggregate": IncrementalSpec(
        storage.NEIGHBORS,
        storage.INSTANCE_INDEX,
        storage.FEATURES,
        storage.INSTANCE_ID,
        (storage.VARIANT, storage.SPLIT),
        output_by_id=True,
        kinds=(storage.KIND_INSTANCE,),
        also_select=_instances_touching,
    ),
}


class OverlayPaths(storage.RunPaths):
    """A :class:`~pina_spark.storage.RunPaths` that redirects some relative names to other URIs
    (staging stays under the real root, so publishing is a same-filesystem rename)."""

    def __init__(self, base: storage.RunPaths, overrides: dict[str, str]):
        super().__init__(base.output, base.run_date)
        self.overrides = dict(overrides)

    def table(self, rel: str) -> str:
        return self.overrides.get(rel) or super().table(rel)


def _copy_side_files(spark, src: str, dst: str) -> None:
    """Copy the small non-Parquet files a stage keeps inside its table folder (e.g. the features
    metadata JSON) from ``src`` to the republished ``dst``."""
    for name, is_dir in storage.list_dir(spark, src):
        if is_dir or name.startswith(
            ("part-", "_SUCCESS", ".", "_committed", "_started", storage.VERSION_FILE)
        ):
            continue
        data = storage.read_bytes(storage.join(src, name))
        if data is not None:
            storage.write_bytes(storage.join(dst, name), data)


def _incremental_runner(spec: StageSpec) -> Callable[[StageContext], dict[str, Any]]:
    inc = INCREMENTAL[spec.name]

    def run(ctx: StageContext) -> dict[str, Any]:
        return run_incremental(ctx, spec, inc)

    return run


def run_incremental(ctx: StageContext, spec: StageSpec, inc: IncrementalSpec) -> dict[str, Any]:
    """Run ``spec`` on the selected rows only and publish them merged with the base run's rows.

    Falls back to a full run when there is no complete base (first incremental run)."""
    from pyspark.sql import functions as F

    spark, paths = ctx.spark, ctx.paths
    base = incremental_base(spark, ctx.cfg, inc.output)
    if base is None:
        log.info("stage %s: no complete base run for an incremental run, full run", spec.name)
        return stats_dict(spec.load()(ctx), incremental="full (no base run)")
    if inc.subset == storage.NEIGHBORS and not V.needs_neighbors(ctx.cfg.train.variants):
        # vectorizer_only alone (a selection chose it): no neighbours table to take the
        # changed rows from, and its features are a per-row map of the embeddings
        log.info("stage %s: no variant reads neighbours, full run", spec.name)
        return stats_dict(spec.load()(ctx), incremental="full (no variant reads neighbours)")
    if spec.name == "aggregate" and ctx.cfg.aggregate.label_features != "text":
        # a label neighbour adds the centroid of its train members' rows, which moves when any
        # member's text changes or a train member is added: the instances whose V1 it reaches
        # are not the changed ones, so the merge would keep stale rows (it is a cheap stage)
        why = f"aggregate.label_features: {ctx.cfg.aggregate.label_features}"
        log.info("stage %s: %s, full run", spec.name, why)
        return stats_dict(spec.load()(ctx), incremental=f"full ({why})")
    other = _base_used_other_models(ctx, base, spec.name) or _base_used_other_settings(
        ctx, base, spec.name
    )
    wanted = _variants_written(ctx.cfg, spec.name)
    if not other and wanted is not None:
        other = _base_lacks_variants(spark, base.table(inc.output), spec.name, wanted)
    if other:
        log.warning("stage %s: full recompute instead of incremental: %s", spec.name, other)
        return stats_dict(spec.load()(ctx), incremental=f"full ({other})")
    nodes = storage.read_table(spark, paths, storage.NODES)
    changed = select_changed(nodes, storage.read_table(spark, base, storage.NODES))
    sel = changed.where(F.col(storage.KIND).isin(list(inc.kinds))).select(storage.NODE_INDEX)
    if inc.also_select is not None:  # from the changed nodes of every kind
        sel = sel.unionByName(inc.also_select(spark, paths, changed.select(storage.NODE_INDEX)))
    sel = sel.distinct()
    scratch = paths.table(f"{storage.INCREMENTAL_SCRATCH}/{spec.name}-{uuid.uuid4().hex[:8]}")
    sel_uri = scratch + "/incremental_rows"
    sel.write.mode("overwrite").parquet(sel_uri)
    sel = spark.read.parquet(sel_uri)
    n_sel = sel.count()
    try:
        out_uri = scratch + "/output"
        if n_sel:
            full_in = storage.read_table(spark, paths, inc.subset)
            sub = full_in.join(
                sel.withColumnRenamed(storage.NODE_INDEX, inc.key), inc.key, "left_semi"
            )
            sub_paths = storage.RunPaths(scratch)
            storage.write_table(
                sub,
                sub_paths,
                "input",
                partition_by=[c for c in inc.partition_by if c in sub.columns]
                if inc.subset != storage.NODES
                else (),
            )
            overlay = OverlayPaths(
                paths, {inc.subset: sub_paths.table("input"), inc.output: out_uri}
            )
            sub_ctx = dc.replace(ctx, paths=overlay, incremental_rows=sel_uri)
            stats = stats_dict(spec.load()(sub_ctx))
            recomputed = spark.read.parquet(out_uri)
        else:
            stats = {}
            recomputed = None
        old = spark.read.parquet(base.table(inc.output))
        if wanted is not None:
            # only the variants this run writes, from either side: the base's rows of others
            # go, and so do recomputed rows of a variant the input holds beyond them
            # (aggregate over a neighbours table that serves more variants than trained)
            old = old.where(F.col(storage.VARIANT).isin(list(wanted)))
            if recomputed is not None:
                recomputed = recomputed.where(F.col(storage.VARIANT).isin(list(wanted)))
            # what the output holds, for resume (resume.g_lacking), also when no row changed
            stats.setdefault("variants", {v: {} for v in wanted})
        if inc.output_by_id:
            keys = nodes.join(sel, storage.NODE_INDEX, "left_semi").select(
                F.col(storage.NODE_ID).alias(inc.output_key)
            )
            current = nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
                F.col(storage.NODE_ID).alias(inc.output_key)
            )
        else:
            keys = sel.withColumnRenamed(storage.NODE_INDEX, inc.output_key)
            current = nodes.select(F.col(storage.NODE_INDEX).alias(inc.output_key))
        reused = old.join(keys, inc.output_key, "left_anti").join(
            current, inc.output_key, "left_semi"
        )
        merged = (
            reused if recomputed is None else reused.unionByName(recomputed.select(*reused.columns))
        )
        storage.write_table(merged, paths, inc.output, partition_by=list(inc.partition_by))
        _copy_side_files(
            spark,
            out_uri if recomputed is not None else base.table(inc.output),
            paths.table(inc.output),
        )
    finally:
        storage.delete_path(spark, scratch)
    n_reused = storage.read_table(spark, paths, inc.output).count()
    log.info(
        "stage %s: incremental against %s: %d rows recomputed, %d rows in total",
        spec.name,
        base.root,
        n_sel,
        n_reused,
    )
    return stats_dict(stats, incremental_base=base.root, selected=n_sel)
