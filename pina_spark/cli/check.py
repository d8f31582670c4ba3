"""``pina-spark check --config FILE [--set ...] [--stages ...]``: the pre-flight of a run. It
starts no Spark and writes nothing under the run root: it builds the config (every error a run
would give), looks at every configured input with pyarrow (exists, required columns, their
types, row counts where cheap: :mod:`pina_spark.storage.preflight`), reads the run root's
manifest and lease, and says which steps ``pina-spark run`` with the same arguments would run or
skip, and why (:func:`pina_spark.orchestration.resume.plan_steps`, the decision the run takes).
Like the run, it first follows the selection of ``run.models``' root
(:func:`pina_spark.selection.follow.follow_selection`, ``--set`` keys winning): the report names
the variant and settings followed, and a missing (``select.follow: required``), stale or
unreadable selection is a problem (exit 2), as it fails the run.

The inputs' fingerprint is computed as the run computes it (the same hash of every file's path,
size and modification time, listed with pyarrow instead of Hadoop; a test checks that the two
agree) for local inputs. For inputs on an object store (``s3://``) it is not computed: a step
complete in the manifest is then reported ``unknown`` ("run decides"), from the manifest's
recorded state only.

Exit codes: 0 the run can start; 2 it cannot (a config error, an input the command reads that
is missing or would be refused, the root's lease held by a live run).

:func:`require_inputs` is the same input check, raising: ``pina-spark run`` and ``jobs/*.py``
call it before they take the run root's lease and start Spark.

Example::

    report = check_run(cfg, STAGE_NAMES)
    print(report_text(report)); report.can_start
"""

import dataclasses as dc
from collections.abc import Mapping, Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError, PinaConfig
from pina_spark.orchestration.resume import (
    StepPlan,
    full_root_problem,
    inputs_read,
    plan_problem,
    plan_steps,
)
from pina_spark.storage import preflight
from pina_spark.storage.preflight import (
    InputReport,
    input_fingerprint_local,
    inspect_input,
    is_complete_arrow,
)

#: ``schema`` value of ``pina-spark check --json`` (docs/cli.md)
SCHEMA = "pina-spark-check/1"


