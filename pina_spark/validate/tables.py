"""``instances``, ``labels`` and ``instance_labels`` validated on the driver in one pyarrow pass.

Driver side. The Spark path of :func:`pina_spark.validate.validate_inputs` spends, per table, a
count, a tagging pass with Java regular expressions, a window over the ids (a shuffle and a
sort), for ``instance_labels`` two joins, a persisted copy and a ``groupBy`` of the reasons:
four to six Spark jobs of 0.4-4 s each whatever the size, most of the graph stage on inputs of
up to a few million rows. Tables up to :data:`pina_spark.validate.spark.DRIVER_MAX_ROWS` rows
are read once instead (by pyarrow where the input is Parquet that pyarrow reaches,
:func:`pina_spark.storage.read_input_arrow`; else one Spark collect) and tagged here with the
rules of :data:`pina_spark.validate.rules.RULES`, in the same order as on Spark:

- the row rules (the pyarrow side of each :class:`~pina_spark.validate.rules.Check`: RE2 forms
  of the Java expressions);
- ``unknown_instance`` / ``unknown_label`` against the clean ids (``pyarrow.compute.is_in``);
- ``duplicate_id`` / ``duplicate_pair`` by :func:`flag_first`: the first valid row of each
  key under the rule's order (text, then split, ascending, nulls last; strings compared by
  their UTF-8 bytes on both sides).

Same reasons, same kept rows as the Spark path: ``tests/test_validate.py`` runs both on the same
rows (every rule, seeded random rows with every kind of character the rules name).

Examples
--------
>>> import pyarrow as pa
>>> t = pa.table({"label_id": ["b", "a", "b", " "], "text": ["y", "x", "x", "z"],
...               "_corrupt_record": pa.nulls(4, pa.string())})
>>> tag_labels(t, 100).column("reason").to_pylist()
['duplicate_id', None, None, 'missing_id']
"""

from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.validate.events import flag_unknown, split_by_reason, tag_row_rules
from pina_spark.validate.rules import MAX_TEXT_CHARS, RULES

__all__ = ["validate_table", "tag_table", "tag_instances", "tag_labels", "tag_pairs", "flag_first"]

#: the tables with driver-side rules here
TABLES = ("instances", "labels", "instance_labels")


def validate_table(
    name: str, tbl, rows_in: int, uri: str, max_text_chars: int, known: dict[str, Any]
) -> tuple[Any, Any, dict[str, Any]]:
    """Validate one raw table held by the driver (the contract columns and
    ``_corrupt_record``, as :func:`pina_spark.storage.read_input_arrow` gives them).

    Parameters
    ----------
    name : str
        ``instances`` | ``labels`` | ``instance_labels``.
    tbl : pyarrow.Table
    rows_in : int
        Rows read (checked against rows used + quarantined).
    uri : str
        For messages.
    max_text_chars : int
        ``quality.max_text_chars``.
    known : dict
        ``instance_labels`` only: ``{"instances": ids, "labels": ids}``, pyarrow arrays of the
        clean ids.

    Returns
    -------
    (clean, quarantine, counts)
        pyarrow Tables of the clean rows (contract columns) and of the others (with
        ``_corrupt_record`` and ``reason``), and the counts of
        :func:`pina_spark.validate.rules.reason_counts`.
    """
    if name not in TABLES:
        raise ValueError(f"validate.tables: no driver-side rules for table {name!r}")
    return split_by_reason(tag_table(name, tbl, max_text_chars, known), name, rows_in, uri)


def tag_table(name: str, tbl, max_text_chars: int, known: dict[str, Any]):
    """Every rule of table ``name`` (:data:`pina_spark.validate.rules.RULES`) over ``tbl``:
    the row rules, the unknown ids against ``known`` (``{table: pyarrow array of its clean
    ids}``), then the duplicates: ``tbl`` plus ``reason``."""
    rules = RULES[name]
    tagged = tag_row_rules(tbl, name, max_text_chars)
    for u in rules.unknown:
        tagged = flag_unknown(tagged, u.column, known[u.table], u.reason)
    dup = rules.duplicate
    return flag_first(tagged, list(dup.keys), list(dup.order), dup.reason)


