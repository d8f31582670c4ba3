"""Readers of the input tables (Parquet, CSV, JSON lines) with their explicit schemas.

A schema is never inferred. A missing file, a missing required column or a wrong column type
raises :class:`~pina_spark.storage.schemas.InputError` naming the column and the file, before
any job runs. Lines that cannot be parsed are kept in ``_corrupt_record`` (:data:`CORRUPT`).
"""

import re
from collections.abc import Sequence

from pina_spark.storage.fs import parquet_dataset, parquet_files, path_exists, pyarrow_reaches
from pina_spark.storage.schemas import INPUT_COLUMNS, InputError, schema


def _format_of(uri: str) -> str:
    u = uri.rstrip("/").lower()
    if u.endswith(".csv") or u.endswith(".csv.gz"):
        return "csv"
    if u.endswith(".jsonl") or u.endswith(".json") or u.endswith(".jsonl.gz"):
        return "jsonl"
    return "parquet"


CORRUPT = "_corrupt_record"

#: a well-formed quoted CSV field at field boundaries, its comma after it matched and put back
#: (``\\1\\2``): RE2 and Python have no possessive form or look-ahead in common, so one pass
#: misses every other one of adjacent quoted fields and two passes strip them all. The Java
#: form (Spark) is possessive, so a long field never overflows the matcher's stack.
QUOTED_FIELD = r'(^|,)"[^"]*(?:""[^"]*)*"(,|$)'
QUOTED_FIELD_JAVA = r'(^|,)"[^"]*+(?:""[^"]*+)*+"(,|$)'
#: a line break, and the line breaks a record ends with (the same in Java, RE2 and Python)
LINE_BREAK = r"[\r\n]"
TRAILING_BREAKS = r"[\r\n]+$"


def quote_ran_on(record: str) -> bool:
    """Whether a raw CSV record has a line break outside its well-formed quoted fields
    (trailing line breaks aside): a quoted field that did not close where it should (a missing
    closing quote, or one not followed by a comma or the line's end) ran on over the lines
    after it. The pre-flight's test; validation's ``unbalanced_quote`` rule is the same test
    in Spark and pyarrow (:mod:`pina_spark.validate.rules`).

    Examples
    --------
    >>> quote_ran_on('l1,"two\\nlines",x'), quote_ran_on('l1,"Best" pizza,"a\\nb"\\n')
    (False, False)
    >>> quote_ran_on('l1,"open\\nl2,blue\\n'), quote_ran_on('l1,"open\\nl2,x\\nl3,"red"')
    (True, True)
    """
    import re

    v = re.sub(TRAILING_BREAKS, "", record)
    for _ in range(2):
        v = re.sub(QUOTED_FIELD, r"\1\2", v)
    return bool(re.search(LINE_BREAK, v))


def arrow_readable(uri: str) -> bool:
    """Whether the driver reads the input at ``uri`` with pyarrow: Parquet that pyarrow
    reaches (:func:`pyarrow_reaches`).

    Examples
    --------
    >>> arrow_readable("data/events.parquet"), arrow_readable("data/events.csv")
    (True, False)
    """
    return _format_of(uri) == "parquet" and pyarrow_reaches(uri)


def read_input_arrow(uri: str, table: str):
    """The rows of a Parquet input table as a pyarrow Table read by the driver (contract
    columns, absent optional ones as nulls, plus a null ``_corrupt_record``: what
    :func:`read_input` gives), or ``None`` when the input is not Parquet or pyarrow does not
    reach it (then read it with Spark). Call :func:`read_input` first: it checks the columns
    and their types.

    Examples
    --------
    >>> read_input_arrow("events.csv", "events") is None
    True
    """
    if not arrow_readable(uri):
        return None
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    dset = parquet_dataset(uri)
    if dset is None:
        return None
    full = to_arrow_schema(schema(table))
    present = set(dset.schema.names)
    tbl = dset.to_table(columns=[f.name for f in full if f.name in present])
    cols = [
        tbl.column(f.name).cast(f.type) if f.name in present else pa.nulls(tbl.num_rows, f.type)
        for f in full
    ]
    return pa.table(cols + [pa.nulls(tbl.num_rows, pa.string())], names=[*full.names, CORRUPT])


def type_accepted(expected, found) -> bool:
    """Whether a file column of Spark type ``found`` is read as the contract's ``expected``
    type: the same type, or a float or integer column where a double is expected."""
    from pyspark.sql import types as T

    if found == expected:
        return True
    return isinstance(expected, T.DoubleType) and isinstance(
        found, T.FloatType | T.IntegerType | T.LongType
    )


