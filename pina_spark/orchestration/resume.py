"""Which steps a command runs and which it skips, and why: one decision (:func:`decide`) that
``pina-spark run`` takes step by step as it goes (:mod:`pina_spark.orchestration.pipeline`),
and that ``pina-spark check`` and the start of a run take for the whole command ahead of time
(:func:`plan_steps`).

A step is skipped when its manifest entry is ``complete`` for the same fingerprint and its
outputs are complete on storage (``_SUCCESS``); ``run.force`` (``--force``) redoes every step
named. The fingerprint (:func:`stage_fingerprint`) hashes the input files, ``run.models`` (and
the models run's vectorizer and pretrain entries), the config sections of the stage, and the
manifest entries (fingerprint + version) of every step before it, so a step that runs makes
every later step of the command run too. The steps are the stages of the command in pipeline
order, after the ``nodes`` pre-step of a ``run.models`` run that does not run ``graph``.

Examples
--------
>>> decide("embed", "f1", {"status": "complete", "fingerprint": "f1"}, missing_outputs=[],
...        force=False).action
'skip'
>>> decide("embed", "f2", {"status": "complete", "fingerprint": "f1"}, missing_outputs=[],
...        force=False).reason
'fingerprint changed (inputs, run.models, its config or an earlier step)'
"""

import dataclasses as dc
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, PinaConfig
from pina_spark.config import variants as V
from pina_spark.stages import STAGES
from pina_spark.storage.manifest import Manifest

#: pseudo-stage name (manifest entry) of the ``nodes`` pre-step of a ``run.models`` run
NODES_STEP = "nodes"

RUN = "run"
SKIP = "skip"
#: complete in the manifest, but the fingerprint or the outputs cannot be read here
UNKNOWN = "unknown"


@dc.dataclass(frozen=True)
class StepPlan:
    """The decision for one step: ``action`` is :data:`RUN`, :data:`SKIP` or :data:`UNKNOWN`;
    ``fingerprint`` the step's fingerprint now (``None`` when it cannot be computed here) and
    ``recorded`` the one in the manifest."""

    step: str
    action: str
    reason: str
    fingerprint: str | None = None
    recorded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dc.asdict(self)


