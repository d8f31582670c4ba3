"""Table schemas, column names, readers, run paths, staged writes with atomic publish, quarantine.

The only module that knows paths and formats. Column names live here as constants.

Publishing: every table is written to ``<root>/_staging/<name>-<uuid>`` and, only once the write
succeeded, swapped into ``<root>/<name>`` (the previous version is moved aside first and deleted
after the swap; a crash in between is repaired by :func:`recover` on the next run). Readers of
``<root>/<name>`` therefore see either the old complete table or the new complete one, never a
half-written one. Renames go through Hadoop's FileSystem API so local paths, HDFS and ``s3://``
(EMRFS) behave the same way (on S3, rename is copy+delete: atomic per object, not per folder; the
``_SUCCESS`` marker written last is what readers should check, see :func:`is_complete`).

Examples
--------
>>> paths = RunPaths("/tmp/pina-run", run_date="2026-11-21")
>>> paths.table("features")
'/tmp/pina-run/run_date=2026-11-21/features'
"""

import contextlib
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import threading

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- column names
INSTANCE_ID = "instance_id"
LABEL_ID = "label_id"
TEXT = "text"
SPLIT = "split"
BASKET_ID = "basket_id"
ITEM_ID = "item_id"
EVENT_TIME = "event_time"
WEIGHT = "weight"
REASON = "reason"

NODE_INDEX = "node_index"
KIND = "kind"
NODE_ID = "node_id"
KIND_INSTANCE = "instance"
KIND_LABEL = "label"

SRC_ID = "src_id"
DST_ID = "dst_id"
COUNT = "count"
SCORE = "score"
SRC_INDEX = "src_index"
DST_INDEX = "dst_index"
BLOCK = "block"
VARIANT = "variant"

INSTANCE_INDEX = "instance_index"
LABEL_INDEX = "label_index"
NEIGHBOR = "neighbor"
DENSE = "dense"
SPARSE_INDICES = "sparse_indices"
SPARSE_VALUES = "sparse_values"
NEIGHBOR_IDS = "neighbor_ids"
NEIGHBOR_WEIGHTS = "neighbor_weights"
FOLD = "fold"
LABEL_IDS = "label_ids"
SCORES = "scores"

SPLIT_TRAIN = "train"
SPLIT_TEST = "test"
SPLIT_VALID = "valid"

# --------------------------------------------------------------------------- output layout
# relative paths of every published table / folder under a run root
NODES = "nodes"
I2I_EDGES = "graph/i2i_edges"
INSTANCE_LABELS = "graph/instance_labels"  # downstream target Y: instance_index, label_index
PRETRAIN_EDGES = "graph/pretrain_edges"  # B_pre, partitioned by variant (pina, pina_naive)
VECTORIZER = "vectorizer"  # Phi_pre (tf-idf + encoder), the vectorizer stage's folder
MODELS = "models"  # g per variant, folds, model card: the pretrain stage's folder
EMBEDDINGS = "embeddings"
NEIGHBORS = "neighbors"  # partitioned by variant
FEATURES = "features"  # partitioned by variant, split
PREDICTIONS = "predictions"  # partitioned by variant
DOWNSTREAM_MODELS = "downstream_models"  # the train stage's PECOS models, one folder per variant
EVAL = "eval"
QUARANTINE = "quarantine"
MANIFEST = "_manifest.json"
STAGING = "_staging"
STAGING_RUN_TAG = ".run-"
LOCK = "_LOCK"  # the run root's lease (one writer per root)
COMMITS = "_commits"  # one atomic commit record per stage
VERSION_FILE = "_VERSION"  # version token inside every published folder


def _schemas():
    from pyspark.sql import types as T

    s, lng, f = T.StringType(), T.LongType(), T.FloatType()
    arr = T.ArrayType
    return {
        # input contract
        "instances": T.StructType(
            [T.StructField(INSTANCE_ID, s), T.StructField(TEXT, s), T.StructField(SPLIT, s)]
        ),
        "labels": T.StructType([T.StructField(LABEL_ID, s), T.StructField(TEXT, s)]),
        "instance_labels": T.StructType(
            [T.StructField(INSTANCE_ID, s), T.StructField(LABEL_ID, s)]
        ),
        "events": T.StructType(
            [
                T.StructField(BASKET_ID, s),
                T.StructField(ITEM_ID, s),
                T.StructField(EVENT_TIME, s),
                T.StructField(WEIGHT, T.DoubleType()),
            ]
        ),
        "filter_pairs": T.StructType([T.StructField(INSTANCE_ID, s), T.StructField(LABEL_ID, s)]),
        # produced tables
        NODES: T.StructType(
            [
                T.StructField(NODE_INDEX, lng, False),
                T.StructField(KIND, s, False),
                T.StructField(NODE_ID, s, False),
                T.StructField(TEXT, s),
                T.StructField(SPLIT, s),
            ]
        ),
        EMBEDDINGS: T.StructType(
            [
                T.StructField(NODE_INDEX, lng, False),
                T.StructField(DENSE, arr(f)),
                T.StructField(SPARSE_INDICES, arr(T.IntegerType())),
                T.StructField(SPARSE_VALUES, arr(f)),
            ]
        ),
        NEIGHBORS: T.StructType(
            [
                T.StructField(INSTANCE_INDEX, lng, False),
                T.StructField(NEIGHBOR, arr(lng)),
                T.StructField(SCORE, arr(f)),
            ]
        ),
        # partitioned by VARIANT and SPLIT on disk (SPLIT is also kept as a column)
        FEATURES: T.StructType(
            [
                T.StructField(INSTANCE_ID, s),
                T.StructField(SPLIT, s),
                T.StructField(DENSE, arr(f)),
                T.StructField(SPARSE_INDICES, arr(T.IntegerType())),
                T.StructField(SPARSE_VALUES, arr(f)),
                T.StructField(NEIGHBOR_IDS, arr(s)),
                T.StructField(NEIGHBOR_WEIGHTS, arr(f)),
            ]
        ),
    }


