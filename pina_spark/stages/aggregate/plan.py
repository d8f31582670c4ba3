"""Decide once, on the driver: :func:`plan_aggregate` turns the ``aggregate`` config plus the
measured facts (embedding widths and size, where the tables live, what pyarrow reaches) into a
frozen :class:`AggregatePlan`, which the stage logs, follows and records in its statistics.

Examples
--------
>>> choose_strategy("auto", 100.0, 512)
('broadcast', 'auto: embeddings ~100.0 MB <= broadcast_max_mb 512')
>>> choose_broadcast_via("auto", "hdfs:///r/embeddings", "hdfs:///r/nodes")[0]
'spark'
>>> choose_writer(None, "/tmp/run/_staging/features")[0]
'arrow'
"""

import dataclasses as dc
import json
import logging
import math
from typing import Any

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.models import artifacts
from pina_spark.runtime import embstore

log = logging.getLogger(__name__)

__all__ = [
    "AggregateInputs",
    "AggregatePlan",
    "plan_aggregate",
    "choose_strategy",
    "choose_broadcast_via",
    "choose_writer",
    "resolve_sparse_dim",
    "WRITER_KEY",
]

#: the config key choosing how ``features`` is written: ``auto`` (default, see
#: :func:`choose_writer`), ``arrow`` (the executors write the Parquet files with pyarrow into
#: the staging folder, then the same _SUCCESS + atomic publish) or ``spark`` (storage.write_table,
#: the JVM Parquet writer). Set it with ``--set aggregate.writer=spark``.
WRITER_KEY = "aggregate.writer"
#: rows per partition of the instance table when aggregate.output_partitions is 0
ROWS_PER_PARTITION = 100_000


@dc.dataclass(frozen=True, eq=False)
class AggregateInputs:
    """The published input tables of the stage (driver side).

    Attributes:
        nodes, embeddings, neighbors: DataFrames (``neighbors`` with its ``variant`` column;
            ``None`` when no variant trained reads neighbours: ``vectorizer_only`` alone).
        embeddings_uri, nodes_uri: where the two tables live, when they are file tables: the
            driver then sizes them from Parquet footers and reads them with pyarrow.
        incremental_rows: ``node_index`` of the instances to compute (incremental runs), else
            all.
        label_features_uri: a table of extra rows that are both ``embeddings`` and ``nodes``
            rows (the virtual label-feature rows of
            :mod:`~pina_spark.stages.aggregate.labelfeatures`; ``nodes`` and ``embeddings`` then
            include them already), else ``None``.
    """

    nodes: Any
    embeddings: Any
    neighbors: Any
    embeddings_uri: str | None = None
    nodes_uri: str | None = None
    incremental_rows: Any = None
    label_features_uri: str | None = None

    def uris(self, table_uri: str | None) -> tuple[str, ...]:
        """The file tables behind ``embeddings`` (or ``nodes``): ``table_uri`` plus the label
        features table; ``()`` when ``table_uri`` is not a file table."""
        if not table_uri:
            return ()
        return (table_uri,) + ((self.label_features_uri,) if self.label_features_uri else ())

    def instances(self):
        """``instance_index, instance_id, split`` of the instance nodes (of the incremental
        rows, in an incremental run)."""
        from pyspark.sql import functions as F

        inst = self.nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
            F.col(storage.NODE_INDEX).cast("long").alias(storage.INSTANCE_INDEX),
            F.col(storage.NODE_ID).alias(storage.INSTANCE_ID),
            F.col(storage.SPLIT),
        )
        if self.incremental_rows is not None:
            sel = self.incremental_rows.select(
                F.col(storage.NODE_INDEX).cast("long").alias(storage.INSTANCE_INDEX)
            )
            inst = inst.join(sel, storage.INSTANCE_INDEX, "left_semi")
        return inst


