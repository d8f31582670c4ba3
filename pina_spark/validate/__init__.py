"""Input validation: read every configured input table, split it into clean rows and quarantined
rows (each with one ``reason``), and prove that nothing was dropped silently.

Driver side. Every input is read with :func:`pina_spark.storage.read_input` (explicit schemas: a
missing file, a missing column or a wrong column type raises :class:`pina_spark.storage.InputError`
naming the column and the file). An input that is required by the config but not given, or that
has no rows at all, is an :class:`~pina_spark.storage.InputError` too.

Row rules (the first rule a row breaks is its ``reason``; rules are checked in this order):

===================  =========================================================================
reason               rule
===================  =========================================================================
``unparseable``      the reader could not parse the line (``_corrupt_record`` is set)
``missing_id``       an id column is null or blank (instances, labels, pairs); blank is
                     Unicode-aware: only white space of any kind (tab, NBSP, U+3000...),
                     control or format characters
``missing_basket``   events: ``basket_id`` null or blank
``missing_item``     events: ``item_id`` null or blank
``invalid_utf8``     a string column holds U+FFFD: Spark's CSV/JSON readers replace bytes that
                     are not valid UTF-8 by U+FFFD, so the original text is lost; quarantined
                     rather than silently mangled
``invalid_id``       an id holds a control character (``\r``, ``\n``, tab...), a format
                     character (zero-width space, BOM, bidi marks), a line/paragraph separator
                     or a space other than U+0020 (NBSP...): such ids break one-id-per-line
                     exports and never match the same id typed plainly
``missing_text``     instance or label with null or blank text
``text_too_long``    instance or label text longer than ``quality.max_text_chars`` characters
``invalid_split``    instances: ``split`` is not ``train``/``test`` (a null split means ``train``)
``invalid_weight``   events: weight is NaN, +-inf or negative (null weight is allowed)
``unknown_instance`` instance_labels: the instance is not a clean instance row
``unknown_label``    instance_labels: the label is not a clean label row
``unknown_item``     events: the item has no clean instance row
``duplicate_id``     instances/labels: another valid row has the same id (one is kept, see below)
``duplicate_pair``   instance_labels / filter_pairs: the same (instance_id, label_id) again
``duplicate_event``  events: the same (basket_id, item_id) again
===================  =========================================================================

Duplicates are resolved deterministically, whatever the input order or partitioning: among the
*valid* rows of one key, instances/labels keep the row with the smallest (text, split); events
keep the earliest ``event_time`` (nulls last), then the smallest weight; all others are
quarantined. Ids are compared exactly (no trimming or case folding).

Data-quality gates (:func:`check_quality`, ``quality`` config section): after the quarantine
tables are published, a table whose quarantined fraction exceeds
``quality.max_quarantined_fraction`` (default 0.5), or one reason over its
``quality.max_reason_fraction`` limit, stops the graph stage with an :class:`InputError` that cites
every rate (e.g. 100% ``unknown_item``: item ids formatted differently from instance ids).

Baskets of one item are *not* quarantined: they are valid rows that contribute no pair (the graph
stage counts them). Event weights are validated but the co-purchase count is a count of baskets
(see :mod:`pina_spark.stages.graph`).

Invariant, checked in code for every table: ``rows_in == rows_used + rows_quarantined``;
a violation raises :class:`ValidationInvariantError`.

Where the rules run (one implementation of each rule per engine, same reasons and same kept rows,
tested on the same rows): Spark SQL by default; on the driver in pyarrow for the tables the
caller names in ``on_driver``. The graph stage names ``instances``, ``labels`` and
``instance_labels`` when they have at most :data:`DRIVER_MAX_ROWS` rows and
:data:`DRIVER_MAX_BYTES` bytes (:func:`driver_tables`,
:mod:`pina_spark.validate.tables`: no Spark job per table) and ``events`` under the
``broadcast`` pair plan (:mod:`pina_spark.validate.events`).

Examples
--------
>>> from pina_spark.config import config_from_dict
>>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
...     "labels": "l.csv", "instance_labels": "il.csv"}})
>>> tables, quarantine = validate_inputs(spark, cfg)              # doctest: +SKIP
>>> sorted(tables)                                                # doctest: +SKIP
['instance_labels', 'instances', 'labels']
"""

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = [
    "read_inputs",
    "validate_inputs",
    "driver_tables",
    "count_input",
    "reason_counts",
    "tag_event_rows",
    "required_tables",
    "ValidationInvariantError",
    "check_quality",
    "validate_instances",
    "validate_labels",
    "validate_instance_labels",
    "validate_events",
    "validate_filter_pairs",
    "REASONS",
]

