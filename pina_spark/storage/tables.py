"""Writing and reading published tables, and moving Arrow tables between the driver and Spark.

:func:`write_table` (a DataFrame) and :func:`write_arrow` (a pyarrow Table held by the driver)
go through staging and atomic publish (:mod:`pina_spark.storage.publishing`).
:func:`read_table` refuses an incomplete table. :func:`collect_arrow` and
:func:`frame_from_arrow` move rows between Spark and the driver as Arrow, never row by row;
:func:`collect_table` brings a published table to the driver without Spark where pyarrow reaches
it.
"""

import contextlib
import logging
import re
from collections.abc import Sequence
from urllib.parse import unquote

from pina_spark.storage.files import write_bytes
from pina_spark.storage.fs import (
    delete_path,
    is_complete,
    parquet_dataset,
    parquet_files,
    pyarrow_fs,
    pyarrow_reaches,
)
from pina_spark.storage.paths import RunPaths
from pina_spark.storage.publishing import discard_staging, publish
from pina_spark.storage.schemas import QUARANTINE, REASON, InputError, schema

log = logging.getLogger(__name__)


def require_complete(spark, paths: "RunPaths", rel: str) -> str:
    """The URI of published table ``rel``; :class:`InputError` when it is missing or incomplete
    (no ``_SUCCESS``)."""
    uri = paths.table(rel)
    if not is_complete(spark, uri):
        raise InputError(
            f"table {uri} is missing or incomplete (no _SUCCESS); run the stage that "
            f"produces it first"
        )
    return uri


def write_table(
    df,
    paths: RunPaths,
    rel: str,
    partition_by: Sequence[str] = (),
    mode_replace_partitions: bool = False,
) -> str:
    """Write ``df`` as Parquet to a staging folder and publish it at ``paths.table(rel)``.

    ``mode_replace_partitions``: keep the published table's other partitions and replace only the
    partitions present in ``df`` (e.g. one ``variant``), still via staging + swap.
    """
    spark = df.sparkSession
    final = paths.table(rel)
    staging = paths.staging(rel)
    if mode_replace_partitions and partition_by and is_complete(spark, final):
        keep = spark.read.parquet(final)
        new_keys = df.select(*partition_by).distinct()
        keep = keep.join(new_keys, list(partition_by), "left_anti")
        df = keep.unionByName(df.select(*keep.columns))
    writer = df.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        writer.parquet(staging)
    except BaseException:
        discard_staging(spark, staging)  # the published table is untouched
        raise
    publish(spark, staging, final)
    return final


def collect_arrow(df):
    """All rows of a (small) DataFrame on the driver as a pyarrow Table, through Arrow record
    batches, never row by row through py4j (``DataFrame.toArrow`` on Spark >= 4, the same
    Arrow collect on Spark 3.5); an empty result keeps the schema.

    Examples
    --------
    >>> collect_arrow(spark.range(3)).num_rows
    3
    """
    import pyarrow as pa

    if hasattr(df, "toArrow"):
        return df.toArrow()
    batches = df._collect_as_arrow()  # Spark 3.5
    if batches:
        return pa.Table.from_batches(batches)
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.Table.from_batches([], schema=to_arrow_schema(df.schema))


def frame_from_arrow(spark, tbl, table: str | None = None):
    """A DataFrame of a pyarrow Table held by the driver, with the explicit schema of
    ``table`` (the reverse of :func:`collect_arrow`; ``None``: the Table's own schema): from the
    Arrow table itself on Spark >= 4, through pandas with Arrow on Spark 3.5.

    Examples
    --------
    >>> import pyarrow as pa
    >>> frame_from_arrow(spark, pa.table({"label_id": ["l"], "text": ["t"]}), "labels").count()
    1
    """
    import pyspark
    from pyspark.sql.pandas.types import from_arrow_schema

    if table is None:
        sch = from_arrow_schema(tbl.schema)
    else:
        sch = schema(table)
        tbl = tbl.select(sch.names)
    if int(pyspark.__version__.split(".")[0]) >= 4:
        return spark.createDataFrame(tbl, schema=sch)
    return spark.createDataFrame(tbl.to_pandas(), schema=sch)


