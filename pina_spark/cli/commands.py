"""Command line: ``pina-spark run | demo | prepare-data | tune | skeleton | status | compare``.

Exit codes: 0 success; 1 an unexpected failure (a stage raised: Python traceback on stderr, the
stage marked ``failed`` in ``_manifest.json``); 2 a usage, configuration or input error (message
``pina-spark: error: ...`` naming the key and the file; nothing ran).

Examples
--------
``pina-spark run --config conf/local.yaml --set neighbors.k=10 --stages graph,pretrain``
``pina-spark demo --output runs/demo``
``pina-spark prepare-data --source citeulike-t --input ../shared/data/citeulike-t \
--output data/cul``
``pina-spark prepare-data --source synthetic --instances 100000 --seed 1 --output data/syn100k``
"""

import argparse
import json
import logging
import os
import sys
from typing import List, Optional

log = logging.getLogger("pina_spark")


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


def add_config_args(p: argparse.ArgumentParser, config_required: bool = True) -> None:
    p.add_argument("--config", required=config_required, help="YAML config file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set neighbors.k=10 (repeatable)",
    )
    p.add_argument("--run-date", help="YYYY-MM-DD: outputs under <output>/run_date=<date>/")
    p.add_argument(
        "--models",
        help="reuse the models of an earlier run (its run root), or "
        "'latest': the run promoted under the config's output",
    )
    p.add_argument(
        "--incremental",
        action="store_true",
        help="recompute only new or changed instances (needs --models)",
    )
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
    if getattr(args, "run_date", None):
        sets.append(f"run.run_date={args.run_date}")
    if getattr(args, "models", None):
        sets.append(f"run.models={args.models}")
    if getattr(args, "incremental", False):
        sets.append("run.incremental=true")
    if getattr(args, "force", False):
        sets.append("run.force=true")
    from pina_spark.config.redact import redact_config

    redact_config(sets)  # registers secret values before anything can log them
    cfg = load_config(args.config, sets, base=base)
    redact_config(cfg.to_dict())
    return cfg


def run_stages(cfg, stages) -> dict:
    """Take the run root's lease (before Spark starts, so a second run on the same root fails
    at once naming the owner), then run the stages."""
    import uuid

    from pina_spark.orchestration.pipeline import run_pipeline
    from pina_spark.orchestration.session import get_spark
    from pina_spark.storage import RunPaths, acquire_lease

    root = RunPaths(cfg.output, cfg.run.run_date).root
    with acquire_lease(
        root,
        uuid.uuid4().hex[:12],
        stale_s=cfg.run.lease_stale_s,
        heartbeat_s=cfg.run.lease_heartbeat_s,
    ):
        spark = get_spark(cfg.spark)
        return run_pipeline(spark, cfg, stages)


def _fail(e: BaseException) -> int:
    """Print a known error (exit 2) or a scrubbed traceback (exit 1)."""
    from pina_spark.config import ConfigError
    from pina_spark.config.redact import scrub
    from pina_spark.storage import InputError, LeaseError

    if isinstance(e, (ConfigError, InputError, LeaseError)):
        print(scrub(f"pina-spark: error: {e}"), file=sys.stderr)
        return 2
    import traceback

    print(scrub("".join(traceback.format_exception(type(e), e, e.__traceback__))), file=sys.stderr)
    return 1


def _cmd_run(args) -> int:
    from pina_spark.config import parse_stages

    cfg = config_from_args(args)
    result = run_stages(cfg, parse_stages(args.stages))
    print(json.dumps({"output": cfg.output, "stages": result}, indent=2))
    return 0


def _cmd_demo(args) -> int:
    import os

    from pina_spark.config import parse_stages
    from pina_spark.datasets import write_demo_data

    out = os.path.abspath(args.output)
    inputs = write_demo_data(os.path.join(out, "input"))
    base = {"output": os.path.join(out, "run"), "input": inputs}
    args.config = args.config or _packaged_demo_config()
    cfg = config_from_args(args, base=base)
    result = run_stages(cfg, parse_stages(args.stages))
    print(
        json.dumps(
            {"input": os.path.join(out, "input"), "output": cfg.output, "stages": result}, indent=2
        )
    )
    print(f"\nDemo outputs are under {cfg.output}")
    return 0