REASONS = (
    "unparseable",
    "missing_id",
    "missing_basket",
    "missing_item",
    "invalid_utf8",
    "invalid_id",
    "missing_text",
    "text_too_long",
    "invalid_split",
    "invalid_weight",
    "unknown_instance",
    "unknown_label",
    "unknown_item",
    "duplicate_id",
    "duplicate_pair",
    "duplicate_event",
)

#: the character Spark's text readers substitute for bytes that are not valid UTF-8
REPLACEMENT_CHAR = "\ufffd"
VALID_SPLITS = (storage.SPLIT_TRAIN, storage.SPLIT_TEST)
TABLE_ORDER = ("instances", "labels", "instance_labels", "events", "filter_pairs")


class ValidationInvariantError(RuntimeError):
    """rows in != rows used + rows quarantined for a table (a bug, never bad input)."""


# --------------------------------------------------------------------------- helpers
#: Java regex: characters that make an id blank when nothing else is there (any Unicode white
#: space, control and format characters)
BLANK_CHARS = r"(?U)[\s\p{Z}\p{Cc}\p{Cf}]"
#: Java regex: characters an id may not hold (controls, format characters, line/paragraph
#: separators, any space but U+0020)
BAD_ID_CHARS = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}[\p{Zs}&&[^ ]]]"
#: default of ``quality.max_text_chars``
MAX_TEXT_CHARS = 100_000
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


def _blank(col):
    """Null, empty, or only white space / control / format characters (Unicode-aware: ``F.trim``
    strips ASCII spaces only, so a tab or an NBSP would pass as an id)."""
    from pyspark.sql import functions as F

    return col.isNull() | (F.regexp_replace(col, BLANK_CHARS, "") == "")


def _bad_id(*cols):
    from pyspark.sql import functions as F

    cond = None
    for c in cols:
        one = F.coalesce(F.col(c).rlike(BAD_ID_CHARS), F.lit(False))
        cond = one if cond is None else (cond | one)
    return cond


def _too_long(col, max_chars: int):
    from pyspark.sql import functions as F

    return F.coalesce(F.length(col) > int(max_chars), F.lit(False))


def _has_fffd(*cols):
    from pyspark.sql import functions as F

    cond = None
    for c in cols:
        one = F.coalesce(F.instr(c, REPLACEMENT_CHAR) > 0, F.lit(False))
        cond = one if cond is None else (cond | one)
    return cond


def _tag(df, rules):
    """Add ``reason``: the first ``(condition, reason)`` in ``rules`` that holds, else null."""
    from pyspark.sql import functions as F

    expr = None
    for cond, reason in rules:
        expr = F.when(cond, F.lit(reason)) if expr is None else expr.when(cond, F.lit(reason))
    return df.withColumn(storage.REASON, expr.otherwise(F.lit(None).cast("string")))


def _flag_unknown(tagged, ref_ids, col: str, reason: str):
    """Rows still valid whose ``col`` is not in ``ref_ids`` (a frame of unique ids) get
    ``reason``. A left join against unique keys never duplicates rows."""
    from pyspark.sql import functions as F

    ref = ref_ids.select(F.col(col).alias("_ref_id")).distinct().withColumn("_known", F.lit(True))
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


def _split(tagged, table: str):
    """(clean rows without helper columns, quarantined rows with ``reason``)."""
    from pyspark.sql import functions as F

    cols = [f.name for f in storage.schema(table).fields]
    clean = tagged.filter(F.col(storage.REASON).isNull()).select(*cols)
    quarantine = tagged.filter(F.col(storage.REASON).isNotNull()).select(
        *cols, storage.CORRUPT, storage.REASON
    )
    return clean, quarantine


# --------------------------------------------------------------------------- per table
def _pair_rules():
    """The row rules of an (instance_id, label_id) table: instance_labels and filter_pairs."""
    from pyspark.sql import functions as F

    return [
        (F.col(storage.CORRUPT).isNotNull(), "unparseable"),
        (_blank(F.col(storage.INSTANCE_ID)) | _blank(F.col(storage.LABEL_ID)), "missing_id"),
        (_has_fffd(storage.INSTANCE_ID, storage.LABEL_ID), "invalid_utf8"),
        (_bad_id(storage.INSTANCE_ID, storage.LABEL_ID), "invalid_id"),
    ]


