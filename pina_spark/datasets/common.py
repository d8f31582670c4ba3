"""What every converter shares: the split rule, the constants of the prepared files and the
writers (single-file Parquet tables of strings, JSON statistics), all atomic (tmp + rename)."""

import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.storage.folds import in_sample_fraction

SOURCES = ("demo", "instacart", "citeulike-t", "synthetic")
TEST_SALT = "pina-test"
TEST_FRACTION = 0.2
STATS_FILE = "prepare_stats.json"
#: rows per row group of the tables written chunk by chunk (:class:`ParquetStream`)
ROW_GROUP_ROWS = 1 << 18


def _fields(names: Sequence[str]) -> list:
    """The contract's Arrow fields of these columns: strings, except ``weight`` (float64)."""
    import pyarrow as pa

    return [pa.field(c, pa.float64() if c == storage.WEIGHT else pa.string()) for c in names]


def _write(out_dir: str, name: str, columns: dict[str, list]) -> str:
    """Write one single-file Parquet table of string columns atomically (tmp + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = _fields(list(columns))
    table = pa.table(
        {c: pa.array(v, type=f.type) for (c, v), f in zip(columns.items(), fields)},
        schema=pa.schema(fields),
    )
    path = os.path.join(out_dir, f"{name}.parquet")
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, path)
    return path


class ParquetStream:
    """One single-file Parquet table written chunk by chunk (for tables too big to hold), in
    row groups of exactly ``row_group_rows`` rows (the last one shorter), so the bytes do not
    depend on how the rows were chunked; atomic (tmp + rename on :meth:`close`, the tmp file
    removed when the ``with`` block raises).

    Examples
    --------
    >>> import tempfile, pyarrow.parquet as pq
    >>> with ParquetStream(tempfile.mkdtemp(), "labels", ["label_id", "text"], 2) as out:
    ...     out.write({"label_id": ["L0", "L1", "L2"], "text": ["a", "b", "c"]})
    ...     out.write({"label_id": ["L3"], "text": ["d"]})
    >>> f = pq.ParquetFile(out.path)
    >>> f.metadata.num_rows, f.metadata.num_row_groups
    (4, 2)
    """

    def __init__(
        self,
        out_dir: str,
        name: str,
        columns: Sequence[str],
        row_group_rows: int = ROW_GROUP_ROWS,
    ):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if row_group_rows < 1:
            raise ValueError(f"ParquetStream: row_group_rows must be >= 1, got {row_group_rows}")
        self.schema = pa.schema(_fields(columns))
        self.path = os.path.join(out_dir, f"{name}.parquet")
        self.rows = 0
        self._tmp = f"{self.path}.tmp-{uuid.uuid4().hex[:8]}"
        self._writer = pq.ParquetWriter(self._tmp, self.schema, compression="snappy")
        self._group = row_group_rows
        self._buffer: list[Any] = []
        self._buffered = 0

    def write(self, columns: dict[str, Any]) -> None:
        """Append rows: column name -> list or Arrow array (every column of the schema)."""
        import pyarrow as pa

        table = pa.table(
            [pa.array(columns[f.name], type=f.type) for f in self.schema], schema=self.schema
        )
        self._buffer.append(table)
        self._buffered += table.num_rows
        self.rows += table.num_rows
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        import pyarrow as pa

        if self._buffered < self._group and not (final and self._buffered):
            return
        table = pa.concat_tables(self._buffer).combine_chunks()
        start = 0
        while table.num_rows - start >= self._group or (final and start < table.num_rows):
            self._writer.write_table(table.slice(start, self._group), row_group_size=self._group)
            start += self._group
        rest = table.slice(start)
        self._buffer = [rest] if rest.num_rows else []
        self._buffered = rest.num_rows

    def close(self) -> str:
        """Write what is buffered, close the file and move it in place; returns its path."""
        self._flush(final=True)
        self._writer.close()
        os.replace(self._tmp, self.path)
        return self.path

    def __enter__(self) -> "ParquetStream":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        self._writer.close()
        if os.path.exists(self._tmp):
            os.remove(self._tmp)


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def _read_lines(path: str) -> list[str]:
    """Lines of a text file; a missing final newline is fine, no trailing empty line is made."""
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


def _split_of(instance_id: str, salt: str = TEST_SALT) -> str:
    return (
        storage.SPLIT_TEST
        if in_sample_fraction(instance_id, TEST_FRACTION, salt)
        else storage.SPLIT_TRAIN
    )


def _need(input_dir: str | None, source: str, files: Sequence[str]) -> str:
    if not input_dir:
        raise storage.InputError(
            f"prepare-data --source {source}: --input (folder of the raw data " f"set) is required"
        )
    missing = [f for f in files if not os.path.isfile(os.path.join(input_dir, f))]
    if missing:
        raise storage.InputError(f"prepare-data --source {source}: {input_dir} lacks {missing}")
    return input_dir
