"""What the driver learns about the input tables and a run root with pyarrow alone, before any
SparkSession exists: whether each input exists, its columns and their types (Parquet footers,
the CSV header of every file, the first JSON lines), its row count where that is cheap, whether
a published folder is complete, and the fingerprint of the input files. ``pina-spark check``
reports it; ``pina-spark run`` refuses to take the run root's lease when an input its stages
read fails here, so a missing input costs neither a Spark start nor a ``failed`` manifest entry.

The column rules are those of :func:`pina_spark.storage.read_input`: the required columns of
:data:`~pina_spark.storage.schemas.INPUT_COLUMNS`, the Spark type of each contract column (a
``double`` column also takes float and integer files), one type per column across the files
of a Parquet folder, and the same messages. Paths that pyarrow does not reach here
(``hdfs://``, ``s3a://``) are ``unchecked``: the graph stage checks them with Spark.

Examples
--------
>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "labels.csv"), "w") as fh:
...     _ = fh.write("label_id,text\\nl1,red\\nl2,blue\\n")
>>> r = inspect_input(os.path.join(d, "labels.csv"), "labels")
>>> r.status, r.rows, r.columns
('ok', 2, ('label_id', 'text'))
>>> inspect_input(os.path.join(d, "none.csv"), "labels").problem.endswith("does not exist")
True
"""

import dataclasses as dc
import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

from pina_spark.storage.fs import is_data_file, pyarrow_fs, pyarrow_reaches
from pina_spark.storage.inputs import (
    JSON_PEEK_LINES,
    column_problem,
    csv_header_names,
    empty_table_message,
    quote_ran_on,
    type_accepted,
    type_mismatch,
)
from pina_spark.storage.inputs import _format_of as input_format
from pina_spark.storage.schemas import INPUT_COLUMNS, schema
from pina_spark.storage.uri import is_remote, local_path, same_place

#: an input that passed every check
OK = "ok"
#: the path does not exist
MISSING = "missing"
#: it exists but a run would stop on it (a column, a type, an empty table, an unreadable file)
BAD = "bad"
#: pyarrow does not reach it here (``hdfs://``, ``s3a://``): the graph stage checks it
UNCHECKED = "unchecked"

#: text inputs (CSV, JSON lines) are counted row by row only when local and at most this large
COUNT_TEXT_MAX_BYTES = 64 << 20
#: bytes read at most to find the first line of a text file
_FIRST_LINE_MAX = 1 << 20


@dc.dataclass(frozen=True)
class InputReport:
    """What :func:`inspect_input` found about one input table.

    Attributes
    ----------
    table, uri : the contract table (``instances``, ...) and its configured path.
    status : :data:`OK`, :data:`MISSING`, :data:`BAD` or :data:`UNCHECKED`.
    format : ``parquet``, ``csv`` or ``jsonl`` (from the path's extension, as the reader does).
    files, bytes : data files (names starting with ``_`` or ``.`` are skipped, as Spark does) and
        their total size.
    rows : row count from the Parquet footers, or of a small local text file; ``None`` where
        counting would mean reading the data.
    columns : the columns found (Parquet schema, CSV header, keys of the first JSON lines).
    problem : why a run would stop (:data:`MISSING`, :data:`BAD`), the reader's message.
    note : anything else worth knowing (why unchecked, why not counted).
    """

    table: str
    uri: str
    status: str
    format: str
    files: int = 0
    bytes: int = 0
    rows: int | None = None
    columns: tuple[str, ...] = ()
    problem: str | None = None
    note: str | None = None

    @property
    def blocks_run(self) -> bool:
        """Whether a run reading this table would stop on it (an empty table too: see
        :meth:`empty_problem`)."""
        return self.status in (MISSING, BAD)

    def empty_problem(self) -> str | None:
        """The graph stage's error for a table with a header and no rows (what it refuses
        before any work), or ``None``: counted rows and none of them."""
        if self.status == OK and self.rows == 0:
            return empty_table_message(self.table, self.uri)
        return None

    def to_dict(self) -> dict[str, Any]:
        return dict(dc.asdict(self), columns=list(self.columns))