@contextlib.contextmanager
def values_frame(spark, paths: "RunPaths", column: str, values, what: str, kind: str = "int64"):
    """A one-column DataFrame of the ``values`` the driver holds (``kind`` ``int64``, e.g. the
    node indices of a stage's rows, or ``string``, e.g. instance ids), to join with a table,
    for the ``with`` block's Spark jobs only.

    Where pyarrow reaches the run root, the values go to one Parquet file in a staging folder
    of their own (``what``) that Spark reads and that is deleted when the block ends, so they
    never travel inside Spark's tasks. ``createDataFrame`` of a driver-side array puts it in
    the tasks' closures (8 bytes a value, split over the default parallelism: 4.3 MB tasks for
    268k values on ``local[2]``, Spark's "task of very large size"); that is still the way where
    pyarrow does not reach the root.

    Examples
    --------
    >>> import os, tempfile
    >>> from pina_spark.storage.schemas import STAGING
    >>> run = RunPaths(tempfile.mkdtemp())
    >>> with values_frame(spark, run, "node_index", [3, 1], "doc") as df:
    ...     sorted(r[0] for r in df.collect())
    [1, 3]
    >>> os.listdir(f"{run.root}/{STAGING}")   # the values' folder is gone
    []
    >>> with values_frame(spark, run, "instance_id", ["b", "a"], "doc", kind="string") as df:
    ...     df.schema.simpleString()
    'struct<instance_id:string>'
    """
    import numpy as np
    import pyarrow as pa

    if kind == "int64":
        arr = pa.array(np.asarray(values, dtype=np.int64))
    elif kind == "string":
        arr = pa.array([str(v) for v in values], type=pa.string())
    else:
        raise ValueError(f"values_frame: kind {kind!r} is not 'int64' or 'string'")
    tbl = pa.table({column: arr})
    if not pyarrow_reaches(paths.root):
        yield frame_from_arrow(spark, tbl)
        return
    staging = paths.staging(what)
    try:
        fs, root = pyarrow_fs(staging)
        _write_parquet_file(fs, root, tbl)
        yield spark.read.parquet(staging)
    finally:
        try:  # best effort: never hide the block's own error; recover removes it next run
            delete_path(spark, staging)
        except Exception:
            log.warning("could not remove the staging folder %s", staging)


def collect_table(
    spark, paths: RunPaths, rel: str, columns: Sequence[str], keep=None, what: str = "rows"
):
    """The ``columns`` of published table ``rel`` on the driver as a pyarrow Table: every row,
    or with ``keep=(column, values)`` only the rows whose int64 ``column`` is one of ``values``.
    Row order is not defined; column types are the table's.

    Where pyarrow reaches the table here (:func:`pyarrow_reaches`: local paths, ``s3://``), the
    driver reads its data files (:func:`parquet_dataset`) itself: the columns asked for, ``keep``
    pushed into the scan, no Spark job and no copy through the JVM. Elsewhere, or when pyarrow
    cannot read it, Spark reads the table and collects it through Arrow (:func:`collect_arrow`;
    ``keep`` as a semi join with :func:`values_frame` named ``what``). Both return the same rows
    (``test_io.py::test_collect_table_reads_the_same_rows_with_and_without_spark``).

    Raises
    ------
    InputError
        When the table is missing or incomplete (:func:`require_complete`).

    Examples
    --------
    >>> import tempfile
    >>> run = RunPaths(tempfile.mkdtemp())
    >>> _ = write_table(spark.range(5).withColumnRenamed("id", "node_index"), run, "t")
    >>> tbl = collect_table(spark, run, "t", ["node_index"], keep=("node_index", [4, 1, 9]))
    >>> sorted(tbl.column("node_index").to_pylist())
    [1, 4]
    """
    uri = require_complete(spark, paths, rel)
    columns = list(columns)
    dset = parquet_dataset(uri) if pyarrow_reaches(uri) else None
    if dset is not None and dset.files:  # no data file: Spark says what it sees
        import numpy as np
        import pyarrow as pa
        import pyarrow.dataset as ds

        flt = None
        if keep is not None:
            flt = ds.field(keep[0]).isin(pa.array(np.asarray(keep[1], dtype=np.int64)))
        try:
            return dset.to_table(columns=columns, filter=flt)
        except (pa.ArrowException, OSError) as e:
            log.info("%s: not read with pyarrow here (%s); Spark collects it", uri, e)
    df = spark.read.parquet(uri).select(*columns)
    if keep is None:
        return collect_arrow(df)
    with values_frame(spark, paths, keep[0], keep[1], what) as want:
        return collect_arrow(df.join(want, keep[0], "left_semi"))