def type_mismatch(uri: str, table: str, column: str, found: str, expected) -> str:
    """The error of a Parquet column whose type the contract does not take; for integer ids,
    how to write them.

    Examples
    --------
    >>> from pyspark.sql import types as T
    >>> print(type_mismatch("p.parquet", "labels", "label_id", "bigint", T.StringType()))
    p.parquet: column 'label_id' of labels has type bigint, expected string (ids are text: \
write them as strings, e.g. with Spark .withColumn('label_id', F.col('label_id').cast('string')))
    """
    from pyspark.sql import types as T

    msg = (
        f"{uri}: column '{column}' of {table} has type {found}, expected {expected.simpleString()}"
    )
    if isinstance(expected, T.StringType) and found in ("tinyint", "smallint", "int", "bigint"):
        msg += (
            f" (ids are text: write them as strings, e.g. with Spark "
            f".withColumn('{column}', F.col('{column}').cast('string')))"
        )
    return msg


def read_input(spark, uri: str, table: str):
    """Read an input table with its explicit schema (never inferred).

    Returns a DataFrame with the table's columns (optional ones filled with nulls when absent)
    plus ``_corrupt_record`` (string, non-null for CSV/JSON lines that could not be parsed).
    A missing file, a missing required column or a wrong column type raises :class:`InputError`
    naming the column and the file.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not uri:
        raise InputError(f"input.{table}: no path given")
    if not path_exists(spark, uri):
        raise InputError(f"input.{table}: {uri} does not exist")
    full = schema(table)
    fmt = _format_of(uri)
    if fmt == "parquet":
        try:
            df = spark.read.parquet(uri)
        except Exception as e:  # AnalysisException: 0-byte file, empty folder, not Parquet
            # Spark 4: UNABLE_TO_INFER_SCHEMA; Spark 3.5 reads the 0-byte file's footer and
            # fails with "is not a Parquet file (length is too low: 0)"
            if any(
                m in str(e)
                for m in (
                    "UNABLE_TO_INFER_SCHEMA",
                    "Unable to infer schema",
                    "is not a Parquet file",
                )
            ):
                stray = _non_parquet_file(uri, str(e))
                if stray:
                    raise InputError(_not_parquet_message(table, stray, uri)) from None
                raise InputError(
                    f"input.{table}: {uri} is empty or not a Parquet table (no "
                    f"schema could be read)"
                ) from None
            raise
        present = {f.name: f.dataType for f in df.schema.fields}
        _check_columns(present.keys(), uri, table)
        _check_parquet_files_agree(uri, table, [f.name for f in full.fields])
        for field in full.fields:
            got = present.get(field.name)
            if got is not None and not type_accepted(field.dataType, got):
                raise InputError(
                    type_mismatch(uri, table, field.name, got.simpleString(), field.dataType)
                )
        cols = [
            F.col(f.name).cast(f.dataType).alias(f.name)
            if f.name in present
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in full.fields
        ]
        return df.select(*cols, F.lit(None).cast("string").alias(CORRUPT))
    # text formats: check the header / keys first, then read with the explicit schema
    written = _peek_columns(spark, uri, fmt)  # CSV: the header's names as written
    header = [c.strip() for c in written]
    _check_columns(header, uri, table)
    types = {f.name: f.dataType for f in full.fields}
    if fmt == "csv":
        # CSV columns are positional: the schema follows the header's order; columns outside
        # the contract are read as strings and dropped below. enforceSchema=False makes Spark
        # check every file's header against these names (a folder of CSV files with different
        # column orders fails instead of being misread), so they are the names as written
        # (`instance_id, text` has a column " text"), renamed below.
        present_fields = [
            T.StructField(w, types.get(c, T.StringType())) for w, c in zip(written, header)
        ]
    else:
        # a JSON line may omit a key (null): read every contract column by name
        present_fields = list(full.fields)
        header = [f.name for f in full.fields]
    read_schema = T.StructType(present_fields + [T.StructField(CORRUPT, T.StringType())])
    reader = (
        spark.read.schema(read_schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
    )
    if fmt == "csv":
        # multiLine: a quoted field may hold a newline (one record, not two halves)
        df = (
            reader.option("header", True)
            .option("multiLine", True)
            .option("escape", '"')
            .option("enforceSchema", False)
            .csv(uri)
        )
    else:
        df = reader.json(uri)
    as_written = dict(zip(header, written)) if fmt == "csv" else {}
    # a <column>=<value> folder's column (Spark's partition discovery, case-insensitive as
    # Spark resolves names), cast as the contract
    found = {c.lower(): c for c in df.columns if c not in header and c != CORRUPT}
    cols = [
        F.col(_quoted(as_written.get(f.name, f.name))).alias(f.name)
        if f.name in header
        else F.col(_quoted(found[f.name.lower()])).cast(f.dataType).alias(f.name)
        if f.name.lower() in found
        else F.lit(None).cast(f.dataType).alias(f.name)
        for f in full.fields
    ]
    out = df.select(*cols, F.col(CORRUPT))
    if fmt == "csv":
        return _mark_run_on_quotes(out, [c for c in header if c in types])
    return out


def _mark_run_on_quotes(df, columns: Sequence[str]):
    """Give a parsed CSV row the raw record it came from (its fields joined by commas) as
    ``_corrupt_record`` when one of its values starts with a quote and holds a line break.

    Spark strips the quotes of a well-formed quoted field; it keeps the opening one only where
    the field's quote did not close where it should, and then a line break in the value means
    the field ran on over the lines after it, which are lost as rows. Validation quarantines
    such a record as ``unbalanced_quote``. (A value that really starts with a doubled quote and
    holds a line break, ``\"\"\"Hi\"\" she said<newline>...\"``, reads the same: rare in
    titles, and ``quality.max_reason_fraction.unbalanced_quote`` or Parquet lets it through.)
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    strings = [
        f.name for f in df.schema.fields if f.name in columns and f.dataType == T.StringType()
    ]
    if not strings:
        return df
    run_on = F.lit(False)
    for c in strings:
        run_on = run_on | (F.col(c).startswith('"') & F.col(c).rlike(LINE_BREAK))
    raw = F.concat_ws(",", *[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in columns])
    return df.withColumn(
        CORRUPT, F.when(F.col(CORRUPT).isNull() & run_on, raw).otherwise(F.col(CORRUPT))
    )


