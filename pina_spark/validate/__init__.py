"""Input validation: read every configured input table, split it into clean rows and quarantined
rows (each with one ``reason``), and prove that nothing was dropped silently
(``rows_in == rows_used + rows_quarantined`` for every table).

- :mod:`pina_spark.validate.rules`: the rules, written once (reasons, checks with their Spark and
  pyarrow expressions side by side, the rule table per input table), the counts and the
  data-quality gates;
- :mod:`pina_spark.validate.spark`: the Spark path and the driver's entry point,
  :func:`validate_inputs`, which sends small tables to the pyarrow path;
- :mod:`pina_spark.validate.tables`: ``instances``, ``labels``, ``instance_labels`` in pyarrow on
  the driver;
- :mod:`pina_spark.validate.events`: ``events`` in pyarrow on their way to the driver (the
  ``broadcast`` pair plan).

Examples
--------
>>> from pina_spark.config import config_from_dict
>>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
...     "labels": "l.csv", "instance_labels": "il.csv"}})

Example::

    result = validate_inputs(spark, cfg)
    sorted(result.tables), result.counts["labels"]["rows_used"]
    # (['instance_labels', 'instances', 'labels'], 40)
"""

from pina_spark.validate.rules import (
    REASONS,
    RULES,
    ValidationInvariantError,
    check_quality,
    reason_counts,
)
from pina_spark.validate.spark import (
    DRIVER_TABLES,
    ValidationResult,
    count_input,
    driver_tables,
    publish_quarantine,
    read_inputs,
    require_configured,
    required_tables,
    tag_event_rows,
    validate_events,
    validate_filter_pairs,
    validate_inputs,
    validate_instance_labels,
    validate_instances,
    validate_labels,
)

__all__ = [
    "read_inputs",
    "validate_inputs",
    "publish_quarantine",
    "ValidationResult",
    "driver_tables",
    "count_input",
    "reason_counts",
    "tag_event_rows",
    "require_configured",
    "required_tables",
    "ValidationInvariantError",
    "check_quality",
    "validate_instances",
    "validate_labels",
    "validate_instance_labels",
    "validate_events",
    "validate_filter_pairs",
    "REASONS",
    "RULES",
    "DRIVER_TABLES",
]