def validate_instances(raw, max_text_chars: int = MAX_TEXT_CHARS):
    """Tag the rows of a raw ``instances`` frame (as returned by ``storage.read_input``).

    Returns the raw frame plus a ``reason`` column (null = clean). A null split becomes
    ``train``.

    Examples
    --------
    >>> raw = storage.read_input(spark, "instances.csv", "instances")        # doctest: +SKIP
    >>> validate_instances(raw).filter("reason is null").count()        # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    raw = raw.withColumn(
        storage.SPLIT,
        F.when(_blank(F.col(storage.SPLIT)), F.lit(storage.SPLIT_TRAIN)).otherwise(
            F.col(storage.SPLIT)
        ),
    )
    tagged = _tag(
        raw,
        [
            (F.col(storage.CORRUPT).isNotNull(), "unparseable"),
            (_blank(F.col(storage.INSTANCE_ID)), "missing_id"),
            (_has_fffd(storage.INSTANCE_ID, storage.TEXT, storage.SPLIT), "invalid_utf8"),
            (_bad_id(storage.INSTANCE_ID), "invalid_id"),
            (_blank(F.col(storage.TEXT)), "missing_text"),
            (_too_long(F.col(storage.TEXT), max_text_chars), "text_too_long"),
            (~F.col(storage.SPLIT).isin(*VALID_SPLITS), "invalid_split"),
        ],
    )
    return _flag_duplicates(
        tagged,
        [storage.INSTANCE_ID],
        [F.col(storage.TEXT).asc_nulls_last(), F.col(storage.SPLIT).asc_nulls_last()],
        "duplicate_id",
    )


def validate_labels(raw, max_text_chars: int = MAX_TEXT_CHARS):
    """Tag the rows of a raw ``labels`` frame (``reason`` null = clean).

    Examples
    --------
    >>> validate_labels(storage.read_input(spark, "labels.csv", "labels"))   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    tagged = _tag(
        raw,
        [
            (F.col(storage.CORRUPT).isNotNull(), "unparseable"),
            (_blank(F.col(storage.LABEL_ID)), "missing_id"),
            (_has_fffd(storage.LABEL_ID, storage.TEXT), "invalid_utf8"),
            (_bad_id(storage.LABEL_ID), "invalid_id"),
            (_blank(F.col(storage.TEXT)), "missing_text"),
            (_too_long(F.col(storage.TEXT), max_text_chars), "text_too_long"),
        ],
    )
    return _flag_duplicates(
        tagged, [storage.LABEL_ID], [F.col(storage.TEXT).asc_nulls_last()], "duplicate_id"
    )


def validate_instance_labels(raw, instances, labels):
    """Tag ``instance_labels`` rows against the clean ``instances`` and ``labels`` frames.

    Examples
    --------
    >>> validate_instance_labels(raw, clean_instances, clean_labels)   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    tagged = _tag(raw, _pair_rules())
    tagged = _flag_unknown(tagged, instances, storage.INSTANCE_ID, "unknown_instance")
    tagged = _flag_unknown(tagged, labels, storage.LABEL_ID, "unknown_label")
    return _flag_duplicates(
        tagged, [storage.INSTANCE_ID, storage.LABEL_ID], [F.lit(1)], "duplicate_pair"
    )


def tag_event_rows(raw):
    """The row rules of ``events`` (every reason but ``unknown_item`` and ``duplicate_event``,
    which need other rows): the raw frame plus ``reason``. Shared by :func:`validate_events` and
    the driver-side pass of :mod:`pina_spark.validate.events`.

    Examples
    --------
    >>> tag_event_rows(storage.read_input(spark, "events.csv", "events"))  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    w = F.col(storage.WEIGHT)
    bad_weight = w.isNotNull() & (F.isnan(w) | (w == float("inf")) | (w == float("-inf")) | (w < 0))
    return _tag(
        raw,
        [
            (F.col(storage.CORRUPT).isNotNull(), "unparseable"),
            (_blank(F.col(storage.BASKET_ID)), "missing_basket"),
            (_blank(F.col(storage.ITEM_ID)), "missing_item"),
            (_has_fffd(storage.BASKET_ID, storage.ITEM_ID, storage.EVENT_TIME), "invalid_utf8"),
            (_bad_id(storage.BASKET_ID, storage.ITEM_ID), "invalid_id"),
            (bad_weight, "invalid_weight"),
        ],
    )


