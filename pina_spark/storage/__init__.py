"""The storage layer: the only code that knows the paths and formats of a run's tables.

Callers write ``from pina_spark import storage`` and ``storage.X``. This package re-exports the
public names of its submodules, each of which owns one subject:

- :mod:`~pina_spark.storage.schemas`: column names, the relative paths of the tables of a run,
  their Spark schemas, and :class:`InputError`.
- :mod:`~pina_spark.storage.uri`: one spelling for local paths and URIs (:func:`norm`,
  :func:`join`, :func:`is_remote`, :func:`local_path`).
- :mod:`~pina_spark.storage.paths`: :class:`RunPaths`, where the tables of a run live.
- :mod:`~pina_spark.storage.fs`: Hadoop FileSystem helpers (driver) and ``pyarrow.fs`` /
  dataset helpers (driver and executors).
- :mod:`~pina_spark.storage.files`: small files written atomically, and folder copies.
- :mod:`~pina_spark.storage.lease`: the run root's lease (one writer per root).
- :mod:`~pina_spark.storage.publishing`: staged writes with atomic publish, and recovery after a
  crash.
- :mod:`~pina_spark.storage.tables`: writing and reading published tables, and Arrow on the
  driver.
- :mod:`~pina_spark.storage.inputs`: readers of the input tables with their explicit schemas.
- :mod:`~pina_spark.storage.commits`: one atomic commit record per stage, and input
  fingerprints.

The run manifest (:mod:`~pina_spark.storage.manifest`), the folds
(:mod:`~pina_spark.storage.folds`), the ``.npz`` task inputs (:mod:`~pina_spark.storage.npz`)
and the Parquet part files that executors write (:mod:`~pina_spark.storage.partfile`) are
imported from their own submodules.

Examples
--------
>>> paths = RunPaths("/tmp/pina-run", run_date="2026-11-21")
>>> paths.table("features")
'/tmp/pina-run/run_date=2026-11-21/features'
"""

from pina_spark.storage.commits import (
    UncommittedError,
    commit_stage,
    input_fingerprint,
    read_commit,
    uncommitted_tables,
)
from pina_spark.storage.files import (
    copy_dir,
    read_bytes,
    read_inputs_of,
    write_bytes,
)
from pina_spark.storage.fs import (
    count_rows_arrow,
    delete_path,
    files_fingerprint,
    is_complete,
    jpath_child,
    list_dir,
    parquet_dataset,
    parquet_files,
    parquet_size,
    path_exists,
    pyarrow_fs,
    pyarrow_reaches,
)
from pina_spark.storage.inputs import (
    CORRUPT,
    JSON_PEEK_LINES,
    arrow_readable,
    empty_table_message,
    no_test_rows_message,
    read_input,
    read_input_arrow,
)
from pina_spark.storage.lease import (
    LEASE_HEARTBEAT_S,
    LEASE_STALE_S,
    Lease,
    LeaseError,
    acquire_lease,
    check_lease_for,
    describe_lease,
    held_run_id,
    live_lease_owner,
    read_lease,
)
from pina_spark.storage.paths import (
    RunPaths,
)
from pina_spark.storage.publishing import (
    discard_staging,
    holds_its_files,
    publish,
    publish_written,
    recover,
    table_version,
)
from pina_spark.storage.schemas import (
    BASKET_ID,
    BLOCK,
    COMMITS,
    COUNT,
    DENSE,
    DOWNSTREAM_MODELS,
    DST_ID,
    DST_INDEX,
    EMBEDDINGS,
    EVAL,
    EVENT_TIME,
    FEATURES,
    FOLD,
    I2I_EDGES,
    INCREMENTAL_SCRATCH,
    INPUT_COLUMNS,
    INSTANCE_ID,
    INSTANCE_INDEX,
    INSTANCE_LABELS,
    ITEM_ID,
    KIND,
    KIND_INSTANCE,
    KIND_LABEL,
    LABEL_ID,
    LABEL_IDS,
    LABEL_INDEX,
    LOCK,
    MANIFEST,
    MODELS,
    NEIGHBOR,
    NEIGHBOR_IDS,
    NEIGHBOR_WEIGHTS,
    NEIGHBORS,
    NODE_ID,
    NODE_INDEX,
    NODES,
    PREDICTIONS,
    PRETRAIN_EDGES,
    QUARANTINE,
    REASON,
    SCORE,
    SCORES,
    SPARSE_INDICES,
    SPARSE_VALUES,
    SPLIT,
    SPLIT_TEST,
    SPLIT_TRAIN,
    SPLIT_VALID,
    SRC_ID,
    SRC_INDEX,
    STAGING,
    STAGING_RUN_TAG,
    TEXT,
    VARIANT,
    VECTORIZER,
    VERSION_FILE,
    WEIGHT,
    InputError,
    schema,
)
from pina_spark.storage.tables import (
    collect_arrow,
    collect_table,
    frame_from_arrow,
    group_counts,
    parquet_codec,
    partition_values,
    read_table,
    require_complete,
    values_frame,
    write_arrow,
    write_quarantine,
    write_table,
)
from pina_spark.storage.uri import (
    arrow_uri,
    is_remote,
    join,
    local_path,
    norm,
    same_place,
)