class _Bad(Exception):
    """A problem found while inspecting (becomes :data:`BAD` with this message)."""


def inspect_input(uri: str, table: str) -> InputReport:
    """Check the input ``table`` at ``uri`` as :func:`pina_spark.storage.read_input` would,
    reading only metadata: Parquet footers, the first line of each CSV file, the first
    :data:`~pina_spark.storage.JSON_PEEK_LINES` JSON lines."""
    fmt = input_format(uri)
    if not pyarrow_reaches(uri):
        why = "pyarrow does not reach it here"
        return InputReport(table, uri, UNCHECKED, fmt, note=f"{why}: the graph stage checks it")
    try:
        listed = _data_files(uri)
    except Exception as e:  # no credentials here, a bucket in another account, ...
        why = f"pyarrow could not list it here ({type(e).__name__}: {e})"
        return InputReport(table, uri, UNCHECKED, fmt, note=f"{why}: the graph stage checks it")
    if listed is None:
        return InputReport(table, uri, MISSING, fmt, problem=f"input.{table}: {uri} does not exist")
    fs, root, files = listed
    found = InputReport(
        table, uri, OK, fmt, files=len(files), bytes=sum(int(fi.size or 0) for fi in files)
    )
    rows: int | None
    note: str | None = None
    try:
        partitions = folder_layout(files, root, uri, table)
        if fmt == "parquet":
            rows, columns = _parquet(fs, files, uri, table)
        else:
            columns = _csv_header(fs, files, uri) if fmt == "csv" else _json_keys(fs, files, uri)
            rows, note = _count_text(fs, files, uri, fmt)
        both = [c for c in partitions if c.lower() in {x.lower() for x in columns}]
        if both:
            raise _Bad(
                f"input.{table}: {uri} has the column '{both[0]}' both in its files and in its "
                f"partition folders' names ({both[0]}=...); drop it from one of them"
            )
        if fmt != "parquet":  # the text readers match partition folders' names to the
            # contract case-insensitively (storage.inputs), so `Split=test/` is the split
            named = {c.lower(): c for group in INPUT_COLUMNS[table] for c in group}
            partitions = [named.get(c.lower(), c) for c in partitions]
        columns += partitions
        _check_required(columns, uri, table)
        if rows == 0:
            note = (
                "no rows: the graph stage refuses an empty table; a run of another run's "
                "models takes empty instances as a day without new products"
            )
    except _Bad as e:
        return dc.replace(found, status=BAD, problem=str(e))
    return dc.replace(found, rows=rows, columns=tuple(columns), note=note)


def folder_layout(files, root: str, uri: str, table: str) -> list[str]:
    """The partition columns of a folder input (``<column>=<value>`` folders, as Spark and
    pyarrow read them), after checking that Spark reads every file listed: a data file must lie
    directly in the folder (``root``, its path as pyarrow lists it) or below partition folders
    only, and not both. A file in any other subfolder (``old/part-0.csv``) is one Spark leaves
    out, and so are the top-level files of a folder that also has partition folders.

    Examples
    --------
    >>> import pyarrow.fs as pafs
    >>> def f(*paths):
    ...     return [pafs.FileInfo(p, pafs.FileType.File) for p in paths]
    >>> folder_layout(f("/t/split=test/a.csv", "/t/split=train/b.csv"), "/t", "/t", "instances")
    ['split']
    >>> folder_layout(f("/t/a.csv", "/t/old/b.csv"), "/t", "/t", "instances")
    Traceback (most recent call last):
    ...
    pina_spark.storage.preflight._Bad: input.instances: /t/old/b.csv lies in the subfolder \
'old' of /t, which Spark does not read as part of the table (only files directly in the \
folder, or in <column>=<value> partition folders, are): move it, or point input.instances at \
the files
    """
    root = root.rstrip("/")
    columns: list[str] = []
    top = nested = None
    for fi in files:
        if fi.path == root or not fi.path.startswith(root + "/"):
            continue  # the input is this one file
        rel = fi.path[len(root) + 1 :].split("/")[:-1]
        for d in rel:
            col = d.split("=", 1)[0]
            if "=" not in d or not col:
                raise _Bad(
                    f"input.{table}: {fi.path} lies in the subfolder '{d}' of {uri}, which "
                    f"Spark does not read as part of the table (only files directly in the "
                    f"folder, or in <column>=<value> partition folders, are): move it, or "
                    f"point input.{table} at the files"
                )
            if col not in columns:
                columns.append(col)
        if rel:
            nested = nested or fi.path
        else:
            top = top or fi.path
    if top and nested:
        raise _Bad(
            f"input.{table}: {uri} holds data files both directly in it ({top}) and in "
            f"partition folders ({nested}): Spark reads the partition folders only, leaving the "
            f"top-level files out; move them into a partition folder or out of the table"
        )
    return columns