def _quoted(name: str) -> str:
    """A column name as Spark's ``F.col`` takes it literally (spaces, dots).

    >>> _quoted(" text"), _quoted("a.b`c")
    ('` text`', '`a.b``c`')
    """
    return "`" + name.replace("`", "``") + "`"


def _check_parquet_files_agree(uri: str, table: str, columns: Sequence[str]) -> None:
    """Every data file of a Parquet folder must give each contract column the same type (Spark
    takes one file's schema and fails later, mid-job, with a raw conversion error otherwise).
    Reads the footers with pyarrow where it reaches ``uri``; a single file is its own schema."""
    if not pyarrow_reaches(uri):
        return
    found = parquet_files(uri)
    if not found or len(found[1]) < 2:
        return
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_type

    def spark_type(t) -> str:
        try:
            return from_arrow_type(t).simpleString()
        except Exception:
            return str(t)

    fs, files = found
    seen: dict[str, dict[str, str]] = {}
    for fi in files:
        try:
            with fs.open_input_file(fi.path) as fh:
                sch = pq.read_schema(fh)
        except Exception as e:
            raise InputError(
                _not_parquet_message(table, fi.path, uri) + f" ({type(e).__name__}: {e})"
            ) from None
        for c in columns:
            if c in sch.names:
                seen.setdefault(c, {}).setdefault(spark_type(sch.field(c).type), fi.path)
    for c, types in seen.items():
        if len(types) > 1:
            detail = ", ".join(f"{t} (e.g. {p})" for t, p in sorted(types.items()))
            raise InputError(
                f"{uri}: the files of {table} disagree on the type of column "
                f"'{c}': {detail}; rewrite them with one type"
            )


def _not_parquet_message(table: str, path: str, uri: str) -> str:
    return (
        f"input.{table}: {path} (in {uri}) is not a Parquet file; move it out of the "
        f"folder or give the Parquet files' path"
    )


def _non_parquet_file(uri: str, spark_error: str) -> str | None:
    """The first data file of the Parquet folder ``uri`` whose footer pyarrow cannot read (a
    stray ``README.txt``), else the path Spark's error names as "not a Parquet file", else
    ``None`` (an empty folder or file)."""
    found = parquet_files(uri) if pyarrow_reaches(uri) else None
    if found:
        import pyarrow.parquet as pq

        fs, files = found
        for fi in files:
            if fi.size == 0:
                continue  # a 0-byte file: "empty", as Spark 4 says
            try:
                with fs.open_input_file(fi.path) as fh:
                    pq.read_schema(fh)
            except Exception:
                return fi.path
        return None
    m = re.search(r"(\S+) is not a Parquet file\. ", spark_error)
    return m.group(1) if m else None


#: JSON lines looked at to find the keys of a table (a key absent from all of them is missing)
JSON_PEEK_LINES = 1000


