"""Events validated in one pass on their way to the driver (the ``broadcast`` pair plan).

Driver side. With the ``broadcast`` pair plan (:func:`pina_spark.stages.graph.pair_plan`) the graph
stage needs the clean (basket, item) rows on the driver as Arrow anyway. The Spark path of
:func:`pina_spark.validate.validate_events` costs a join, a window over every row (a shuffle
and a sort), a persisted copy and a count, and then the rows were collected a second time. Here
the events are read once:

1. the rows come to the driver as Arrow: read by pyarrow where the input is Parquet that
   pyarrow reaches (:func:`pina_spark.storage.read_input_arrow`; ~8x faster than a Spark collect of
   the same rows here), else by one Spark job (no Spark SQL rule: Java's regular expressions
   cost more than the collect itself);
2. the driver applies the row rules (:func:`tag_rows`: the rules of
   :func:`pina_spark.validate.tag_event_rows` in pyarrow, same order), flags ``unknown_item``
   (``pyarrow.compute.is_in`` against the clean instance ids) and ``duplicate_event``
   (:func:`flag_duplicates`: numpy over integer codes, the same order as the Spark path:
   earliest ``event_time``, nulls last, then smallest weight);
3. the reasons are counted and rows in = used + quarantined is checked
   (:func:`pina_spark.validate.reason_counts`).

The reasons and the kept rows are those of the Spark path (``tests/test_validate.py`` runs both
on the same rows, and both rule sets on every kind of character). One difference in kind:
pyarrow's RE2 may know newer Unicode format characters than the JVM's regex tables, so an id
holding a character assigned after the JVM's Unicode version is ``invalid_id`` here. Large logs
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
from typing import Any, Dict, Tuple

from pina_spark import storage, validate

log = logging.getLogger(__name__)

__all__ = [
    "validate_events",
    "tag_rows",
    "flag_duplicates",
    "flag_unknown_items",
    "flag_unknown",
    "blank",
    "has_fffd",
    "bad_id",
    "fffd",
    "bad_chars",
    "with_reason",
    "encode_ids",
    "per_value",
    "split_by_reason",
]

DUPLICATE = "duplicate_event"
UNKNOWN = "unknown_item"


def validate_events(raw, instance_ids, rows_in: int, uri: str) -> Tuple[Any, Any, Dict[str, Any]]:
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


#: RE2 (pyarrow) forms of :data:`pina_spark.validate.BLANK_CHARS` (Java's ``(?U)\\s`` is the
#: Unicode White_Space property, inside Z and Cc) and :data:`pina_spark.validate.BAD_ID_CHARS`
#: (RE2 has no class intersection: the Zs spaces but U+0020 are listed)
BLANK_ONLY = r"^[\p{Z}\p{Cc}\p{Cf}]*$"
BAD_ID = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\x{00A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]"


def column(tbl, name):
    """One column of ``tbl`` as a single array."""
    return tbl.column(name).combine_chunks()


def blank(c):
    """Null, empty, or only white space / control / format characters: the Spark rule
    ``validate._blank`` (Java ``(?U)\\s``, ``\\p{Z}``, ``\\p{Cc}``, ``\\p{Cf}``) in RE2."""
    import pyarrow.compute as pc

    return pc.or_(pc.is_null(c), pc.fill_null(pc.match_substring_regex(c, BLANK_ONLY), True))


def any_of(tbl, names, test):
    """Rows where ``test`` holds for any of the columns ``names`` (null counts as false)."""
    import pyarrow.compute as pc

    out = None
    for n in names:
        one = pc.fill_null(test(column(tbl, n)), False)
        out = one if out is None else pc.or_(out, one)
    return out


def fffd(c):
    """Values holding U+FFFD (what Spark's text readers put for bytes that are not UTF-8)."""
    import pyarrow.compute as pc

    return pc.match_substring(c, validate.REPLACEMENT_CHAR)


def bad_chars(c):
    """Values holding a character no id may hold (:data:`BAD_ID`)."""
    import pyarrow.compute as pc

    return pc.match_substring_regex(c, BAD_ID)


def has_fffd(tbl, names):
    """Rows holding U+FFFD in any of ``names``: the rule ``validate._has_fffd``."""
    return any_of(tbl, names, fffd)


def bad_id(tbl, names):
    """Rows whose ids in ``names`` hold a character no id may hold: ``validate._bad_id``."""
    return any_of(tbl, names, bad_chars)


def with_reason(tbl, rules):
    """``tbl`` plus ``reason``: the name of the first ``(mask, name)`` of ``rules`` that holds,
    else null (``validate._tag``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    reason = pa.nulls(tbl.num_rows, pa.string())
    for mask, name in reversed(rules):  # the first rule that holds wins
        reason = pc.if_else(mask, pa.scalar(name, pa.string()), reason)
    return tbl.append_column(storage.REASON, reason)


def encode_ids(tbl) -> Dict[str, Any]:
    """``basket_id`` and ``item_id`` dictionary-encoded once (an id repeats on every row of its
    basket, or of its item): the row rules test each distinct id once
    (:func:`per_value`) and :func:`flag_duplicates` uses the codes."""
    import pyarrow.compute as pc

    return {n: pc.dictionary_encode(column(tbl, n)) for n in (storage.BASKET_ID, storage.ITEM_ID)}


def per_value(enc, test, if_null: bool):
    """The boolean ``test`` of a dictionary-encoded column, evaluated once per distinct value
    and spread back to the rows (``if_null`` on null rows).

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> enc = pc.dictionary_encode(pa.array(["a", " ", "a", None]))
    >>> per_value(enc, blank, True).to_pylist()
    [False, True, False, True]
    """
    import pyarrow.compute as pc

    return pc.fill_null(test(enc.dictionary).take(enc.indices), if_null)


def tag_rows(tbl, enc=None):
    """The row rules of :func:`pina_spark.validate.tag_event_rows`, in the same order, in
    pyarrow: ``tbl`` (the contract columns and ``_corrupt_record``) plus ``reason``; ``enc``:
    :func:`encode_ids` of ``tbl`` when the caller has it. ``tests/test_validate.py`` checks both
    give the same reason on every kind of character.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"basket_id": ["b", " ", "b", "b"], "item_id": ["x", "x", "x\\u200b", "x"],
    ...               "event_time": pa.nulls(4, pa.string()), "weight": [1.0, 1.0, 1.0, -1.0],
    ...               "_corrupt_record": pa.nulls(4, pa.string())})
    >>> tag_rows(t).column("reason").to_pylist()
    [None, 'missing_basket', 'invalid_id', 'invalid_weight']
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = encode_ids(tbl) if enc is None else enc
    ids = (storage.BASKET_ID, storage.ITEM_ID)

    def on_ids(test):
        return pc.or_(*(per_value(enc[n], test, False) for n in ids))

    w = column(tbl, storage.WEIGHT).cast(pa.float64())
    bad_weight = pc.fill_null(pc.or_(pc.or_(pc.is_nan(w), pc.is_inf(w)), pc.less(w, 0.0)), False)
    fffd_time = has_fffd(tbl, (storage.EVENT_TIME,))
    return with_reason(
        tbl,
        [
            (pc.is_valid(column(tbl, storage.CORRUPT)), "unparseable"),
            (per_value(enc[storage.BASKET_ID], blank, True), "missing_basket"),
            (per_value(enc[storage.ITEM_ID], blank, True), "missing_item"),
            (
                pc.or_(on_ids(fffd), fffd_time),
                "invalid_utf8",
            ),
            (on_ids(bad_chars), "invalid_id"),
            (bad_weight, "invalid_weight"),
        ],
    )


