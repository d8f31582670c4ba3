"""Values that are not valid UTF-8: found, and escaped for the quarantine tables, in Spark and in
pyarrow alike.

A Parquet string column is never decoded on read, and Spark's JSON reader keeps an unparseable
line's bytes as they are in ``_corrupt_record``: either can hold bytes that are not UTF-8. Rows
holding them are quarantined (reason ``invalid_utf8``, :mod:`pina_spark.validate.rules`), but a
Parquet string column that holds them breaks every reader that decodes it (pandas, pyarrow's
``to_pandas``, Arrow-based tools). So the quarantine tables keep each such value as an escaped
string, as Python's ``bytes.decode("utf-8", "backslashreplace")`` writes it: every byte that is
not part of a valid UTF-8 sequence becomes ``\\xNN`` (``b"p\\xff"`` -> ``p\\xff``), every valid
character stays itself. The schemas stay as they are (string columns); a value that is valid
UTF-8 is stored unchanged, a U+FFFD that a CSV reader put in place of a bad byte included.

:func:`escape_spark` is a Spark SQL expression (no Python UDF; the same on pyspark 3.5 and 4.x):
the value's bytes as hex are cut into tokens, one valid UTF-8 sequence or one lone byte each
(:data:`UTF8_TOKEN`, the well-formed sequences of the Unicode standard's table 3-7: no overlong
forms, no surrogates, nothing above U+10FFFF), and lone bytes of 0x80 and above are written as
``\\xNN``. :func:`escape_arrow` does the same in Python on the driver's pyarrow tables.

Examples
--------
>>> import pyarrow as pa
>>> bad = pa.array([b"p\\xff", b"caf\\xc3\\xa9", None], pa.binary()).view(pa.string())
>>> invalid_utf8_mask(bad)
[True, False, False]
>>> escape_arrow(bad).to_pylist()
['p\\\\xff', 'café', None]
"""

from typing import Any

from pina_spark import storage

__all__ = [
    "REPLACEMENT_CHAR",
    "string_columns",
    "UTF8_TOKEN",
    "invalid_utf8_mask",
    "escape_arrow",
    "escape_table_arrow",
    "escape_spark",
]

#: the character Spark's text readers substitute for bytes that are not valid UTF-8
REPLACEMENT_CHAR = "\ufffd"

#: Java regex over a value's bytes as upper-case hex: one well-formed UTF-8 sequence (Unicode
#: table 3-7), else (the last alternative) one byte, which is then not part of any. Every
#: alternative takes an even number of hex digits, so tokens never straddle a byte.
UTF8_TOKEN = "|".join(
    (
        "[0-7][0-9A-F]",  # U+0000..U+007F
        "(?:C[2-9A-F]|D[0-9A-F])[89AB][0-9A-F]",  # C2..DF 80..BF
        "E0[AB][0-9A-F][89AB][0-9A-F]",  # E0 A0..BF 80..BF
        "E[1-9A-CEF][89AB][0-9A-F][89AB][0-9A-F]",  # E1..EC, EE..EF 80..BF 80..BF
        "ED[89][0-9A-F][89AB][0-9A-F]",  # ED 80..9F 80..BF (no surrogates)
        "F0[9AB][0-9A-F](?:[89AB][0-9A-F]){2}",  # F0 90..BF 80..BF 80..BF
        "F[1-3](?:[89AB][0-9A-F]){3}",  # F1..F3 80..BF 80..BF 80..BF
        "F48[0-9A-F](?:[89AB][0-9A-F]){2}",  # F4 80..8F 80..BF 80..BF
        "..",  # any other byte: not UTF-8
    )
)


def string_columns(table: str) -> list[str]:
    """The string columns of ``quarantine/<table>`` that may hold what the input held: the
    contract's string columns and ``_corrupt_record`` (``reason`` is always ours).

    Examples
    --------
    >>> string_columns("events")
    ['basket_id', 'item_id', 'event_time', '_corrupt_record']
    """
    from pyspark.sql import types as T

    fields = storage.schema(table).fields
    return [f.name for f in fields if isinstance(f.dataType, T.StringType)] + [storage.CORRUPT]


def invalid_utf8_mask(chunk) -> list[bool]:
    """Per value of one pyarrow string array: whether its bytes are not valid UTF-8 (false on
    a null). Checked value by value only in an array that fails pyarrow's full validation."""
    import pyarrow as pa

    try:
        chunk.validate(full=True)
        return [False] * len(chunk)
    except pa.ArrowInvalid:
        pass

    def bad(b: bytes) -> bool:
        try:
            b.decode("utf-8")
            return False
        except UnicodeDecodeError:
            return True

    return [b is not None and bad(b) for b in chunk.view(pa.binary()).to_pylist()]


def escape_arrow(values):
    """A pyarrow string array (or chunked array) with each value that is not valid UTF-8
    escaped as ``bytes.decode("utf-8", "backslashreplace")`` writes it; a chunk that is valid
    UTF-8 throughout is returned as it is."""
    import pyarrow as pa

    def one(chunk):
        try:
            chunk.validate(full=True)
            return chunk
        except pa.ArrowInvalid:
            raw = chunk.view(pa.binary()).to_pylist()
            return pa.array(
                [None if b is None else b.decode("utf-8", "backslashreplace") for b in raw],
                pa.string(),
            )

    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([one(c) for c in values.chunks], pa.string())
    return one(values)


def escape_table_arrow(tbl, columns) -> Any:
    """``tbl`` with :func:`escape_arrow` applied to each of ``columns`` (string columns)."""
    for name in columns:
        i = tbl.schema.get_field_index(name)
        tbl = tbl.set_column(i, name, escape_arrow(tbl.column(name)))
    return tbl


def escape_spark(name: str):
    """The string column ``name`` as a pyspark Column with each value that is not valid UTF-8
    escaped as :func:`escape_arrow` does (byte for byte the same string); other values, and
    nulls, unchanged. Only values that hold U+FFFD as a Java string (where invalid bytes
    decode to it) go through the token split."""
    from pyspark.sql import functions as F

    value = F.col(name)
    tokens = F.expr(f"regexp_extract_all(hex(cast(`{name}` as binary)), '{UTF8_TOKEN}', 0)")

    def text(tok):  # a lone byte >= 0x80 is the only two-digit token that sorts from "80" on
        lone = (F.length(tok) == 2) & (tok >= F.lit("80"))
        return F.when(lone, F.concat(F.lit("\\x"), F.lower(tok))).otherwise(
            F.unhex(tok).cast("string")
        )

    escaped = F.array_join(F.transform(tokens, text), "")
    return F.when(value.rlike(REPLACEMENT_CHAR), escaped).otherwise(value)