def _data_files(uri: str):
    """``(pyarrow filesystem, path, [FileInfo])`` of the data files at ``uri`` (a file, or the
    files of a folder sorted by path, hidden names skipped; ``path``: ``uri`` as pyarrow names
    it), or ``None`` when nothing is there."""
    import pyarrow.fs as pafs

    fs, path = pyarrow_fs(uri)
    path = path.rstrip("/") or "/"
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return None
    if info.type == pafs.FileType.File:
        return fs, path, [info]
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = [fi for fi in infos if fi.type == pafs.FileType.File and is_data_file(fi.path, path)]
    return fs, path, sorted(files, key=lambda fi: fi.path)


def _check_required(present: Iterable[str], uri: str, table: str) -> None:
    problem = column_problem(list(present), uri, table)
    if problem:
        raise _Bad(problem)


def _spark_type(arrow_type):
    """The Spark type Spark reads a Parquet column of ``arrow_type`` as (``None``: unknown)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    try:
        return from_arrow_type(arrow_type)
    except Exception:
        return None


def _parquet(fs, files, uri: str, table: str) -> tuple[int, list[str]]:
    """Row count and columns of a Parquet input, from the footer of every file; the contract
    columns' types are checked in each file."""
    import pyarrow.parquet as pq

    if not files:
        raise _Bad(
            f"input.{table}: {uri} is empty or not a Parquet table (no schema could be read)"
        )
    expected = {f.name: f.dataType for f in schema(table).fields}
    rows, columns = 0, []
    seen: dict[str, dict[str, str]] = {}
    for fi in files:
        try:
            with fs.open_input_file(fi.path) as fh:
                md = pq.ParquetFile(fh).metadata
                sch = md.schema.to_arrow_schema()
        except Exception as e:
            hint = ""
            if fi.path.lower().endswith((".csv", ".csv.gz", ".json", ".jsonl", ".jsonl.gz")):
                hint = (
                    f"; a folder of CSV or JSON lines files must be named by its format "
                    f"(e.g. {uri.rstrip('/')}.csv)"
                )
            elif os.path.splitext(uri.rstrip("/"))[1].lower() not in ("", ".parquet", ".pq"):
                hint = (
                    "; the format comes from the path's extension: .csv (or .csv.gz), .jsonl "
                    "(.json, .jsonl.gz), else Parquet (tab-separated files: convert them to "
                    "CSV or Parquet)"
                )
            raise _Bad(
                f"input.{table}: {fi.path} (in {uri}) is not a readable Parquet file: "
                f"{type(e).__name__}: {e}{hint}"
            ) from None
        rows += md.num_rows
        columns += [n for n in sch.names if n not in columns]
        for name, want in expected.items():
            if name not in sch.names:
                continue
            got = _spark_type(sch.field(name).type)
            got_s = got.simpleString() if got is not None else str(sch.field(name).type)
            if got is None or not type_accepted(want, got):
                raise _Bad(type_mismatch(uri, table, name, got_s, want))
            seen.setdefault(name, {}).setdefault(got_s, fi.path)
    for c, types in seen.items():
        if len(types) > 1:
            detail = ", ".join(f"{t} (e.g. {p})" for t, p in sorted(types.items()))
            raise _Bad(
                f"{uri}: the files of {table} disagree on the type of column '{c}': {detail}; "
                "rewrite them with one type"
            )
    return rows, columns


