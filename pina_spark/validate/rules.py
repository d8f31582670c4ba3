"""The validation rules, written once: one table that the Spark path
(:mod:`pina_spark.validate.spark`) and the pyarrow path on the driver
(:mod:`pina_spark.validate.tables`, :mod:`pina_spark.validate.events`) both read.

Each input table has a :class:`TableRules`: its row rules (:class:`RowRule`, checked in order;
the first rule a row breaks is its ``reason``), the clean tables its ids must be in
(:class:`Unknown`) and which of the rows sharing a key are kept (:class:`Duplicate`). A row rule
names a :class:`Check`, a test of one column's values whose Spark Column expression and pyarrow
compute expression sit side by side in :data:`CHECKS`, so both engines give the same reason for
the same row (``tests/test_validate.py`` runs both on the same rows).

===================  =========================================================================
reason               rule
===================  =========================================================================
``invalid_utf8``     the reader could not parse the line and its bytes are not UTF-8 (JSON
                     lines: Spark's parser refuses such bytes; CSV: the line holds U+FFFD):
                     the encoding is the first thing to fix
``unbalanced_quote`` a CSV record with a line break outside its well-formed quoted fields
                     (the reader could not parse it, or a value kept its opening quote: see
                     :func:`pina_spark.storage.inputs.read_input`): a quoted field that did not
                     close where it should ran on over the next lines, whose rows are in this
                     record, not counted. ``quality.max_reason_fraction`` is 0 for it unless set:
                     one such record stops the run
``unparseable``      the reader could not parse the line (``_corrupt_record`` is set)
``missing_id``       an id column is null or blank (instances, labels, pairs); blank is
                     Unicode-aware: only white space of any kind (tab, NBSP, U+3000...),
                     control or format characters
``missing_basket``   events: ``basket_id`` null or blank
``missing_item``     events: ``item_id`` null or blank
``invalid_utf8``     a string column holds U+FFFD or bytes that are not valid UTF-8: Spark's
                     CSV reader replaces such bytes by U+FFFD (the original text is lost),
                     Parquet keeps them as they are (a later stage would fail on them);
                     quarantined rather than silently mangled. The quarantine tables hold
                     such values escaped (``\\xff``, :mod:`pina_spark.validate.utf8`)
``invalid_id``       an id holds a control character (``\\r``, ``\\n``, tab...), a format
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
*valid* rows of one key, the row first in :attr:`Duplicate.order` (ascending, nulls last) is
kept: instances/labels keep the row with the smallest (text, split); events keep the earliest
``event_time``, then the smallest weight; all others are quarantined. Ids are compared exactly
(no trimming or case folding).

Both paths count their rows with :func:`reason_counts` (rows in = rows used + rows quarantined,
else :class:`ValidationInvariantError`), and :func:`check_quality` gates the counts.

Examples
--------
>>> [r.reason for r in RULES["labels"].rows]  # doctest: +NORMALIZE_WHITESPACE
['invalid_utf8', 'unbalanced_quote', 'unparseable', 'missing_id', 'invalid_utf8', 'invalid_id',
 'missing_text', 'text_too_long']
>>> import pyarrow as pa
>>> t = pa.table({"label_id": ["a", "a\\u200b", "\\u3000"], "text": ["x", "y", "z"]})
>>> RULES["labels"].rows[3].arrow_mask(t, MAX_TEXT_CHARS).to_pylist()  # missing_id
[False, False, True]
>>> {r.reason for t in RULES.values() for r in (*t.rows, *t.unknown, t.duplicate)} == set(REASONS)
True
"""

import dataclasses as dc
from collections.abc import Callable
from typing import Any

from pina_spark import storage
from pina_spark.config import QUARANTINE_REASONS
from pina_spark.storage.inputs import (
    LINE_BREAK,
    QUOTED_FIELD,
    QUOTED_FIELD_JAVA,
    TRAILING_BREAKS,
)
from pina_spark.validate.utf8 import REPLACEMENT_CHAR, invalid_utf8_mask

__all__ = [
    "REASONS",
    "TABLE_ORDER",
    "ID_COLUMN",
    "REPLACEMENT_CHAR",
    "VALID_SPLITS",
    "BLANK_CHARS",
    "BLANK_ONLY",
    "BAD_ID_CHARS",
    "BAD_ID",
    "MAX_TEXT_CHARS",
    "Check",
    "CHECKS",
    "RowRule",
    "Unknown",
    "Duplicate",
    "TableRules",
    "RULES",
    "column",
    "per_value",
    "ValidationInvariantError",
    "reason_counts",
    "check_quality",
]

