"""Events validated in one pass on their way to the driver (the ``broadcast`` pair plan).

Driver side. With the ``broadcast`` pair plan (:func:`pina_spark.stages.graph.pair_plan`) the graph
stage needs the clean (basket, item) rows on the driver as Arrow anyway. The Spark path of
:func:`pina_spark.validate.spark.validate_events` costs a join, a window over every row (a shuffle
and a sort), a persisted copy and a count, and then the rows were collected a second time. Here
the events are read once:

1. the rows come to the driver as Arrow: read by pyarrow where the input is Parquet that
   pyarrow reaches (:func:`pina_spark.storage.read_input_arrow`; ~8x faster than a Spark collect of
   the same rows here), else by one Spark job (no Spark SQL rule: Java's regular expressions
   cost more than the collect itself);
2. the driver applies the row rules of :data:`pina_spark.validate.rules.RULES` in pyarrow
   (:func:`tag_rows`, each id tested once per distinct value), flags ``unknown_item``
   (``pyarrow.compute.is_in`` against the clean instance ids) and ``duplicate_event``
   (:func:`flag_duplicates`: numpy over integer codes, the same order as the Spark path:
   earliest ``event_time``, nulls last, then smallest weight);
3. the reasons are counted and rows in = used + quarantined is checked
   (:func:`pina_spark.validate.rules.reason_counts`).

The pyarrow helpers every driver-side table uses (:func:`with_reason`, :func:`flag_unknown`,
:func:`split_by_reason`) live here too; :mod:`pina_spark.validate.tables` reads them.

The reasons and the kept rows are those of the Spark path (``tests/test_validate.py`` runs both
on the same rows, and both rule sets on every kind of character; see
:data:`pina_spark.validate.rules.BAD_ID` for the one difference in kind). Large logs
(``shuffle`` plan) keep the Spark path.

Examples
--------
>>> import pyarrow as pa
>>> t = pa.table({"basket_id": ["b", "b", "b"], "item_id": ["x", "x", "y"],
...               "event_time": ["2", "1", None], "weight": [1.0, None, 2.0],
...               "_corrupt_record": pa.nulls(3, pa.string()),
...               "reason": pa.nulls(3, pa.string())})
>>> flag_duplicates(t).column("reason").to_pylist()
['duplicate_event', None, None]
"""

import logging
from typing import Any

from pina_spark import storage
from pina_spark.validate import utf8
from pina_spark.validate.rules import CHECKS, MAX_TEXT_CHARS, RULES, column, reason_counts

log = logging.getLogger(__name__)

__all__ = [
    "validate_events",
    "tag_rows",
    "flag_duplicates",
    "flag_unknown_items",
    "flag_unknown",
    "with_reason",
    "tag_row_rules",
    "encode_ids",
    "split_by_reason",
]

_RULES = RULES["events"]
(_UNKNOWN,) = _RULES.unknown
_DUPLICATE = _RULES.duplicate


def validate_events(raw, instance_ids, rows_in: int, uri: str) -> tuple[Any, Any, dict[str, Any]]:
    """Validate the raw ``events`` frame in one pass and collect it.

    Parameters
    ----------
    raw : DataFrame
        ``storage.read_input(..., "events")``.
    instance_ids : pyarrow.Array
        The ids of the clean instance rows.
    rows_in : int
        Rows of ``raw`` (counted by the caller).
    uri : str
        For messages.

    Returns
    -------
    (clean, quarantine, counts)
        ``clean``: pyarrow Table of the contract columns of ``events``; ``quarantine``: the
        other rows with ``_corrupt_record`` and ``reason``; ``counts`` as
        :func:`pina_spark.validate.validate_inputs` records them.
    """
    cols = [f.name for f in storage.schema("events").fields]
    tbl = storage.read_input_arrow(uri, "events")  # Parquet the driver reaches: no Spark job
    if tbl is None:
        tbl = storage.collect_arrow(raw.select(*cols, storage.CORRUPT))
    enc = encode_ids(tbl)
    tbl = flag_duplicates(flag_unknown_items(tag_rows(tbl, enc), instance_ids), enc)
    return split_by_reason(tbl, "events", rows_in, uri)