def tag_instances(tbl, max_text_chars: int = MAX_TEXT_CHARS):
    """The rules of ``instances`` in pyarrow: a blank ``split`` becomes ``train``, then the row
    rules, then ``duplicate_id``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"instance_id": ["a", "a", "b", "c"], "text": ["y", "x", "t", "u"],
    ...               "split": [None, "test", "dev", " "],
    ...               "_corrupt_record": pa.nulls(4, pa.string())})
    >>> out = tag_instances(t)
    >>> out.column("reason").to_pylist(), out.column("split").to_pylist()
    (['duplicate_id', None, 'invalid_split', None], ['train', 'test', 'dev', 'train'])
    """
    return tag_table("instances", tbl, max_text_chars, {})


def tag_labels(tbl, max_text_chars: int = MAX_TEXT_CHARS):
    """The rules of ``labels`` in pyarrow (example in the module docstring)."""
    return tag_table("labels", tbl, max_text_chars, {})


def tag_pairs(tbl, instance_ids, label_ids):
    """The rules of ``instance_labels`` in pyarrow: the pair rules, then ``unknown_instance``
    and ``unknown_label`` against the clean ids, then ``duplicate_pair``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"instance_id": ["a", "a", "z", "a"], "label_id": ["x", "x", "x", None],
    ...               "_corrupt_record": pa.nulls(4, pa.string())})
    >>> tag_pairs(t, pa.array(["a"]), pa.array(["x"])).column("reason").to_pylist()
    [None, 'duplicate_pair', 'unknown_instance', 'missing_id']
    """
    known = {"instances": instance_ids, "labels": label_ids}
    return tag_table("instance_labels", tbl, MAX_TEXT_CHARS, known)


def flag_first(tbl, keys: Sequence[str], order: Sequence[str], reason: str):
    """``tbl`` with ``reason`` on every valid row (``reason`` null) but the first of its
    ``keys`` among the valid rows, ordered by ``order`` ascending, nulls last: the window of
    the Spark path (:mod:`pina_spark.validate.spark`). Rows tied on ``keys`` and ``order`` are
    the same row as far as the contract columns go (the Spark path's orders end with every
    column), so which of them is kept does not matter.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"k": ["a", "a", "b"], "v": ["2", "1", None],
    ...               "reason": pa.nulls(3, pa.string())})
    >>> flag_first(t, ["k"], ["v"], "dup").column("reason").to_pylist()
    ['dup', None, None]
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    current = tbl.column(storage.REASON).combine_chunks()
    rows = np.flatnonzero(pc.is_null(current).to_numpy(zero_copy_only=False))
    if len(rows) < 2:
        return tbl
    cols = list(keys) + [c for c in order if c not in keys]
    sub = tbl.select(cols).take(pa.array(rows))
    idx = pc.sort_indices(
        sub, sort_keys=[(c, "ascending") for c in cols], null_placement="at_end"
    ).to_numpy()
    new_key = np.zeros(len(rows), dtype=bool)
    new_key[0] = True
    for k in keys:
        s = sub.column(k).take(pa.array(idx)).combine_chunks()
        diff = pc.not_equal(s.slice(1), s.slice(0, len(s) - 1))
        new_key[1:] |= pc.fill_null(diff, True).to_numpy(zero_copy_only=False)
    if new_key.all():
        return tbl
    mask = np.zeros(tbl.num_rows, dtype=bool)
    mask[rows[idx[~new_key]]] = True
    flagged = pc.if_else(pa.array(mask), pa.scalar(reason, pa.string()), current)
    return tbl.set_column(tbl.schema.get_field_index(storage.REASON), storage.REASON, flagged)