def validate_events(raw, instances):
    """Tag ``events`` rows against the clean ``instances`` frame.

    Examples
    --------
    >>> validate_events(storage.read_input(spark, "events.csv", "events"),
    ...                 clean_instances)  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    tagged = _flag_unknown(
        tag_event_rows(raw),
        instances.select(F.col(storage.INSTANCE_ID).alias(storage.ITEM_ID)),
        storage.ITEM_ID,
        "unknown_item",
    )
    return _flag_duplicates(
        tagged,
        [storage.BASKET_ID, storage.ITEM_ID],
        [F.col(storage.EVENT_TIME).asc_nulls_last(), F.col(storage.WEIGHT).asc_nulls_last()],
        "duplicate_event",
    )


def validate_filter_pairs(raw):
    """Tag ``filter_pairs`` rows (pairs need not be known instances/labels: removing a pair that
    is never predicted is harmless).

    Examples
    --------
    >>> validate_filter_pairs(storage.read_input(spark, "pairs.csv", "filter_pairs"))  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    tagged = _tag(raw, _pair_rules())
    return _flag_duplicates(
        tagged, [storage.INSTANCE_ID, storage.LABEL_ID], [F.lit(1)], "duplicate_pair"
    )


# --------------------------------------------------------------------------- driver entry
def required_tables(cfg) -> Tuple[str, ...]:
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


