"""Command line: ``pina-spark run | check | demo | prepare-data | tune | select | skeleton |
status | compare | promote`` (:mod:`pina_spark.cli.promote`).

Exit codes: 0 success; 1 an unexpected failure (a stage raised: Python traceback on stderr, the
stage marked ``failed`` in ``_manifest.json``); 2 a usage, configuration or input error (message
``pina-spark: error: ...`` naming the key and the file; nothing ran; ``check``: the run cannot
start); 3 ``status`` of a run with a failed step.

``run`` (and ``jobs/<stage>.py``) check the inputs its stages read with pyarrow before it takes
the run root's lease and starts Spark (:func:`pina_spark.cli.check.require_inputs`), so a
missing input or a refused column is exit 2 with nothing written.

Examples
--------
``pina-spark check --config conf/local.yaml``
``pina-spark run --config conf/local.yaml --set neighbors.k=10 --stages graph,pretrain``
``pina-spark demo --output runs/demo``
``pina-spark prepare-data --source citeulike-t --input ../shared/data/citeulike-t \
--output data/cul``
``pina-spark prepare-data --source synthetic --instances 100000 --seed 1 --output data/syn100k``
``pina-spark status runs/demo/run --json | head``
"""

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from pina_spark.runtime.termination import exit_on_sigterm

log = logging.getLogger("pina_spark")

#: exit code of a usage, configuration or input error (argparse's own code too)
EXIT_USAGE = 2

#: the examples under ``pina-spark --help`` (each subcommand shows its own)
EXAMPLES = {
    "run": """examples:
  pina-spark run --config conf/local.yaml
  pina-spark run --config conf/local.yaml --set neighbors.k=10 \\
      --stages neighbors,aggregate,train,evaluate --force
  pina-spark run --config conf/emr.yaml --run-date 2026-11-21 --models latest --incremental""",
    "check": """examples:
  pina-spark check --config my.yaml
  pina-spark check --config conf/local.yaml --set input.events=data/ev.csv --json
exit: 0 the run can start, 2 it cannot (config, input or lease problem)""",
    "demo": """examples:
  pina-spark demo --output /tmp/demo
  pina-spark demo --output /tmp/demo-k10 --set neighbors.k=10""",
    "prepare-data": """examples:
  pina-spark prepare-data --source demo --output data/demo
  pina-spark prepare-data --source citeulike-t --input ../shared/data/citeulike-t --output data/cul
  pina-spark prepare-data --source synthetic --instances 100000 --seed 1 --output data/syn100k""",
    "tune": """examples:
  pina-spark tune --config conf/local.yaml --grid neighbors.k=3,5,10 \\
      --grid aggregate.v1_weight=0.5,1""",
    "select": """examples:
  pina-spark select --config conf/local.yaml
  pina-spark select --config conf/local.yaml --set 'select.candidates=[vectorizer_only, pina/text]'
writes <output>/selection/selection.json and report.md (runs with run.models follow it)""",
    "skeleton": """examples:
  pina-spark skeleton > my.yaml""",
    "status": """examples:
  pina-spark status runs/demo/run
  pina-spark status s3://bucket/runs/prod/run_date=2026-11-21 --json
exit: 0 no step failed, 3 a step failed, 2 no manifest there""",
    "compare": """examples:
  pina-spark compare runs/demo/run runs/demo-k10/run
  pina-spark compare runs/a runs/b --json""",
}


def _emit(text: str) -> None:
    """Print ``text`` to stdout; a reader that went away (``| head``) ends the output quietly
    (no BrokenPipeError traceback, the command's exit code unchanged)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null first
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    """argparse type of ``--log-level``: a level name in any case, else a usage error (exit 2)."""
    v = value.strip().upper()
    if v not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return v


class Py4JRetryFilter(logging.Filter):
    """Drops Py4J's *retried* connection resets, which it logs with a traceback through the
    root logger at INFO (``logging.info`` in ``py4j/java_gateway.py``, so the ``py4j`` logger's
    level does not reach them). The retry then succeeds; when it fails, Py4J logs at ERROR,
    which passes. Kept at ``--log-level DEBUG`` (the filter is not installed there).

    >>> where = "/x/site-packages/py4j/java_gateway.py"
    >>> rec = lambda level: logging.LogRecord("root", level, where, 1, "retry", (), None)
    >>> f = Py4JRetryFilter()
    >>> f.filter(rec(logging.INFO)), f.filter(rec(logging.ERROR))
    (False, True)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or record.name != "root":
            return True
        return os.path.basename(os.path.dirname(record.pathname)) != "py4j"