def hash_text(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def models_run_root(cfg: PinaConfig) -> str | None:
    """Root of the run whose models are reused (``run.models``), or ``None``."""
    return storage.norm(cfg.run.models) if cfg.run.models else None


def runs_nodes_step(cfg: PinaConfig, root: str, stages: Sequence[str]) -> bool:
    """Whether a command over ``stages`` starts with the ``nodes`` pre-step: ``run.models``
    names another run and the command does not run ``graph``."""
    mroot = models_run_root(cfg)
    return bool(mroot and not storage.same_place(mroot, root) and "graph" not in stages)


def models_token(cfg: PinaConfig) -> str:
    """``run.models`` and the manifest entries of the stages that wrote its model folders."""
    root = models_run_root(cfg)
    if not root:
        return ""
    m = Manifest(storage.RunPaths(root).manifest)
    parts = [root]
    for st in ("vectorizer", "pretrain"):  # the stages that wrote the reused model folders
        e = m.stage(st) or {}
        parts.append(f"{e.get('fingerprint')}:{e.get('version', e.get('finished'))}")
    return ":".join(parts)


def index_space_token(cfg: PinaConfig) -> str:
    """The node index space a run of ``run.models`` extends: the models run's root and the
    version of its ``nodes`` (what its graph stage published). A refit of the models run's g
    or vectorizer in place keeps it; a retraining (another root, or its graph rerun) does not.
    ``""`` without ``run.models``."""
    root = models_run_root(cfg)
    if not root:
        return ""
    e = Manifest(storage.RunPaths(root).manifest).stage("graph") or {}
    return f"{root}:{e.get('version', e.get('finished'))}"


def full_root_problem(
    cfg: PinaConfig, manifest: Manifest, root: str, stages: Sequence[str]
) -> str | None:
    """Why a run of another run's models (a daily augmentation) may not run on ``root``: it
    publishes its own ``nodes`` there (the models run's plus the day's products), and a full or
    retraining run's graph stage ran on that root (the same ``--run-date`` under the same
    output: the daily and monthly DAGs on the 1st), whose later stages read those ``nodes``.
    Checked before every other rule (``run`` and ``check`` alike): ``None`` where it may."""
    if not runs_nodes_step(cfg, root, stages):
        return None
    entry = manifest.stage("graph")
    if entry is None:
        return None
    return (
        f"{root} holds a full run (its graph stage is {entry.get('status')}): a run with "
        f"run.models ({cfg.run.models}) writes its own nodes there and would replace that "
        f"run's. Give it another --run-date or output (a daily and a retraining run must not "
        f"share a run root)"
    )


def nodes_token(instances_fingerprint: str, carry_token: str) -> str:
    """What the nodes pre-step reads besides ``run.models``: the fingerprint of
    ``input.instances`` (the day's products) and the earlier daily root it continues
    (:attr:`pina_spark.orchestration.daily.Carry.token`, ``""`` for none)."""
    return f"instances:{instances_fingerprint}|{carry_token}"


def base_token(cfg: PinaConfig, input_fingerprint: str) -> str:
    """The part of every step's fingerprint that the inputs and ``run.models`` make."""
    return hash_text(input_fingerprint + models_token(cfg))


def upstream_token(manifest: Manifest, name: str) -> str:
    """Fingerprint + version of every step before ``name`` (the nodes pre-step first)."""
    parts = []
    for up in (NODES_STEP,) + STAGE_NAMES[: STAGE_NAMES.index(name)]:
        e = manifest.stage(up)
        if e and e.get("status") == "complete":
            parts.append(f"{up}:{e.get('fingerprint')}:{e.get('version', e.get('finished'))}")
        else:
            parts.append(f"{up}:-")
    return "|".join(parts)


def stage_fingerprint(
    cfg: PinaConfig, manifest: Manifest, base: str, name: str, nodes_token: str = ""
) -> str:
    """The fingerprint of step ``name`` now (``base``: :func:`base_token`). The nodes pre-step's
    is made of what it reads, not ``base``: ``run.models`` (:func:`models_token`) and
    ``nodes_token`` (:func:`nodes_token`: the day's instances and the earlier daily root it
    continues), so a refreshed input it never reads (events, the monthly labels) does not
    rerun it between the steps of a day."""
    if name == NODES_STEP:
        return hash_text(models_token(cfg) + "nodes" + nodes_token)
    spec = STAGES[name]
    return hash_text(
        base + cfg.fingerprint(*spec.fingerprint_sections(cfg)) + upstream_token(manifest, name)
    )


def settings_token(cfg: PinaConfig, name: str) -> str:
    """What step ``name``'s outputs are made with besides its inputs: ``run.models`` (and the
    models run's vectorizer and pretrain entries, :func:`models_token`) and the stage's config
    sections (:meth:`StageSpec.fingerprint_sections`). Recorded in the step's manifest entry
    (``settings``) and compared by :func:`stale_upstream`.

    >>> from pina_spark.config import config_from_dict
    >>> a = config_from_dict({"output": "/r"})
    >>> b = config_from_dict({"output": "/r", "neighbors": {"k": 10}})
    >>> settings_token(a, "embed") == settings_token(b, "embed")
    True
    >>> settings_token(a, "neighbors") == settings_token(b, "neighbors")
    False
    """
    own = "" if name == NODES_STEP else cfg.fingerprint(*STAGES[name].fingerprint_sections(cfg))
    return hash_text(models_token(cfg) + own)


def considered_steps(cfg: PinaConfig, root: str, stages: Sequence[str]) -> tuple[str, ...]:
    """Every step a run of ``cfg`` over ``stages`` on ``root`` considers, in order: the
    ``nodes`` pre-step in a run of another run's models, then :func:`stage_names`."""
    return ((NODES_STEP,) if runs_nodes_step(cfg, root, stages) else ()) + tuple(
        stage_names(cfg, STAGE_NAMES)
    )


def stale_upstream(
    cfg: PinaConfig, manifest: Manifest, name: str, stages: Sequence[str]
) -> list[tuple[str, str, str]]:
    """The steps before ``name`` that this root's manifest records ``complete`` with other
    settings than they would have now (:func:`settings_token`): ``(step, recorded, now)``
    each. Their outputs were made with other models (``run.models``: ``latest`` may name
    another run than when they ran) or settings, so ``name`` must not read them: a command
    that names ``name`` but not them would mix the two (the steps of a scheduled run are
    separate commands). Only the steps a run of ``cfg`` over ``stages`` considers count
    (:func:`stage_names`: no pretrain or neighbours for ``vectorizer_only``; the ``nodes``
    pre-step in a run of another run's models); an entry without ``settings`` (a root made
    before they were recorded) is not judged. Input files are not part of it: a step whose
    inputs changed reruns when it is named (:func:`decide`).

    Examples
    --------
    >>> import tempfile, os
    >>> from pina_spark.config import config_from_dict
    >>> m = Manifest(os.path.join(tempfile.mkdtemp(), "_manifest.json"))
    >>> cfg = config_from_dict({"output": "/tmp/r"})
    >>> m.record_stage("embed", {}, "f", 1.0, settings=settings_token(cfg, "embed"))
    >>> stale_upstream(cfg, m, "neighbors", ["neighbors"])
    []
    >>> other = config_from_dict({"output": "/tmp/r", "inference": {"batch_size": 7}})
    >>> [s for s, _, _ in stale_upstream(other, m, "neighbors", ["neighbors"])]
    ['embed']
    """
    root = storage.norm(manifest.uri.rsplit("/", 1)[0])
    order = considered_steps(cfg, root, stages)
    if name not in order:
        return []
    out = []
    for up in order[: order.index(name)]:
        e = manifest.stage(up)
        if not e or e.get("status") != "complete" or e.get("settings") is None:
            continue
        now = settings_token(cfg, up)
        if e["settings"] != now:
            out.append((up, str(e["settings"]), now))
    return out


#: stages that, in a run with ``run.models``, reuse that run's model folder and fit nothing
REUSES_MODELS = ("vectorizer", "pretrain")


def stale_message(
    cfg: PinaConfig,
    root: str,
    name: str,
    stale: Sequence[tuple[str, str, str]],
    stages: Sequence[str] = (),
) -> str:
    """The refusal of step ``name`` over the :func:`stale_upstream` steps ``stale``: which, both
    settings tokens, and the stages to rerun: from the first stale one to ``name``, or to the
    last of the command's ``stages`` where that comes later (``--stages train,evaluate``
    refused over stale neighbours suggests ``neighbors,aggregate,train,evaluate``, not a
    command that leaves evaluate's report over the replaced predictions)."""
    first = next((s for s, _, _ in stale if s in STAGE_NAMES), None)
    last = max(
        [STAGE_NAMES.index(name)] + [STAGE_NAMES.index(s) for s in stages if s in STAGE_NAMES]
    )
    upto = STAGE_NAMES[STAGE_NAMES.index(first) : last + 1] if first else ()
    if runs_nodes_step(cfg, root, upto):  # the models run's stages stay there
        upto = tuple(s for s in upto if s not in ("graph",) + REUSES_MODELS)
    upto = tuple(stage_names(cfg, upto))
    detail = ", ".join(f"{s} (recorded {r}, now {n})" for s, r, n in stale)
    models = f" (run.models: {cfg.run.models})" if cfg.run.models else ""
    return (
        f"stage {name} refuses the outputs of {detail} in {root}: they were made "
        f"with other models{models} or settings than this command's, and reading them would "
        f"mix the two. Rerun from the first of them"
        + (f": --stages {','.join(upto)}" if upto else "")
    )


def plan_problem(
    cfg: PinaConfig,
    stages: Sequence[str],
    manifest: Manifest,
    plan: Sequence["StepPlan"],
    output_complete: Callable[[str], bool | None],
) -> str | None:
    """Why a command over ``stages`` cannot run on this root though :func:`plan_steps` runs its
    steps, or ``None``: a step it runs would read outputs of an earlier step that it does not
    name and that were made with other models or settings (:func:`stale_upstream`, what each
    stage refuses when it starts), or it runs stages on a root without ``nodes`` (every stage
    after graph reads it) and publishes none itself (no graph stage, no ``nodes`` pre-step).
    Decided before any step runs, by ``check`` and by the run itself, so that the run stops
    before it records anything. Other missing tables are the stages' own errors: which a stage
    reads depends on the stage and its settings.

    >>> import tempfile, os
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": tempfile.mkdtemp()})
    >>> m = Manifest(os.path.join(cfg.output, "_manifest.json"))
    >>> plan = plan_steps(cfg, ("train",), m, "fp", lambda uri: False)
    >>> print(plan_problem(cfg, ("train",), m, plan, lambda uri: False).split(" (")[0])
    stage train reads the run root's nodes, which this root lacks or holds incomplete
    """
    paths = storage.RunPaths(cfg.output, cfg.run.run_date)
    named = {s.step for s in plan}  # a named step reruns if its settings changed
    runs = [s.step for s in plan if s.action == RUN]
    for name in [s.step for s in plan if s.action != SKIP]:  # unknown: it may run
        stale = [t for t in stale_upstream(cfg, manifest, name, stages) if t[0] not in named]
        if stale:
            return stale_message(cfg, paths.root, name, stale, stages)
    makes_nodes = "graph" in named or NODES_STEP in named
    first = next((s for s in runs if s in STAGES), None)
    if first and not makes_nodes and output_complete(paths.table(storage.NODES)) is False:
        upto = stage_names(cfg, STAGE_NAMES[: STAGE_NAMES.index(first) + 1])
        return (
            f"stage {first} reads the run root's nodes, which this root lacks or holds "
            f"incomplete ({paths.table(storage.NODES)}): run the stages before it first "
            f"(--stages {','.join(upto)})"
        )
    return _gap_problem(cfg, paths.root, stages, plan)


def _gap_problem(
    cfg: PinaConfig, root: str, stages: Sequence[str], plan: Sequence["StepPlan"]
) -> str | None:
    """Why a command cannot run because it republishes the node index space (the ``nodes``
    pre-step, which no command names and which reruns when its inputs or the earlier daily
    root it continues changed, or the graph stage) before a step of this root that it does
    not name and that a later step it names reads: that step's outputs would be keyed by the
    node indices it replaces (a later day's ``--stages aggregate`` after an earlier day was
    backfilled aggregated embeddings and neighbours of other products) or are missing
    (``--stages neighbors`` on a new daily root). A named step rerun before an unnamed one
    whose node indices it keeps (``--stages embed,neighbors``: g stays as pretrain left it)
    is the command's own choice, as two separate commands would be. ``None`` when there is
    no such gap."""
    nodes_step = runs_nodes_step(cfg, root, stages)
    order = [
        s
        for s in considered_steps(cfg, root, stages)
        # steps whose outputs are not this root's: the models run's graph and model folders
        if not (s == "graph" and nodes_step) and not (cfg.run.models and s in REUSES_MODELS)
    ]
    named = {s.step for s in plan}
    ran = [order.index(s.step) for s in plan if s.action == RUN and s.step in order]
    last = max((order.index(s) for s in named if s in order), default=-1)
    if not ran:
        return None
    first = min(ran)
    if order[first] not in (NODES_STEP, "graph"):
        return None
    gap = [s for s in order[first + 1 : last] if s not in named]
    if not gap:
        return None
    why = next(s.reason for s in plan if s.step == order[first])
    upto = [s for s in order[first : last + 1] if s in STAGES]
    return (
        f"step {order[first]} runs in this command ({why}), before {', '.join(gap)}, which the "
        f"command does not name: the later steps would read {', '.join(gap)}'s outputs made "
        f"from what {order[first]} replaces, or find them missing, in {root}. Name them too: "
        f"--stages {','.join(upto)}"
    )


def step_outputs(name: str, cfg: PinaConfig | None = None) -> Sequence[str]:
    """The folders step ``name`` publishes in ``cfg``'s run root: none for a stage that reuses
    the model folder of ``run.models`` (:data:`REUSES_MODELS`: its folder lives in that run, so
    a rerun must not find it missing here and redo every stage after it).

    >>> from pina_spark.config import config_from_dict
    >>> step_outputs("vectorizer")
    ('vectorizer',)
    >>> step_outputs("vectorizer", config_from_dict({"output": "/r", "run": {"models": "/m"}}))
    ()
    """
    if name == NODES_STEP:
        return (storage.NODES,)
    if cfg is not None and cfg.run.models and name in REUSES_MODELS:
        return ()
    return STAGES[name].outputs


def decide(
    name: str,
    fingerprint: str | None,
    entry: dict[str, Any] | None,
    missing_outputs: Sequence[str] | None,
    force: bool,
    earlier_runs: Sequence[str] = (),
    lacking: Sequence[str] = (),
) -> StepPlan:
    """Run or skip step ``name``, and why.

    Parameters
    ----------
    fingerprint : the step's fingerprint now (:func:`stage_fingerprint`); ``None`` when it
        cannot be computed (inputs on an object store, seen without Spark).
    entry : the step's manifest entry (``None``: never ran on this root).
    missing_outputs : outputs without ``_SUCCESS`` (``None``: not readable here).
    earlier_runs : steps of the same command before this one that run.
    lacking : the g variants the run needs that the step's recorded output lacks
        (:func:`g_lacking`): it reruns, although its fingerprint is unchanged.
    """
    recorded = (entry or {}).get("fingerprint")
    plan = lambda action, why: StepPlan(name, action, why, fingerprint, recorded)  # noqa: E731
    if force:
        return plan(RUN, "--force (run.force)")
    if earlier_runs:
        return plan(RUN, f"{earlier_runs[0]} runs before it")
    if not entry:
        return plan(RUN, "never ran on this root")
    status = entry.get("status")
    if status != "complete":
        error = f": {str(entry.get('error'))[:160]}" if entry.get("error") else ""
        return plan(RUN, f"last attempt {status}{error}")
    if fingerprint is not None and recorded != fingerprint:
        if name == NODES_STEP:
            return plan(
                RUN,
                "fingerprint changed (inputs, run.models, or the earlier daily root it continues)",
            )
        return plan(RUN, "fingerprint changed (inputs, run.models, its config or an earlier step)")
    if lacking:
        return plan(RUN, f"its output has no {', '.join(lacking)} (a run trained fewer variants)")
    if missing_outputs:
        return plan(RUN, f"outputs incomplete: {', '.join(missing_outputs)}")
    if fingerprint is None or missing_outputs is None:
        what = "the inputs' fingerprint" if fingerprint is None else "the outputs"
        return plan(UNKNOWN, f"complete in the manifest; {what} cannot be read here: run decides")
    return plan(SKIP, f"complete for fingerprint {fingerprint}")


#: the stages only the variants with neighbours need (:func:`variants.needs_neighbors`)
NEIGHBOR_STAGES = ("pretrain", "neighbors")


def g_lacking(cfg: PinaConfig, name: str, entry: dict[str, Any] | None) -> list[str]:
    """The g variants ``cfg``'s run trains (:func:`variants.g_variants`) that step ``name``'s
    recorded output lacks: the g models a ``pretrain`` fitted, the variants a ``neighbors`` run
    predicted (their manifest ``stats``). Output that holds more variants than needed serves
    as it is (a run that trains fewer variants than the root's run refits nothing);
    ``[]`` for other steps and where the entry records no variants (reused models).

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> every = config_from_dict({"output": "/r"})
    >>> g_lacking(every, "pretrain", {"stats": {"variants": "pina"}})
    ['pina_naive']
    >>> g_lacking(every, "neighbors", {"stats": {"variants": {"pina": {}, "pina_naive": {}}}})
    []
    >>> one = config_from_dict({"output": "/r", "train": {"variants": ["pina"]}})
    >>> g_lacking(one, "pretrain", {"stats": {"variants": "pina,pina_naive"}})
    []
    """
    if name not in NEIGHBOR_STAGES or not entry:
        return []
    got = (entry.get("stats") or {}).get("variants")
    if not got:
        return []
    have = set(got.split(",")) if isinstance(got, str) else set(got)
    return [v for v in V.g_variants(cfg.train.variants) if v not in have]


def stages_left_out(variants: Sequence[str]) -> tuple[str, ...]:
    """The stages a run of ``train.variants`` ``variants`` does not consider: ``pretrain`` and
    ``neighbors`` when no variant reads neighbours.

    >>> stages_left_out(["baseline", "vectorizer_only"]), stages_left_out(["pina"])
    (('pretrain', 'neighbors'), ())
    """
    return () if V.needs_neighbors(variants) else NEIGHBOR_STAGES


def stage_names(cfg: PinaConfig, stages: Sequence[str]) -> list[str]:
    """The stages of ``stages`` a run of ``cfg`` considers, in pipeline order: without
    ``pretrain`` and ``neighbors`` when ``train.variants`` holds no variant with neighbours (no
    g fit, no neighbours table; aggregate then writes ``vectorizer_only`` alone).

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/r", "train": {"variants": ["vectorizer_only"]}})
    >>> stage_names(cfg, ["graph", "pretrain", "neighbors", "aggregate"])
    ['graph', 'aggregate']
    """
    skip = stages_left_out(cfg.train.variants)
    return [s for s in STAGE_NAMES if s in stages and s not in skip]


def plan_steps(
    cfg: PinaConfig,
    stages: Sequence[str],
    manifest: Manifest,
    input_fingerprint: str | None,
    output_complete: Callable[[str], bool | None],
    nodes_token: str | None = "",
) -> list[StepPlan]:
    """The decision of every step of a command over ``stages`` on ``cfg``'s run root, taken
    now, in order.

    Parameters
    ----------
    manifest : the run root's manifest as it is now.
    input_fingerprint : :func:`pina_spark.storage.input_fingerprint` of ``cfg.input`` (``None``
        when it cannot be computed here).
    output_complete : ``uri -> bool`` whether a published folder is complete (``None``: not
        readable here).
    nodes_token : what the nodes pre-step reads (:func:`nodes_token`; ``None`` when it cannot
        be computed here, as the inputs' fingerprint).
    """
    paths = storage.RunPaths(cfg.output, cfg.run.run_date)
    names = stage_names(cfg, stages)
    if runs_nodes_step(cfg, paths.root, stages):
        names.insert(0, NODES_STEP)
    base = None if input_fingerprint is None else base_token(cfg, input_fingerprint)
    out: list[StepPlan] = []
    runs: list[str] = []
    for name in names:
        if name == NODES_STEP:
            fp = (
                None
                if nodes_token is None
                else stage_fingerprint(cfg, manifest, "", name, nodes_token)
            )
        else:
            fp = None if base is None else stage_fingerprint(cfg, manifest, base, name)
        done = {o: output_complete(paths.table(o)) for o in step_outputs(name, cfg)}
        missing: list[str] | None = [o for o, ok in done.items() if ok is False]
        if not missing and any(ok is None for ok in done.values()):
            missing = None
        entry = manifest.stage(name)
        force = forces(cfg, name, stages)
        d = decide(name, fp, entry, missing, force, runs, g_lacking(cfg, name, entry))
        if d.action != SKIP:
            runs.append(name)
        out.append(d)
    return out


def forces(cfg: PinaConfig, name: str, stages: Sequence[str]) -> bool:
    """Whether ``--force`` (``run.force``) redoes step ``name`` of a command over ``stages``:
    every stage named; the ``nodes`` pre-step only with embed, which reads it (a forced
    neighbours step alone would otherwise republish nodes under the embeddings it reads).

    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/r", "run": {"models": "/m", "force": True}})
    >>> forces(cfg, NODES_STEP, ("neighbors",)), forces(cfg, NODES_STEP, ("embed",))
    (False, True)
    """
    if name == NODES_STEP:
        return cfg.run.force and "embed" in stages
    return cfg.run.force


def inputs_read(cfg: PinaConfig, stages: Sequence[str]) -> dict[str, str]:
    """``{table: uri}`` of the inputs a command over ``stages`` reads: every configured table
    when it runs ``graph``, ``instances`` for the ``nodes`` pre-step, ``filter_pairs`` for
    ``evaluate``.

    Raises
    ------
    pina_spark.storage.InputError
        A table the config needs (``graph``) is not configured.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
    ...     "labels": "l.csv", "instance_labels": "il.csv", "filter_pairs": "p.csv"}})
    >>> sorted(inputs_read(cfg, ("graph",))), sorted(inputs_read(cfg, ("train", "evaluate")))
    (['filter_pairs', 'instance_labels', 'instances', 'labels'], ['filter_pairs'])
    """
    from pina_spark.validate import require_configured

    inp = cfg.input
    out: dict[str, str] = {}
    if "graph" in stages:
        require_configured(cfg)
        out.update({f.name: getattr(inp, f.name) for f in dc.fields(inp) if getattr(inp, f.name)})
    elif runs_nodes_step(cfg, storage.RunPaths(cfg.output, cfg.run.run_date).root, stages):
        if inp.instances:
            out["instances"] = inp.instances
    if "evaluate" in stages and inp.filter_pairs:
        out["filter_pairs"] = inp.filter_pairs
    return out
