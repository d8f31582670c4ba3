"""Input validation on Spark, and the driver's entry point that sends each table to Spark or to
the pyarrow path: read every configured input table, split it into clean rows and quarantined
rows (each with one ``reason``), and prove that nothing was dropped silently.

Driver side. Every input is read with :func:`pina_spark.storage.read_input` (explicit schemas: a
missing file, a missing column or a wrong column type raises :class:`pina_spark.storage.InputError`
naming the column and the file). An input that is required by the config but not given, or that
has no rows at all, is an :class:`~pina_spark.storage.InputError` too.

The rules and their reasons are those of :data:`pina_spark.validate.rules.RULES`; here each table's
rules become Spark SQL (:func:`validate_instances` ... :func:`validate_filter_pairs`): the row rules
as one ``CASE WHEN`` in rule order, unknown ids as a left join against the clean ids, duplicates
as a window over the key. :func:`validate_inputs` validates on the driver, in pyarrow, the tables
the caller names in ``on_driver``: the graph stage names ``instances``, ``labels`` and
``instance_labels`` when they have at most :data:`DRIVER_MAX_ROWS` rows and
:data:`DRIVER_MAX_BYTES` bytes (:func:`driver_tables`, :mod:`pina_spark.validate.tables`: no
Spark job per table) and ``events`` under the ``broadcast`` pair plan
(:mod:`pina_spark.validate.events`). Same reasons, same kept rows, same counts on both paths.

Baskets of one item are *not* quarantined: they are valid rows that contribute no pair (the graph
stage counts them). Event weights are validated but the co-purchase count is a count of baskets
(see :mod:`pina_spark.stages.graph`).

Examples
--------
>>> from pina_spark.config import config_from_dict
>>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
...     "labels": "l.csv", "instance_labels": "il.csv"}})
>>> required_tables(cfg)
('instances', 'labels', 'instance_labels')

Example::

    sorted(validate_inputs(spark, cfg).tables)  # ['instance_labels', 'instances', 'labels']
"""

import contextlib
import dataclasses as dc
import logging
from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.validate import events as arrow_events
from pina_spark.validate import tables as arrow_tables
from pina_spark.validate import utf8
from pina_spark.validate.rules import (
    CHECKS,
    ID_COLUMN,
    MAX_TEXT_CHARS,
    RULES,
    TABLE_ORDER,
    TableRules,
    ValidationInvariantError,
    check_quality,
    reason_counts,
)

log = logging.getLogger(__name__)

__all__ = [
    "ValidationResult",
    "validate_inputs",
    "publish_quarantine",
    "read_inputs",
    "required_tables",
    "driver_tables",
    "count_input",
    "validate_instances",
    "validate_labels",
    "validate_instance_labels",
    "tag_event_rows",
    "validate_events",
    "validate_filter_pairs",
    "DRIVER_TABLES",
    "DRIVER_MAX_ROWS",
    "DRIVER_MAX_BYTES",
]

#: tables that may be validated on the driver in one pyarrow pass
#: (:mod:`pina_spark.validate.tables`)
DRIVER_TABLES = ("instances", "labels", "instance_labels")
#: up to this many rows (counted from the Parquet footers where pyarrow reaches the input, else
#: by Spark) a table of :data:`DRIVER_TABLES` is validated on the driver: same reasons, same kept
#: rows as the Spark path, without its per-table jobs; larger tables stay with Spark
DRIVER_MAX_ROWS = 2_000_000
#: ... and at most this many bytes of values (uncompressed, from the Parquet footers; characters
#: of the string columns for other formats): 2M rows of long texts stay with Spark
DRIVER_MAX_BYTES = 1 << 30


# --------------------------------------------------------------------------- the rules in Spark
def _tag_rows(raw, rules: TableRules, max_text_chars: int):
    """``raw`` with the table's defaults applied, plus ``reason``: the first row rule that
    holds, else null."""
    from pyspark.sql import functions as F

    for col, value in rules.defaults:
        raw = raw.withColumn(
            col,
            F.when(CHECKS["blank"].spark(col, max_text_chars), F.lit(value)).otherwise(F.col(col)),
        )
    expr = None
    for rule in rules.rows:
        cond, reason = rule.spark_mask(max_text_chars), F.lit(rule.reason)
        expr = F.when(cond, reason) if expr is None else expr.when(cond, reason)
    assert expr is not None, "a table without row rules"
    return raw.withColumn(storage.REASON, expr.otherwise(F.lit(None).cast("string")))