def parquet_codec(name: str | None, default: str = "snappy") -> str:
    """pyarrow's name of a Spark Parquet compression codec (``uncompressed`` -> ``none``).

    Examples
    --------
    >>> parquet_codec("UNCOMPRESSED"), parquet_codec(None, "zstd")
    ('none', 'zstd')
    """
    codec = (name or default).lower()
    return "none" if codec in ("uncompressed", "none") else codec


def read_table(spark, paths: RunPaths, rel: str, contract: bool = False):
    """Read a published table, refusing an incomplete one.

    ``contract=True`` (tables with a :func:`schema`, not partitioned): when pyarrow reads the
    table here and a data file's footer has every contract column with the contract's type,
    Spark reads it with that schema and skips its schema-inference job (~0.5 s on small
    clusters); otherwise Spark infers the schema as usual.
    """
    uri = require_complete(spark, paths, rel)
    if contract and _footer_has_contract(uri, schema(rel)):
        return spark.read.schema(schema(rel)).parquet(uri)
    return spark.read.parquet(uri)


def _footer_has_contract(uri: str, contract) -> bool:
    """Whether the first data file of ``uri`` (read with pyarrow) has every column of the
    Spark schema ``contract`` with the same type (nullability aside)."""
    if not pyarrow_reaches(uri):
        return False
    found = parquet_files(uri)
    if not found or not found[1]:
        return False
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        fs, files = found
        with fs.open_input_file(files[0].path) as fh:
            got = {f.name: f.dataType for f in from_arrow_schema(pq.read_schema(fh)).fields}
    except Exception as e:
        log.info("%s: footer schema not readable here (%s); Spark infers it", uri, e)
        return False
    return all(f.name in got and got[f.name] == f.dataType for f in contract.fields)


def write_quarantine(
    df, paths: RunPaths, table: str, n_rows: int | None = None, spark=None
) -> dict[str, int]:
    """Publish quarantined rows of input ``table`` (with a ``reason`` column) under
    ``quarantine/<table>`` and return counts per reason, counted on the published table
    (:func:`group_counts`; always written, even when empty). ``n_rows=0`` (known to the
    caller): where pyarrow reaches the run root, the empty table is written by the driver
    (one Parquet file with the schema, ``_SUCCESS``, same publish) instead of a Spark job.
    ``df`` may also be a pyarrow Table (rows validated on the driver,
    :mod:`pina_spark.validate.events`; ``spark`` then required): written by
    :func:`write_arrow`."""
    import pyarrow as pa

    rel = f"{QUARANTINE}/{table}"
    if isinstance(df, pa.Table):
        write_arrow(spark, df, paths, rel)
    elif n_rows == 0 and pyarrow_reaches(paths.root):
        from pyspark.sql.pandas.types import to_arrow_schema

        spark = df.sparkSession
        write_arrow(spark, pa.Table.from_batches([], schema=to_arrow_schema(df.schema)), paths, rel)
        return {}
    else:
        spark = df.sparkSession
        write_table(df, paths, rel)
    counts = group_counts(spark, paths.table(rel), [REASON])
    return {r[REASON]: int(r["count"]) for r in counts.to_pylist()}