def split_by_reason(tbl, table: str, rows_in: int, uri: str):
    """``(clean, quarantine, counts)`` of a tagged table: the clean rows with the contract
    columns of ``table``, the others with ``_corrupt_record`` and ``reason``, and the counts
    of :func:`pina_spark.validate.reason_counts` (rows in = used + quarantined checked)."""
    import pyarrow.compute as pc

    cols = [f.name for f in storage.schema(table).fields]
    reason = tbl.column(storage.REASON)
    by_reason: Dict[Any, int] = {None: reason.null_count}
    for vc in pc.value_counts(reason.combine_chunks()).to_pylist():
        if vc["values"] is not None:
            by_reason[vc["values"]] = int(vc["counts"])
    counts = validate.reason_counts(table, uri, rows_in, by_reason)
    bad = pc.is_valid(reason)
    quarantine = tbl.filter(bad).select([*cols, storage.CORRUPT, storage.REASON])
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
    return flag_unknown(tbl, storage.ITEM_ID, instance_ids, UNKNOWN)


def flag_unknown(tbl, col: str, known_ids, reason: str):
    """``tbl`` with ``reason`` on the rows still valid whose ``col`` is not in ``known_ids``
    (a pyarrow array): ``validate._flag_unknown`` in pyarrow."""
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
    ``weight`` (nulls last): the order of :func:`pina_spark.validate.validate_events`. Rows tied
    on all four columns are identical, so which of them is kept does not matter. ``enc``:
    :func:`encode_ids` of ``tbl`` when the caller has it."""
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

    b, i = codes(storage.BASKET_ID), codes(storage.ITEM_ID)
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
        tbl.column(storage.EVENT_TIME).take(dup).combine_chunks(),
        null_placement="at_end",
        tiebreaker="dense",
    )
    t = t.to_numpy(zero_copy_only=False)
    w = tbl.column(storage.WEIGHT).take(dup).to_numpy(zero_copy_only=False).astype(np.float64)
    w = np.where(np.isnan(w), np.inf, w)  # valid weights are finite: NaN here is a null
    first = np.lexsort((w, t, dkey))
    losers = np.ones(len(dup), dtype=bool)
    k = dkey[first]
    losers[first[np.r_[True, k[1:] != k[:-1]]]] = False
    mask = np.zeros(tbl.num_rows, dtype=bool)
    mask[dup[losers]] = True
    flagged = pc.if_else(pa.array(mask), pa.scalar(DUPLICATE, pa.string()), reason)
    log.info("events: %d duplicate (basket, item) rows", int(losers.sum()))
    return tbl.set_column(tbl.schema.get_field_index(storage.REASON), storage.REASON, flagged)


def _codes(col):
    """int64 codes of a string column (equal strings, equal codes; not ordered)."""
    import numpy as np
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(col.combine_chunks() if hasattr(col, "combine_chunks") else col)
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
