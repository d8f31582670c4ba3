"""How ``features`` is written (``AggregatePlan.writer``), one small object per writer with
the same hooks: ``schema`` and ``wrap`` shape the ``mapInArrow`` of a reduction, ``label``
tags its output with the variant, ``publish`` runs the job and publishes the table.

:class:`ArrowSink` -- the reduction tasks write their Parquet files themselves with pyarrow
into the staging folder (``variant=/split=`` folders, deterministic file names so a retried
attempt replaces its files) and the driver checks them, adds ``_SUCCESS`` and publishes
(:func:`pina_spark.storage.publish_written`): the vectors never cross into the JVM.
:class:`SparkSink` -- the JVM Parquet writer (:func:`pina_spark.storage.write_table`, dictionary
encoding off for the float arrays).
"""

import dataclasses as dc
from collections.abc import Iterator

from pina_spark import storage
from pina_spark.storage import features as layout

__all__ = ["ArrowSink", "SparkSink", "SinkTask", "make_sink"]

#: rows of the ``arrow`` writer's job: one per file written
SINK_SCHEMA = "variant string, split string, rows long, path string"


@dc.dataclass(frozen=True)
class SinkTask:
    """What the executor-side writer of one variant needs.

    Attributes:
        variant: the ``variant`` partition written.
        staging: the staging folder (pyarrow reaches it).
        codec: pyarrow's Parquet compression codec.
    """

    variant: str
    staging: str
    codec: str


class ArrowSink:
    """The executors write the Parquet files (pyarrow); the job lists the files written."""

    schema = SINK_SCHEMA

    def __init__(self, staging: str, compression: str | None):
        self.staging = staging
        self.codec = storage.parquet_codec(compression, "zstd")

    def wrap(self, reduce, variant: str):
        return write_files(reduce, SinkTask(variant, self.staging, self.codec))

    def label(self, df, variant: str):
        return df

    def publish(self, spark, df, paths) -> str:
        final = paths.table(storage.FEATURES)
        storage.publish_written(spark, df, self.staging, final, "aggregate")
        return final


class SparkSink:
    """The reductions return the features rows; the JVM writes them."""

    @property
    def schema(self):
        return storage.schema(storage.FEATURES)

    def wrap(self, reduce, variant: str):
        return reduce

    def label(self, df, variant: str):
        from pyspark.sql import functions as F

        return df.withColumn(storage.VARIANT, F.lit(variant))

    def publish(self, spark, df, paths) -> str:
        """Publish ``df`` at ``features`` (no dictionary encoding for the float arrays: it
        cannot compress embedding values and costs time)."""
        key = "parquet.enable.dictionary"
        old = spark.conf.get(key, None)
        spark.conf.set(key, "false")
        try:
            return storage.write_table(
                df, paths, storage.FEATURES, partition_by=layout.PARTITION_BY
            )
        finally:
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def make_sink(spark, writer: str, staging: str):
    """Driver side: the sink of ``AggregatePlan.writer`` (``arrow`` or ``spark``)."""
    if writer == "arrow":
        codec = spark.conf.get("spark.sql.parquet.compression.codec", "zstd")
        return ArrowSink(staging, codec)
    return SparkSink()


def write_files(reduce, task: SinkTask):
    """Driver side: wrap a reducer so that the executor writes its output batches as Parquet
    (pyarrow) under ``staging/variant=<v>/split=<s>/part-<partition>.parquet`` and yields one
    ``variant, split, rows, path`` row per file.

    File names depend only on the partition id, and each file is written to a hidden temporary
    name and renamed when complete, so a retried or speculative task attempt replaces the same
    file with the same rows (never a duplicate).
    """

    def write(batches: Iterator) -> Iterator:
        """Executor side (mapInArrow)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from pina_spark.storage.partfile import PartFile

        tc = TaskContext.get()
        if tc is None:
            raise RuntimeError("aggregate: the arrow writer runs inside a Spark task only")
        pid, attempt = tc.partitionId(), tc.attemptNumber()
        fs, base = storage.pyarrow_fs(task.staging)
        files: dict = {}
        try:
            for b in reduce(batches):
                split = b.column(1)
                for sv in pc.unique(split).to_pylist():
                    mask = pc.is_null(split) if sv is None else pc.equal(split, sv)
                    sub = b.filter(mask)
                    sub = pa.RecordBatch.from_arrays(
                        [sub.column(i) for i in (0, 2, 3, 4, 5, 6)],
                        [sub.schema.names[i] for i in (0, 2, 3, 4, 5, 6)],
                    )
                    if sv not in files:
                        files[sv] = PartFile(
                            fs,
                            layout.partition_dir(base, task.variant, sv),
                            f"part-{pid:05d}.parquet",
                            attempt,
                            sub.schema,
                            task.codec,
                            use_dictionary=[storage.INSTANCE_ID, storage.NEIGHBOR_IDS],
                        )
                    files[sv].write_batch(sub)
            done = [(sv, f.commit(), f.rows) for sv, f in list(files.items())]
            files = {}
        finally:
            for f in files.values():  # failed attempt: drop its tmp files
                f.abort()
        if done:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([task.variant] * len(done), pa.string()),
                    pa.array([sv for sv, _, _ in done], pa.string()),
                    pa.array([n for _, _, n in done], pa.int64()),
                    pa.array([p for _, p, _ in done], pa.string()),
                ],
                ["variant", "split", "rows", "path"],
            )

    return write
