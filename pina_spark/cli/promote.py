"""``pina-spark promote``: record in the promotion record (``<output>/_PROMOTED``, or
``<run.promoted_from>/_PROMOTED`` where that is set) the digests of the promoted run's models.

A record written before pina-spark recorded digests names a run but vouches for none of its
model folders, so ``--models latest`` is refused (:func:`pina_spark.models.trust.anchor`) until
an operator, having checked that nobody changed that run since it was promoted, runs this once
(:func:`pina_spark.orchestration.promotion.record_digests`). It adds them (and when) and changes
nothing else in the record; it refuses a record that holds other digests already.

Example::

    pina-spark promote --config conf/emr.yaml
"""

import argparse
import json
import sys

#: the subcommand's help line and its ``--help`` epilog
HELP = (
    "record the digests of the promoted run's models in <output>/_PROMOTED (of "
    "run.promoted_from where set; once, after an upgrade: a record without them vouches for "
    "nothing)"
)
EXAMPLES = """examples:
  pina-spark promote --config conf/emr.yaml
  pina-spark promote --config s3://bucket/conf/emr.yaml --set output=s3://bucket/runs/prod"""


def add_promote_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``pina-spark promote`` on its subparser ``p``."""
    p.epilog = EXAMPLES
    p.add_argument("--config", required=True, metavar="FILE", help="YAML config file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set output=s3://bucket/runs/prod (repeatable)",
    )
    p.set_defaults(fn=promote_command)


def promote_command(args) -> int:
    """Load the config (secrets registered for redaction first), record the digests, print the
    result as JSON; exit code 0 (errors: the CLI's exit code 2)."""
    from pina_spark.config import load_config
    from pina_spark.config.redact import redact_config
    from pina_spark.orchestration.promotion import record_digests
    from pina_spark.storage import read_bytes

    redact_config(list(args.set))
    cfg = load_config(args.config, list(args.set), read=read_bytes)
    redact_config(cfg.to_dict())
    result = record_digests(cfg)
    print(json.dumps(result, indent=2))
    sys.stdout.flush()
    return 0