def _flag_unknown(tagged, ref, ref_col: str, col: str, reason: str):
    """Rows still valid whose ``col`` is not a ``ref_col`` of the frame ``ref`` get ``reason``.
    A left join against unique keys never duplicates rows."""
    from pyspark.sql import functions as F

    ref = ref.select(F.col(ref_col).alias("_ref_id")).distinct().withColumn("_known", F.lit(True))
    out = tagged.join(ref, tagged[col] == ref["_ref_id"], "left")
    out = out.withColumn(
        storage.REASON,
        F.when(F.col(storage.REASON).isNull() & F.col("_known").isNull(), F.lit(reason)).otherwise(
            F.col(storage.REASON)
        ),
    )
    return out.drop("_ref_id", "_known")


def _flag_duplicates(tagged, keys, order, reason: str):
    """Among rows still valid, keep the first row of each ``keys`` group under ``order``
    (a list of sort columns that ends with every column, so ties are identical rows)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*[F.col(k) for k in keys], F.col(storage.REASON).isNull()).orderBy(
        *order
    )
    rn = F.row_number().over(w)
    return tagged.withColumn(
        storage.REASON,
        F.when(F.col(storage.REASON).isNull() & (rn > 1), F.lit(reason)).otherwise(
            F.col(storage.REASON)
        ),
    )


def _tag(raw, name: str, max_text_chars: int, clean: dict[str, Any]):
    """Every rule of table ``name`` over the raw frame: ``raw`` plus ``reason`` (null =
    clean). ``clean``: the clean frames of the tables its ids must be in."""
    from pyspark.sql import functions as F

    rules = RULES[name]
    tagged = _tag_rows(raw, rules, max_text_chars)
    for u in rules.unknown:
        tagged = _flag_unknown(tagged, clean[u.table], ID_COLUMN[u.table], u.column, u.reason)
    dup = rules.duplicate
    order = [F.col(c).asc_nulls_last() for c in dup.order] or [F.lit(1)]
    return _flag_duplicates(tagged, list(dup.keys), order, dup.reason)


def _split(tagged, table: str):
    """(clean rows without helper columns, quarantined rows with ``reason``; their values that
    are not UTF-8 escaped, :func:`pina_spark.validate.utf8.escape_spark`)."""
    from pyspark.sql import functions as F

    cols = [f.name for f in storage.schema(table).fields]
    clean = tagged.filter(F.col(storage.REASON).isNull()).select(*cols)
    strings = set(utf8.string_columns(table))
    quarantine = tagged.filter(F.col(storage.REASON).isNotNull()).select(
        *[utf8.escape_spark(c).alias(c) if c in strings else F.col(c) for c in cols],
        utf8.escape_spark(storage.CORRUPT).alias(storage.CORRUPT),
        storage.REASON,
    )
    return clean, quarantine


# --------------------------------------------------------------------------- per table
def validate_instances(raw, max_text_chars: int = MAX_TEXT_CHARS):
    """Tag the rows of a raw ``instances`` frame (as returned by ``storage.read_input``).

    Returns the raw frame plus a ``reason`` column (null = clean). A null split becomes
    ``train``.

    Example::

        raw = storage.read_input(spark, "instances.csv", "instances")
        validate_instances(raw).filter("reason is null").count()
    """
    return _tag(raw, "instances", max_text_chars, {})


def validate_labels(raw, max_text_chars: int = MAX_TEXT_CHARS):
    """Tag the rows of a raw ``labels`` frame (``reason`` null = clean).

    Example::

        validate_labels(storage.read_input(spark, "labels.csv", "labels"))
    """
    return _tag(raw, "labels", max_text_chars, {})


def validate_instance_labels(raw, instances, labels):
    """Tag ``instance_labels`` rows against the clean ``instances`` and ``labels`` frames.

    Example::

        validate_instance_labels(raw, clean_instances, clean_labels)
    """
    return _tag(raw, "instance_labels", MAX_TEXT_CHARS, {"instances": instances, "labels": labels})


def tag_event_rows(raw):
    """The row rules of ``events`` (every reason but ``unknown_item`` and ``duplicate_event``,
    which need other rows): the raw frame plus ``reason``. The driver-side pass of
    :mod:`pina_spark.validate.events` applies the same rules in pyarrow.

    Example::

        tag_event_rows(storage.read_input(spark, "events.csv", "events"))
    """
    return _tag_rows(raw, RULES["events"], MAX_TEXT_CHARS)


def validate_events(raw, instances):
    """Tag ``events`` rows against the clean ``instances`` frame.

    Example::

        validate_events(storage.read_input(spark, "events.csv", "events"),
                        clean_instances)
    """
    return _tag(raw, "events", MAX_TEXT_CHARS, {"instances": instances})


def validate_filter_pairs(raw):
    """Tag ``filter_pairs`` rows (pairs need not be known instances/labels: removing a pair that
    is never predicted is harmless).

    Example::

        validate_filter_pairs(
            storage.read_input(spark, "pairs.csv", "filter_pairs"))
    """
    return _tag(raw, "filter_pairs", MAX_TEXT_CHARS, {})


# --------------------------------------------------------------------------- driver entry
def required_tables(cfg) -> tuple[str, ...]:
    """Input tables the config needs (a missing one is an error).

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> required_tables(config_from_dict({"output": "/tmp/r"}))
    ('instances', 'labels', 'instance_labels')
    """
    need = ["instances"]
    if cfg.task.labels == "given":
        need += ["labels", "instance_labels"]
    if cfg.side_info in ("i2i", "both") or cfg.task.labels == "graph":
        need.append("events")
    return tuple(need)


def require_configured(cfg) -> None:
    """Raise :class:`~pina_spark.storage.InputError` naming the first table the config needs
    (:func:`required_tables`) that ``input`` leaves unset, and why it is needed.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> try:
    ...     require_configured(config_from_dict({"output": "/tmp/r"}))
    ... except storage.InputError as e:
    ...     print(e)
    input.instances: required (side_info=label_text, task.labels=given) but not configured
    """
    inp = cfg.input
    for name in required_tables(cfg):
        if not getattr(inp, name):
            why = (
                "task.labels=given"
                if name in ("labels", "instance_labels")
                else f"side_info={cfg.side_info}, task.labels={cfg.task.labels}"
            )
            raise storage.InputError(f"input.{name}: required ({why}) but not configured")


def read_inputs(spark, cfg) -> dict[str, Any]:
    """The raw frames of every configured input table (:func:`pina_spark.storage.read_input`), after
    checking that the tables the config needs are configured.

    Raises
    ------
    pina_spark.storage.InputError
        a required input not configured, a missing path, a missing column or a wrong type.

    Example::

        sorted(read_inputs(spark, cfg))  # ['instance_labels', 'instances', 'labels']
    """
    inp = cfg.input
    require_configured(cfg)
    if cfg.task.labels == "graph" and (inp.labels or inp.instance_labels):
        log.warning(
            "task.labels=graph: input.labels / input.instance_labels are validated but "
            "not used (labels come from the co-purchase graph)"
        )
    return {
        name: storage.read_input(spark, getattr(inp, name), name)
        for name in TABLE_ORDER
        if getattr(inp, name)
    }


@dc.dataclass(frozen=True)
class ValidationResult:
    """What :func:`validate_inputs` gives back (read it; the caller copies a dict it adds to).

    Attributes
    ----------
    tables : dict
        ``tables[name]``: the clean rows of a table with its contract columns, a DataFrame
        computed from :attr:`persisted` frames; a pyarrow Table for ``events`` validated on the
        driver. A table validated on the driver by :mod:`pina_spark.validate.tables` is here
        only with ``driver_frames`` (or when a table validated by Spark joined against it).
    quarantine : dict
        ``quarantine[name]``: the other rows, with ``_corrupt_record`` and ``reason`` (a
        pyarrow Table for the tables validated on the driver).
    counts : dict
        ``{table: {"rows_in", "rows_used", "rows_quarantined", "reasons": {reason: n}}}``, the
        counts for the manifest (:func:`pina_spark.validate.rules.reason_counts`).
    clean_arrow : dict
        The clean rows of the tables validated on the driver by
        :mod:`pina_spark.validate.tables`, as pyarrow Tables.
    persisted : tuple
        The persisted intermediate frames, for the caller to ``unpersist()`` when done.
    """

    tables: dict[str, Any]
    quarantine: dict[str, Any]
    counts: dict[str, dict[str, Any]]
    clean_arrow: dict[str, Any]
    persisted: tuple[Any, ...]


def validate_inputs(
    spark,
    cfg,
    *,
    timer=None,
    raw: dict[str, Any] | None = None,
    rows_in: dict[str, int] | None = None,
    on_driver: Sequence[str] = (),
    driver_frames: bool = True,
) -> ValidationResult:
    """Read and validate every configured input table.

    Parameters
    ----------
    spark : SparkSession
    cfg : pina_spark.config.PinaConfig
    timer : pina_spark.storage.manifest.StepTimer, optional
        Records one step ``validate.<table>`` per table (read, tag, count).
    raw : dict, optional
        The frames of :func:`read_inputs` when the caller has read them already.
    rows_in : dict, optional
        Row counts of raw tables the caller has counted already (not counted again).
    on_driver : sequence of str
        Tables validated on the driver in one pyarrow pass (:func:`driver_tables` decides
        which), same reasons and same kept rows as the Spark path. ``events``
        (:mod:`pina_spark.validate.events`, for the ``broadcast`` pair plan, which needs them
        there anyway): ``tables["events"]`` and ``quarantine["events"]`` are then pyarrow
        Tables. ``instances``, ``labels``, ``instance_labels``
        (:mod:`pina_spark.validate.tables`): ``quarantine[name]`` and ``clean_arrow[name]``
        are pyarrow Tables.
    driver_frames : bool
        Make a DataFrame in ``tables`` of the clean rows of each table validated by
        :mod:`pina_spark.validate.tables` (False: the caller makes one from ``clean_arrow``
        where it needs one).

    Returns
    -------
    ValidationResult

    Raises
    ------
    pina_spark.storage.InputError
        a required input not configured, a missing path, a missing column, a wrong type or an
        empty table.
    pina_spark.validate.rules.ValidationInvariantError
        rows in != rows used + rows quarantined.

    Example::

        result = validate_inputs(spark, cfg)
        result.counts["events"]["reasons"]  # {'unknown_item': 3, 'duplicate_event': 1}
    """
    raw = read_inputs(spark, cfg) if raw is None else raw
    tables: dict[str, Any] = {}
    quarantine: dict[str, Any] = {}
    counts: dict[str, dict[str, Any]] = {}
    persisted: list[Any] = []
    clean_ids: dict[str, Any] = {}  # clean ids as pyarrow arrays, where the driver has them
    driver_clean: dict[str, Any] = {}  # clean rows of the tables validated on the driver
    for name in TABLE_ORDER:
        if name not in raw:
            continue
        with timer.step(f"validate.{name}") if timer is not None else contextlib.nullcontext():
            uri = getattr(cfg.input, name)
            n_in = (rows_in or {}).get(name)
            n_in = raw[name].count() if n_in is None else int(n_in)
            if n_in == 0:
                raise storage.InputError(storage.empty_table_message(name, uri))
            if name == "instance_labels" and "labels" not in raw:
                raise storage.InputError("input.instance_labels given without input.labels")
            refs = [u.table for u in RULES[name].unknown]  # the clean tables it joins against
            if name not in on_driver:
                for dep in refs:  # a frame of a table the driver validated
                    if dep not in tables and dep in driver_clean:
                        tables[dep] = storage.frame_from_arrow(spark, driver_clean[dep], dep)
                tagged = _validate_one(name, raw[name], tables, cfg.quality.max_text_chars)
                persisted.append(tagged)
                counts[name] = _count(tagged, name, uri, n_in)
                tables[name], quarantine[name] = _split(tagged, name)
            elif name == "events":
                tables[name], quarantine[name], counts[name] = arrow_events.validate_events(
                    raw[name], _clean_ids(tables, clean_ids, "instances"), n_in, uri
                )
            else:
                clean, quarantine[name], counts[name] = arrow_tables.validate_table(
                    name,
                    _driver_rows(raw[name], uri, name),
                    n_in,
                    uri,
                    cfg.quality.max_text_chars,
                    {t: _clean_ids(tables, clean_ids, t) for t in refs},
                )
                if name in ID_COLUMN:
                    clean_ids[name] = clean.column(ID_COLUMN[name]).combine_chunks()
                driver_clean[name] = clean
                if driver_frames:
                    tables[name] = storage.frame_from_arrow(spark, clean, name)
            _log_counts(name, counts[name])
    return ValidationResult(tables, quarantine, counts, driver_clean, tuple(persisted))


def driver_tables(spark, cfg, raw: dict[str, Any], rows_in: dict[str, int]) -> tuple[str, ...]:
    """Which of :data:`DRIVER_TABLES` are validated on the driver (decided once, before any is
    read): those of at most :data:`DRIVER_MAX_ROWS` rows and :data:`DRIVER_MAX_BYTES` bytes of
    values. Rows and bytes come from the Parquet footers where pyarrow reaches the input (no
    Spark job), else from one Spark aggregation (rows and characters of the string columns);
    the rows are put in ``rows_in`` so validation does not count again.

    Example::

        driver_tables(spark, cfg, read_inputs(spark, cfg), {})
        # ('instances', 'labels', 'instance_labels')
    """
    out = []
    for name in DRIVER_TABLES:
        if name not in raw:
            continue
        uri = getattr(cfg.input, name)
        size = storage.parquet_size(uri) if storage.arrow_readable(uri) else None
        if size is None:
            size = _spark_size(raw[name])
        rows_in[name] = size[0]
        if size[0] <= DRIVER_MAX_ROWS and size[1] <= DRIVER_MAX_BYTES:
            out.append(name)
        else:
            log.info("input %s: %d rows, %d bytes: validated by Spark", name, *size)
    return tuple(out)


def _spark_size(raw) -> tuple[int, int]:
    """(rows, characters of the string columns) of a raw input frame: one Spark job."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    strings = [f.name for f in raw.schema.fields if isinstance(f.dataType, T.StringType)]
    chars = sum((F.coalesce(F.length(F.col(c)), F.lit(0)) for c in strings), F.lit(0))
    r = raw.agg(F.count(F.lit(1)).alias("n"), F.sum(chars).alias("b")).first()
    return int(r["n"]), int(r["b"] or 0)