def read_inputs(spark, cfg) -> Dict[str, Any]:
    """The raw frames of every configured input table (:func:`pina_spark.storage.read_input`), after
    checking that the tables the config needs are configured.

    Raises
    ------
    pina_spark.storage.InputError
        a required input not configured, a missing path, a missing column or a wrong type.

    Examples
    --------
    >>> sorted(read_inputs(spark, cfg))                                  # doctest: +SKIP
    ['instance_labels', 'instances', 'labels']
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


def validate_inputs(
    spark,
    cfg,
    stats: Optional[Dict[str, Any]] = None,
    persisted: Optional[List[Any]] = None,
    timer=None,
    raw: Optional[Dict[str, Any]] = None,
    rows_in: Optional[Dict[str, int]] = None,
    on_driver: Sequence[str] = (),
    clean_arrow: Optional[Dict[str, Any]] = None,
):
    """Read and validate every configured input table.

    Parameters
    ----------
    spark : SparkSession
    cfg : pina_spark.config.PinaConfig
    stats : dict, optional
        Filled with ``{table: {"rows_in", "rows_used", "rows_quarantined", "reasons": {reason:
        n}}}`` (the counts for the manifest).
    persisted : list, optional
        Receives the persisted intermediate frames so the caller can ``unpersist()`` them when
        done (the returned frames are computed from them).
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
        (:mod:`pina_spark.validate.tables`): ``quarantine[name]`` is a pyarrow Table and
        ``tables[name]`` a DataFrame of the driver's clean rows.
    clean_arrow : dict, optional
        Receives the clean rows of the tables validated on the driver as pyarrow Tables; those
        tables are then not in ``tables`` (no DataFrame is made for them here).

    Returns
    -------
    (tables, quarantine) : (dict, dict)
        ``tables[name]``: clean rows with the table's contract columns (persisted);
        ``quarantine[name]``: the other rows with ``_corrupt_record`` and ``reason``.

    Raises
    ------
    pina_spark.storage.InputError
        a required input not configured, a missing path, a missing column, a wrong type or an
        empty table.
    ValidationInvariantError
        rows in != rows used + rows quarantined.

    Examples
    --------
    >>> st = {}
    >>> tables, quarantine = validate_inputs(spark, cfg, st)            # doctest: +SKIP
    >>> st["events"]["reasons"]                                          # doctest: +SKIP
    {'unknown_item': 3, 'duplicate_event': 1}
    """
    raw = read_inputs(spark, cfg) if raw is None else raw
    tables: Dict[str, Any] = {}
    quarantine: Dict[str, Any] = {}
    counts: Dict[str, Dict[str, Any]] = {}
    clean_ids: Dict[str, Any] = {}  # clean ids as pyarrow arrays, where the driver has them
    driver_clean: Dict[str, Any] = {}  # clean rows of the tables validated on the driver
    for name in TABLE_ORDER:
        if name not in raw:
            continue
        with timer.step(f"validate.{name}") if timer is not None else _no_timer():
            uri = getattr(cfg.input, name)
            n_in = (rows_in or {}).get(name)
            n_in = raw[name].count() if n_in is None else int(n_in)
            if n_in == 0:
                raise storage.InputError(
                    f"input.{name}: {uri} has no rows (an empty input table is an error)"
                )
            if name == "instance_labels" and "labels" not in raw:
                raise storage.InputError("input.instance_labels given without input.labels")
            if name not in on_driver:
                for dep in _DEPENDS_ON.get(name, ()):  # a frame of a table the driver validated
                    if dep not in tables and dep in driver_clean:
                        tables[dep] = storage.frame_from_arrow(spark, driver_clean[dep], dep)
                _validate_one(
                    name,
                    raw,
                    tables,
                    quarantine,
                    counts,
                    uri,
                    persisted,
                    cfg.quality.max_text_chars,
                    n_in,
                )
            elif name == "events":
                from pina_spark.validate import events as collected_events

                tables[name], quarantine[name], counts[name] = collected_events.validate_events(
                    raw[name], _clean_ids(tables, clean_ids, "instances"), n_in, uri
                )
            else:
                from pina_spark.validate import tables as collected_tables

                clean, quarantine[name], counts[name] = collected_tables.validate_table(
                    name,
                    _driver_rows(raw[name], uri, name),
                    n_in,
                    uri,
                    cfg.quality.max_text_chars,
                    {
                        t: _clean_ids(tables, clean_ids, t)
                        for t in ("instances", "labels")
                        if name == "instance_labels"
                    },
                )
                if name in _ID_COLUMN:
                    clean_ids[name] = clean.column(_ID_COLUMN[name]).combine_chunks()
                driver_clean[name] = clean
                if clean_arrow is not None:  # the caller makes a frame where it needs one
                    clean_arrow[name] = clean
                else:
                    tables[name] = storage.frame_from_arrow(spark, clean, name)
            _log_counts(name, counts[name])
    if stats is not None:
        stats.update(counts)
    return tables, quarantine


#: advice added to a gate error per reason
_ADVICE = {
    "unknown_item": "events.item_id must be an instance_id of input.instances, formatted "
    "alike (zero padding, case, prefixes)",
    "unknown_instance": "instance_labels.instance_id must be an instance_id of input.instances",
    "unknown_label": "instance_labels.label_id must be a label_id of input.labels",
    "unparseable": "check the file's format, delimiter and quoting",
}


def check_quality(counts: Dict[str, Dict[str, Any]], quality, where: str = "") -> None:
    """Data-quality gates over the counts of :func:`validate_inputs`.

    Raises
    ------
    pina_spark.storage.InputError
        A table's quarantined fraction is above ``quality.max_quarantined_fraction``, or one
        reason's fraction above its ``quality.max_reason_fraction`` limit; the message cites
        every offending rate, the key to change and, per reason, what to check.

    Examples
    --------
    >>> from pina_spark.config import QualityConfig
    >>> check_quality({"events": {"rows_in": 4, "rows_quarantined": 4,
    ...                           "reasons": {"unknown_item": 4}}},
    ...               QualityConfig())  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    pina_spark.storage.InputError: data-quality gate: events: 4 of 4 rows quarantined (100.0% > 50.0%,
    quality.max_quarantined_fraction): unknown_item 100.0%. unknown_item: events.item_id must be
    an instance_id of input.instances, formatted alike (zero padding, case, prefixes)
    """
    problems, reasons_seen = [], []
    for table, c in counts.items():
        n = max(1, int(c["rows_in"]))
        rates = ", ".join(
            f"{r} {k / n:.1%}" for r, k in sorted(c["reasons"].items(), key=lambda x: -x[1])
        )
        q = int(c["rows_quarantined"])
        if q / n > quality.max_quarantined_fraction:
            problems.append(
                f"{table}: {q} of {n} rows quarantined ({q / n:.1%} > "
                f"{quality.max_quarantined_fraction:.1%}, "
                f"quality.max_quarantined_fraction): {rates}"
            )
            reasons_seen += list(c["reasons"])
        for r, k in c["reasons"].items():
            lim = quality.limit(table, r)
            if lim is not None and k / n > lim:
                problems.append(
                    f"{table}.{r}: {k} of {n} rows ({k / n:.1%} > {lim:.1%}, "
                    f"quality.max_reason_fraction)"
                )
                reasons_seen.append(r)
    if problems:
        advice = [f"{r}: {_ADVICE[r]}" for r in dict.fromkeys(reasons_seen) if r in _ADVICE]
        raise storage.InputError(
            "data-quality gate: "
            + "; ".join(problems)
            + ". "
            + " ".join(advice)
            + (f" (quarantined rows: {where})" if where else "")
        )


def driver_tables(spark, cfg, raw: Dict[str, Any], rows_in: Dict[str, int]) -> Tuple[str, ...]:
    """Which of :data:`DRIVER_TABLES` are validated on the driver (decided once, before any is
    read): those of at most :data:`DRIVER_MAX_ROWS` rows and :data:`DRIVER_MAX_BYTES` bytes of
    values. Rows and bytes come from the Parquet footers where pyarrow reaches the input (no
    Spark job), else from one Spark aggregation (rows and characters of the string columns);
    the rows are put in ``rows_in`` so validation does not count again.

    Examples
    --------
    >>> driver_tables(spark, cfg, read_inputs(spark, cfg), {})           # doctest: +SKIP
    ('instances', 'labels', 'instance_labels')
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