def _open_text(fs, path: str):
    import io

    compression = "gzip" if path.lower().endswith(".gz") else None
    return io.TextIOWrapper(
        fs.open_input_stream(path, compression=compression),
        encoding="utf-8",
        errors="replace",
        newline="",
    )


def _first_line(fs, path: str) -> str | None:
    with _open_text(fs, path) as fh:
        line = fh.readline(_FIRST_LINE_MAX)
    line = line.rstrip("\r\n")
    return line if line.strip() else None


def _csv_header(fs, files, uri: str) -> list[str]:
    """The header of a CSV input: the first line of every file, which must agree (Spark checks
    each file's header against the columns it reads)."""
    headers: dict[tuple[str, ...], str] = {}
    for fi in files:
        line = _first_line(fs, fi.path)
        if line is None:
            continue
        cols = tuple(csv_header_names(line))
        headers.setdefault(tuple(c.lower() for c in cols), fi.path)
        if len(headers) == 1:
            first = list(cols)
    if not headers:
        raise _Bad(f"{uri}: input is empty (no header / no rows)")
    if len(headers) > 1:
        detail = "; ".join(f"{','.join(h)} (e.g. {p})" for h, p in headers.items())
        raise _Bad(f"{uri}: its CSV files have different headers: {detail}; give them one header")
    return first


def _json_keys(fs, files, uri: str) -> list[str]:
    """The keys of the first :data:`JSON_PEEK_LINES` non-blank lines of a JSON lines input."""
    keys: list[str] = []
    n = 0
    for fi in files:
        with _open_text(fs, fi.path) as fh:
            for line in fh:
                if not line.strip():
                    continue
                n += 1
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None  # an unparseable line: it lands in _corrupt_record
                if isinstance(obj, dict):
                    keys += [k for k in obj if k not in keys]
                if n >= JSON_PEEK_LINES:
                    break
        if n >= JSON_PEEK_LINES:
            break
    if not n:
        raise _Bad(f"{uri}: input is empty (no rows)")
    if not keys:
        raise _Bad(f"{uri}: none of the first {n} lines is a JSON object")
    return keys


def _count_text(fs, files, uri: str, fmt: str) -> tuple[int | None, str | None]:
    """Rows of a local text input of at most :data:`COUNT_TEXT_MAX_BYTES` (CSV records after
    the header, quoted newlines kept in their record; non-blank JSON lines), else ``None``."""
    import csv

    size = sum(int(fi.size or 0) for fi in files)
    if is_remote(uri) or size > COUNT_TEXT_MAX_BYTES:
        return None, f"rows not counted ({size:,} bytes of {fmt}; the graph stage counts them)"
    # a field may be as long as the file (the default limit, 131,072 characters, would stop
    # here on a long text the run quarantines as text_too_long)
    csv.field_size_limit(max(csv.field_size_limit(), COUNT_TEXT_MAX_BYTES))
    rows = 0
    for fi in files:
        if fmt != "csv":
            with _open_text(fs, fi.path) as fh:
                rows += sum(1 for line in fh if line.strip())
            continue
        with _open_text(fs, fi.path) as fh:
            n = _csv_records(fh, fi.path, uri)
        rows += max(0, n - 1)
    return rows, None