def count_input(raw, uri: str) -> int:
    """Rows of a raw input table: from the Parquet footers where pyarrow reaches the input (no
    Spark job), else ``raw.count()``.

    Example::

        count_input(read_inputs(spark, cfg)["events"], cfg.input.events)  # 97222
    """
    n = storage.count_rows_arrow(uri) if storage.arrow_readable(uri) else None
    return raw.count() if n is None else n


def _driver_rows(raw, uri: str, name: str):
    """The raw rows of ``name`` on the driver as pyarrow (contract columns, ``_corrupt_record``):
    read by pyarrow where it reaches the Parquet input, else one Spark collect."""
    tbl = storage.read_input_arrow(uri, name)
    if tbl is None:
        cols = [f.name for f in storage.schema(name).fields]
        tbl = storage.collect_arrow(raw.select(*cols, storage.CORRUPT))
    return tbl


def _clean_ids(tables: dict[str, Any], clean_ids: dict[str, Any], name: str):
    """The clean ids of ``name`` (``instances`` or ``labels``) as a pyarrow array: the driver's
    when it validated the table, else one Spark collect."""
    if name not in clean_ids:
        df = tables[name].select(ID_COLUMN[name])
        clean_ids[name] = storage.collect_arrow(df).column(0).combine_chunks()
    return clean_ids[name]