def with_reason(tbl, rules):
    """``tbl`` plus ``reason``: the name of the first ``(mask, name)`` of ``rules`` that holds,
    else null (a ``CASE WHEN`` in rule order, as on the Spark path)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    reason = pa.nulls(tbl.num_rows, pa.string())
    for mask, name in reversed(rules):  # the first rule that holds wins
        reason = pc.if_else(mask, pa.scalar(name, pa.string()), reason)
    return tbl.append_column(storage.REASON, reason)


def tag_row_rules(tbl, table: str, max_text_chars: int, enc: dict[str, Any] | None = None):
    """The row rules of ``table`` (:data:`pina_spark.validate.rules.RULES`, defaults first) over
    the pyarrow Table ``tbl``: ``tbl`` plus ``reason``; ``enc``: dictionary-encoded columns
    (:func:`encode_ids`), tested once per distinct value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rules = RULES[table]
    for col, value in rules.defaults:  # a blank value becomes the default
        values = column(tbl, col)
        blank = CHECKS["blank"].arrow(values, max_text_chars)
        values = pc.if_else(blank, pa.scalar(value, pa.string()), values)
        tbl = tbl.set_column(tbl.schema.get_field_index(col), col, values)
    return with_reason(
        tbl, [(r.arrow_mask(tbl, max_text_chars, enc), r.reason) for r in rules.rows]
    )


def encode_ids(tbl) -> dict[str, Any]:
    """``basket_id`` and ``item_id`` dictionary-encoded once (an id repeats on every row of its
    basket, or of its item): the row rules test each distinct id once
    (:func:`pina_spark.validate.rules.per_value`) and :func:`flag_duplicates` uses the codes."""
    import pyarrow.compute as pc

    return {n: pc.dictionary_encode(column(tbl, n)) for n in _DUPLICATE.keys}


def tag_rows(tbl, enc=None):
    """The row rules of ``events`` (those :func:`pina_spark.validate.spark.tag_event_rows`
    applies, in the same order) in pyarrow: ``tbl`` (the contract columns and
    ``_corrupt_record``) plus ``reason``; ``enc``: :func:`encode_ids` of ``tbl`` when the caller
    has it. ``tests/test_validate.py`` checks both give the same reason on every kind of
    character.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"basket_id": ["b", " ", "b", "b"], "item_id": ["x", "x", "x\\u200b", "x"],
    ...               "event_time": pa.nulls(4, pa.string()), "weight": [1.0, 1.0, 1.0, -1.0],
    ...               "_corrupt_record": pa.nulls(4, pa.string())})
    >>> tag_rows(t).column("reason").to_pylist()
    [None, 'missing_basket', 'invalid_id', 'invalid_weight']
    """
    enc = encode_ids(tbl) if enc is None else enc
    return tag_row_rules(tbl, "events", MAX_TEXT_CHARS, enc)


def split_by_reason(tbl, table: str, rows_in: int, uri: str):
    """``(clean, quarantine, counts)`` of a tagged table: the clean rows with the contract
    columns of ``table``, the others with ``_corrupt_record`` and ``reason`` (their values
    that are not UTF-8 escaped, :func:`pina_spark.validate.utf8.escape_arrow`), and the counts
    of :func:`pina_spark.validate.rules.reason_counts` (rows in = used + quarantined
    checked)."""
    import pyarrow.compute as pc

    cols = [f.name for f in storage.schema(table).fields]
    reason = tbl.column(storage.REASON)
    by_reason: dict[Any, int] = {None: reason.null_count}
    for vc in pc.value_counts(reason.combine_chunks()).to_pylist():
        if vc["values"] is not None:
            by_reason[vc["values"]] = int(vc["counts"])
    counts = reason_counts(table, uri, rows_in, by_reason)
    bad = pc.is_valid(reason)
    quarantine = tbl.filter(bad).select([*cols, storage.CORRUPT, storage.REASON])
    quarantine = utf8.escape_table_arrow(quarantine, utf8.string_columns(table))
    clean = tbl.filter(pc.invert(bad)).select(cols)
    return clean, quarantine, counts