def _csv_records(fh, path: str, uri: str) -> int:
    """The non-blank records of a CSV file (the header included, quoted line breaks kept in
    their record), after checking that no quoted field ran on over line breaks.

    A quoted field that does not close where it should (its closing quote missing, or not
    followed by a comma or the end of the line) runs on: Spark's multi-line reader (and this
    lenient count) take the lines after it into the field, up to the next quote that can close
    it or to the end of the file, and the rows on them are gone. The resulting record is often
    valid (the field is the last column, or the closing quote comes from another quoted
    field), so the validation cannot always see it. Every record that spans lines is tested
    with :func:`~pina_spark.storage.inputs.quote_ran_on`, validation's ``unbalanced_quote``
    test: a line break outside its well-formed quoted fields.

    Raises ``_Bad`` naming the file and the line where the record starts, unless nothing but
    blank lines follow that line (an open quote on the last line loses no row).

    Examples
    --------
    >>> import io
    >>> _csv_records(io.StringIO('a,b\\n1,"two\\nlines"\\n2,"Best" pizza\\n'), "f.csv", "f.csv")
    3
    >>> _csv_records(io.StringIO('a,b\\n1,"open\\n2,x\\n3,"red"\\n4,y\\n'), "f.csv", "f.csv")
    ... # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    pina_spark.storage.preflight._Bad: f.csv: the quoted field of the record that starts on line
    2 is not closed where it should be: Spark would read lines 2-4 as one record, the rows on
    lines 3-4 lost; close the quote, double a quote inside a quoted field (RFC 4180: "12""
    pan"), or write Parquet
    """
    import csv

    lines: list[str] = []

    def recorded():
        for line in fh:
            lines.append(line)
            yield line

    reader = csv.reader(recorded())
    n, start = 0, 1
    for record in reader:
        if record:
            n += 1
            if len(lines) > 1:
                _check_record(lines, start, path, uri)
        start += len(lines)
        lines.clear()
    return n


def _check_record(lines: list[str], start: int, path: str, uri: str) -> None:
    """Refuse the record on ``lines`` (from line ``start``) when its quoting ran on (see
    :func:`_csv_records`)."""
    if not quote_ran_on("".join(lines)):
        return
    lost = [i for i, line in enumerate(lines[1:], start + 1) if line.strip()]
    if not lost:
        return  # a quote open on the last line: nothing after it to lose
    where = uri if same_place(path, uri) else f"{uri}: {path}"
    raise _Bad(
        f"{where}: the quoted field of the record that starts on line {start} is not closed "
        f"where it should be: Spark would read lines {start}-{lost[-1]} as one record, the "
        f"rows on lines {lost[0]}-{lost[-1]} lost; close the quote, double a quote inside a "
        f'quoted field (RFC 4180: "12"" pan"), or write Parquet'
    )


# --------------------------------------------------------------------------- run root
def is_complete_arrow(uri: str) -> bool | None:
    """Whether the published folder ``uri`` holds its ``_SUCCESS`` marker, with pyarrow
    (what :func:`pina_spark.storage.is_complete` asks Hadoop); ``None`` where pyarrow does not
    reach it."""
    if not pyarrow_reaches(uri):
        return None
    import pyarrow.fs as pafs

    try:
        fs, path = pyarrow_fs(uri.rstrip("/") + "/_SUCCESS")
        return fs.get_file_info(path).type == pafs.FileType.File
    except Exception:
        return None


def input_fingerprint_local(uris: Iterable[str | None]) -> str | None:
    """:func:`pina_spark.storage.input_fingerprint` without a JVM, for local inputs: the same
    hash of ``file:<absolute path>:<size>:<modification ms>`` of every file under each input
    (Hadoop's local file system hides its ``.<name>.crc`` checksum files and qualifies a relative
    path with the working directory, as here). ``None`` when an input is a URI (``s3://``,
    ``hdfs://``): EMRFS and pyarrow do not list an object store alike, so the caller reports
    the manifest's recorded state instead.

    Examples
    --------
    >>> input_fingerprint_local(["s3://b/events/"]) is None
    True
    >>> input_fingerprint_local([None, "/no/such/file.csv"]) == input_fingerprint_local(
    ...     ["/no/such/file.csv"])
    True
    """
    h = hashlib.sha256()
    given = sorted(u for u in uris if u)
    if any(is_remote(u) for u in given):
        return None
    for uri in given:
        p = os.path.abspath(local_path(uri))
        if not os.path.exists(p):
            h.update(f"{uri}:missing".encode())
            continue
        if os.path.isfile(p):
            found = [p]
        else:
            found = [
                os.path.join(d, n)
                for d, _, names in os.walk(p)
                for n in names
                if not (n.startswith(".") and n.endswith(".crc"))
            ]
        entries = []
        for f in found:
            st = os.stat(f)
            entries.append(f"file:{f}:{st.st_size}:{st.st_mtime_ns // 1_000_000}")
        for e in sorted(entries):
            h.update(e.encode())
    return h.hexdigest()[:16]