def _write_parquet_file(fs, folder: str, tbl) -> None:
    """``tbl`` as the one Parquet file of ``folder`` (a path of the pyarrow filesystem ``fs``)."""
    import pyarrow.parquet as pq

    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/part-00000.zstd.parquet") as fh:
        pq.write_table(tbl, fh, compression="zstd")


def write_arrow(spark, tbl, paths: RunPaths, rel: str, partition_by: str | None = None) -> str:
    """Publish a pyarrow Table held by the driver at ``paths.table(rel)``, same staging and
    publish as :func:`write_table`: one Parquet file (one per value of ``partition_by``, in
    ``<column>=<value>/`` folders without the column, as Spark lays out a partitioned table)
    written by pyarrow where pyarrow reaches the run root, else through Spark
    (:func:`frame_from_arrow`).

    Example::

        write_arrow(spark, pa.table({"a": [1]}), paths, "quarantine/x")
    """
    parts = [partition_by] if partition_by else []
    if not pyarrow_reaches(paths.root):
        df = frame_from_arrow(spark, tbl)
        if partition_by:  # one file per value, as the pyarrow path writes
            df = df.repartition(df[partition_by])
        return write_table(df, paths, rel, partition_by=parts)
    import pyarrow.compute as pc

    staging = paths.staging(rel)
    try:
        fs, root = pyarrow_fs(staging)
        if partition_by:
            rest = [c for c in tbl.column_names if c != partition_by]
            key = tbl.column(partition_by)
            files = [
                (f"{root}/{partition_by}={v}", tbl.filter(pc.equal(key, v)).select(rest))
                for v in sorted(pc.unique(key).to_pylist())
            ]
        else:
            files = [(root, tbl)]
        for folder, part in files:
            _write_parquet_file(fs, folder, part)
        write_bytes(staging.rstrip("/") + "/_SUCCESS", b"")
        publish(spark, staging, paths.table(rel))
    except BaseException:
        discard_staging(spark, staging)
        raise
    return paths.table(rel)


def group_counts(spark, uri: str, cols: Sequence[str]):
    """Rows per distinct value of ``cols`` in the Parquet table at ``uri`` as a pyarrow Table
    (``cols`` + ``count``): read with pyarrow on the driver where it reaches the table (no
    Spark job; a published table's partition folders are read as columns), else a Spark
    ``groupBy`` collected as Arrow.

    Example::

        group_counts(spark, paths.table("graph/pretrain_edges"),
                     ["variant", "block"])
    """
    import pyarrow as pa

    dset = parquet_dataset(uri) if pyarrow_reaches(uri) else None
    if dset is not None:
        try:
            t = dset.to_table(columns=list(cols))
            g = t.group_by(list(cols)).aggregate([([], "count_all")])
            return pa.table({**{c: g[c] for c in cols}, "count": g["count_all"]})
        except (pa.ArrowInvalid, KeyError) as e:  # e.g. files without the column
            log.info("%s: counted with Spark (%s)", uri, e)
    from pyspark.sql import functions as F

    df = spark.read.parquet(uri)
    return collect_arrow(df.groupBy(*cols).agg(F.count(F.lit(1)).cast("long").alias("count")))


def partition_values(df, column: str) -> list[str]:
    """The values of partition column ``column`` of a DataFrame read from a partitioned file
    table (sorted): from its file paths (``.../<column>=<value>/...``; no job), else, for a
    file outside such folders, with a ``distinct``."""
    try:
        files = df.inputFiles()
    except Exception:
        files = []
    found: set[str] = set()
    for f in files:
        m = re.search(rf"/{re.escape(column)}=([^/]*)/", f)
        if m is None:  # a file outside <column>=... folders: ask Spark
            found = set()
            break
        found.add(unquote(m.group(1)))
    if found:
        return sorted(found)
    return sorted(r[0] for r in df.select(column).distinct().collect() if r[0] is not None)