@dc.dataclass(frozen=True)
class CheckReport:
    """What :func:`check_run` found. ``problems`` are the reasons the run cannot start (empty:
    it can); ``inputs_read`` the tables the command's steps read (an input outside it is
    reported but does not block)."""

    root: str
    stages: list[str]
    inputs: list[InputReport]
    inputs_read: list[str]
    plan: list[StepPlan]
    input_fingerprint: str | None
    manifest: bool
    lease: str | None
    problems: list[str]
    plan_note: str | None = None
    #: the selection the run follows: ``{"root", "variant", "settings"}`` (``None``: none)
    selection: dict[str, Any] | None = None

    @property
    def can_start(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (schema :data:`SCHEMA`, described in docs/cli.md)."""
        return {
            "schema": SCHEMA,
            "root": self.root,
            "stages": list(self.stages),
            "can_start": self.can_start,
            "problems": list(self.problems),
            "lease": self.lease,
            "manifest": self.manifest,
            "input_fingerprint": self.input_fingerprint,
            "inputs": [dict(r.to_dict(), read=r.table in self.inputs_read) for r in self.inputs],
            "plan": [s.to_dict() for s in self.plan],
            "plan_note": self.plan_note,
            "selection": self.selection,
        }


def _configured(cfg: PinaConfig) -> dict[str, str]:
    return {
        f.name: getattr(cfg.input, f.name)
        for f in dc.fields(cfg.input)
        if getattr(cfg.input, f.name)
    }


def check_inputs(cfg: PinaConfig, stages: Sequence[str]):
    """``(reports of every configured input, tables the command reads, problems)``."""
    problems: list[str] = []
    try:
        needed = inputs_read(cfg, stages)
    except storage.InputError as e:
        needed, problems = {}, [str(e)]
    reports = [inspect_input(uri, table) for table, uri in _configured(cfg).items()]
    problems += [p for r in reports if r.table in needed for p in [_blocking(r, cfg, stages)] if p]
    return reports, sorted(needed), problems


def _blocking(report, cfg: PinaConfig, stages: Sequence[str]) -> str | None:
    """Why a run of ``stages`` stops on the input of ``report``: its problem, or, where the
    graph stage reads it (a run of another run's models takes empty instances as a day without
    new products, and new ones without a split), a table with no rows, or instances without a
    ``split`` column where the stages train or evaluate score test instances (the graph stage
    would run first, and the run would stop after it)."""
    from pina_spark.orchestration.resume import stage_names

    if report.blocks_run:
        return report.problem
    names = stage_names(cfg, stages)
    if "graph" not in names:
        return None
    if (
        report.table == "instances"
        and report.status == preflight.OK  # columns read (not unchecked, not missing)
        and storage.SPLIT not in report.columns
        and {"train", "evaluate"} & set(names)
    ):
        return storage.no_test_rows_message(report.uri, "it has no split column")
    return report.empty_problem()


def hadoop_site_conf(conf_dir: str | None = None) -> dict[str, str]:
    """The properties of ``core-site.xml`` in ``conf_dir`` (default ``$HADOOP_CONF_DIR``, which
    EMR sets to ``/etc/hadoop/conf``, where its ``core-site`` classification lands); ``{}``
    where there is none or it cannot be parsed. Not read: a ``core-site.xml`` that reaches
    Spark's classpath only through ``$SPARK_CONF_DIR``, and ``spark.hadoop.*`` keys in
    ``spark-defaults.conf``; the check cannot see those.

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "core-site.xml"), "w").write(
    ...     "<configuration><property><name>fs.s3a.endpoint</name>"
    ...     "<value>http://minio:9000</value></property></configuration>")
    >>> hadoop_site_conf(d)
    {'fs.s3a.endpoint': 'http://minio:9000'}
    >>> hadoop_site_conf(os.path.join(d, "none"))
    {}
    """
    import os
    import xml.etree.ElementTree as ET

    conf_dir = conf_dir if conf_dir is not None else os.environ.get("HADOOP_CONF_DIR")
    if not conf_dir:
        return {}
    try:
        tree = ET.parse(os.path.join(conf_dir, "core-site.xml"))
    except (OSError, ET.ParseError):
        return {}
    out = {}
    for prop in tree.getroot().iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            out[name.strip()] = value.strip()
    return out


def s3a_endpoint(
    bucket: str, spark_conf: Mapping[str, Any], site: Mapping[str, str]
) -> tuple[str, str, str] | None:
    """The endpoint S3A uses for ``bucket``, as ``(value, where, key)``, or ``None`` (AWS's
    default): Hadoop's per-bucket key before the global one, and for each the config's
    ``spark.hadoop.*`` key before ``core-site.xml`` (``site``); an empty value is unset.

    Examples
    --------
    >>> site = {"fs.s3a.endpoint": "http://minio:9000", "fs.s3a.bucket.o.endpoint": "http://x"}
    >>> s3a_endpoint("b", {}, site)
    ('http://minio:9000', 'core-site.xml', 'fs.s3a.endpoint')
    >>> s3a_endpoint("b", {"spark.hadoop.fs.s3a.bucket.b.endpoint": "s3.amazonaws.com"}, site)
    ('s3.amazonaws.com', 'spark.conf', 'spark.hadoop.fs.s3a.bucket.b.endpoint')
    >>> s3a_endpoint("b", {}, {"fs.s3a.endpoint": ""}) is None
    True
    """
    for key in (f"fs.s3a.bucket.{bucket}.endpoint", "fs.s3a.endpoint"):
        for where, conf, name in (
            ("spark.conf", spark_conf, f"spark.hadoop.{key}"),
            ("core-site.xml", site, key),
        ):
            value = conf.get(name)
            if value is not None and str(value).strip():
                return str(value).strip(), where, name
    return None


def s3a_endpoint_problem(cfg: PinaConfig, site: Mapping[str, str] | None = None) -> str | None:
    """Why an ``s3a://`` (or ``s3n://``) run root cannot work with this config, or ``None``.
    Spark's S3A reaches the root's bucket at :func:`s3a_endpoint` (MinIO, Ceph ...; from the
    config's ``spark.hadoop.*`` keys or the cluster's ``core-site.xml``, ``site``: default
    :func:`hadoop_site_conf`); the run's manifest, lease and commits go through pyarrow
    (:func:`pina_spark.storage.uri.arrow_uri`), which reads no Hadoop setting and would reach
    AWS's own endpoint: two stores for one root. An AWS endpoint (``*.amazonaws.com``) is no
    problem.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> minio = {"conf": {"spark.hadoop.fs.s3a.endpoint": "http://minio:9000"}}
    >>> s3a_endpoint_problem(config_from_dict({"output": "s3a://b/run", "spark": minio}), {})[:40]
    's3a://b/run: spark.conf sets spark.hadoo'
    >>> s3a_endpoint_problem(config_from_dict({"output": "s3://b/run", "spark": minio}), {}) is None
    True
    >>> site = {"fs.s3a.endpoint": "http://ceph:7480"}
    >>> s3a_endpoint_problem(config_from_dict({"output": "s3a://b/run"}), site)[:36]
    's3a://b/run: core-site.xml sets fs.s'
    >>> other = {"fs.s3a.bucket.other.endpoint": "http://ceph:7480"}
    >>> s3a_endpoint_problem(config_from_dict({"output": "s3a://b/run"}), other) is None
    True
    """
    named = (cfg.output, cfg.run.models, cfg.run.promoted_from)
    roots = [u for u in named if u and storage.arrow_uri(u) != u]
    if not roots:
        return None
    site = hadoop_site_conf() if site is None else site
    for root in roots:
        bucket = root.split("://", 1)[1].split("/", 1)[0]
        found = s3a_endpoint(bucket, cfg.spark.conf, site)
        if found is None or found[0].rstrip("/").endswith("amazonaws.com"):
            continue
        value, where, key = found
        return (
            f"{root}: {where} sets {key}={value} for Spark's S3A, but the run's manifest, "
            "lease and commits go through pyarrow, which reads no Hadoop setting and would "
            "use AWS's own endpoint: on that store use a local or hdfs:// output (an s3a:// "
            "root works on AWS)"
        )
    return None


def models_g_problem(cfg: PinaConfig, stages: Sequence[str]) -> str | None:
    """With ``run.models`` set and the neighbours stage to run: the problem of a models folder
    whose card lists no g for a variant ``train.variants`` trains (a run that trained only some
    g variants); ``None`` when there is none, or where the card cannot be read here (the
    neighbours stage then checks the folders itself). (``run.models`` naming the run's own root
    is refused before this: :func:`pina_spark.orchestration.promotion.resolve_models`.)

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> models_g_problem(config_from_dict({"output": "/tmp/r"}), ("neighbors",)) is None
    True
    """
    from pina_spark.config import variants as V
    from pina_spark.models import artifacts
    from pina_spark.models.card import lacking_g
    from pina_spark.orchestration.resume import stage_names

    considered = stage_names(cfg, stages)
    if not cfg.run.models or "neighbors" not in considered:
        return None
    models = storage.RunPaths(cfg.run.models).table(storage.MODELS)
    if not storage.pyarrow_reaches(models):
        return None
    lacking = lacking_g(models, V.g_variants(cfg.train.variants))
    return artifacts.missing_g_message(models, lacking) if lacking else None


def models_folder_problem(cfg: PinaConfig, stages: Sequence[str]) -> str | None:
    """With ``run.models`` naming another run and a stage that loads its models to run (embed,
    neighbours): the problem of its ``vectorizer`` folder, which embed loads first. Missing or
    incomplete (``--models`` names a daily root, which holds no models), or refused by the
    model-trust policy (:func:`pina_spark.models.trust.anchor`: no promotion record or key
    vouches for it; and g's ``models`` folder where the neighbours stage runs); the run would
    stop there after taking the lease and publishing ``nodes``
    (or, in a run that follows a selection into a new output, the graph and vectorizer
    stages' tables). ``None`` when there is none, or where pyarrow does not reach the folder
    (the stage checks it then).

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/tmp/r", "run": {"models": "/no/such/run"}})
    >>> print(models_folder_problem(cfg, ("embed",)))  # doctest: +NORMALIZE_WHITESPACE
    run.models /no/such/run: /no/such/run/vectorizer is missing or incomplete; --models must
    name a run that trained models (a full or retraining run, not a daily one)
    """
    from pina_spark.models import artifacts, trust
    from pina_spark.orchestration.resume import models_run_root, stage_names
    from pina_spark.storage.preflight import is_complete_arrow

    own = storage.RunPaths(cfg.output, cfg.run.run_date).root
    mroot = models_run_root(cfg)
    if not mroot or storage.same_place(mroot, own):
        return None
    if not {"embed", "neighbors"} & set(stage_names(cfg, stages)):
        return None
    models = storage.RunPaths(mroot).table(storage.MODELS)
    vec = artifacts.vectorizer_dir(models)
    complete = is_complete_arrow(vec)
    if complete is None:
        return None
    if not complete:
        return (
            f"run.models {cfg.run.models}: {vec} is missing or incomplete; --models must name "
            f"a run that trained models (a full or retraining run, not a daily one)"
        )
    try:
        trust.anchor(cfg, vec, storage.VECTORIZER)
        if "neighbors" in stage_names(cfg, stages) and is_complete_arrow(models):
            trust.anchor(cfg, models, storage.MODELS)  # g, which the neighbours stage loads
    except trust.ModelTrustError as e:
        return str(e)
    return None


def require_inputs(cfg: PinaConfig, stages: Sequence[str]) -> None:
    """Raise :class:`pina_spark.storage.InputError` naming every problem of an input the command
    reads (what :func:`check_run` reports), before any lease or Spark.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "/no/i.csv",
    ...     "labels": "/no/l.csv", "instance_labels": "/no/il.csv"}})
    >>> require_inputs(cfg, ("graph",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.storage.schemas.InputError: input.instances: /no/i.csv does not exist; ...
    >>> require_inputs(cfg, ("train",))  # the train stage reads no input
    """
    problem = s3a_endpoint_problem(cfg)
    if problem:
        raise ConfigError(problem)
    needed = inputs_read(cfg, stages)
    bad = [_blocking(inspect_input(u, t), cfg, stages) for t, u in needed.items()]
    bad.append(models_g_problem(cfg, stages))
    bad.append(models_folder_problem(cfg, stages))
    if any(bad):
        raise storage.InputError("; ".join(p for p in bad if p))


def check_run(cfg: PinaConfig, stages: Sequence[str], sets: Sequence[str] = ()) -> CheckReport:
    """The pre-flight of ``pina-spark run`` over ``stages`` with ``cfg`` (see the module
    docstring; ``sets``: the ``--set`` strings, which win over a selection). Reads only: the
    inputs' metadata, the root's manifest and lease, the selection of ``run.models``' root."""
    from pina_spark.orchestration.promotion import resolve_models
    from pina_spark.selection.artifact import SelectionError
    from pina_spark.selection.follow import follow_selection, followed_settings, set_keys
    from pina_spark.storage.manifest import Manifest

    cfg = resolve_models(cfg, stages)
    selection, early, explicit = None, [], set_keys(sets)
    try:
        cfg, rec = follow_selection(cfg, explicit)
    except SelectionError as e:
        early.append(str(e))
    else:
        if rec is not None:
            selection = {
                "root": storage.norm(cfg.run.models or ""),
                "variant": rec["variant"],
                "settings": {k: v for k, v in followed_settings(rec).items() if k not in explicit},
            }
    paths = storage.RunPaths(cfg.output, cfg.run.run_date)
    reports, needed, problems = check_inputs(cfg, stages)
    problems = early + [p for p in [s3a_endpoint_problem(cfg)] if p] + problems
    problems += [
        p for p in [models_g_problem(cfg, stages), models_folder_problem(cfg, stages)] if p
    ]
    lease = None
    plan: list[StepPlan] = []
    has_manifest = False
    note = None
    fp = input_fingerprint_local(dc.astuple(cfg.input))
    if not storage.pyarrow_reaches(paths.root):
        note = f"pyarrow does not reach {paths.root} here: the run decides"
    else:
        try:
            owner = storage.live_lease_owner(paths.root, cfg.run.lease_stale_s)
            manifest = Manifest(paths.manifest)
        except OSError as e:  # no credentials for the bucket here, ...
            owner, manifest = None, None
            note = f"{paths.root} not readable here ({type(e).__name__}: {e}): the run decides"
        if owner is not None:
            lease = storage.describe_lease(owner)
            problems.append(f"{paths.root} is leased by {lease}: wait for it or use another output")
        if manifest is not None:
            has_manifest = bool(manifest.data.get("stages") or manifest.data.get("history"))
            plan = plan_steps(cfg, stages, manifest, fp, is_complete_arrow, _nodes_token(cfg))
            # the run's own order: a daily run on a full run's root is refused before the plan
            problem = full_root_problem(cfg, manifest, paths.root, stages) or plan_problem(
                cfg, stages, manifest, plan, is_complete_arrow
            )
            problems += [problem] if problem else []
    return CheckReport(
        root=paths.root,
        stages=list(stages),
        inputs=reports,
        inputs_read=needed,
        plan=plan,
        input_fingerprint=fp,
        manifest=has_manifest,
        lease=lease,
        problems=problems,
        plan_note=note,
        selection=selection,
    )


def report_text(r: CheckReport) -> str:
    """The report as a terminal reads it (Markdown tables)."""
    from pina_spark.cli.status import markdown_table

    out = [
        f"run root {r.root}: "
        + ("manifest found" if r.manifest else "no manifest yet")
        + f"; lease {'held by ' + r.lease if r.lease else 'free'}",
    ]
    if r.selection:
        out.append(
            f"follows the selection of {r.selection['root']}: variant "
            f"{r.selection['variant']}, settings {r.selection['settings']}"
        )
    out += ["", "inputs (read with pyarrow; no Spark):"]
    rows = []
    for i in r.inputs:
        detail = i.problem or i.note or ", ".join(i.columns)
        if i.table not in r.inputs_read:
            detail = f"(not read by these stages) {detail}"
        rows.append(
            [
                i.table,
                i.status,
                i.format,
                i.files,
                None if i.rows is None else f"{i.rows:,}",
                detail,
            ]
        )
    out.append(
        markdown_table(rows, ["table", "status", "format", "files", "rows", "columns / problem"])
    )
    if r.plan:
        out += [
            "",
            f"plan of `pina-spark run` over {','.join(r.stages)}:",
            markdown_table(
                [[s.step, s.action, s.reason] for s in r.plan], ["step", "action", "why"]
            ),
        ]
    else:
        out += ["", f"plan: not computed ({r.plan_note})"]
    out.append(
        f"\ninputs' fingerprint: {r.input_fingerprint} (as the run computes it)"
        if r.input_fingerprint
        else "\ninputs' fingerprint: not computed (inputs on an object store): a step complete "
        "in the manifest shows as unknown"
    )
    if r.can_start:
        out.append("\nresult: the run can start")
    else:
        out.append("\nresult: the run cannot start:")
        out += [f"  - {p}" for p in r.problems]
    return "\n".join(out)


def _nodes_token(cfg: PinaConfig) -> str | None:
    """What the nodes pre-step of a daily run reads
    (:func:`pina_spark.orchestration.resume.nodes_token`), read as the run reads it: the day's
    instances (``None`` where they are not local: the run decides) and the earlier daily root
    it continues (:func:`pina_spark.orchestration.daily.carry_of`; none where pyarrow cannot
    list the output here)."""
    from pina_spark.orchestration.daily import carry_of
    from pina_spark.orchestration.resume import nodes_token
    from pina_spark.orchestration.runs import list_run_dates_arrow

    instances = input_fingerprint_local([cfg.input.instances])
    if instances is None:
        return None
    dates = list_run_dates_arrow(cfg.output) if cfg.run.models and cfg.run.run_date else None
    return nodes_token(instances, carry_of(cfg, dates).token if dates else "")