#: every reason a rule gives (the vocabulary is the config's: ``quality.max_reason_fraction``
#: takes these names)
REASONS = QUARANTINE_REASONS
#: the input tables, in the order they are validated (a table's rules may need the clean rows
#: of the tables before it)
TABLE_ORDER = ("instances", "labels", "instance_labels", "events", "filter_pairs")
#: the id column of the tables whose clean ids other tables are checked against
ID_COLUMN = {"instances": storage.INSTANCE_ID, "labels": storage.LABEL_ID}

VALID_SPLITS = (storage.SPLIT_TRAIN, storage.SPLIT_TEST)
#: Java regex: characters that make an id blank when nothing else is there (any Unicode white
#: space, control and format characters)
BLANK_CHARS = r"(?U)[\s\p{Z}\p{Cc}\p{Cf}]"
#: RE2 (pyarrow) form of :data:`BLANK_CHARS`, a whole value of them (Java's ``(?U)\s`` is the
#: Unicode White_Space property, inside Z and Cc)
BLANK_ONLY = r"^[\p{Z}\p{Cc}\p{Cf}]*$"
#: Java regex: characters an id may not hold (controls, format characters, line/paragraph
#: separators, any space but U+0020)
BAD_ID_CHARS = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}[\p{Zs}&&[^ ]]]"
#: RE2 form of :data:`BAD_ID_CHARS` (RE2 has no class intersection: the Zs spaces but U+0020
#: are listed). RE2 may know newer Unicode format characters than the JVM's regex tables, so
#: an id holding a character assigned after the JVM's Unicode version is ``invalid_id`` on the
#: pyarrow path only.
BAD_ID = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\x{00A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]"
#: default of ``quality.max_text_chars``
MAX_TEXT_CHARS = 100_000


# --------------------------------------------------------------------------- checks
@dc.dataclass(frozen=True)
class Check:
    """A test of one column's values, in both engines.

    Attributes
    ----------
    spark : callable
        ``(column name, max_text_chars) -> pyspark Column``: true where the test holds,
        never null.
    arrow : callable
        ``(pyarrow array, max_text_chars) -> boolean array``: the same test; may be null on a
        null value.
    if_null : bool
        What a null value gives (fills the pyarrow test's nulls).
    """

    spark: Callable[[str, int], Any]
    arrow: Callable[[Any, int], Any]
    if_null: bool


def _corrupt_spark(col: str, max_chars: int):
    from pyspark.sql import functions as F

    return F.col(col).isNotNull()


def _corrupt_arrow(values, max_chars: int):
    import pyarrow.compute as pc

    return pc.is_valid(values)


def _spans_lines_spark(col: str, max_chars: int):
    """A raw record with a line break outside its well-formed quoted fields, trailing line
    breaks aside (Spark 3.5 keeps a CR-only file's ``\\r``): a quote ran the record on over
    lines. A record that is corrupt for another reason (a cell too many) while a closed quoted
    field holds a line break is not this. :func:`pina_spark.storage.inputs.quote_ran_on` is
    the same test in Python."""
    from pyspark.sql import functions as F

    v = F.regexp_replace(F.col(col), TRAILING_BREAKS, "")
    for _ in range(2):
        v = F.regexp_replace(v, QUOTED_FIELD_JAVA, "$1$2")
    return F.col(col).isNotNull() & v.rlike(LINE_BREAK)


def _spans_lines_arrow(values, max_chars: int):
    import pyarrow.compute as pc

    v = pc.replace_substring_regex(values, pattern=TRAILING_BREAKS, replacement="")
    for _ in range(2):
        v = pc.replace_substring_regex(v, pattern=QUOTED_FIELD, replacement=r"\1\2")
    return pc.match_substring_regex(v, LINE_BREAK)


def _blank_spark(col: str, max_chars: int):
    """Null, empty, or only white space / control / format characters (Unicode-aware:
    ``F.trim`` strips ASCII spaces only, so a tab or an NBSP would pass as an id)."""
    from pyspark.sql import functions as F

    c = F.col(col)
    return c.isNull() | (F.regexp_replace(c, BLANK_CHARS, "") == "")


