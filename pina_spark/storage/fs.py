"""File system helpers: Hadoop's FileSystem API on the driver, ``pyarrow.fs`` on either side.

The Hadoop helpers (:func:`path_exists`, :func:`delete_path`, :func:`list_dir`,
:func:`is_complete`) treat local paths, HDFS and ``s3://`` (EMRFS) the same way. The pyarrow
helpers list and open Parquet folders without a JVM round trip. :func:`pyarrow_reaches` tells
where they apply (local paths and ``s3://``).
"""

import logging

from pina_spark.storage.uri import arrow_uri, is_remote, local_path

log = logging.getLogger(__name__)


def _jfs(spark, uri: str):
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(uri)
    fs = jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return fs, jpath


def path_exists(spark, uri: str) -> bool:
    fs, p = _jfs(spark, uri)
    return bool(fs.exists(p))


def delete_path(spark, uri: str) -> None:
    fs, p = _jfs(spark, uri)
    if fs.exists(p):
        fs.delete(p, True)


def list_dir(spark, uri: str) -> list[tuple[str, bool]]:
    """``(name, is_directory)`` of the entries of folder ``uri`` (Hadoop FS; ``[]`` when it
    does not exist)."""
    fs, p = _jfs(spark, uri)
    if not fs.exists(p):
        return []
    return [(st.getPath().getName(), bool(st.isDirectory())) for st in fs.listStatus(p)]


def is_complete(spark, uri: str) -> bool:
    """A published table: the folder exists and holds Spark's ``_SUCCESS`` marker."""
    return path_exists(spark, uri.rstrip("/") + "/_SUCCESS")


def jpath_child(spark, jpath, name: str):
    """Hadoop ``Path`` of ``name`` inside the Hadoop ``Path`` ``jpath``."""
    return spark.sparkContext._jvm.org.apache.hadoop.fs.Path(jpath, name)


def parquet_dataset(uri: str):
    """pyarrow dataset of a Parquet folder (local path or pyarrow.fs URI) or of one Parquet file,
    or ``None`` when pyarrow cannot list it here (driver side: importing ``pyarrow.dataset``
    costs ~0.3 s in a fresh Python worker; executors use :func:`parquet_files`).

    A folder's data files are those of :func:`parquet_files` (so the empty ``<dir>_$folder$``
    objects EMRFS leaves beside S3 partition folders are skipped, where pyarrow's own discovery
    would take them for Parquet files and fail); ``<column>=<value>`` folders below it are
    read as columns (hive partitioning). An empty folder gives a dataset without files.

    Examples
    --------
    >>> parquet_dataset("/no/such/table") is None
    True
    """
    try:
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        fs, root = pyarrow_fs(uri)
        if fs.get_file_info(root).type == pafs.FileType.File:  # an input given as one file
            return ds.dataset(root, format="parquet", filesystem=fs)
        found = parquet_files(uri, (fs, root))
        if found is None:
            return None
        opts = {
            "filesystem": fs,
            "format": "parquet",
            "partitioning": ds.partitioning(flavor="hive"),
            "partition_base_dir": root.rstrip("/"),
        }
        try:  # the listing's entries carry each file's size: no HEAD request per file on S3
            return ds.dataset(found[1], **opts)
        except TypeError:  # pyarrow < 16 takes paths only
            return ds.dataset([fi.path for fi in found[1]], **opts)
    except Exception as e:  # not a readable Parquet folder from the driver
        log.info("%s not readable with pyarrow here (%s)", uri, e)
        return None


def count_rows_arrow(uri: str) -> int | None:
    """Row count of a Parquet table from its footers, driver side (``None`` when pyarrow does
    not read it here)."""
    dset = parquet_dataset(uri)
    if dset is None:
        return None
    try:
        return int(dset.count_rows())  # footers read concurrently on pyarrow's I/O threads
    except Exception:
        return None


def parquet_size(uri: str) -> tuple[int, int] | None:
    """(rows, uncompressed bytes) of a Parquet table from its footers, driver side (``None``
    when pyarrow does not read it here)."""
    dset = parquet_dataset(uri)
    if dset is None:
        return None
    try:
        rows = size = 0
        for f in dset.get_fragments():
            md = f.metadata
            rows += md.num_rows
            size += sum(md.row_group(k).total_byte_size for k in range(md.num_row_groups))
        return int(rows), int(size)
    except Exception:
        return None