@dc.dataclass(frozen=True)
class AggregatePlan:
    """Every choice of one aggregate run, made on the driver before any job.

    Attributes:
        strategy: ``broadcast`` or ``shuffle``; ``reason`` says why.
        broadcast_via: ``files`` or ``spark`` for ``broadcast`` (``None`` for ``shuffle``);
            ``broadcast_via_reason`` says why.
        writer: ``arrow`` (the executors write Parquet with pyarrow) or ``spark`` (JVM);
            ``writer_reason`` says why.
        dense_dim, sparse_dim: D and S of the embeddings.
        v1_weight: ``a``, the weight of the neighbour part V1.
        variants: the ``features`` variants, the ``neighbors`` ones then ``vectorizer_only``.
        embeddings_mb: estimated in-memory size of the embeddings.
        partitions: partitions of the reduction (and files per variant and split).
        label_features: ``aggregate.label_features`` (what a label neighbour contributes).
    """

    strategy: str
    reason: str
    broadcast_via: str | None
    broadcast_via_reason: str | None
    writer: str
    writer_reason: str
    dense_dim: int
    sparse_dim: int
    v1_weight: float
    variants: tuple[str, ...]
    embeddings_mb: float
    partitions: int
    label_features: str = "text"

    def to_dict(self) -> dict[str, Any]:
        """The plan as the stage statistics record it (``broadcast_via`` only for
        ``broadcast``)."""
        d: dict[str, Any] = {
            "strategy": self.strategy,
            "reason": self.reason,
            "dense_dim": self.dense_dim,
            "sparse_dim": self.sparse_dim,
            "variants": list(self.variants),
            "embeddings_mb": self.embeddings_mb,
            "partitions": self.partitions,
            "label_features": self.label_features,
        }
        if self.strategy == "broadcast":
            d["broadcast_via"] = self.broadcast_via
            d["broadcast_via_reason"] = self.broadcast_via_reason
        d["writer"] = self.writer
        d["writer_reason"] = self.writer_reason
        return d