def _peek_columns(spark, uri: str, fmt: str) -> list[str]:
    import json

    from pyspark.sql import functions as F

    if fmt == "csv":
        first = spark.read.text(uri).limit(1).collect()
        if not first:
            raise InputError(f"{uri}: input is empty (no header / no rows)")
        return csv_header_names(first[0][0], strip=False)
    lines = (
        spark.read.text(uri).filter(F.trim(F.col("value")) != "").limit(JSON_PEEK_LINES).collect()
    )
    if not lines:
        raise InputError(f"{uri}: input is empty (no rows)")
    keys: list[str] = []
    for row in lines:
        try:
            obj = json.loads(row[0])
        except ValueError:
            continue  # an unparseable line: it lands in _corrupt_record
        if isinstance(obj, dict):
            keys += [k for k in obj if k not in keys]
    if not keys:
        raise InputError(f"{uri}: none of the first {len(lines)} lines is a JSON object")
    return keys


def empty_table_message(table: str, uri: str) -> str:
    """The error of an input table with no rows (the graph stage's, and the pre-flight's).

    >>> empty_table_message("labels", "l.csv")
    'input.labels: l.csv has no rows (an empty input table is an error)'
    """
    return f"input.{table}: {uri} has no rows (an empty input table is an error)"


def no_test_rows_message(uri: str, why: str) -> str:
    """The error of a run that trains or evaluates the downstream model without a test
    instance (the graph stage's, and the pre-flight's where ``split`` is not a column).

    >>> print(no_test_rows_message("i.csv", "it has no split column"))  # doctest: +ELLIPSIS
    input.instances: i.csv: it has no split column, so every instance is train, but ...
    """
    return (
        f"input.instances: {uri}: {why}, so every instance is train, but the stages train and "
        f"evaluate score test instances: mark the instances to score split=test, or run "
        f"--stages graph,vectorizer,embed,pretrain,neighbors,aggregate for the features alone"
    )


def csv_header_names(line: str, strip: bool = True) -> list[str]:
    """The column names of a CSV header line: a byte-order mark before it dropped, then parsed
    as CSV (quoted names unquoted), each stripped of surrounding spaces unless ``strip`` is
    false (the names as Spark compares them with a schema).

    Examples
    --------
    >>> csv_header_names('\ufeff"instance_id","text"')
    ['instance_id', 'text']
    >>> csv_header_names("instance_id, text", strip=False)
    ['instance_id', ' text']
    """
    import csv

    names = next(csv.reader([line.lstrip("\ufeff")]), [])
    return [c.strip() for c in names] if strip else names


def column_problem(present: Sequence[str], uri: str, table: str) -> str | None:
    """Why the columns ``present`` cannot be read as ``table``: a required column missing, or
    two names that differ only in case (Spark resolves column names case-insensitively, so
    ``Text`` beside ``text`` is ambiguous); else ``None``.

    Examples
    --------
    >>> column_problem(["label_id", "text"], "l.csv", "labels") is None
    True
    >>> print(column_problem(["label_id", "text", "Text"], "l.csv", "labels"))
    l.csv: labels has columns that differ only in case: 'text', 'Text' (Spark reads column \
names case-insensitively); rename or drop one
    >>> print(column_problem(["instance_id", "text", "Split"], "i.csv", "instances"))
    i.csv: instances has a column 'Split', which differs from the optional column 'split' \
only in case and would be ignored; rename it to 'split' (column names are case-sensitive)
    """
    required, optional = INPUT_COLUMNS[table]
    missing = [c for c in required if c not in set(present)]
    if missing:
        return f"{uri}: {table} is missing required column(s) {missing} (found {sorted(present)})"
    # an optional column spelt in another case would be read as an extra column and ignored
    # (a 'Split' header: every instance train, nothing to score)
    for want in optional:
        near = [c for c in present if c != want and c.lower() == want.lower()]
        if near and want not in present:
            return (
                f"{uri}: {table} has a column {near[0]!r}, which differs from the optional "
                f"column {want!r} only in case and would be ignored; rename it to {want!r} "
                "(column names are case-sensitive)"
            )
    by_case: dict[str, list[str]] = {}
    for c in present:
        by_case.setdefault(c.lower(), []).append(c)
    clash = next((names for names in by_case.values() if len(names) > 1), None)
    if clash:
        return (
            f"{uri}: {table} has columns that differ only in case: "
            f"{', '.join(repr(c) for c in clash)} (Spark reads column names "
            f"case-insensitively); rename or drop one"
        )
    return None


def _check_columns(present, uri: str, table: str) -> None:
    problem = column_problem(list(present), uri, table)
    if problem:
        raise InputError(problem)