def _validate_one(name: str, raw, tables: dict[str, Any], max_text_chars: int):
    """The tagged rows of one table (persisted), joined against the clean ``tables`` its rules
    name."""
    from pyspark import StorageLevel

    clean = {u.table: tables[u.table] for u in RULES[name].unknown}
    return _tag(raw, name, max_text_chars, clean).persist(StorageLevel.MEMORY_AND_DISK)


def _count(tagged, name: str, uri: str, rows_in: int) -> dict[str, Any]:
    """The counts of one tagged table: one ``groupBy`` of the reasons."""
    from pyspark.sql import functions as F

    by_reason = {
        r[storage.REASON]: int(r["n"])
        for r in tagged.groupBy(storage.REASON).agg(F.count(F.lit(1)).alias("n")).collect()
    }
    return reason_counts(name, uri, rows_in, by_reason)


def _log_counts(name: str, c: dict[str, Any]) -> None:
    log.info(
        "input %s: %d rows in, %d used, %d quarantined %s",
        name,
        c["rows_in"],
        c["rows_used"],
        c["rows_quarantined"],
        c["reasons"],
    )


def publish_quarantine(spark, result: ValidationResult, paths, quality, timer=None) -> None:
    """Publish the quarantine of every table :func:`validate_inputs` validated
    (``quarantine/<table>``, counted again on the published table), then stop where the rows
    cannot be used: every instance quarantined, or a ``quality.*`` gate
    (:func:`~pina_spark.validate.rules.check_quality`). The graph stage and the ``nodes``
    pre-step of a run of another run's models both call it after validating.

    Raises
    ------
    ValidationInvariantError
        The published quarantine's counts are not the counted ones (a bug).
    pina_spark.storage.InputError
        Every instance row quarantined, or a gate.
    """
    counts = result.counts
    for name, q in result.quarantine.items():
        step = timer.step(f"quarantine.{name}") if timer is not None else contextlib.nullcontext()
        with step:
            written = storage.write_quarantine(
                q, paths, name, counts[name]["rows_quarantined"], spark=spark
            )
        if written != counts[name]["reasons"]:
            raise ValidationInvariantError(
                f"quarantine/{name}: wrote {written}, counted {counts[name]['reasons']}"
            )
    inst = counts.get("instances")
    if inst is not None and inst["rows_used"] == 0:
        raise storage.InputError(
            f"input.instances: all {inst['rows_in']} rows were quarantined {inst['reasons']}; "
            f"see {paths.table(storage.QUARANTINE + '/instances')}"
        )
    check_quality(counts, quality, paths.table(storage.QUARANTINE))