def _spark_size(raw) -> Tuple[int, int]:
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

    Examples
    --------
    >>> count_input(read_inputs(spark, cfg)["events"], cfg.input.events)  # doctest: +SKIP
    97222
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


#: the clean tables the Spark rules of a table join against
_DEPENDS_ON = {"instance_labels": ("instances", "labels"), "events": ("instances",)}
#: the id column of the tables whose clean ids other tables are checked against
_ID_COLUMN = {"instances": storage.INSTANCE_ID, "labels": storage.LABEL_ID}


def _clean_ids(tables: Dict[str, Any], clean_ids: Dict[str, Any], name: str):
    """The clean ids of ``name`` (``instances`` or ``labels``) as a pyarrow array: the driver's
    when it validated the table, else one Spark collect."""
    if name not in clean_ids:
        df = tables[name].select(_ID_COLUMN[name])
        clean_ids[name] = storage.collect_arrow(df).column(0).combine_chunks()
    return clean_ids[name]


def _no_timer():
    import contextlib

    return contextlib.nullcontext()


def _validate_one(name, raw, tables, quarantine, counts, uri, persisted, max_text_chars, rows_in):
    """Tag, persist and count one table (fills ``tables``, ``quarantine``, ``counts``)."""
    from pyspark import StorageLevel

    if name == "instances":
        tagged = validate_instances(raw[name], max_text_chars)
    elif name == "labels":
        tagged = validate_labels(raw[name], max_text_chars)
    elif name == "instance_labels":
        tagged = validate_instance_labels(raw[name], tables["instances"], tables["labels"])
    elif name == "events":
        tagged = validate_events(raw[name], tables["instances"])
    else:
        tagged = validate_filter_pairs(raw[name])
    tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    if persisted is not None:
        persisted.append(tagged)
    from pyspark.sql import functions as F

    by_reason = {
        r[storage.REASON]: int(r["n"])
        for r in tagged.groupBy(storage.REASON).agg(F.count(F.lit(1)).alias("n")).collect()
    }
    counts[name] = reason_counts(name, uri, rows_in, by_reason)
    tables[name], quarantine[name] = _split(tagged, name)


def _log_counts(name: str, c: Dict[str, Any]) -> None:
    log.info(
        "input %s: %d rows in, %d used, %d quarantined %s",
        name,
        c["rows_in"],
        c["rows_used"],
        c["rows_quarantined"],
        c["reasons"],
    )


def reason_counts(
    table: str, uri: str, rows_in: int, by_reason: Dict[Optional[str], int]
) -> Dict[str, Any]:
    """The manifest counts of one table from its rows per reason (``None``: used), checking
    the rows-in = used + quarantined invariant.

    Examples
    --------
    >>> reason_counts("events", "e.csv", 3, {None: 2, "unknown_item": 1})["rows_used"]
    2
    >>> reason_counts("events", "e.csv", 4, {None: 2, "unknown_item": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.validate.ValidationInvariantError: input.events: 4 rows in but 2 used + 1 ...
    """
    by_reason = dict(by_reason)
    used = by_reason.pop(None, 0)
    quarantined = sum(by_reason.values())
    if used + quarantined != rows_in:
        raise ValidationInvariantError(
            f"input.{table}: {rows_in} rows in but {used} used + {quarantined} quarantined "
            f"= {used + quarantined} ({uri})"
        )
    return {
        "rows_in": int(rows_in),
        "rows_used": int(used),
        "rows_quarantined": int(quarantined),
        "reasons": dict(sorted(by_reason.items())),
    }