def plan_aggregate(
    spark,
    inputs: AggregateInputs,
    agg_cfg,
    staging_uri: str,
    sparse_dim: int | None = None,
) -> AggregatePlan:
    """Decide strategy, transport, writer, widths and partitions. Driver side.

    Parameters
    ----------
    spark : SparkSession
    inputs : AggregateInputs
    agg_cfg : config.AggregateConfig
        ``strategy``, ``broadcast_via``, ``broadcast_max_mb``, ``mmap_max_mb``, ``writer``,
        ``v1_weight``, ``output_partitions``.
    staging_uri : str
        The staging folder of ``features`` (the ``arrow`` writer needs pyarrow to reach it).
    sparse_dim : int, optional
        S; when ``None`` it is max sparse index + 1 (a warning is logged).

    Raises ``ValueError`` for a bad config value, a ``broadcast`` of too large embeddings,
    embeddings with an index >= ``sparse_dim`` and a ``neighbors`` variant named
    ``vectorizer_only``.
    """
    writer, writer_reason = choose_writer(agg_cfg.writer, staging_uri)
    a = float(agg_cfg.v1_weight)
    if not math.isfinite(a) or a < 0:
        raise ValueError(f"aggregate.v1_weight: {a!r} must be a finite number >= 0")
    stats, dense_dim, sparse_dim = measure_embeddings(inputs, sparse_dim)
    size_mb = embstore.estimate_mb(stats)
    via, via_reason = choose_broadcast_via(
        agg_cfg.broadcast_via, inputs.embeddings_uri, inputs.nodes_uri, inputs.label_features_uri
    )
    limit_key = "mmap_max_mb" if via == "files" else "broadcast_max_mb"
    strategy, reason = choose_strategy(
        agg_cfg.strategy, size_mb, getattr(agg_cfg, limit_key), limit_key
    )
    log.info(
        "aggregate: strategy %s (%s); D=%d S=%d a=%g", strategy, reason, dense_dim, sparse_dim, a
    )
    variants = [] if inputs.neighbors is None else neighbor_variants(inputs.neighbors)
    if V.VECTORIZER_ONLY in variants:
        raise ValueError(f"neighbors: variant name {V.VECTORIZER_ONLY!r} is reserved")
    n_inst = None
    if inputs.nodes_uri and inputs.incremental_rows is None:
        n_inst = storage.count_rows_arrow(inputs.nodes_uri)
    if n_inst is None:
        n_inst = inputs.instances().count()  # (an upper bound only sizes the partitions)
    n_parts = agg_cfg.output_partitions or max(
        spark.sparkContext.defaultParallelism, -(-n_inst // ROWS_PER_PARTITION)
    )
    plan = AggregatePlan(
        strategy=strategy,
        reason=reason,
        broadcast_via=via if strategy == "broadcast" else None,
        broadcast_via_reason=via_reason if strategy == "broadcast" else None,
        writer=writer,
        writer_reason=writer_reason,
        dense_dim=int(dense_dim),
        sparse_dim=int(sparse_dim),
        v1_weight=a,
        variants=tuple(variants) + (V.VECTORIZER_ONLY,),
        embeddings_mb=round(size_mb, 2),
        partitions=int(n_parts),
        label_features=agg_cfg.label_features,
    )
    log.info("aggregate plan: %s", plan.to_dict())
    return plan


def measure_embeddings(
    inputs: AggregateInputs, sparse_dim: int | None
) -> tuple[dict[str, Any], int, int]:
    """``(stats, D, S)`` of the embeddings (Parquet footers where pyarrow reads them, else one
    Spark job): rows, dense and sparse values, max sparse index; S = ``sparse_dim`` when known
    (checked against the max index), else max index + 1 (with a warning). Driver side."""
    emb = inputs.embeddings
    stats = _footer_stats(inputs.uris(inputs.embeddings_uri))
    if stats is None:
        stats = _embedding_stats_spark(emb)
    dense_dim = stats.get("dense_dim")
    if dense_dim is None:
        dense_dim = _dense_dim(emb)
    if stats["rows"] and dense_dim and stats["dense_values"] < stats["rows"] * dense_dim:
        stats["dense_values"] = stats["rows"] * dense_dim  # null dense lists become zero rows
    if sparse_dim is None:
        mx = stats.get("max_index")
        if mx is None:
            mx = _embedding_stats_spark(emb)["max_index"]
        sparse_dim = int(mx if mx is not None else -1) + 1
        log.warning(
            "aggregate: sparse dimension S unknown (no models/vectorizer/encoder.json "
            "sparse_dim); using max sparse index + 1 = %d. Train and test features of "
            "different runs may then disagree on S",
            sparse_dim,
        )
    elif stats.get("max_index") is not None and stats["max_index"] >= sparse_dim:
        raise ValueError(
            f"embeddings: sparse index {stats['max_index']} >= sparse_dim "
            f"{sparse_dim} (models/vectorizer/encoder.json and embeddings disagree)"
        )
    return stats, int(dense_dim), int(sparse_dim)


# --------------------------------------------------------------------------- choosers
def choose_strategy(
    strategy: str, size_mb: float, broadcast_max_mb: float, limit_key: str = "broadcast_max_mb"
) -> tuple[str, str]:
    """Pick ``broadcast`` or ``shuffle``; refuse ``broadcast`` of a too large table.

    Returns ``(strategy, reason)``. Raises ``ValueError`` (before any job runs) when
    ``strategy == "broadcast"`` and the embeddings exceed ``broadcast_max_mb`` (the limit of the
    broadcast transport in use; ``limit_key`` names its config key in messages).

    Examples
    --------
    >>> choose_strategy("auto", 100.0, 512)[0]
    'broadcast'
    >>> choose_strategy("auto", 900.0, 512)[0]
    'shuffle'
    >>> choose_strategy("broadcast", 900.0, 512)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: aggregate.strategy=broadcast: the embeddings take about 900 MB ...
    """
    if strategy not in ("auto", "broadcast", "shuffle"):
        raise ValueError(f"aggregate.strategy: {strategy!r} is not one of auto, broadcast, shuffle")
    fits = size_mb <= broadcast_max_mb
    if strategy == "broadcast":
        if not fits:
            raise ValueError(
                f"aggregate.strategy=broadcast: the embeddings take about {size_mb:.0f} MB in "
                f"memory, over aggregate.{limit_key}={broadcast_max_mb}. Use "
                f"aggregate.strategy=shuffle (or auto), or raise aggregate.{limit_key} "
                f"together with the memory it needs (broadcast_max_mb: spark.driver.memory and "
                f"spark.executor.pyspark.memory, every Python worker holds one copy; "
                f"mmap_max_mb: one memory-mapped copy per executor machine, in its local dirs)"
            )
        return (
            "broadcast",
            f"requested; embeddings ~{size_mb:.1f} MB <= {limit_key} {broadcast_max_mb}",
        )
    if strategy == "shuffle":
        return "shuffle", f"requested (embeddings ~{size_mb:.1f} MB)"
    if fits:
        return "broadcast", f"auto: embeddings ~{size_mb:.1f} MB <= {limit_key} {broadcast_max_mb}"
    return "shuffle", f"auto: embeddings ~{size_mb:.1f} MB > {limit_key} {broadcast_max_mb}"


def choose_broadcast_via(
    value: str | None,
    embeddings_uri: str | None,
    nodes_uri: str | None,
    extra_uri: str | None = None,
) -> tuple[str, str]:
    """``(via, reason)`` for ``aggregate.broadcast_via`` = ``auto`` | ``files`` | ``spark``.

    ``files``: every executor machine reads the ``embeddings`` and ``nodes`` Parquet tables
    itself (pyarrow) once, into a memory-mapped copy in its local dirs shared by its Python
    workers (:func:`pina_spark.runtime.embstore.open_store`); nothing is collected on the driver.
    ``spark``: the driver reads them and ships a Spark broadcast variable (one copy per Python
    worker). ``auto`` takes ``files`` when pyarrow reaches both tables on the executors
    (:func:`pina_spark.storage.pyarrow_reaches`; and ``extra_uri``, the label features, when
    given), else ``spark``.

    Examples
    --------
    >>> choose_broadcast_via("auto", "/r/embeddings", "/r/nodes")[0]
    'files'
    >>> choose_broadcast_via("auto", None, None)[0]
    'spark'
    """
    value = (value or "auto").strip().lower()
    if value not in ("auto", "files", "spark"):
        raise ValueError(f"aggregate.broadcast_via: {value!r} is not one of auto, files, spark")
    if value == "files" and not (embeddings_uri and nodes_uri):
        raise ValueError(
            "aggregate.broadcast_via=files needs the embeddings and nodes as "
            "Parquet tables (a run folder); use broadcast_via: spark or auto"
        )
    if value != "auto":
        return value, f"aggregate.broadcast_via={value}"
    tables = (embeddings_uri, nodes_uri) + ((extra_uri,) if extra_uri else ())
    if all(storage.pyarrow_reaches(u) for u in tables):
        return "files", "auto: the executors read the Parquet tables with pyarrow"
    return "spark", "auto: the tables are not file tables pyarrow reads here; Spark broadcast"


def choose_writer(conf_value: str | None, staging_uri: str) -> tuple[str, str]:
    """``(writer, reason)`` for ``aggregate.writer`` = ``auto`` (default) | ``arrow`` |
    ``spark``. ``auto`` takes the executor-side pyarrow writer where pyarrow reaches the
    staging folder (:func:`pina_spark.storage.pyarrow_reaches`) and the JVM writer elsewhere.

    Examples
    --------
    >>> choose_writer("auto", "hdfs:///runs/x/_staging/features")[0]
    'spark'
    >>> choose_writer("spark", "s3://bucket/run/_staging/features")
    ('spark', 'aggregate.writer=spark')
    """
    value = (conf_value or "auto").strip().lower()
    if value not in ("auto", "spark", "arrow"):
        raise ValueError(f"{WRITER_KEY}: {value!r} is not one of auto, spark, arrow")
    if value != "auto":
        return value, f"{WRITER_KEY}={value}"
    if storage.pyarrow_reaches(staging_uri):
        return "arrow", "auto: pyarrow can write the staging folder"
    return "spark", (
        f"auto: {staging_uri.split('://', 1)[0]}:// is not written with pyarrow "
        f"here; JVM Parquet writer"
    )


def resolve_sparse_dim(models_uri: str | None = None, sparse_dim: int | None = None) -> int | None:
    """The tf-idf dimension S: ``sparse_dim`` when given, else ``sparse_dim`` of
    the vectorizer's ``encoder.json`` (:func:`artifacts.vectorizer_dir` of ``models_uri``; or of
    ``<models>/model_card.json``), else ``None``
    (the caller then falls back to max index + 1). Driver side.

    Examples
    --------
    >>> resolve_sparse_dim(None, 100)
    100
    >>> resolve_sparse_dim("/nonexistent/models") is None
    True
    """
    if sparse_dim is not None:
        return int(sparse_dim)
    if not models_uri:
        return None
    root = storage.norm(models_uri)
    for uri in (
        storage.join(artifacts.vectorizer_dir(root), artifacts.ENCODER_JSON),
        storage.join(root, artifacts.MODEL_CARD),
    ):
        try:
            raw = storage.read_bytes(uri)
        except Exception as e:  # unreachable storage: fall back, but say so
            log.warning("aggregate: could not read %s: %s", uri, e)
            raw = None
        if raw is None:
            continue
        try:
            spec = json.loads(raw.decode("utf-8"))
        except ValueError:
            log.warning("aggregate: %s is not valid JSON", uri)
            continue
        for d in (spec, spec.get("vectorizer") if isinstance(spec, dict) else None):
            if isinstance(d, dict) and d.get("sparse_dim") is not None:
                return int(d["sparse_dim"])
    return None


# --------------------------------------------------------------------------- facts
def neighbor_variants(neighbors) -> list[str]:
    """The ``variant`` values of the neighbours table (:func:`storage.partition_values`)."""
    return storage.partition_values(neighbors, storage.VARIANT)


def _footer_stats(uris: tuple[str, ...]) -> dict[str, Any] | None:
    """:func:`pina_spark.runtime.embstore.footer_stats` summed over tables (``None`` when any is not
    readable from its footers)."""
    if not uris:
        return None
    found = [embstore.footer_stats(u) for u in uris]
    parts = [p for p in found if p is not None]
    if len(parts) < len(found):
        return None
    dims = {p["dense_dim"] for p in parts if p["rows"]}
    maxes = [p["max_index"] for p in parts if p["rows"]]
    return {
        "rows": sum(p["rows"] for p in parts),
        "dense_values": sum(p["dense_values"] for p in parts),
        "sparse_values": sum(p["sparse_values"] for p in parts),
        "max_index": None if any(m is None for m in maxes) else max(maxes, default=-1),
        "dense_dim": dims.pop() if len(dims) == 1 else None,
    }


def _embedding_stats_spark(emb) -> dict[str, Any]:
    from pyspark.sql import functions as F

    n_sp = F.greatest(F.coalesce(F.size(storage.SPARSE_INDICES), F.lit(0)), F.lit(0))
    r = emb.select(
        F.count(F.lit(1)).alias("rows"),
        F.sum(n_sp).alias("nnz"),
        F.max(F.array_max(storage.SPARSE_INDICES)).alias("mx"),
    ).first()
    d = _dense_dim(emb)
    rows = int(r["rows"] or 0)
    return {
        "rows": rows,
        "dense_values": rows * d,
        "sparse_values": int(r["nnz"] or 0),
        "max_index": None if r["mx"] is None else int(r["mx"]),
    }


def _dense_dim(emb) -> int:
    from pyspark.sql import functions as F

    first = emb.where(F.size(storage.DENSE) > 0).select(F.size(storage.DENSE).alias("d")).first()
    return 0 if first is None else int(first["d"])