def flag_unknown_items(tbl, instance_ids):
    """``tbl`` with ``reason = unknown_item`` on the rows still valid whose item is not in
    ``instance_ids`` (a pyarrow array of the clean instance ids).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"item_id": ["a", "z", None], "reason": [None, None, "missing_item"]})
    >>> flag_unknown_items(t, pa.array(["a"])).column("reason").to_pylist()
    [None, 'unknown_item', 'missing_item']
    """
    return flag_unknown(tbl, _UNKNOWN.column, instance_ids, _UNKNOWN.reason)


def flag_unknown(tbl, col: str, known_ids, reason: str):
    """``tbl`` with ``reason`` on the rows still valid whose ``col`` is not in ``known_ids``
    (a pyarrow array): the left join of :mod:`pina_spark.validate.spark` in pyarrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    current = tbl.column(storage.REASON)
    known = pc.is_in(tbl.column(col), value_set=known_ids)
    unknown = pc.and_(pc.is_null(current), pc.invert(known))
    flagged = pc.if_else(unknown, pa.scalar(reason, pa.string()), current.cast(pa.string()))
    return tbl.set_column(tbl.schema.get_field_index(storage.REASON), storage.REASON, flagged)


def flag_duplicates(tbl, enc=None):
    """``tbl`` with ``reason = duplicate_event`` on every valid row but the first of its
    (basket_id, item_id) among the valid rows, first by ``event_time`` (nulls last), then
    ``weight`` (nulls last): the ``duplicate_event`` rule of
    :data:`pina_spark.validate.rules.RULES`, in numpy. Rows tied on all four columns are
    identical, so which of them is kept does not matter. ``enc``: :func:`encode_ids` of ``tbl``
    when the caller has it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    reason = tbl.column(storage.REASON).combine_chunks()
    rows = np.flatnonzero(pc.is_null(reason).to_numpy(zero_copy_only=False))
    if len(rows) < 2:
        return tbl
    every = len(rows) == tbl.num_rows  # the usual case: no copy of the columns

    def codes(name):
        if enc is not None:  # valid rows have both ids: no null code
            c = enc[name].indices
            return (c if every else c.take(rows)).to_numpy(zero_copy_only=False).astype(np.int64)
        c = tbl.column(name)
        return _codes(c if every else c.take(rows))

    basket, item = _DUPLICATE.keys  # a key of two ids, an order of a time and a weight
    time, weight = _DUPLICATE.order
    b, i = codes(basket), codes(item)
    key = b * (int(i.max()) + 1) + i
    s = np.sort(key)  # a value sort (SIMD in numpy) is ~20x cheaper than an argsort here
    same = s[1:] == s[:-1]
    if not same.any():
        return tbl
    # a hash lookup (numpy's isin sorts key and set together: ~15x slower here)
    repeated = pc.is_in(pa.array(key), value_set=pa.array(np.unique(s[1:][same])))
    repeated = repeated.to_numpy(zero_copy_only=False)
    dup = rows[repeated]  # valid rows whose (basket, item) is repeated
    dkey = key[repeated]
    t = pc.rank(
        tbl.column(time).take(dup).combine_chunks(),
        null_placement="at_end",
        tiebreaker="dense",
    )
    t = t.to_numpy(zero_copy_only=False)
    w = tbl.column(weight).take(dup).to_numpy(zero_copy_only=False).astype(np.float64)
    w = np.where(np.isnan(w), np.inf, w)  # valid weights are finite: NaN here is a null
    first = np.lexsort((w, t, dkey))
    losers = np.ones(len(dup), dtype=bool)
    k = dkey[first]
    losers[first[np.r_[True, k[1:] != k[:-1]]]] = False
    mask = np.zeros(tbl.num_rows, dtype=bool)
    mask[dup[losers]] = True
    flagged = pc.if_else(pa.array(mask), pa.scalar(_DUPLICATE.reason, pa.string()), reason)
    log.info("events: %d duplicate (basket, item) rows", int(losers.sum()))
    return tbl.set_column(tbl.schema.get_field_index(storage.REASON), storage.REASON, flagged)


def _codes(col):
    """int64 codes of a string column (equal strings, equal codes; not ordered)."""
    import numpy as np
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(col.combine_chunks() if hasattr(col, "combine_chunks") else col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