def setup_logging(level: str = "INFO") -> None:
    """Configure handlers once, in the entry point (library modules only get loggers)."""
    logging.basicConfig(
        level=getattr(logging, _log_level(level)),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from pina_spark.config.redact import LogFilter

    for h in logging.getLogger().handlers:
        if not any(isinstance(f, LogFilter) for f in h.filters):
            h.addFilter(LogFilter())
        if _log_level(level) != "DEBUG" and not any(
            isinstance(f, Py4JRetryFilter) for f in h.filters
        ):
            h.addFilter(Py4JRetryFilter())


#: the scheduling flags of a command that runs pipeline stages
RUN_FLAGS = ("run_date", "models", "incremental", "force")


def add_config_args(
    p: argparse.ArgumentParser,
    config_required: bool = True,
    flags: Sequence[str] = RUN_FLAGS,
) -> None:
    """``--config``, ``--set``, ``--log-level`` and the scheduling ``flags`` a command reads
    (a command that would ignore a flag does not take it: argparse then refuses it)."""
    p.add_argument(
        "--config",
        required=config_required,
        metavar="FILE",
        help="YAML config file (local path or s3://...)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set neighbors.k=10 (repeatable)",
    )
    if "run_date" in flags:
        p.add_argument("--run-date", help="YYYY-MM-DD: outputs under <output>/run_date=<date>/")
    if "models" in flags:
        p.add_argument(
            "--models",
            help="reuse the models of an earlier run (its run root), or "
            "'latest': the run promoted under the config's output (run.promoted_from where set)",
        )
    if "incremental" in flags:
        p.add_argument(
            "--incremental",
            action="store_true",
            help="recompute only new or changed instances (needs --models)",
        )
    if "force" in flags:
        p.add_argument("--force", action="store_true", help="redo stages even if complete")
    add_log_level(p)


def add_log_level(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level,
        metavar="LEVEL",
        help=f"one of {', '.join(LOG_LEVELS)} (default INFO)",
    )


def config_from_args(args, base=None):
    """Build the config from ``--config``/``--set`` and the scheduling flags."""
    from pina_spark.config import load_config

    sets = list(args.set)
    flags: dict[str, str] = {}  # a flag's override -> the flag as given, for error messages
    for flag, key, value in (
        ("--run-date", "run.run_date", getattr(args, "run_date", None)),
        ("--models", "run.models", getattr(args, "models", None)),
        ("--incremental", "run.incremental", getattr(args, "incremental", False) or None),
        ("--force", "run.force", getattr(args, "force", False) or None),
    ):
        if value:
            item = f"{key}={'true' if value is True else value}"
            sets.append(item)
            flags[item] = flag if value is True else f"{flag} {value!r}"
    from pina_spark.config.redact import redact_config
    from pina_spark.storage import read_bytes

    redact_config(sets)  # registers secret values before anything can log them
    cfg = load_config(args.config, sets, base=base, read=read_bytes, spelled=flags)
    redact_config(cfg.to_dict())
    return cfg


def run_stages(cfg, stages, sets: list[str] | tuple[str, ...] = ()) -> dict:
    """Follow the selection of ``run.models``' root
    (:func:`pina_spark.selection.follow.follow_selection`; the keys of ``sets``, the ``--set``
    strings, win over it), check the inputs the stages read (pyarrow,
    :func:`pina_spark.cli.check.require_inputs`), take the run root's lease (before Spark
    starts, so a second run on the same root fails at once naming the owner), then run the
    stages."""
    import uuid

    from pina_spark.cli.check import require_inputs
    from pina_spark.orchestration.pipeline import run_pipeline
    from pina_spark.orchestration.promotion import resolve_models
    from pina_spark.orchestration.session import get_spark
    from pina_spark.selection.follow import follow_selection, set_keys
    from pina_spark.storage import RunPaths, acquire_lease

    cfg, _ = follow_selection(resolve_models(cfg, stages), set_keys(sets))
    require_inputs(cfg, stages)
    root = RunPaths(cfg.output, cfg.run.run_date).root
    with acquire_lease(
        root,
        uuid.uuid4().hex[:12],
        stale_s=cfg.run.lease_stale_s,
        heartbeat_s=cfg.run.lease_heartbeat_s,
    ):
        spark = get_spark(cfg.spark)
        return run_pipeline(spark, cfg, stages)


def _terminated_rc(e: BaseException | None = None) -> int | None:
    """143 where a SIGTERM came during the command, whether it then ended with the error ``e``
    (a cancelled Spark job's) or without one (its job finished before the cancellation reached
    it): the process was still asked to stop. ``None`` without a SIGTERM."""
    from pina_spark.runtime import termination

    if not termination.requested():
        return None
    termination.disarm()
    what = termination.reason(e) if e is not None else str(termination.Terminated())
    print(f"pina-spark: error: {what}", file=sys.stderr)
    return termination.EXIT_SIGTERM


def _fail(e: BaseException) -> int:
    """Print a known error (exit 2) or a scrubbed traceback (exit 1); after a SIGTERM, whatever
    error ended the command (a cancelled Spark job's) is the termination (exit 143)."""
    from pina_spark.config import ConfigError
    from pina_spark.config.redact import scrub
    from pina_spark.storage import InputError, LeaseError

    terminated = _terminated_rc(e)
    if terminated:
        return terminated
    if isinstance(e, ConfigError | InputError | LeaseError):
        print(scrub(f"pina-spark: error: {e}"), file=sys.stderr)
        return EXIT_USAGE
    import traceback

    print(scrub("".join(traceback.format_exception(type(e), e, e.__traceback__))), file=sys.stderr)
    return 1


def _cmd_run(args) -> int:
    from pina_spark.config import parse_stages

    cfg = config_from_args(args)
    result = run_stages(cfg, parse_stages(args.stages), args.set)
    _emit(json.dumps({"output": cfg.output, "stages": result}, indent=2))
    return 0


def _cmd_check(args) -> int:
    from pina_spark.cli.check import check_run, report_text
    from pina_spark.config import parse_stages

    cfg = config_from_args(args)
    report = check_run(cfg, parse_stages(args.stages), args.set or ())
    _emit(json.dumps(report.to_dict(), indent=2) if args.json else report_text(report))
    return 0 if report.can_start else EXIT_USAGE


def _cmd_demo(args) -> int:
    import os

    from pina_spark.config import parse_stages
    from pina_spark.datasets import write_demo_data

    out = os.path.abspath(args.output)
    inputs = write_demo_data(os.path.join(out, "input"))
    base = {"output": os.path.join(out, "run"), "input": inputs}
    args.config = args.config or _packaged_demo_config()
    cfg = config_from_args(args, base=base)
    result = run_stages(cfg, parse_stages(args.stages), args.set)
    _emit(
        json.dumps(
            {"input": os.path.join(out, "input"), "output": cfg.output, "stages": result}, indent=2
        )
    )
    from pina_spark.stages.evaluate.stage import REPORT_FILE, eval_file

    report = eval_file(cfg.output, REPORT_FILE)
    _emit(f"\nDemo outputs are under {cfg.output}; the report: {report}")
    return 0


def _packaged_demo_config() -> str:
    """``pina_spark/conf/demo.yaml``, the demo's config shipped in the wheel."""
    return os.path.join(os.path.dirname(os.path.dirname(__file__)), "conf", "demo.yaml")


def _cmd_prepare(args) -> int:
    from pina_spark.datasets import prepare_data

    paths = prepare_data(args.source, args.input, args.output, args.instances, args.seed)
    _emit(json.dumps(paths, indent=2))
    return 0


def _check_prepare_args(p: argparse.ArgumentParser, args) -> None:
    """Usage errors of ``prepare-data`` (exit 2): ``--instances`` is required for and only for
    ``--source synthetic``, and so is ``--seed``."""
    if args.source == "synthetic":
        if args.instances is None:
            p.error("--source synthetic needs --instances N (the number of products)")
    elif args.instances is not None or args.seed is not None:
        given = "--instances" if args.instances is not None else "--seed"
        p.error(f"{given} is for --source synthetic only, not --source {args.source}")


def _cmd_tune(args) -> int:
    from pina_spark.orchestration.tune import run_tune

    cfg = config_from_args(args)
    table = run_tune(cfg, args.grid)
    _emit(table)
    return 0


def _cmd_select(args) -> int:
    from pina_spark.orchestration.select import run_select, selection_markdown
    from pina_spark.selection.artifact import selection_uri
    from pina_spark.storage import RunPaths

    cfg = config_from_args(args)
    rec = run_select(cfg)
    root = RunPaths(cfg.output, cfg.run.run_date).root
    _emit(selection_markdown(rec) + f"\n\nselection: {selection_uri(root)} (report.md beside it)")
    return 0


def _cmd_skeleton(args) -> int:
    import yaml

    from pina_spark.config import skeleton

    _emit(yaml.safe_dump(skeleton(), sort_keys=False))
    return 0


def _cmd_status(args) -> int:
    from pina_spark.cli.status import EXIT_STAGE_FAILED, status_data, status_text

    data = status_data(args.run)
    _emit(json.dumps(data, indent=2) if args.json else status_text(args.run, data))
    return EXIT_STAGE_FAILED if data["failed"] else 0


def _cmd_compare(args) -> int:
    from pina_spark.cli.status import compare_data, compare_text

    data = compare_data(args.run_a, args.run_b)
    _emit(json.dumps(data, indent=2) if args.json else compare_text(args.run_a, args.run_b, data))
    return 0


def _add_json(p: argparse.ArgumentParser, schema: str) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON document instead of tables (schema {schema}, see docs/cli.md)",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions as argparse does, and prints an ``examples:`` epilog line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _subparser(sub, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with its examples (:data:`EXAMPLES`)."""
    return sub.add_parser(
        name,
        help=help,
        description=help,
        epilog=EXAMPLES.get(name),
        formatter_class=_HelpFormatter,
    )


def main(argv: list[str] | None = None) -> int:
    from pina_spark import __version__

    parser = argparse.ArgumentParser(
        prog="pina-spark",
        description="PINA for extreme multi-label classification on Apache Spark.",
        epilog="examples:\n"
        "  pina-spark check --config my.yaml      # inputs, columns, what a run would do\n"
        "  pina-spark run --config my.yaml\n"
        "  pina-spark status runs/mydata\n"
        "  pina-spark demo --output /tmp/demo\n"
        "exit codes: 0 success, 1 a stage failed (traceback), 2 usage / config / input "
        "error,\n  3 status: a step of the run failed. `pina-spark COMMAND --help` for more.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pina-spark {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    stages_help = (
        "comma list of graph,vectorizer,embed,pretrain,neighbors,aggregate,train,evaluate "
        "(default: all)"
    )

    p = _subparser(sub, "run", "run pipeline stages")
    add_config_args(p)
    p.add_argument("--stages", help=stages_help)
    p.set_defaults(fn=_cmd_run)

    p = _subparser(
        sub,
        "check",
        "pre-flight of a run, without Spark: the config, every input (exists, columns, "
        "types, rows) and which stages a run would execute or skip, and why",
    )
    add_config_args(p)
    p.add_argument("--stages", help=stages_help + ": the stages of the run to plan")
    _add_json(p, "pina-spark-check/1")
    p.set_defaults(fn=_cmd_check)

    p = _subparser(sub, "demo", "generate the built-in demo data and run the pipeline")
    add_config_args(p, config_required=False)
    p.add_argument(
        "--output",
        default="runs/demo",
        metavar="DIR",
        help="folder for input/ and run/ (default runs/demo)",
    )
    p.add_argument("--stages", help=stages_help)
    p.set_defaults(fn=_cmd_demo)

    p = _subparser(
        sub, "prepare-data", "convert a shared data set to the input contract, or generate one"
    )
    p.add_argument(
        "--source",
        required=True,
        choices=["instacart", "citeulike-t", "demo", "synthetic"],
        help="the data set: a converter of a public one, the demo, or synthetic scale data",
    )
    p.add_argument("--input", help="folder of the raw data set (not needed for demo, synthetic)")
    p.add_argument("--instances", type=int, metavar="N", help="synthetic: number of products")
    p.add_argument("--seed", type=int, metavar="S", help="synthetic: random seed (default 0)")
    p.add_argument(
        "--output", required=True, metavar="DIR", help="folder for the input-contract tables"
    )
    add_log_level(p)
    p.set_defaults(fn=_cmd_prepare)
    prepare_parser = p

    p = _subparser(sub, "tune", "grid over cheap stages on a validation split of train")
    add_config_args(p, flags=("run_date", "models"))  # every point is computed afresh
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=v1,v2",
        help="e.g. --grid neighbors.k=3,5,10 (repeatable); keys of the stages tune reruns "
        "(neighbors, aggregate, train, evaluate) that no stage it reuses reads",
    )
    p.set_defaults(fn=_cmd_tune)

    p = _subparser(
        sub,
        "select",
        "choose the variant of a finished run root on a validation split of train (the select "
        "section), and publish it for production runs",
    )
    add_config_args(p, flags=("run_date", "models", "force"))  # --force: recompute kept steps
    p.set_defaults(fn=_cmd_select)

    p = _subparser(sub, "skeleton", "print every config key with its default")
    add_log_level(p)
    p.set_defaults(fn=_cmd_skeleton)

    p = _subparser(
        sub,
        "status",
        "stages, times, row counts and quarantine of a run (from its _manifest.json)",
    )
    p.add_argument("run", help="run root: <output> or <output>/run_date=YYYY-MM-DD")
    _add_json(p, "pina-spark-status/1")
    add_log_level(p)
    p.set_defaults(fn=_cmd_status)

    p = _subparser(
        sub,
        "compare",
        "metrics of two runs side by side, with a paired t-test on the test instances both "
        "scored",
    )
    p.add_argument("run_a", help="run root A (the reference)")
    p.add_argument("run_b", help="run root B")
    _add_json(p, "pina-spark-compare/1")
    add_log_level(p)
    p.set_defaults(fn=_cmd_compare)

    from pina_spark.cli.promote import HELP as PROMOTE_HELP
    from pina_spark.cli.promote import add_promote_parser

    p = _subparser(sub, "promote", PROMOTE_HELP)
    add_promote_parser(p)
    add_log_level(p)

    args = parser.parse_args(argv)
    if args.cmd == "prepare-data":
        _check_prepare_args(prepare_parser, args)
    setup_logging(getattr(args, "log_level", "INFO"))
    exit_on_sigterm()
    try:
        rc = args.fn(args)
    except Exception as e:
        return _fail(e)
    return _terminated_rc() or rc


def job_main(stage: str, argv: list[str] | None = None) -> int:
    """Body of every ``jobs/<stage>.py``: parse ``--config``/``--set``, run one stage, stop."""
    p = argparse.ArgumentParser(prog=f"jobs/{stage}.py", description=f"pina-spark stage {stage}")
    add_config_args(p)
    args = p.parse_args(argv)
    setup_logging(args.log_level)
    exit_on_sigterm()
    try:
        cfg = config_from_args(args)
        result = run_stages(cfg, (stage,), args.set)
    except Exception as e:
        return _fail(e)
    _emit(json.dumps({"output": cfg.output, "stages": result}))
    return _terminated_rc() or 0