def _blank_arrow(values, max_chars: int):
    import pyarrow.compute as pc

    return pc.or_(
        pc.is_null(values), pc.fill_null(pc.match_substring_regex(values, BLANK_ONLY), True)
    )


def _fffd_spark(col: str, max_chars: int):
    """U+FFFD, or bytes that are not UTF-8 (Parquet strings are never decoded on read).
    ``rlike`` matches on the Java string, which decodes invalid bytes to U+FFFD; ``instr``
    compares bytes and would miss them. The same on pyspark 3.5 and 4.x."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col(col).rlike(REPLACEMENT_CHAR), F.lit(False))


def _fffd_arrow(values, max_chars: int):
    """U+FFFD or bytes that are not UTF-8, as :func:`_fffd_spark` (pyarrow does not check
    the UTF-8 of a Parquet string column on read)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    invalid = pa.chunked_array(
        [pa.array(invalid_utf8_mask(c), pa.bool_()) for c in chunks], pa.bool_()
    )
    if isinstance(values, pa.Array):
        invalid = invalid.combine_chunks()
    # match_substring on a value with invalid bytes compares bytes: harmless, it is already true
    return pc.or_(invalid, pc.match_substring(values, REPLACEMENT_CHAR))


def _bad_id_spark(col: str, max_chars: int):
    from pyspark.sql import functions as F

    return F.coalesce(F.col(col).rlike(BAD_ID_CHARS), F.lit(False))


def _bad_id_arrow(values, max_chars: int):
    import pyarrow.compute as pc

    return pc.match_substring_regex(values, BAD_ID)


def _too_long_spark(col: str, max_chars: int):
    from pyspark.sql import functions as F

    return F.coalesce(F.length(F.col(col)) > int(max_chars), F.lit(False))


def _too_long_arrow(values, max_chars: int):
    import pyarrow.compute as pc

    return pc.greater(pc.utf8_length(values), int(max_chars))


def _bad_split_spark(col: str, max_chars: int):
    from pyspark.sql import functions as F

    return ~F.col(col).isin(*VALID_SPLITS)


def _bad_split_arrow(values, max_chars: int):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.invert(pc.fill_null(pc.is_in(values, value_set=pa.array(VALID_SPLITS)), False))


def _bad_weight_spark(col: str, max_chars: int):
    from pyspark.sql import functions as F

    w = F.col(col)
    return w.isNotNull() & (F.isnan(w) | (w == float("inf")) | (w == float("-inf")) | (w < 0))


def _bad_weight_arrow(values, max_chars: int):
    import pyarrow as pa
    import pyarrow.compute as pc

    w = values.cast(pa.float64())
    return pc.or_(pc.or_(pc.is_nan(w), pc.is_inf(w)), pc.less(w, 0.0))


#: every check a row rule may name
CHECKS: dict[str, Check] = {
    "corrupt": Check(_corrupt_spark, _corrupt_arrow, if_null=False),
    "spans_lines": Check(_spans_lines_spark, _spans_lines_arrow, if_null=False),
    "blank": Check(_blank_spark, _blank_arrow, if_null=True),
    "fffd": Check(_fffd_spark, _fffd_arrow, if_null=False),
    "bad_id": Check(_bad_id_spark, _bad_id_arrow, if_null=False),
    "too_long": Check(_too_long_spark, _too_long_arrow, if_null=False),
    "bad_split": Check(_bad_split_spark, _bad_split_arrow, if_null=True),
    "bad_weight": Check(_bad_weight_spark, _bad_weight_arrow, if_null=False),
}


def column(tbl, name: str):
    """One column of a pyarrow Table as a single array."""
    return tbl.column(name).combine_chunks()


def per_value(enc, test, if_null: bool):
    """The boolean ``test`` of a dictionary-encoded column, evaluated once per distinct value
    and spread back to the rows (``if_null`` on null rows).

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> enc = pc.dictionary_encode(pa.array(["a", " ", "a", None]))
    >>> per_value(enc, lambda v: CHECKS["blank"].arrow(v, 0), True).to_pylist()
    [False, True, False, True]
    """
    import pyarrow.compute as pc

    return pc.fill_null(test(enc.dictionary).take(enc.indices), if_null)