__all__ = [
    # commits
    "UncommittedError",
    "commit_stage",
    "input_fingerprint",
    "read_commit",
    "uncommitted_tables",
    # files
    "copy_dir",
    "read_bytes",
    "read_inputs_of",
    "write_bytes",
    # fs
    "count_rows_arrow",
    "delete_path",
    "files_fingerprint",
    "is_complete",
    "jpath_child",
    "list_dir",
    "parquet_dataset",
    "parquet_files",
    "parquet_size",
    "path_exists",
    "pyarrow_fs",
    "pyarrow_reaches",
    # inputs
    "CORRUPT",
    "JSON_PEEK_LINES",
    "arrow_readable",
    "read_input",
    "empty_table_message",
    "no_test_rows_message",
    "read_input_arrow",
    # lease
    "LEASE_HEARTBEAT_S",
    "LEASE_STALE_S",
    "Lease",
    "LeaseError",
    "acquire_lease",
    "check_lease_for",
    "describe_lease",
    "held_run_id",
    "live_lease_owner",
    "read_lease",
    # paths
    "RunPaths",
    # publishing
    "discard_staging",
    "holds_its_files",
    "publish",
    "publish_written",
    "recover",
    "table_version",
    # schemas
    "BASKET_ID",
    "BLOCK",
    "COMMITS",
    "COUNT",
    "DENSE",
    "DOWNSTREAM_MODELS",
    "DST_ID",
    "DST_INDEX",
    "EMBEDDINGS",
    "EVAL",
    "EVENT_TIME",
    "FEATURES",
    "FOLD",
    "I2I_EDGES",
    "INPUT_COLUMNS",
    "INSTANCE_ID",
    "INSTANCE_INDEX",
    "INSTANCE_LABELS",
    "ITEM_ID",
    "KIND",
    "KIND_INSTANCE",
    "KIND_LABEL",
    "LABEL_ID",
    "LABEL_IDS",
    "LABEL_INDEX",
    "LOCK",
    "MANIFEST",
    "MODELS",
    "NEIGHBOR",
    "NEIGHBOR_IDS",
    "NEIGHBOR_WEIGHTS",
    "NEIGHBORS",
    "NODE_ID",
    "NODE_INDEX",
    "NODES",
    "PREDICTIONS",
    "PRETRAIN_EDGES",
    "QUARANTINE",
    "REASON",
    "SCORE",
    "SCORES",
    "SPARSE_INDICES",
    "SPARSE_VALUES",
    "SPLIT",
    "SPLIT_TEST",
    "SPLIT_TRAIN",
    "SPLIT_VALID",
    "SRC_ID",
    "SRC_INDEX",
    "INCREMENTAL_SCRATCH",
    "STAGING",
    "STAGING_RUN_TAG",
    "TEXT",
    "VARIANT",
    "VECTORIZER",
    "VERSION_FILE",
    "WEIGHT",
    "InputError",
    "schema",
    # tables
    "collect_arrow",
    "collect_table",
    "frame_from_arrow",
    "group_counts",
    "parquet_codec",
    "partition_values",
    "read_table",
    "require_complete",
    "values_frame",
    "write_arrow",
    "write_quarantine",
    "write_table",
    # uri
    "is_remote",
    "arrow_uri",
    "join",
    "local_path",
    "norm",
    "same_place",
]
