"""Typed configuration for every pina-spark stage.

One frozen dataclass per section (:mod:`pina_spark.config.sections`). :func:`load_config`
(:mod:`pina_spark.config.load`) reads YAML, applies ``--set key.sub=value`` overrides and builds
the dataclasses strictly: an unknown key, a wrong type or a missing required value raises
:class:`ConfigError` naming the key and the file. :mod:`pina_spark.config.reference` generates
``docs/config.md`` from the sections, :mod:`pina_spark.config.redact` hides secrets in what is
logged or recorded, :mod:`pina_spark.config.variants` names the variants of a run.

Examples
--------
>>> cfg = config_from_dict({"output": "/tmp/run", "input": {"instances": "i.parquet"}})
>>> cfg.neighbors.k, cfg.input.instances
(5, 'i.parquet')
>>> try:
...     config_from_dict({"output": "/tmp/run", "neighbours": {}})
... except ConfigError as e:
...     print(str(e)[:40])
<dict>: unknown key 'neighbours' (known:
"""

from pina_spark.config.load import (
    apply_overrides,
    config_from_dict,
    dump_config,
    load_config,
    parse_stages,
    skeleton,
)
from pina_spark.config.sections import (
    DEFAULT_REASON_LIMITS,
    QUARANTINE_REASONS,
    SIDE_INFO,
    STAGE_NAMES,
    AggregateConfig,
    ConfigError,
    ContrastiveConfig,
    EvaluateConfig,
    FaultsConfig,
    GraphConfig,
    InferenceConfig,
    InputConfig,
    NeighborsConfig,
    PinaConfig,
    PretrainConfig,
    QualityConfig,
    RunConfig,
    SelectConfig,
    SparkConfig,
    TaskConfig,
    TrainConfig,
    TuneConfig,
    XLinearConfig,
)

__all__ = [
    "ConfigError",
    "PinaConfig",
    "InputConfig",
    "TaskConfig",
    "GraphConfig",
    "XLinearConfig",
    "PretrainConfig",
    "ContrastiveConfig",
    "NeighborsConfig",
    "InferenceConfig",
    "AggregateConfig",
    "TrainConfig",
    "EvaluateConfig",
    "SparkConfig",
    "RunConfig",
    "QualityConfig",
    "FaultsConfig",
    "TuneConfig",
    "SelectConfig",
    "SIDE_INFO",
    "STAGE_NAMES",
    "QUARANTINE_REASONS",
    "DEFAULT_REASON_LIMITS",
    "load_config",
    "config_from_dict",
    "apply_overrides",
    "dump_config",
    "skeleton",
    "parse_stages",
]