# --------------------------------------------------------------------------- rule table
@dc.dataclass(frozen=True)
class RowRule:
    """``reason`` for a row where :data:`CHECKS` ``[check]`` holds for any of ``columns``."""

    reason: str
    check: str
    columns: tuple[str, ...]

    def spark_mask(self, max_text_chars: int):
        """The rule as a pyspark Column (true: the row breaks it; never null)."""
        test = CHECKS[self.check].spark
        cond = None
        for c in self.columns:
            one = test(c, max_text_chars)
            cond = one if cond is None else (cond | one)
        return cond

    def arrow_mask(self, tbl, max_text_chars: int, enc: dict[str, Any] | None = None):
        """The rule over a pyarrow Table (a boolean array, never null); a column found in
        ``enc`` (dictionary-encoded once by the caller) is tested once per distinct value."""
        import pyarrow.compute as pc

        chk = CHECKS[self.check]
        out = None
        for c in self.columns:
            if enc is not None and c in enc:
                one = per_value(enc[c], lambda v: chk.arrow(v, max_text_chars), chk.if_null)
            else:
                one = pc.fill_null(chk.arrow(column(tbl, c), max_text_chars), chk.if_null)
            out = one if out is None else pc.or_(out, one)
        return out


@dc.dataclass(frozen=True)
class Unknown:
    """``reason`` for a row still valid whose ``column`` is not an id (:data:`ID_COLUMN`) of a
    clean row of ``table``."""

    column: str
    table: str
    reason: str


@dc.dataclass(frozen=True)
class Duplicate:
    """``reason`` for every valid row but the first of its ``keys`` among the valid rows,
    ordered by ``order`` ascending, nulls last (rows tied on keys and order are identical in
    the contract columns, so which of them is kept does not matter)."""

    keys: tuple[str, ...]
    order: tuple[str, ...]
    reason: str