def pyarrow_reaches(uri: str | None) -> bool:
    """Whether executors read/write ``uri`` with pyarrow here: local/``file://`` paths and
    ``s3://`` (``hdfs://``, ``s3a://``, ``gs://``... stay with the JVM, which holds their
    settings and credentials; the driver's small files reach ``s3a://`` through
    :func:`~pina_spark.storage.uri.arrow_uri`).

    >>> [pyarrow_reaches(u) for u in ("/tmp/x", "s3://b/x", "s3a://b/x", "hdfs://nn/x")]
    [True, True, False, False]
    """
    if not uri:
        return False
    return not is_remote(uri) or uri.startswith("s3://")


def pyarrow_fs(uri: str):
    """``(pyarrow filesystem, path)`` of a local / ``file://`` path or a pyarrow.fs URI
    (``s3://``, or ``s3a://`` as :func:`arrow_uri` names it); executor and driver side.

    Examples
    --------
    >>> pyarrow_fs("file:///tmp/x")[1]
    '/tmp/x'
    """
    import pyarrow.fs as pafs

    if is_remote(uri):
        return pafs.FileSystem.from_uri(arrow_uri(uri))
    return pafs.LocalFileSystem(), local_path(uri)


def _list_files(uri: str, located=None):
    """``(filesystem, root, [FileInfo of every file under root])`` listed with ``pyarrow.fs``,
    or ``None`` when pyarrow cannot list ``uri`` here. ``located``: ``pyarrow_fs(uri)`` when the
    caller has it already (an S3 filesystem costs a round trip to make)."""
    try:
        import pyarrow.fs as pafs

        fs, root = located or pyarrow_fs(uri)
        root = root.rstrip("/")
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except Exception as e:
        log.info("%s not listable with pyarrow here (%s)", uri, e)
        return None
    return fs, root, [fi for fi in infos if fi.type == pafs.FileType.File]


def parquet_files(uri: str, located=None):
    """``(pyarrow filesystem, [FileInfo])`` of the data files of a Parquet folder, sorted by
    path (names starting with ``_`` or ``.`` are skipped, as Spark does, and the empty
    ``<dir>_$folder$`` objects EMRFS leaves beside S3 folders, which EMRFS hides from Spark), or
    ``None`` when pyarrow cannot list it here. Lists with ``pyarrow.fs`` only (cheap to import on
    executors). ``located``: ``pyarrow_fs(uri)``, when the caller has it already.

    Examples
    --------
    >>> parquet_files("/no/such/table") is None
    True
    """
    listed = _list_files(uri, located)
    if listed is None:
        return None
    fs, root, files = listed
    keep = [fi for fi in files if is_data_file(fi.path, root)]
    return fs, sorted(keep, key=lambda fi: fi.path)


def is_data_file(path: str, root: str) -> bool:
    """Whether the file ``path`` listed under the folder ``root`` is one Spark reads as data:
    no part of its path below ``root`` starts with ``_`` or ``.`` (``_SUCCESS``, ``.crc``,
    ``_staging``), and it is not one of the empty ``<dir>_$folder$`` objects EMRFS leaves
    beside S3 folders (EMRFS hides them from Spark).

    >>> is_data_file("/t/split=a/p.csv", "/t"), is_data_file("/t/_SUCCESS", "/t")
    (True, False)
    >>> is_data_file("/t/split=a_$folder$", "/t")
    False
    """
    below = path[len(root.rstrip("/")) :].split("/")
    return not any(p.startswith(("_", ".")) for p in below if p) and not path.endswith("_$folder$")


def files_fingerprint(uri: str) -> str | None:
    """Driver side: hash of (path, size, modification time) of every file under ``uri`` listed
    with ``pyarrow.fs`` (no JVM round trip per file), or ``None`` where pyarrow does not reach
    or list it (then use :func:`~pina_spark.storage.commits.input_fingerprint`). Not
    interchangeable with that fingerprint: a cache key, not a manifest value.

    Examples
    --------
    >>> files_fingerprint("hdfs:///models/g") is None
    True
    """
    listed = _list_files(uri) if pyarrow_reaches(uri) else None
    if listed is None:
        return None
    import hashlib

    h = hashlib.sha256(uri.encode())
    for fi in sorted(listed[2], key=lambda fi: fi.path):
        h.update(f"\x1e{fi.path}\x1f{fi.size}\x1f{fi.mtime_ns}".encode())
    return h.hexdigest()[:16]
