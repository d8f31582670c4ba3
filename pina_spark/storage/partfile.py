"""Executor-side Parquet part files: the one writer that tasks use when they write their own
output with pyarrow (the neighbours stage's ``embeddings_via: files`` path, the aggregate
stage's Arrow writer).

A part file is written under a hidden name tagged with the task attempt and renamed to its final
name only when complete. Final names depend on the task (or partition) id alone, so a retried or
speculative attempt replaces the same file with the same rows, never adds a duplicate, and a
failed attempt leaves no file behind. The driver publishes the staging folder afterwards
(:func:`pina_spark.storage.publish_written`).

Examples
--------
>>> import tempfile, pyarrow as pa, pyarrow.fs as pafs, pyarrow.parquet as pq
>>> d = tempfile.mkdtemp()
>>> t = pa.table({"x": [1, 2]})
>>> with PartFile(pafs.LocalFileSystem(), d + "/v=a", "part-00000.parquet", 0, t.schema) as f:
...     f.write_table(t)
>>> f.path.endswith("/v=a/part-00000.parquet"), pq.read_table(f.path).num_rows
(True, 2)
"""

from collections.abc import Sequence
from typing import Any

__all__ = ["PartFile"]


class PartFile:
    """One Parquet file written by a task attempt: ``write_batch``/``write_table``, then
    ``commit()`` (close and rename into place; returns the final path) or ``abort()`` (close
    and delete the temporary file). As a context manager it commits on success and aborts on
    an exception."""

    def __init__(
        self,
        fs,
        directory: str,
        name: str,
        attempt: int,
        schema,
        compression: str | None = None,
        use_dictionary: bool | Sequence[str] = True,
    ):
        import pyarrow.parquet as pq

        fs.create_dir(directory, recursive=True)
        self.fs = fs
        self.path = f"{directory}/{name}"
        self._tmp = f"{directory}/.{name}.attempt{attempt}.tmp"
        self._stream = fs.open_output_stream(self._tmp)
        self._writer = pq.ParquetWriter(
            self._stream, schema, compression=compression, use_dictionary=use_dictionary
        )
        self.rows = 0

    def write_batch(self, batch) -> None:
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def write_table(self, table) -> None:
        self._writer.write_table(table)
        self.rows += table.num_rows

    def _close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._stream.close()

    def commit(self) -> str:
        self._close()
        self.fs.move(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        try:
            self._close()
        except Exception:
            pass
        try:
            self.fs.delete_file(self._tmp)
        except Exception:
            pass

    def __enter__(self) -> "PartFile":
        return self

    def __exit__(self, exc_type, exc, tb) -> Any:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False