def _packaged_demo_config() -> str:
    import os

    return os.path.join(os.path.dirname(__file__), "conf", "demo.yaml")


def _cmd_prepare(args) -> int:
    from pina_spark.datasets import prepare_data

    paths = prepare_data(args.source, args.input, args.output, args.instances, args.seed)
    print(json.dumps(paths, indent=2))
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
    print(table)
    return 0


def _cmd_skeleton(args) -> int:
    import yaml

    from pina_spark.config import skeleton

    print(yaml.safe_dump(skeleton(), sort_keys=False))
    return 0


def _cmd_status(args) -> int:
    from pina_spark.cli.status import status_text

    print(status_text(args.run))
    return 0


def _cmd_compare(args) -> int:
    from pina_spark.cli.status import compare_text

    print(compare_text(args.run_a, args.run_b))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    from pina_spark import __version__

    parser = argparse.ArgumentParser(prog="pina-spark", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pina-spark {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("run", help="run pipeline stages")
    add_config_args(p)
    p.add_argument(
        "--stages",
        help="comma list of graph,vectorizer,embed,pretrain,neighbors,aggregate,"
        "train,evaluate (default: all)",
    )
    p.set_defaults(fn=_cmd_run)

    p = sub.add_parser("demo", help="generate the built-in demo data and run the pipeline")
    add_config_args(p, config_required=False)
    p.add_argument("--output", default="runs/demo")
    p.add_argument("--stages")
    p.set_defaults(fn=_cmd_demo)

    p = sub.add_parser(
        "prepare-data",
        help="convert a shared data set to the input contract, or generate one",
    )
    p.add_argument(
        "--source", required=True, choices=["instacart", "citeulike-t", "demo", "synthetic"]
    )
    p.add_argument("--input", help="folder of the raw data set (not needed for demo, synthetic)")
    p.add_argument("--instances", type=int, metavar="N", help="synthetic: number of products")
    p.add_argument("--seed", type=int, metavar="S", help="synthetic: random seed (default 0)")
    p.add_argument("--output", required=True)
    add_log_level(p)
    p.set_defaults(fn=_cmd_prepare)
    prepare_parser = p

    p = sub.add_parser("tune", help="grid over cheap stages on a validation split of train")
    add_config_args(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=v1,v2",
        help="e.g. --grid neighbors.k=3,5,10 (repeatable)",
    )
    p.set_defaults(fn=_cmd_tune)

    p = sub.add_parser("skeleton", help="print every config key with its default")
    p.set_defaults(fn=_cmd_skeleton, log_level="INFO")

    p = sub.add_parser(
        "status",
        help="stages, times, row counts and quarantine of a run " "(from its _manifest.json)",
    )
    p.add_argument("run", help="run root: <output> or <output>/run_date=YYYY-MM-DD")
    add_log_level(p)
    p.set_defaults(fn=_cmd_status)

    p = sub.add_parser(
        "compare",
        help="metrics of two runs side by side, with a paired t-test "
        "on the test instances both scored",
    )
    p.add_argument("run_a", help="run root A (the reference)")
    p.add_argument("run_b", help="run root B")
    add_log_level(p)
    p.set_defaults(fn=_cmd_compare)

    args = parser.parse_args(argv)
    if args.cmd == "prepare-data":
        _check_prepare_args(prepare_parser, args)
    setup_logging(getattr(args, "log_level", "INFO"))
    try:
        return args.fn(args)
    except Exception as e:
        return _fail(e)


def job_main(stage: str, argv: Optional[List[str]] = None) -> int:
    """Body of every ``jobs/<stage>.py``: parse ``--config``/``--set``, run one stage, stop."""
    p = argparse.ArgumentParser(prog=f"jobs/{stage}.py", description=f"pina-spark stage {stage}")
    add_config_args(p)
    args = p.parse_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = config_from_args(args)
        result = run_stages(cfg, (stage,))
    except Exception as e:
        return _fail(e)
    print(json.dumps({"output": cfg.output, "stages": result}))
    return 0