#: input tables: (required columns, optional columns)
INPUT_COLUMNS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "instances": ((INSTANCE_ID, TEXT), (SPLIT,)),
    "labels": ((LABEL_ID, TEXT), ()),
    "instance_labels": ((INSTANCE_ID, LABEL_ID), ()),
    "events": ((BASKET_ID, ITEM_ID), (EVENT_TIME, WEIGHT)),
    "filter_pairs": ((INSTANCE_ID, LABEL_ID), ()),
}


def schema(name: str):
    """The explicit Spark schema of an input or produced table."""
    return _schemas()[name]


class InputError(ValueError):
    """A missing input, a missing column or a wrong column type; names the column and file."""


# --------------------------------------------------------------------------- run paths
class RunPaths:
    """Where a run's tables live. With ``run_date`` every output goes under
    ``<output>/run_date=YYYY-MM-DD/`` so a rerun of that date replaces only that date."""

    def __init__(self, output: str, run_date: Optional[str] = None):
        self.output = output.rstrip("/")
        self.run_date = run_date
        self.root = self.output + (f"/run_date={run_date}" if run_date else "")

    def table(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def staging(self, rel: str) -> str:
        """A fresh staging folder for ``rel``, tagged with the run id of the lease this process
        holds on the root (``.run-<id>``) so :func:`recover` never touches a live run's files."""
        return (
            f"{self.root}/{STAGING}/{rel.replace('/', '__')}-{uuid.uuid4().hex[:12]}"
            f"{STAGING_RUN_TAG}{held_run_id(self.root) or 'none'}"
        )

    @property
    def manifest(self) -> str:
        return self.table(MANIFEST)

    def __repr__(self):
        return f"RunPaths({self.root!r})"


def norm(uri: str) -> str:
    """``uri`` without trailing slashes: the one spelling two URIs are compared in.

    >>> norm("s3://b/run/")
    's3://b/run'
    """
    return str(uri).rstrip("/")


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for local paths and URIs alike (``os.path.join`` would mangle
    ``s3://``); the one place outside :class:`RunPaths` that builds a path.

    >>> join("s3://b/run/", "models", "g")
    's3://b/run/models/g'
    """
    return "/".join([norm(base)] + [str(p).strip("/") for p in parts])


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


# --------------------------------------------------------------------------- Hadoop FS helpers
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


def list_dir(spark, uri: str) -> List[Tuple[str, bool]]:
    """``(name, is_directory)`` of the entries of folder ``uri`` (Hadoop FS; ``[]`` when it
    does not exist)."""
    fs, p = _jfs(spark, uri)
    if not fs.exists(p):
        return []
    return [(st.getPath().getName(), bool(st.isDirectory())) for st in fs.listStatus(p)]


def is_complete(spark, uri: str) -> bool:
    """A published table: the folder exists and holds Spark's ``_SUCCESS`` marker."""
    return path_exists(spark, uri.rstrip("/") + "/_SUCCESS")


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


def _rename(spark, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst``, refusing an existing ``dst`` (Hadoop's rename would move
    ``src`` *inside* an existing folder and nest one table in another). Local paths use
    ``os.rename``, which cannot replace a non-empty folder, so the refusal is atomic there."""
    import errno

    exists = IOError(
        f"could not rename {src} -> {dst}: the destination exists (another "
        f"writer published it; refusing to nest or overwrite)"
    )
    if not is_remote(src) and not is_remote(dst):
        s, d = local_path(src), local_path(dst)
        os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
        if os.path.lexists(d):
            raise exists
        try:
            os.rename(s, d)
        except OSError as e:
            # another writer renamed into place between the check and the rename
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and os.path.lexists(d):
                raise exists from e
            raise IOError(f"could not rename {src} -> {dst}: {e}") from e
        return
    fs, s = _jfs(spark, src)
    _, d = _jfs(spark, dst)
    if fs.exists(d):
        raise exists
    parent = d.getParent()
    if parent is not None and not fs.exists(parent):
        fs.mkdirs(parent)
    if not fs.rename(s, d):
        raise exists if fs.exists(d) else IOError(f"could not rename {src} -> {dst}")


def _version_info(uri: str) -> Optional[Dict[str, Any]]:
    """The content of ``<uri>/_VERSION`` (``{"version", "files": {path: size} or None}``)."""
    import json

    try:
        raw = read_bytes(uri.rstrip("/") + "/" + VERSION_FILE)
    except Exception:
        return None
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return {"version": raw.decode("utf-8", "replace").strip(), "files": None}
    return info if isinstance(info, dict) else None


def table_version(uri: str) -> Optional[str]:
    """The version token written into a published folder by :func:`publish` (``None`` for a
    folder published before version tokens existed, or a missing one)."""
    info = _version_info(uri)
    return info.get("version") if info else None


def _relative_files(uri: str) -> Optional[Dict[str, int]]:
    """``{relative path: size}`` of every file under ``uri`` but the markers and hidden files
    (e.g. Hadoop's local ``.crc`` files) (pyarrow listing; ``None`` where pyarrow does not
    reach)."""
    listed = _list_files(uri) if pyarrow_reaches(uri) else None
    if listed is None:
        return None
    _, root, files = listed
    out = {}
    for fi in files:
        rel = fi.path[len(root) + 1 :]
        if rel not in ("_SUCCESS", VERSION_FILE) and not any(
            part.startswith(".") for part in rel.split("/")
        ):
            out[rel] = int(fi.size)
    return out


def holds_its_files(uri: str) -> bool:
    """Whether the published folder ``uri`` holds every file (with its size) that its
    ``_VERSION`` lists: false for a folder whose copy-and-delete rename (S3) stopped half way,
    even though ``_SUCCESS`` (copied early: ``_`` sorts first) is there. Folders without a list
    count as complete."""
    info = _version_info(uri)
    if not info or not info.get("files"):
        return True
    have = _relative_files(uri)
    if have is None:
        return True
    return all(have.get(f) == n for f, n in info["files"].items())


def publish(spark, staging: str, final: str) -> None:
    """Swap a fully written ``staging`` folder into ``final`` (see module docstring).

    The staging folder gets a version token (``_VERSION``, its own unique name) first, so a
    stage commit can record exactly which version of each table it published. Refuses to run
    when this process held the root's lease and lost it. If another writer published ``final``
    in between, the rename refuses the existing destination and this publish fails (its moved
    aside copy is put back when ``final`` is gone, else dropped)."""
    check_lease_for(final)
    if not is_complete(spark, staging):
        raise IOError(f"refusing to publish {staging}: no _SUCCESS marker (incomplete write)")
    import json

    write_bytes(
        staging.rstrip("/") + "/" + VERSION_FILE,
        json.dumps(
            {"version": staging.rstrip("/").rsplit("/", 1)[-1], "files": _relative_files(staging)},
            sort_keys=True,
        ).encode("utf-8"),
    )
    old = None
    if path_exists(spark, final):
        old = f"{final}.__old-{uuid.uuid4().hex[:8]}"
        _rename(spark, final, old)
    try:
        _rename(spark, staging, final)
    except BaseException:
        if old is not None:
            if not path_exists(spark, final):
                _rename(spark, old, final)  # nobody replaced it: put the old version back
            elif is_complete(spark, final) and holds_its_files(final):
                delete_path(spark, old)  # another writer's complete version won
        raise
    if old:
        delete_path(spark, old)
    log.info("published %s", final)


def recover(spark, paths: RunPaths, rels: Iterable[str]) -> List[str]:
    """Repair an interrupted publish: if ``<t>`` is missing, or present without ``_SUCCESS``
    (an S3-style rename copies object by object and can stop half way), and a complete
    ``<t>.__old-*`` exists, restore it; delete leftover staging folders of runs that do not
    hold the root's lease. Returns the repaired table names.

    Refuses (:class:`LeaseError`) when another live run holds the lease of the root: the
    staging folders and moved-aside versions are then that run's in-flight work.

    Besides ``rels``, every ``*.__old-*`` folder found under the run root (two levels deep, e.g.
    ``quarantine/<table>``) is repaired the same way, so no published table is forgotten."""
    owner = live_lease_owner(paths.root)
    if owner is not None and owner.get("run_id") != held_run_id(paths.root):
        raise LeaseError(
            f"recover {paths.root}: {describe_lease(owner)} holds the lease; "
            f"refusing to touch its staging folders"
        )
    repaired = []
    rels = list(rels)
    for rel in _stray_olds(spark, paths):
        if rel not in rels:
            rels.append(rel)
    for rel in rels:
        final = paths.table(rel)
        fs, p = _jfs(spark, final)
        parent = p.getParent()
        if not fs.exists(parent):
            continue
        base = p.getName()
        olds = [
            st.getPath()
            for st in fs.listStatus(parent)
            if st.getPath().getName().startswith(base + ".__old-")
        ]
        complete_olds = [
            o
            for o in olds
            if fs.exists(jpath_child(spark, o, "_SUCCESS"))
            and holds_its_files(final.rsplit("/", 1)[0] + "/" + o.getName())
        ]
        if (
            complete_olds
            and fs.exists(p)
            and not (is_complete(spark, final) and holds_its_files(final))
        ):
            log.warning(
                "recover: %s is incomplete (a rename stopped half way); restoring the "
                "previous complete version",
                final,
            )
            fs.delete(p, True)
        if complete_olds and not fs.exists(p):
            fs.rename(complete_olds[0], p)
            olds = [o for o in olds if o.getName() != complete_olds[0].getName()]
            repaired.append(rel)
        for o in olds:
            fs.delete(o, True)
    _clean_staging(spark, paths)
    return repaired


def jpath_child(spark, jpath, name: str):
    """Hadoop ``Path`` of ``name`` inside the Hadoop ``Path`` ``jpath``."""
    return spark.sparkContext._jvm.org.apache.hadoop.fs.Path(jpath, name)


def _clean_staging(spark, paths: RunPaths) -> None:
    """Delete the staging folders of every run except the one holding the root's lease."""
    staging = paths.table(STAGING)
    if not path_exists(spark, staging):
        return
    keep = held_run_id(paths.root)
    fs, p = _jfs(spark, staging)
    left = 0
    for st in fs.listStatus(p):
        name = st.getPath().getName()
        if keep and name.endswith(STAGING_RUN_TAG + keep):
            left += 1
            continue
        fs.delete(st.getPath(), True)
    if not left:
        fs.delete(p, True)


def _stray_olds(spark, paths: RunPaths, depth: int = 2) -> List[str]:
    """Relative names ``t`` of every ``<root>/t.__old-*`` folder (``depth`` levels deep)."""
    fs, root = _jfs(spark, paths.root)
    if not fs.exists(root):
        return []
    found: List[str] = []
    level = [("", root)]
    for _ in range(depth):
        nxt = []
        for prefix, d in level:
            for st in fs.listStatus(d):
                if not st.isDirectory():
                    continue
                name = st.getPath().getName()
                if name == "_staging":
                    continue
                if ".__old-" in name:
                    rel = prefix + name.split(".__old-")[0]
                    if rel not in found:
                        found.append(rel)
                elif "=" not in name:  # never descend into partition folders
                    nxt.append((prefix + name + "/", st.getPath()))
        level = nxt
    return found


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


def discard_staging(spark, staging: str, settle_s: float = 1.0, max_rounds: int = 30) -> None:
    """Remove a half-written staging folder after a failed write (best effort: :func:`recover`
    removes it next run otherwise).

    When a Spark job fails, its other running tasks are killed but may still be finishing (or
    aborting their output) after the job has returned, and such a straggler recreates the
    folder. So the folder is deleted until it stays absent for ``settle_s`` seconds (at most
    ``max_rounds`` rounds)."""
    for _ in range(max_rounds):
        try:
            delete_path(spark, staging)
        except Exception:  # pragma: no cover - best effort
            log.warning("could not remove staging folder %s", staging)
            return
        time.sleep(settle_s)
        if not path_exists(spark, staging):
            return
    log.warning("staging folder %s keeps reappearing; recover removes it", staging)


def collect_arrow(df):
    """All rows of a (small) DataFrame on the driver as a pyarrow Table, through Arrow record
    batches, never row by row through py4j (``DataFrame.toArrow`` on Spark >= 4, the same
    Arrow collect on Spark 3.5); an empty result keeps the schema.

    Examples
    --------
    >>> collect_arrow(spark.range(3)).num_rows      # doctest: +SKIP
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


def frame_from_arrow(spark, tbl, table: Optional[str] = None):
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
    >>> import tempfile
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


def parquet_dataset(uri: str):
    """pyarrow dataset of a Parquet folder (local path or pyarrow.fs URI), or ``None``
    (driver side: importing ``pyarrow.dataset`` costs ~0.3 s in a fresh Python worker; executors
    use :func:`parquet_files`)."""
    try:
        import pyarrow.dataset as ds

        if is_remote(uri):
            import pyarrow.fs as pafs

            fs, p = pafs.FileSystem.from_uri(uri)
            return ds.dataset(p, format="parquet", filesystem=fs, partitioning="hive")
        return ds.dataset(local_path(uri), format="parquet", partitioning="hive")
    except Exception as e:  # not a readable Parquet folder from the driver
        log.info("%s not readable with pyarrow here (%s)", uri, e)
        return None


def count_rows_arrow(uri: str) -> Optional[int]:
    """Row count of a Parquet table from its footers, driver side (``None`` when pyarrow does
    not read it here)."""
    dset = parquet_dataset(uri)
    if dset is None:
        return None
    try:
        return int(sum(f.metadata.num_rows for f in dset.get_fragments()))
    except Exception:
        return None


def parquet_size(uri: str) -> Optional[Tuple[int, int]]:
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


def pyarrow_reaches(uri: Optional[str]) -> bool:
    """Whether executors read/write ``uri`` with pyarrow here: local/``file://`` paths and
    ``s3://`` (``hdfs://``, ``s3a://``, ``gs://``... stay with the JVM)."""
    if not uri:
        return False
    return not is_remote(uri) or uri.startswith("s3://")


def pyarrow_fs(uri: str):
    """``(pyarrow filesystem, path)`` of a local / ``file://`` path or a pyarrow.fs URI
    (``s3://``); executor and driver side.

    Examples
    --------
    >>> pyarrow_fs("file:///tmp/x")[1]
    '/tmp/x'
    """
    import pyarrow.fs as pafs

    if is_remote(uri):
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), local_path(uri)


def _list_files(uri: str):
    """``(filesystem, root, [FileInfo of every file under root])`` listed with ``pyarrow.fs``,
    or ``None`` when pyarrow cannot list ``uri`` here."""
    try:
        import pyarrow.fs as pafs

        fs, root = pyarrow_fs(uri)
        root = root.rstrip("/")
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except Exception as e:
        log.info("%s not listable with pyarrow here (%s)", uri, e)
        return None
    return fs, root, [fi for fi in infos if fi.type == pafs.FileType.File]


def parquet_files(uri: str):
    """``(pyarrow filesystem, [FileInfo])`` of the data files of a Parquet folder, sorted by
    path (names starting with ``_`` or ``.`` are skipped, as Spark does), or ``None`` when
    pyarrow cannot list it here. Lists with ``pyarrow.fs`` only (cheap to import on executors).

    Examples
    --------
    >>> parquet_files("/no/such/table") is None
    True
    """
    listed = _list_files(uri)
    if listed is None:
        return None
    fs, root, files = listed
    keep = [
        fi
        for fi in files
        if not any(part.startswith(("_", ".")) for part in fi.path[len(root) :].split("/") if part)
    ]
    return fs, sorted(keep, key=lambda fi: fi.path)


def files_fingerprint(uri: str) -> Optional[str]:
    """Driver side: hash of (path, size, modification time) of every file under ``uri`` listed
    with ``pyarrow.fs`` (no JVM round trip per file), or ``None`` where pyarrow does not reach
    or list it (then use :func:`input_fingerprint`). Not interchangeable with
    :func:`input_fingerprint`: a cache key, not a manifest value.

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


def parquet_codec(name: Optional[str], default: str = "snappy") -> str:
    """pyarrow's name of a Spark Parquet compression codec (``uncompressed`` -> ``none``).

    Examples
    --------
    >>> parquet_codec("UNCOMPRESSED"), parquet_codec(None, "zstd")
    ('none', 'zstd')
    """
    codec = (name or default).lower()
    return "none" if codec in ("uncompressed", "none") else codec


def publish_written(spark, df, staging: str, final: str, what: str) -> int:
    """Run the job ``df`` whose executors wrote their files into ``staging`` (one row per file,
    with its ``path`` and ``rows``), check that the staging folder holds exactly those files with
    those row counts, then mark it complete (``_SUCCESS``) and publish it at ``final`` as
    :func:`write_table` does; on failure the staging folder is removed. Returns the number of
    files.

    The check catches a staging folder that was emptied while the job ran (another process's
    cleanup: the writers of later tasks recreate the folder, so it looks fine but lacks the
    earlier tasks' files) and stray files nobody reported.
    """
    try:
        written = df.collect()
        n = len(written)
        log.info("%s: %d files written by the executors into %s", what, n, staging)
        _check_written(staging, [(r["path"], int(r["rows"])) for r in written], what)
        write_bytes(staging.rstrip("/") + "/_SUCCESS", b"")
        publish(spark, staging, final)
    except BaseException:
        discard_staging(spark, staging)
        raise
    return n


def _check_written(staging: str, reported: Sequence[Tuple[str, int]], what: str) -> None:
    """Raise ``IOError`` unless the data files under ``staging`` are exactly ``reported`` (path,
    rows), each with that row count in its Parquet footer."""
    import pyarrow.parquet as pq

    found = parquet_files(staging)
    if found is None:
        raise IOError(f"{what}: cannot list {staging} to check the written files")
    fs, files = found
    on_disk = {fi.path for fi in files}
    want: Dict[str, int] = {}
    for path, rows in reported:
        want[path] = want.get(path, 0) + rows  # pyarrow paths, as the writers report them
    missing = sorted(set(want) - on_disk)
    extra = sorted(on_disk - set(want))
    if missing or extra:
        raise IOError(
            f"{what}: the files in {staging} are not those the tasks reported "
            f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected "
            f"{extra[:3]}{'...' if len(extra) > 3 else ''}); was the staging folder "
            f"cleaned by another run? Not publishing"
        )
    for path, rows in want.items():
        with fs.open_input_file(path) as fh:
            got = pq.ParquetFile(fh).metadata.num_rows
        if got != rows:
            raise IOError(
                f"{what}: {path} holds {got} rows, its task reported {rows}; not " f"publishing"
            )


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
    df, paths: RunPaths, table: str, n_rows: Optional[int] = None, spark=None
) -> Dict[str, int]:
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


def write_arrow(spark, tbl, paths: RunPaths, rel: str, partition_by: Optional[str] = None) -> str:
    """Publish a pyarrow Table held by the driver at ``paths.table(rel)``, same staging and
    publish as :func:`write_table`: one Parquet file (one per value of ``partition_by``, in
    ``<column>=<value>/`` folders without the column, as Spark lays out a partitioned table)
    written by pyarrow where pyarrow reaches the run root, else through Spark
    (:func:`frame_from_arrow`).

    Examples
    --------
    >>> write_arrow(spark, pa.table({"a": [1]}), paths, "quarantine/x")   # doctest: +SKIP
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

    Examples
    --------
    >>> group_counts(spark, paths.table("graph/pretrain_edges"),
    ...              ["variant", "block"])  # doctest: +SKIP
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


# --------------------------------------------------------------------------- input readers
def _format_of(uri: str) -> str:
    u = uri.rstrip("/").lower()
    if u.endswith(".csv") or u.endswith(".csv.gz"):
        return "csv"
    if u.endswith(".jsonl") or u.endswith(".json") or u.endswith(".jsonl.gz"):
        return "jsonl"
    return "parquet"


CORRUPT = "_corrupt_record"


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
    required, optional = INPUT_COLUMNS[table]
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
                raise InputError(
                    f"input.{table}: {uri} is empty or not a Parquet table (no "
                    f"schema could be read)"
                ) from None
            raise
        present = {f.name: f.dataType for f in df.schema.fields}
        _check_columns(present.keys(), required, uri, table)
        _check_parquet_files_agree(uri, table, [f.name for f in full.fields])
        for field in full.fields:
            if field.name in present and present[field.name] != field.dataType:
                ok = isinstance(field.dataType, T.DoubleType) and isinstance(
                    present[field.name], (T.FloatType, T.IntegerType, T.LongType)
                )
                if not ok:
                    raise InputError(
                        f"{uri}: column '{field.name}' of {table} has type "
                        f"{present[field.name].simpleString()}, expected "
                        f"{field.dataType.simpleString()}"
                    )
        cols = [
            F.col(f.name).cast(f.dataType).alias(f.name)
            if f.name in present
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in full.fields
        ]
        return df.select(*cols, F.lit(None).cast("string").alias(CORRUPT))
    # text formats: check the header / keys first, then read with the explicit schema
    header = _peek_columns(spark, uri, fmt)
    _check_columns(header, required, uri, table)
    types = {f.name: f.dataType for f in full.fields}
    if fmt == "csv":
        # CSV columns are positional: the schema follows the header's order; columns outside
        # the contract are read as strings and dropped below. enforceSchema=False makes Spark
        # check every file's header against these names (a folder of CSV files with different
        # column orders fails instead of being misread).
        present_fields = [T.StructField(c, types.get(c, T.StringType())) for c in header]
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
    cols = [
        F.col(f.name) if f.name in header else F.lit(None).cast(f.dataType).alias(f.name)
        for f in full.fields
    ]
    return df.select(*cols, F.col(CORRUPT))


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
    seen: Dict[str, Dict[str, str]] = {}
    for fi in files:
        try:
            with fs.open_input_file(fi.path) as fh:
                sch = pq.read_schema(fh)
        except Exception as e:
            raise InputError(
                f"input.{table}: {fi.path} (in {uri}) is not a readable Parquet "
                f"file: {type(e).__name__}: {e}"
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


#: JSON lines looked at to find the keys of a table (a key absent from all of them is missing)
JSON_PEEK_LINES = 1000


def _peek_columns(spark, uri: str, fmt: str) -> List[str]:
    import json

    from pyspark.sql import functions as F

    if fmt == "csv":
        import csv

        first = spark.read.text(uri).limit(1).collect()
        if not first:
            raise InputError(f"{uri}: input is empty (no header / no rows)")
        return [c.strip().lstrip("\ufeff") for c in next(csv.reader([first[0][0]]))]
    lines = (
        spark.read.text(uri).filter(F.trim(F.col("value")) != "").limit(JSON_PEEK_LINES).collect()
    )
    if not lines:
        raise InputError(f"{uri}: input is empty (no rows)")
    keys: List[str] = []
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


def _check_columns(present, required, uri, table):
    missing = [c for c in required if c not in set(present)]
    if missing:
        raise InputError(
            f"{uri}: {table} is missing required column(s) {missing} " f"(found {sorted(present)})"
        )


# --------------------------------------------------------------------------- small files
def write_bytes(uri: str, data: bytes) -> None:
    """Write a small file atomically (tmp + rename) to a local path or a pyarrow.fs URI."""
    if is_remote(uri):
        import pyarrow.fs as pafs

        fs, p = pafs.FileSystem.from_uri(uri)
        with fs.open_output_stream(p) as fh:  # S3 PUT is atomic per object
            fh.write(data)
        return
    p = local_path(uri)
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    tmp = f"{p}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, p)


def read_inputs_of(uri: str, what: str) -> bytes:
    """The bytes a task was handed at ``uri`` (:func:`read_bytes`), or an :class:`InputError`
    naming ``what`` when they are gone (e.g. the scratch folder was removed by a rerun).

    Examples
    --------
    >>> read_inputs_of("/nonexistent/x.npz", "fit g[pina/full]")
    Traceback (most recent call last):
    ...
    pina_spark.storage.InputError: fit g[pina/full]: its inputs /nonexistent/x.npz are missing
    """
    raw = read_bytes(uri)
    if raw is None:
        raise InputError(f"{what}: its inputs {uri} are missing")
    return raw


def read_bytes(uri: str) -> Optional[bytes]:
    """Read a small file; ``None`` when it does not exist."""
    if is_remote(uri):
        import pyarrow.fs as pafs

        fs, p = pafs.FileSystem.from_uri(uri)
        if fs.get_file_info(p).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(p) as fh:
            return fh.read()
    p = local_path(uri)
    if not os.path.exists(p):
        return None
    with open(p, "rb") as fh:
        return fh.read()


def copy_dir(src: str, dst: str) -> None:
    """Copy a folder between local paths and/or URIs (models to and from S3)."""
    import pyarrow.fs as pafs

    if not is_remote(src) and not is_remote(dst):
        import shutil

        if os.path.exists(local_path(dst)):
            shutil.rmtree(local_path(dst))
        shutil.copytree(local_path(src), local_path(dst))
        return
    pafs.copy_files(
        src if is_remote(src) else os.path.abspath(local_path(src)),
        dst if is_remote(dst) else os.path.abspath(local_path(dst)),
    )


# --------------------------------------------------------------------------- run-root lease
class LeaseError(RuntimeError):
    """Another live run holds the lease of the run root (or this run lost it)."""


#: lease files older than this (no heartbeat) may be taken over
LEASE_STALE_S = 600.0
LEASE_HEARTBEAT_S = 30.0
_LEASES: Dict[str, "Lease"] = {}
_LEASES_LOCK = __import__("threading").Lock()


def _root_key(root: str) -> str:
    return root.rstrip("/")


def held_run_id(root: str) -> Optional[str]:
    """Run id of the lease this process holds on ``root`` (``None`` when it holds none)."""
    lease = _LEASES.get(_root_key(root))
    return lease.run_id if lease is not None else None


def check_lease_for(uri: str) -> None:
    """Raise :class:`LeaseError` when ``uri`` lies under a root whose lease this process held and
    lost (taken over as stale by another run): publishing now could clobber that run's work."""
    for root, lease in list(_LEASES.items()):
        if uri == root or uri.startswith(root + "/"):
            lease.check()


def read_lease(root: str) -> Optional[Dict[str, Any]]:
    """The content of ``<root>/_LOCK`` (``None`` when there is no lease)."""
    import json

    try:
        raw = read_bytes(_root_key(root) + "/" + LOCK)
        return json.loads(raw) if raw else None
    except ValueError:
        return {"run_id": "?", "heartbeat": 0.0, "note": "unreadable lease file"}


def live_lease_owner(root: str, stale_s: float = LEASE_STALE_S) -> Optional[Dict[str, Any]]:
    """The lease of ``root`` when it is live (heartbeat younger than ``stale_s``), else ``None``."""
    import time

    owner = read_lease(root)
    if owner is None:
        return None
    if time.time() - float(owner.get("heartbeat", 0.0)) > stale_s:
        return None
    return owner


def describe_lease(owner: Dict[str, Any]) -> str:
    import time

    age = time.time() - float(owner.get("heartbeat", 0.0))
    return (
        f"run {owner.get('run_id')} (host {owner.get('host')}, pid {owner.get('pid')}, "
        f"started {owner.get('started')}, last heartbeat {age:.0f}s ago)"
    )


class Lease:
    """One writer per run root: ``<root>/_LOCK`` holds the owner's run id, host, pid and a
    heartbeat refreshed by a daemon thread. Created atomically (``O_EXCL`` on local disks;
    create-if-absent then read back on object stores, which is best effort). A second run fails
    fast naming the owner; a lease whose heartbeat is older than ``stale_s`` is taken over (the
    stale file is first renamed aside, so of two runs taking over only one wins).

    Reentrant inside one process: :func:`acquire_lease` on a root this process already holds
    returns the same lease.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with acquire_lease(root, "r1") as lease:
    ...     held_run_id(root)
    'r1'
    >>> held_run_id(root) is None
    True
    """

    def __init__(
        self,
        root: str,
        run_id: str,
        stale_s: float = LEASE_STALE_S,
        heartbeat_s: float = LEASE_HEARTBEAT_S,
    ):
        self.root = _root_key(root)
        self.run_id = run_id
        self.stale_s = float(stale_s)
        self.heartbeat_s = float(heartbeat_s)
        self.uri = self.root + "/" + LOCK
        self.lost: Optional[str] = None
        self._depth = 0
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None
        self.started: Optional[str] = None

    def _content(self) -> bytes:
        import json
        import socket
        import time

        return json.dumps(
            {
                "run_id": self.run_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": self.started,
                "heartbeat": time.time(),
                "stale_after_s": self.stale_s,
            }
        ).encode()

    def _create(self) -> bool:
        """Create the lease file if absent; ``True`` when this call created it."""
        if is_remote(self.uri):
            if read_bytes(self.uri) is not None:
                return False
            write_bytes(self.uri, self._content())
            got = read_lease(self.root) or {}
            return got.get("run_id") == self.run_id
        p = local_path(self.uri)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(self._content())
        return True

    def _take_over_stale(self, owner: Dict[str, Any]) -> None:
        aside = f"{self.uri}.stale-{uuid.uuid4().hex[:8]}"
        log.warning("lease %s: taking over the stale lease of %s", self.uri, describe_lease(owner))
        try:
            if is_remote(self.uri):
                write_bytes(aside, read_bytes(self.uri) or b"")
                import pyarrow.fs as pafs

                fs, p = pafs.FileSystem.from_uri(self.uri)
                fs.delete_file(p)
            else:
                os.rename(local_path(self.uri), local_path(aside))
        except (OSError, FileNotFoundError):
            pass  # another run moved it first: the create below decides

    def acquire(self) -> "Lease":
        import time

        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for _ in range(2):
            if self._create():
                break
            owner = read_lease(self.root) or {}
            if time.time() - float(owner.get("heartbeat", 0.0)) <= self.stale_s:
                raise LeaseError(
                    f"run root {self.root} is in use by {describe_lease(owner)}: one writer per "
                    f"run root. Wait for it to finish, or, if it is dead, remove {self.uri} (it "
                    f"is taken over automatically {self.stale_s:.0f}s after its last heartbeat)"
                )
            self._take_over_stale(owner)
        else:
            raise LeaseError(
                f"could not take the lease {self.uri}: another run took it over "
                f"at the same time ({describe_lease(read_lease(self.root) or {})})"
            )
        self._start_heartbeat()
        log.info("lease %s taken by run %s", self.uri, self.run_id)
        return self

    def _start_heartbeat(self) -> None:
        import threading

        self._stop = threading.Event()

        def beat():
            while not self._stop.wait(self.heartbeat_s):
                self.refresh()

        self._thread = threading.Thread(target=beat, name=f"lease-{self.run_id}", daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        """Rewrite the heartbeat, unless the lease is no longer ours (then mark it lost)."""
        owner = read_lease(self.root)
        if owner is None or owner.get("run_id") != self.run_id:
            self.lost = (
                f"the lease {self.uri} was taken over by "
                f"{describe_lease(owner) if owner else 'nobody (file removed)'}"
            )
            log.error("run %s: %s", self.run_id, self.lost)
            if self._stop is not None:
                self._stop.set()
            return
        write_bytes(self.uri, self._content())

    def check(self) -> None:
        if self.lost:
            raise LeaseError(f"run {self.run_id} lost its lease: {self.lost}; not publishing")
        owner = read_lease(self.root)
        if owner is None or owner.get("run_id") != self.run_id:
            self.refresh()
            raise LeaseError(f"run {self.run_id} lost its lease: {self.lost}; not publishing")

    def release(self) -> None:
        if self._stop is not None:
            self._stop.set()
        owner = read_lease(self.root)
        if owner is not None and owner.get("run_id") == self.run_id:
            try:
                if is_remote(self.uri):
                    import pyarrow.fs as pafs

                    fs, p = pafs.FileSystem.from_uri(self.uri)
                    fs.delete_file(p)
                else:
                    os.remove(local_path(self.uri))
            except OSError as e:  # pragma: no cover
                log.warning("could not remove lease %s: %s", self.uri, e)
        log.info("lease %s released by run %s", self.uri, self.run_id)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        with _LEASES_LOCK:
            self._depth -= 1
            if self._depth > 0:
                return
            _LEASES.pop(self.root, None)
        self.release()


def acquire_lease(
    root: str, run_id: str, stale_s: float = LEASE_STALE_S, heartbeat_s: float = LEASE_HEARTBEAT_S
) -> Lease:
    """Take (or re-enter) the lease of run root ``root``; use as a context manager.

    Raises
    ------
    LeaseError
        Another live run holds it; the message names that run, its host and pid.
    """
    key = _root_key(root)
    with _LEASES_LOCK:
        lease = _LEASES.get(key)
        if lease is None:
            lease = Lease(key, run_id, stale_s, heartbeat_s).acquire()
            _LEASES[key] = lease
        lease._depth += 1
        return lease


# --------------------------------------------------------------------------- stage commits
class UncommittedError(InputError):
    """A stage's input was published by an upstream stage run that never committed."""


def commit_stage(paths: RunPaths, stage: str, rels: Sequence[str], run_id: str) -> Dict[str, Any]:
    """Record, in one atomic write (``<root>/_commits/<stage>.json``), the version token of every
    output ``rels`` of ``stage``: the point where all its tables become valid together."""
    import json
    import time

    rec = {
        "stage": stage,
        "run_id": run_id,
        "committed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tables": {rel: table_version(paths.table(rel)) for rel in rels},
    }
    write_bytes(
        paths.table(f"{COMMITS}/{stage}.json"), json.dumps(rec, indent=1, sort_keys=True).encode()
    )
    return rec


def read_commit(paths: RunPaths, stage: str) -> Optional[Dict[str, Any]]:
    import json

    raw = read_bytes(paths.table(f"{COMMITS}/{stage}.json"))
    return json.loads(raw) if raw else None


def uncommitted_tables(
    paths: RunPaths, owners: Mapping[str, Sequence[str]], unfinished: Iterable[str] = ()
) -> Dict[str, List[str]]:
    """``{stage: [tables]}`` of the tables in ``owners`` (stage -> its outputs) whose published
    version no commit record lists. A table no commit has ever listed counts only when its
    stage is in ``unfinished`` (the manifest shows a run of it that did not finish) and the
    table carries a version token; tables published by hand or before commit records existed
    are accepted. A table listed by some commit (e.g. ``nodes`` by ``graph`` or by the nodes
    pre-step) is committed when any of them lists its current version."""
    unfinished = set(unfinished)
    records = {st: read_commit(paths, st) or {} for st in owners}
    committed: Dict[str, set] = {}
    for rec in records.values():
        for rel, v in rec.get("tables", {}).items():
            committed.setdefault(rel, set()).add(v)
    out: Dict[str, List[str]] = {}
    for st, rels in owners.items():
        for rel in rels:
            v = table_version(paths.table(rel))
            if v is None or v in committed.get(rel, ()):
                continue
            if st in unfinished or rel in records[st].get("tables", {}):
                out.setdefault(st, []).append(rel)
    return out


def input_fingerprint(spark, uris: Iterable[Optional[str]]) -> str:
    """Hash of (path, size, modification time) of every file under the given inputs."""
    import hashlib

    h = hashlib.sha256()
    for uri in sorted(u for u in uris if u):
        fs, p = _jfs(spark, uri)
        if not fs.exists(p):
            h.update(f"{uri}:missing".encode())
            continue
        it = fs.listFiles(p, True)
        entries = []
        while it.hasNext():
            st = it.next()
            entries.append(f"{st.getPath().toString()}:{st.getLen()}:{st.getModificationTime()}")
        for e in sorted(entries):
            h.update(e.encode())
    return h.hexdigest()[:16]