@dc.dataclass(frozen=True)
class TableRules:
    """The rules of one input table, applied in this order: ``defaults`` (a blank value of the
    column becomes the given value), ``rows``, ``unknown``, ``duplicate``."""

    rows: tuple[RowRule, ...]
    duplicate: Duplicate
    unknown: tuple[Unknown, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()


_ID, _LABEL = storage.INSTANCE_ID, storage.LABEL_ID
#: an unparseable line that is not UTF-8: the bytes are its first defect
_BAD_BYTES_LINE = RowRule("invalid_utf8", "fffd", (storage.CORRUPT,))
#: a CSV record with a line break outside its well-formed quoted fields (an unparseable one, or
#: one the reader marked because a value kept its opening quote): a quote ran it on over the
#: lines after it, so it holds rows that are not counted
_RAN_ON = RowRule("unbalanced_quote", "spans_lines", (storage.CORRUPT,))
_UNPARSEABLE = RowRule("unparseable", "corrupt", (storage.CORRUPT,))
_PAIR_ROWS = (
    _BAD_BYTES_LINE,
    _RAN_ON,
    _UNPARSEABLE,
    RowRule("missing_id", "blank", (_ID, _LABEL)),
    RowRule("invalid_utf8", "fffd", (_ID, _LABEL)),
    RowRule("invalid_id", "bad_id", (_ID, _LABEL)),
)
_PAIR_DUPLICATE = Duplicate((_ID, _LABEL), (), "duplicate_pair")

#: the rules of every input table
RULES: dict[str, TableRules] = {
    "instances": TableRules(
        defaults=((storage.SPLIT, storage.SPLIT_TRAIN),),
        rows=(
            _BAD_BYTES_LINE,
            _RAN_ON,
            _UNPARSEABLE,
            RowRule("missing_id", "blank", (_ID,)),
            RowRule("invalid_utf8", "fffd", (_ID, storage.TEXT, storage.SPLIT)),
            RowRule("invalid_id", "bad_id", (_ID,)),
            RowRule("missing_text", "blank", (storage.TEXT,)),
            RowRule("text_too_long", "too_long", (storage.TEXT,)),
            RowRule("invalid_split", "bad_split", (storage.SPLIT,)),
        ),
        duplicate=Duplicate((_ID,), (storage.TEXT, storage.SPLIT), "duplicate_id"),
    ),
    "labels": TableRules(
        rows=(
            _BAD_BYTES_LINE,
            _RAN_ON,
            _UNPARSEABLE,
            RowRule("missing_id", "blank", (_LABEL,)),
            RowRule("invalid_utf8", "fffd", (_LABEL, storage.TEXT)),
            RowRule("invalid_id", "bad_id", (_LABEL,)),
            RowRule("missing_text", "blank", (storage.TEXT,)),
            RowRule("text_too_long", "too_long", (storage.TEXT,)),
        ),
        duplicate=Duplicate((_LABEL,), (storage.TEXT,), "duplicate_id"),
    ),
    "instance_labels": TableRules(
        rows=_PAIR_ROWS,
        unknown=(
            Unknown(_ID, "instances", "unknown_instance"),
            Unknown(_LABEL, "labels", "unknown_label"),
        ),
        duplicate=_PAIR_DUPLICATE,
    ),
    "events": TableRules(
        rows=(
            _BAD_BYTES_LINE,
            _RAN_ON,
            _UNPARSEABLE,
            RowRule("missing_basket", "blank", (storage.BASKET_ID,)),
            RowRule("missing_item", "blank", (storage.ITEM_ID,)),
            RowRule(
                "invalid_utf8", "fffd", (storage.BASKET_ID, storage.ITEM_ID, storage.EVENT_TIME)
            ),
            RowRule("invalid_id", "bad_id", (storage.BASKET_ID, storage.ITEM_ID)),
            RowRule("invalid_weight", "bad_weight", (storage.WEIGHT,)),
        ),
        unknown=(Unknown(storage.ITEM_ID, "instances", "unknown_item"),),
        duplicate=Duplicate(
            (storage.BASKET_ID, storage.ITEM_ID),
            (storage.EVENT_TIME, storage.WEIGHT),
            "duplicate_event",
        ),
    ),
    # pairs need not be known instances/labels: removing a pair never predicted is harmless
    "filter_pairs": TableRules(rows=_PAIR_ROWS, duplicate=_PAIR_DUPLICATE),
}


# --------------------------------------------------------------------------- counts and gates
class ValidationInvariantError(RuntimeError):
    """rows in != rows used + rows quarantined for a table (a bug, never bad input)."""


def reason_counts(
    table: str, uri: str, rows_in: int, by_reason: dict[str | None, int]
) -> dict[str, Any]:
    """The manifest counts of one table from its rows per reason (``None``: used), checking
    the rows-in = used + quarantined invariant.

    Examples
    --------
    >>> reason_counts("events", "e.csv", 3, {None: 2, "unknown_item": 1})["rows_used"]
    2
    >>> reason_counts("events", "e.csv", 4, {None: 2, "unknown_item": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.validate.rules.ValidationInvariantError: input.events: 4 rows in but 2 used + 1 ...
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


#: advice added to a gate error per reason
_ADVICE = {
    "unknown_item": "events.item_id must be an instance_id of input.instances, formatted "
    "alike (zero padding, case, prefixes)",
    "unknown_instance": "instance_labels.instance_id must be an instance_id of input.instances",
    "unknown_label": "instance_labels.label_id must be a label_id of input.labels",
    "unparseable": "check the file's format, delimiter and quoting",
    "unbalanced_quote": "a quoted CSV field that does not close where it should (a missing "
    'closing quote, or a quote inside it that is not doubled, RFC 4180: "12"" pan"; Spark\'s '
    'writer needs .option("escape", '
    "'\"')), ran on over the lines after it: their rows are inside that quarantined record "
    "and were not read. Fix the quoting or write Parquet; "
    "quality.max_reason_fraction.unbalanced_quote: 1 runs without those rows",
}


def check_quality(counts: dict[str, dict[str, Any]], quality, where: str = "") -> None:
    """Data-quality gates over the counts of :func:`pina_spark.validate.validate_inputs`
    (``quality`` config section): run after the quarantine tables are published.

    Raises
    ------
    pina_spark.storage.InputError
        A table's quarantined fraction is above ``quality.max_quarantined_fraction``, or one
        reason's fraction above its ``quality.max_reason_fraction`` limit; the message cites
        every offending rate, the key to change and, per reason, what to check.

    Examples
    --------
    >>> from pina_spark.config import QualityConfig
    >>> counts = {"events": {"rows_in": 4, "rows_quarantined": 4,
    ...                      "reasons": {"unknown_item": 4}}}
    >>> try:
    ...     check_quality(counts, QualityConfig())
    ... except storage.InputError as e:
    ...     print(e)  # doctest: +NORMALIZE_WHITESPACE
    data-quality gate: events: 4 of 4 rows quarantined (100.0% > 50.0%,
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
