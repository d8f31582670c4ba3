"""Stage 2b: weighted neighbourhood aggregation (Algorithm 1 of PINA) -> the ``features`` table.

For every instance ``i`` with predicted neighbours ``h_j`` and normalised weights ``P_ij``::

    V0 = Phi_pre(x_i) / ||.||
    V1 = sum_j P_ij Phi_pre(h_j) / ||.||
    V  = [V0, a * V1] / ||.||            a = aggregate.v1_weight

``Phi_pre`` is the ``embeddings`` row ``[dense ; sparse]`` (dense D dims, sparse tf-idf S dims).
Both parts aggregate (dense weighted sum, sparse weighted sum over the union of indices); every
norm is over the whole ``[dense ; sparse]`` vector. A zero vector (empty text, no neighbours)
stays zero, never NaN. Neighbours are summed in their stored order, so reruns (and both
strategies) give identical numbers.

Output: ``<run>/features`` (partitioned by ``variant``, ``split``)

==================== ============= =======================================================
column               type          meaning
==================== ============= =======================================================
``instance_id``      string        the instance's ``node_id``
``split``            string        ``train`` / ``test`` / ... (partition column)
``variant``          string        ``pina``, ``pina_naive`` (one per ``neighbors`` variant) and
                                   ``vectorizer_only`` (partition column)
``dense``            array<float>  dense part of V: ``[V0_dense, a * V1_dense]`` scaled by
                                   ``1/||V||`` (2*D values; D for ``vectorizer_only``)
``sparse_indices``   array<int>    sparse part of V, ascending: V0's tf-idf indices as is,
                                   V1's offset by S (so < 2*S; < S for ``vectorizer_only``)
``sparse_values``    array<float>  the matching values (scaled by ``1/||V||``)
``neighbor_ids``     array<string> ``node_id`` of the neighbours, stored order (empty for
                                   ``vectorizer_only`` and instances without neighbours)
``neighbor_weights`` array<float>  ``P_ij`` as stored in ``neighbors``
==================== ============= =======================================================

``vectorizer_only`` is ``V0`` alone. Concatenating ``dense`` and ``sparse`` (dense block
first, sparse columns shifted by the dense width) gives V with norm 1, or zeros; that is what
:func:`export_csr` writes for PECOS. ``<run>/features/_pina_features.json`` records the widths.

Strategies (``aggregate.strategy``)
-----------------------------------
``broadcast``
    Every Python worker sees the whole embeddings table as numpy/CSR arrays (dense matrix, CSR
    of the tf-idf part, node ids as an Arrow array); a ``mapInArrow`` over the instance rows
    gathers the neighbour rows and reduces them with sparse matrix products per Arrow batch. No
    join of vector rows. How the arrays get there is ``aggregate.broadcast_via``
    (:func:`choose_broadcast_via`): ``files`` (default where possible: local paths, ``s3://``)
    -- the first worker of each executor machine reads the Parquet tables itself into
    memory-mapped ``.npy`` files in the executor's local dirs and the machine's other workers
    map the same files (one page-cache copy per machine, nothing collected on the driver);
    ``spark`` -- the driver reads them and ships a Spark broadcast variable (one copy per
    Python worker).
``shuffle``
    The neighbour lists are exploded into ``(instance, pos, neighbour, weight)`` rows (plus one
    ``pos = -1`` row for the instance itself), joined to the embeddings on the neighbour index
    (sort-merge join; AQE's skew-join splits hub partitions), repartitioned by instance, sorted
    by ``(instance, pos)`` within partitions and reduced by a ``mapInArrow`` that cuts each
    Arrow batch into per-instance segments (numpy/scipy segment sums; rows of an instance that
    straddle two batches are carried over).
``auto``
    ``broadcast`` when the estimated in-memory size of the embeddings (rows x (4 D + 8 nnz),
    from Parquet footers when the table is a file table, else from a Spark aggregate) is below
    the limit of the transport: ``aggregate.mmap_max_mb`` (default 8192) for ``files``,
    ``aggregate.broadcast_max_mb`` (default 512) for ``spark``; else ``shuffle``. ``broadcast``
    on a larger table is refused before anything runs.

Writing
-------
``aggregate.writer`` (config key) = ``auto`` (default) | ``arrow`` | ``spark``; ``auto``
is ``arrow`` where pyarrow can write the staging folder (local paths, ``s3://``) and ``spark``
elsewhere (:func:`choose_writer`). ``spark``: :func:`pina_spark.io.write_table` (JVM Parquet
writer; dictionary encoding off for this write). ``arrow``: the reduction tasks write their
Parquet files themselves with pyarrow into the same staging
folder (``variant=/split=`` layout, deterministic file names so retried attempts replace their
files), and the driver adds ``_SUCCESS`` and publishes with :func:`pina_spark.io.publish`: the
vectors never cross into the JVM, which on 2 cores is most of the stage's time
(``benchmarks/bench_aggregate.py --writer arrow``). The staging folder must be writable by
pyarrow from the executors (local paths, ``s3://``; not ``hdfs://`` without libhdfs).

The sparse dimension S comes from ``<models>/vectorizer/encoder.json`` (``sparse_dim``), else
from the caller, else max index + 1 (with a warning).

Examples
--------
>>> stats = run_stage(ctx)                                  # doctest: +SKIP
>>> stats["strategy"], stats["rows"]["pina"]["test"]        # doctest: +SKIP
('broadcast', 5195)
>>> export_csr(spark, ctx.paths.table("features"), "pina", "train",
...            "/tmp/X.trn.npz")                                # doctest: +SKIP
{'rows': 20780, 'cols': ..., 'path': '/tmp/X.trn.npz', 'ids_path': '/tmp/X.trn.ids.txt', ...}
"""

import json
import logging
import math
import time
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from . import embstore, faults, io
from .embstore import estimate_mb as estimate_embeddings_mb

log = logging.getLogger(__name__)

__all__ = [
    "run_stage",
    "build_features",
    "choose_strategy",
    "choose_broadcast_via",
    "choose_writer",
    "estimate_embeddings_mb",
    "resolve_sparse_dim",
    "export_csr",
    "VARIANT_VECTORIZER_ONLY",
    "FEATURES_META",
]

VARIANT_VECTORIZER_ONLY = "vectorizer_only"
#: the config key choosing how ``features`` is written: ``auto`` (default, see
#: :func:`choose_writer`), ``arrow`` (the executors write the Parquet files with pyarrow into
#: the staging folder, then the same _SUCCESS + atomic publish) or ``spark`` (io.write_table,
#: the JVM Parquet writer). Set it with ``--set aggregate.writer=spark``.
WRITER_KEY = "aggregate.writer"
#: small JSON written into the published features folder: dense/sparse widths per variant
FEATURES_META = "_pina_features.json"
#: instance rows per numpy chunk in the executor reduction (bounds the gathered neighbour rows)
_CHUNK_ROWS = 4096
#: rows per partition of the instance table when aggregate.output_partitions is 0
_ROWS_PER_PARTITION = 100_000

# internal column names of the shuffle strategy
_POS = "_pos"
_NIDX = "_nidx"
_W = "_w"


# =========================================================================== driver side
def resolve_sparse_dim(
    models_uri: Optional[str] = None, sparse_dim: Optional[int] = None
) -> Optional[int]:
    """The tf-idf dimension S: ``sparse_dim`` when given, else ``sparse_dim`` of
    ``<models>/vectorizer/encoder.json`` (or of ``<models>/model_card.json``), else ``None``
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
    root = models_uri.rstrip("/")
    for rel in ("vectorizer/encoder.json", "model_card.json"):
        try:
            raw = io.read_bytes(f"{root}/{rel}")
        except Exception as e:  # unreachable storage: fall back, but say so
            log.warning("aggregate: could not read %s/%s: %s", root, rel, e)
            raw = None
        if raw is None:
            continue
        try:
            spec = json.loads(raw.decode("utf-8"))
        except ValueError:
            log.warning("aggregate: %s/%s is not valid JSON", root, rel)
            continue
        for d in (spec, spec.get("vectorizer") if isinstance(spec, dict) else None):
            if isinstance(d, dict) and d.get("sparse_dim") is not None:
                return int(d["sparse_dim"])
    return None


def _embedding_stats_spark(emb) -> Dict[str, Any]:
    from pyspark.sql import functions as F

    n_sp = F.greatest(F.coalesce(F.size(io.SPARSE_INDICES), F.lit(0)), F.lit(0))
    r = emb.select(
        F.count(F.lit(1)).alias("rows"),
        F.sum(n_sp).alias("nnz"),
        F.max(F.array_max(io.SPARSE_INDICES)).alias("mx"),
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

    first = emb.where(F.size(io.DENSE) > 0).select(F.size(io.DENSE).alias("d")).first()
    return 0 if first is None else int(first["d"])


def choose_strategy(
    strategy: str, size_mb: float, broadcast_max_mb: float, limit_key: str = "broadcast_max_mb"
) -> Tuple[str, str]:
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
        raise ValueError(
            f"aggregate.strategy: {strategy!r} is not one of auto, broadcast, " "shuffle"
        )
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
            f"requested; embeddings ~{size_mb:.1f} MB <= {limit_key} " f"{broadcast_max_mb}",
        )
    if strategy == "shuffle":
        return "shuffle", f"requested (embeddings ~{size_mb:.1f} MB)"
    if fits:
        return (
            "broadcast",
            f"auto: embeddings ~{size_mb:.1f} MB <= {limit_key} " f"{broadcast_max_mb}",
        )
    return "shuffle", f"auto: embeddings ~{size_mb:.1f} MB > {limit_key} {broadcast_max_mb}"


def choose_broadcast_via(
    value: str, embeddings_uri: Optional[str], nodes_uri: Optional[str]
) -> Tuple[str, str]:
    """``(via, reason)`` for ``aggregate.broadcast_via`` = ``auto`` | ``files`` | ``spark``.

    ``files``: every executor machine reads the ``embeddings`` and ``nodes`` Parquet tables
    itself (pyarrow) once, into a memory-mapped copy in its local dirs shared by its Python
    workers (:func:`pina_spark.embstore.open_store`); nothing is collected on the driver.
    ``spark``: the driver reads them and ships a Spark broadcast variable (one copy per Python
    worker).
    ``auto`` takes ``files`` when both tables are Parquet folders pyarrow can read on the
    executors (local/``file://`` paths, ``s3://``), else ``spark``.

    Examples
    --------
    >>> choose_broadcast_via("auto", "/r/embeddings", "/r/nodes")[0]
    'files'
    >>> choose_broadcast_via("auto", "hdfs:///r/embeddings", "hdfs:///r/nodes")[0]
    'spark'
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
    if io.pyarrow_reaches(embeddings_uri) and io.pyarrow_reaches(nodes_uri):
        return "files", "auto: the executors read the Parquet tables with pyarrow"
    return "spark", "auto: the tables are not file tables pyarrow reads here; Spark broadcast"


def _variants(neighbors) -> List[str]:
    """The ``variant`` values of the neighbours table: from its file paths (no job) when it is
    a partitioned file table, else with a ``distinct``."""
    import re
    from urllib.parse import unquote

    try:
        files = neighbors.inputFiles()
    except Exception:
        files = []
    found: Set[str] = set()
    for f in files:
        m = re.search(r"/%s=([^/]*)/" % re.escape(io.VARIANT), f)
        if m is None:  # a file outside variant=... folders: ask Spark
            found = set()
            break
        found.add(unquote(m.group(1)))
    if found:
        return sorted(found)
    return sorted(
        r[0] for r in neighbors.select(io.VARIANT).distinct().collect() if r[0] is not None
    )


def _instances(nodes, selection=None):
    """``instance_index, instance_id, split`` of the instance nodes (optionally a selection)."""
    from pyspark.sql import functions as F

    inst = nodes.where(F.col(io.KIND) == io.KIND_INSTANCE).select(
        F.col(io.NODE_INDEX).cast("long").alias(io.INSTANCE_INDEX),
        F.col(io.NODE_ID).alias(io.INSTANCE_ID),
        F.col(io.SPLIT),
    )
    if selection is not None:
        sel = selection.select(F.col(io.NODE_INDEX).cast("long").alias(io.INSTANCE_INDEX))
        inst = inst.join(sel, io.INSTANCE_INDEX, "left_semi")
    return inst


def _read_arrow(df, uri: Optional[str], columns: List[str]):
    """Read ``columns`` of a table on the driver: pyarrow straight from the Parquet files when
    ``uri`` is a readable file table (fast, multi-threaded), else through Spark."""
    if uri:
        dset = io.parquet_dataset(uri)
        if dset is not None and all(c in dset.schema.names for c in columns):
            return dset.to_table(columns=columns)
    return io.collect_arrow(df.select(*columns))


def _broadcast_payload(emb_tbl, ids_tbl, dense_dim: int, sparse_dim: int) -> Dict[str, Any]:
    """Driver side: numpy/Arrow arrays of the embeddings, indexed by a node-index lookup."""
    import numpy as np
    import pyarrow as pa

    emb_tbl = emb_tbl.combine_chunks()
    node = emb_tbl.column(io.NODE_INDEX).to_numpy().astype(np.int64)
    dense, _ = embstore.dense_block(
        emb_tbl.column(io.DENSE).chunk(0)
        if emb_tbl.num_rows
        else pa.array([], pa.list_(pa.float32())),
        dense_dim,
    )
    sp_ptr, sp_idx, sp_val = embstore.sparse_parts(
        emb_tbl.column(io.SPARSE_INDICES).combine_chunks(),
        emb_tbl.column(io.SPARSE_VALUES).combine_chunks(),
    )
    embstore.check_sparse_range(sp_idx, sparse_dim)
    lookup, ids_by_index = embstore.node_lookup(node, ids_tbl)
    return {
        "dense": dense,
        "sp_ptr": sp_ptr,
        "sp_idx": sp_idx,
        "sp_val": sp_val,
        "lookup": lookup,
        "ids": ids_by_index,
        "dense_dim": dense_dim,
        "sparse_dim": sparse_dim,
    }


def build_features(
    spark,
    nodes,
    embeddings,
    neighbors,
    agg_cfg,
    sparse_dim: Optional[int] = None,
    fault_plan=None,
    embeddings_uri: Optional[str] = None,
    nodes_uri: Optional[str] = None,
    selection=None,
    sink: Optional[Dict[str, Any]] = None,
) -> Tuple[Any, Dict[str, Any]]:
    """The ``features`` DataFrame of every variant (lazy) and the decisions taken. Driver side.

    Parameters
    ----------
    spark : SparkSession
    nodes, embeddings, neighbors : DataFrame
        The published tables (``neighbors`` with its ``variant`` partition column).
    agg_cfg : config.AggregateConfig
        ``strategy``, ``broadcast_max_mb``, ``v1_weight``, ``output_partitions``.
    sparse_dim : int, optional
        S; when ``None`` it is max sparse index + 1 (a warning is logged).
    fault_plan : tuple, optional
        :func:`pina_spark.faults.fault_plan` for ``aggregate`` (checked inside the reduction).
    embeddings_uri, nodes_uri : str, optional
        Where the tables live: lets the driver size them from Parquet footers and read the
        broadcast copy with pyarrow instead of through Spark.
    selection : DataFrame, optional
        ``node_index`` of the instances to compute (incremental runs); all instances otherwise.
    sink : dict, optional
        ``{"uri": staging folder, "compression": codec}``: the executors write the features
        Parquet files there themselves (pyarrow, ``variant=/split=`` folders) and the returned
        DataFrame only lists the files written (``variant, split, rows, path``); see
        :func:`run_stage`.

    Returns
    -------
    (DataFrame, dict)
        Columns of ``io.schema(io.FEATURES)`` plus ``variant``; info: ``strategy``, ``reason``,
        ``dense_dim``, ``sparse_dim``, ``variants``, ``embeddings_mb`` and, for ``broadcast``,
        the broadcast variable under ``_broadcast`` (unpersist it after the write).

    Examples
    --------
    >>> df, info = build_features(spark, nodes, emb, nbrs, cfg.aggregate,
    ...                           sparse_dim=S)                         # doctest: +SKIP
    >>> info["strategy"]                                                # doctest: +SKIP
    'broadcast'
    """
    from pyspark.sql import functions as F

    t0 = time.time()
    a = float(agg_cfg.v1_weight)
    if not math.isfinite(a) or a < 0:
        raise ValueError(f"aggregate.v1_weight: {a!r} must be a finite number >= 0")
    stats = embstore.footer_stats(embeddings_uri) if embeddings_uri else None
    if stats is None:
        stats = _embedding_stats_spark(embeddings)
    dense_dim = stats.get("dense_dim")
    if dense_dim is None:
        dense_dim = _dense_dim(embeddings)
    if stats["rows"] and dense_dim and stats["dense_values"] < stats["rows"] * dense_dim:
        stats["dense_values"] = stats["rows"] * dense_dim  # null dense lists become zero rows
    if sparse_dim is None:
        mx = stats.get("max_index")
        if mx is None:
            mx = _embedding_stats_spark(embeddings)["max_index"]
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
    size_mb = estimate_embeddings_mb(stats)
    via, via_reason = choose_broadcast_via(agg_cfg.broadcast_via, embeddings_uri, nodes_uri)
    limit_key = "mmap_max_mb" if via == "files" else "broadcast_max_mb"
    strategy, reason = choose_strategy(
        agg_cfg.strategy, size_mb, getattr(agg_cfg, limit_key), limit_key
    )
    log.info(
        "aggregate: strategy %s (%s); D=%d S=%d a=%g", strategy, reason, dense_dim, sparse_dim, a
    )

    variants = _variants(neighbors)
    if VARIANT_VECTORIZER_ONLY in variants:
        raise ValueError(f"neighbors: variant name {VARIANT_VECTORIZER_ONLY!r} is reserved")
    inst = _instances(nodes, selection)
    n_inst = io.count_rows_arrow(nodes_uri) if (nodes_uri and selection is None) else None
    if n_inst is None:
        n_inst = inst.count()  # (an upper bound is enough: it only sizes the partitions)
    n_parts = agg_cfg.output_partitions or max(
        spark.sparkContext.defaultParallelism, -(-n_inst // _ROWS_PER_PARTITION)
    )
    schema = io.schema(io.FEATURES) if sink is None else _SINK_SCHEMA

    def wrap(fn, v):
        return fn if sink is None else _make_sink(fn, v, sink["uri"], sink.get("compression"))

    info: Dict[str, Any] = {
        "strategy": strategy,
        "reason": reason,
        "dense_dim": dense_dim,
        "sparse_dim": sparse_dim,
        "variants": variants + [VARIANT_VECTORIZER_ONLY],
        "embeddings_mb": round(size_mb, 2),
        "partitions": n_parts,
    }
    parts = []
    if strategy == "broadcast":
        info["broadcast_via"], info["broadcast_via_reason"] = via, via_reason
        if via == "files":
            # choose_broadcast_via returns "files" only when both tables are given
            assert embeddings_uri is not None and nodes_uri is not None
            bc = {
                "embeddings": embeddings_uri,
                "nodes": nodes_uri,
                "dense_dim": dense_dim,
                "sparse_dim": sparse_dim,
                "key": embstore.tables_key(embeddings_uri, nodes_uri, dense_dim, sparse_dim),
            }
        else:
            emb_tbl = _read_arrow(
                embeddings,
                embeddings_uri,
                [io.NODE_INDEX, io.DENSE, io.SPARSE_INDICES, io.SPARSE_VALUES],
            )
            ids_tbl = _read_arrow(nodes, nodes_uri, [io.NODE_INDEX, io.NODE_ID])
            payload = _broadcast_payload(emb_tbl, ids_tbl, dense_dim, sparse_dim)
            del emb_tbl, ids_tbl
            bc = spark.sparkContext.broadcast(payload)
            del payload
            info["_broadcast"] = bc
        inst_p = inst.repartition(n_parts, io.INSTANCE_INDEX)
        for v in variants + [VARIANT_VECTORIZER_ONLY]:
            if v == VARIANT_VECTORIZER_ONLY:
                rows = inst_p.select(
                    io.INSTANCE_INDEX,
                    io.INSTANCE_ID,
                    io.SPLIT,
                    F.lit(None).cast("array<long>").alias(io.NEIGHBOR),
                    F.lit(None).cast("array<float>").alias(io.SCORE),
                )
            else:
                nb = neighbors.where(F.col(io.VARIANT) == v).select(
                    F.col(io.INSTANCE_INDEX).cast("long"), io.NEIGHBOR, io.SCORE
                )
                rows = inst.join(nb, io.INSTANCE_INDEX, "left").repartition(
                    n_parts, io.INSTANCE_INDEX
                )
            rows = rows.sortWithinPartitions(io.INSTANCE_INDEX)
            fn = wrap(_make_broadcast_reducer(bc, a, v != VARIANT_VECTORIZER_ONLY, fault_plan), v)
            out_v = rows.mapInArrow(fn, schema)
            parts.append(out_v if sink else out_v.withColumn(io.VARIANT, F.lit(v)))
    else:
        ids = nodes.select(F.col(io.NODE_INDEX).cast("long").alias(io.NODE_INDEX), io.NODE_ID)
        vecs = embeddings.select(
            F.col(io.NODE_INDEX).cast("long").alias(io.NODE_INDEX),
            io.DENSE,
            io.SPARSE_INDICES,
            io.SPARSE_VALUES,
        )
        self_rows = inst.select(
            io.INSTANCE_INDEX,
            F.lit(-1).alias(_POS),
            F.col(io.INSTANCE_INDEX).alias(_NIDX),
            F.lit(1.0).cast("float").alias(_W),
            io.INSTANCE_ID,
            io.SPLIT,
        )
        for v in variants + [VARIANT_VECTORIZER_ONLY]:
            if v == VARIANT_VECTORIZER_ONLY:
                pairs = self_rows
            else:
                nb = (
                    neighbors.where(F.col(io.VARIANT) == v)
                    .select(F.col(io.INSTANCE_INDEX).cast("long"), io.NEIGHBOR, io.SCORE)
                    .join(inst.select(io.INSTANCE_INDEX), io.INSTANCE_INDEX, "left_semi")
                )
                # arrays_zip pads the shorter array with nulls: keep neighbour positions only
                nb_rows = (
                    nb.select(
                        io.INSTANCE_INDEX,
                        F.size(io.NEIGHBOR).alias("_k"),
                        F.posexplode(
                            F.arrays_zip(F.col(io.NEIGHBOR).alias("n"), F.col(io.SCORE).alias("s"))
                        ).alias(_POS, "_z"),
                    )
                    .where(F.col(_POS) < F.col("_k"))
                    .select(
                        io.INSTANCE_INDEX,
                        _POS,
                        F.col("_z.n").cast("long").alias(_NIDX),
                        F.coalesce(F.col("_z.s").cast("float"), F.lit(0.0).cast("float")).alias(_W),
                        F.lit(None).cast("string").alias(io.INSTANCE_ID),
                        F.lit(None).cast("string").alias(io.SPLIT),
                    )
                )
                pairs = self_rows.unionByName(nb_rows)
            # two joins on the same key: the pairs are shuffled by _nidx once
            joined = pairs.join(ids, pairs[_NIDX] == ids[io.NODE_INDEX], "left").drop(
                ids[io.NODE_INDEX]
            )
            joined = joined.join(vecs, joined[_NIDX] == vecs[io.NODE_INDEX], "left").select(
                io.INSTANCE_INDEX,
                _POS,
                _W,
                io.INSTANCE_ID,
                io.SPLIT,
                io.NODE_ID,
                io.DENSE,
                io.SPARSE_INDICES,
                io.SPARSE_VALUES,
            )
            grouped = joined.repartition(n_parts, io.INSTANCE_INDEX).sortWithinPartitions(
                io.INSTANCE_INDEX, _POS
            )
            fn = _make_shuffle_reducer(
                a, v != VARIANT_VECTORIZER_ONLY, dense_dim, sparse_dim, fault_plan
            )
            out_v = grouped.mapInArrow(wrap(fn, v), schema)
            parts.append(out_v if sink else out_v.withColumn(io.VARIANT, F.lit(v)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    info["plan_s"] = round(time.time() - t0, 3)
    return out, info


def run_stage(ctx) -> Dict[str, Any]:
    """Pipeline entry point: read ``nodes``, ``embeddings``, ``neighbors``; publish
    ``features`` partitioned by ``(variant, split)``; return statistics. Driver side.

    Examples
    --------
    >>> run_stage(ctx)["rows"]          # doctest: +SKIP
    {'pina': {'test': 5195, 'train': 20780}, ...}
    """
    t0 = time.time()
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    nodes = io.read_table(spark, paths, io.NODES)
    emb = io.read_table(spark, paths, io.EMBEDDINGS)
    nbrs = io.read_table(spark, paths, io.NEIGHBORS)
    selection = None
    if getattr(ctx, "selection", None):
        selection = spark.read.parquet(ctx.selection)
    S = resolve_sparse_dim(ctx.models, None)
    if S is None:
        log.warning("aggregate: no sparse_dim in %s/vectorizer/encoder.json", ctx.models)
    plan = faults.fault_plan(cfg, "aggregate")
    staging = paths.staging(io.FEATURES)
    writer, writer_reason = choose_writer(cfg.aggregate.writer, staging)
    sink = None
    if writer == "arrow":
        sink = {
            "uri": staging,
            "compression": spark.conf.get("spark.sql.parquet.compression.codec", "zstd"),
        }
    df, info = build_features(
        spark,
        nodes,
        emb,
        nbrs,
        cfg.aggregate,
        sparse_dim=S,
        fault_plan=plan,
        embeddings_uri=paths.table(io.EMBEDDINGS),
        nodes_uri=paths.table(io.NODES),
        selection=selection,
        sink=sink,
    )
    bc = info.pop("_broadcast", None)
    t1 = time.time()
    try:
        if sink is None:
            final = _write_features(spark, df, paths)
        else:
            final = paths.table(io.FEATURES)
            io.publish_written(spark, df, sink["uri"], final, "aggregate")
    finally:
        if bc is not None:
            bc.unpersist()
    info["writer"] = writer
    info["writer_reason"] = writer_reason
    write_s = time.time() - t1
    meta = _features_meta(info)
    io.write_bytes(
        final.rstrip("/") + "/" + FEATURES_META, json.dumps(meta, indent=1, sort_keys=True).encode()
    )
    counts = _partition_counts(spark, final)
    stats = dict(
        info,
        rows=counts,
        widths=meta["widths"],
        write_s=round(write_s, 2),
        time_s=round(time.time() - t0, 2),
    )
    log.info("aggregate: %s in %.1fs (%s)", counts, stats["time_s"], info["reason"])
    return stats


def choose_writer(conf_value: Optional[str], staging_uri: str) -> Tuple[str, str]:
    """``(writer, reason)`` for ``aggregate.writer`` = ``auto`` (default) | ``arrow`` |
    ``spark``. ``auto`` takes the executor-side pyarrow writer where pyarrow can write the
    staging folder (a local/``file://`` path or ``s3://``) and the JVM writer elsewhere
    (``hdfs://``, ``s3a://``, ``gs://``, ...).

    Examples
    --------
    >>> choose_writer(None, "/tmp/run/_staging/features")[0]
    'arrow'
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
    if io.pyarrow_reaches(staging_uri):
        return "arrow", "auto: pyarrow can write the staging folder"
    return "spark", (
        f"auto: {staging_uri.split('://', 1)[0]}:// is not written with pyarrow "
        f"here; JVM Parquet writer"
    )


def _partition_counts(spark, uri: str) -> Dict[str, Dict[str, int]]:
    """Rows per (variant, split) of the published features: Parquet footers, else Spark."""
    from pyspark.sql import functions as F

    counts: Dict[str, Dict[str, int]] = {}
    dset = io.parquet_dataset(uri)
    if dset is not None:
        try:
            import pyarrow.dataset as pds

            for frag in dset.get_fragments():
                keys = pds.get_partition_keys(frag.partition_expression)
                v, s = str(keys.get(io.VARIANT)), str(keys.get(io.SPLIT))
                counts.setdefault(v, {})
                counts[v][s] = counts[v].get(s, 0) + frag.metadata.num_rows
            return counts
        except Exception as e:
            log.info("aggregate: counting from footers failed (%s); counting with Spark", e)
            counts = {}
    for r in (
        spark.read.parquet(uri)
        .groupBy(io.VARIANT, io.SPLIT)
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    ):
        counts.setdefault(r[io.VARIANT], {})[str(r[io.SPLIT])] = int(r["n"])
    return counts


def _write_features(spark, df, paths) -> str:
    """Publish ``df`` at ``features`` (no dictionary encoding for the float arrays: it cannot
    compress embedding values and costs time)."""
    key = "parquet.enable.dictionary"
    old = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        return io.write_table(df, paths, io.FEATURES, partition_by=(io.VARIANT, io.SPLIT))
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _features_meta(info: Dict[str, Any]) -> Dict[str, Any]:
    D, S = info["dense_dim"], info["sparse_dim"]
    widths = {
        v: {
            "dense": D if v == VARIANT_VECTORIZER_ONLY else 2 * D,
            "sparse": S if v == VARIANT_VECTORIZER_ONLY else 2 * S,
        }
        for v in info["variants"]
    }
    return {"dense_dim": D, "sparse_dim": S, "widths": widths}


# =========================================================================== CSR export
def export_csr(
    spark,
    features_uri_or_df,
    variant: str,
    split: str,
    out_path: str,
    sparse_width: Optional[int] = None,
) -> Dict[str, Any]:
    """Write one (variant, split) of ``features`` as a PECOS/scipy CSR ``.npz``. Driver side.

    ``X = hstack(dense, sparse)`` per row (dense block first, sparse column ``c`` at
    ``dense_width + c``), float32, sorted indices, rows ordered by ``instance_id``. The row
    order is saved alongside as ``<out_path without .npz>.ids.txt`` (one id per line).

    The rows are sorted by Spark (range partitioning) and brought to the driver one partition
    at a time (``toLocalIterator`` over Arrow IPC blobs made by the executors), never with one
    big ``collect``.

    Parameters
    ----------
    features_uri_or_df : str or DataFrame
        The published ``features`` folder, or a DataFrame with its columns.
    sparse_width : int, optional
        Number of sparse columns (2*S, or S for ``vectorizer_only``). Default: from
        ``_pina_features.json`` in the features folder, else max index + 1 (warned).

    Returns
    -------
    dict
        ``rows``, ``cols``, ``nnz``, ``dense_width``, ``sparse_width``, ``path``, ``ids_path``.

    Examples
    --------
    >>> export_csr(spark, "/run/features", "pina", "train", "/tmp/X.trn.npz")  # doctest: +SKIP
    {'rows': 20780, 'cols': 40064, 'nnz': ..., 'path': '/tmp/X.trn.npz', ...}
    """
    import io as _pyio

    import numpy as np
    import pyarrow as pa
    import scipy.sparse as sp
    from pyspark.sql import functions as F

    t0 = time.time()
    if isinstance(features_uri_or_df, str):
        uri = features_uri_or_df
        df = spark.read.parquet(uri)
        if sparse_width is None:
            raw = io.read_bytes(uri.rstrip("/") + "/" + FEATURES_META)
            if raw is not None:
                w = json.loads(raw.decode()).get("widths", {}).get(variant)
                if w:
                    sparse_width = int(w["sparse"])
    else:
        df = features_uri_or_df
    for c in (io.VARIANT, io.SPLIT, io.INSTANCE_ID, io.DENSE, io.SPARSE_INDICES, io.SPARSE_VALUES):
        if c not in df.columns:
            raise ValueError(f"export_csr: column {c!r} missing (found {df.columns})")
    sel = (
        df.where((F.col(io.VARIANT) == variant) & (F.col(io.SPLIT) == split))
        .select(io.INSTANCE_ID, io.DENSE, io.SPARSE_INDICES, io.SPARSE_VALUES)
        .orderBy(io.INSTANCE_ID)
    )
    blobs = sel.mapInArrow(_ipc_blobs, "blob binary")
    ids: List[Any] = []
    mats = []
    dense_w: Optional[int] = None
    max_sp = -1
    for row in blobs.toLocalIterator(prefetchPartitions=False):
        with pa.ipc.open_stream(row["blob"]) as reader:
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                dcol = batch.column(1)
                lens = embstore.lengths(dcol)
                w = int(lens.max(initial=0))
                if dense_w is None:
                    dense_w = w
                if np.any((lens != dense_w) & (lens != 0)) or (w and w != dense_w):
                    raise ValueError(
                        f"export_csr: dense arrays of different lengths in " f"{variant}/{split}"
                    )
                dense, _ = embstore.dense_block(dcol, dense_w)
                ptr, idx, val = embstore.sparse_parts(batch.column(2), batch.column(3))
                if idx.size:
                    max_sp = max(max_sp, int(idx.max()))
                mats.append((sp.csr_matrix(dense), (val, idx, ptr)))
                ids.append(batch.column(0))
    dense_w = dense_w or 0
    if sparse_width is None:
        sparse_width = max_sp + 1
        log.warning(
            "export_csr: sparse width unknown (no %s); using max index + 1 = %d",
            FEATURES_META,
            sparse_width,
        )
    if max_sp >= sparse_width:
        raise ValueError(f"export_csr: sparse index {max_sp} >= sparse_width {sparse_width}")
    blocks = []
    for dcsr, (val, idx, ptr) in mats:
        scsr = sp.csr_matrix((val, idx, ptr), shape=(dcsr.shape[0], sparse_width))
        dcsr = sp.csr_matrix(dcsr, shape=(dcsr.shape[0], dense_w))
        blocks.append(sp.hstack([dcsr, scsr], format="csr"))
    n_cols = dense_w + sparse_width
    X = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, n_cols), dtype=np.float32)
    X = X.astype(np.float32)
    X.eliminate_zeros()
    X.sort_indices()
    buf = _pyio.BytesIO()
    sp.save_npz(buf, X, compressed=False)
    io.write_bytes(out_path, buf.getvalue())
    ids_path = (out_path[:-4] if out_path.endswith(".npz") else out_path) + ".ids.txt"
    id_list = pa.chunked_array(ids, pa.string()).to_pylist() if ids else []
    io.write_bytes(ids_path, ("\n".join(id_list) + ("\n" if id_list else "")).encode("utf-8"))
    out = {
        "rows": int(X.shape[0]),
        "cols": int(n_cols),
        "nnz": int(X.nnz),
        "dense_width": int(dense_w),
        "sparse_width": int(sparse_width),
        "path": out_path,
        "ids_path": ids_path,
        "time_s": round(time.time() - t0, 2),
    }
    log.info("export_csr %s/%s: %s", variant, split, out)
    return out


_SINK_SCHEMA = "variant string, split string, rows long, path string"
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _escape_partition_value(v) -> str:
    """Spark's escaping of a partition value in a folder name (``%XX`` for special chars)."""
    if v is None:
        return _HIVE_NULL
    special = set("\"#%'*/:=?\\\x7f{[]^")
    return "".join("%%%02X" % ord(c) if (c in special or ord(c) < 0x20) else c for c in v)


def _make_sink(fn, variant: str, staging: str, compression: Optional[str]):
    """Driver side: wrap a reducer so that the executor writes its output batches as Parquet
    (pyarrow) under ``staging/variant=<v>/split=<s>/part-<partition>.parquet`` and yields one
    ``variant, split, rows, path`` row per file.

    File names depend only on the partition id, and each file is written to a hidden temporary
    name and renamed when complete, so a retried or speculative task attempt replaces the same
    file with the same rows (never a duplicate).
    """
    codec = io.parquet_codec(compression, "zstd")

    def write(batches):
        """Executor side (mapInArrow)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        tc = TaskContext.get()
        pid, attempt = tc.partitionId(), tc.attemptNumber()
        fs, base = io.pyarrow_fs(staging)
        writers, counts = {}, {}
        try:
            for b in fn(batches):
                split = b.column(1)
                for sv in pc.unique(split).to_pylist():
                    mask = pc.is_null(split) if sv is None else pc.equal(split, sv)
                    sub = b.filter(mask)
                    sub = pa.RecordBatch.from_arrays(
                        [sub.column(i) for i in (0, 2, 3, 4, 5, 6)],
                        [sub.schema.names[i] for i in (0, 2, 3, 4, 5, 6)],
                    )
                    if sv not in writers:
                        d = (
                            f"{base}/{io.VARIANT}={_escape_partition_value(variant)}/"
                            f"{io.SPLIT}={_escape_partition_value(sv)}"
                        )
                        fs.create_dir(d, recursive=True)
                        name = f"part-{pid:05d}.parquet"
                        tmp = f"{d}/.{name}.attempt{attempt}.tmp"
                        stream = fs.open_output_stream(tmp)
                        w = pq.ParquetWriter(
                            stream,
                            sub.schema,
                            compression=codec,
                            use_dictionary=[io.INSTANCE_ID, io.NEIGHBOR_IDS],
                        )
                        writers[sv] = (w, stream, tmp, f"{d}/{name}")
                        counts[sv] = 0
                    writers[sv][0].write_batch(sub)
                    counts[sv] += sub.num_rows
            done = []
            for sv, (w, stream, tmp, final) in writers.items():
                w.close()
                stream.close()
                fs.move(tmp, final)
                done.append((sv, final))
            writers = {}
        finally:
            for w, stream, tmp, _ in writers.values():  # failed attempt: drop its tmp files
                try:
                    w.close()
                    stream.close()
                    fs.delete_file(tmp)
                except Exception:
                    pass
        if done:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([variant] * len(done), pa.string()),
                    pa.array([sv for sv, _ in done], pa.string()),
                    pa.array([counts[sv] for sv, _ in done], pa.int64()),
                    pa.array([p for _, p in done], pa.string()),
                ],
                ["variant", "split", "rows", "path"],
            )

    return write


def _ipc_blobs(batches):
    """Executor side: one Arrow IPC stream per partition, as a one-row ``blob`` batch."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    writer = None
    for b in batches:
        if writer is None:
            writer = pa.ipc.new_stream(sink, b.schema)
        writer.write_batch(b)
    if writer is None:
        return
    writer.close()
    yield pa.RecordBatch.from_arrays(
        [pa.array([sink.getvalue().to_pybytes()], pa.binary())], ["blob"]
    )


# =========================================================================== executor side


def _weights(ln, lw, nb_ptr, w_col):
    """Executor side: the weight of every neighbour (stored order); a missing weight (score
    array shorter than the neighbour array) is 0."""
    import numpy as np

    wf = embstore.flat(w_col, np.float32)
    if np.array_equal(ln, lw):
        return wf
    n = int(nb_ptr[-1])
    row = np.repeat(np.arange(ln.size), ln)
    rank = np.arange(n) - nb_ptr[:-1][row]
    wptr = np.zeros(lw.size + 1, dtype=np.int64)
    np.cumsum(lw, out=wptr[1:])
    ok = rank < lw[row]
    w = np.zeros(n, dtype=np.float32)
    w[ok] = wf[wptr[:-1][row[ok]] + rank[ok]]
    return w


def _row_sq(dense, ptr, data):
    """Squared norms of the rows of [dense ; csr] in float64."""
    import numpy as np

    sq = (
        np.einsum("ij,ij->i", dense, dense, dtype=np.float64)
        if dense.shape[1]
        else np.zeros(dense.shape[0])
    )
    if data.size:
        rows = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
        d = data.astype(np.float64)
        sq = sq + np.bincount(rows, weights=d * d, minlength=ptr.size - 1)
    return sq


def _combine(
    self_dense, self_sp, nb_ptr, nb_w, nb_dense, nb_sp, a: float, with_v1: bool, sparse_dim: int
):
    """Executor side: Algorithm 1 for a chunk of instances, fully vectorised.

    ``self_dense`` (b, D) / ``self_sp`` (CSR b x S): Phi_pre of the instances. Neighbour rows
    ``nb_dense`` (m, D) / ``nb_sp`` (CSR m x S) in stored order, instance ``r`` owning rows
    ``nb_ptr[r]:nb_ptr[r+1]`` with weights ``nb_w``. Returns ``(dense (b, W) float32,
    csr (b x S or 2S) float32 with sorted indices)``. The weighted sums are one CSR product
    ``P @ rows`` (P: b x m, one stored entry per neighbour), accumulated in stored order.
    """
    import numpy as np
    import scipy.sparse as sp

    b, D = self_dense.shape
    self_sp.sum_duplicates()  # canonical: sorted, no duplicates
    n0 = np.sqrt(_row_sq(self_dense, self_sp.indptr, self_sp.data))
    if not with_v1:
        s0 = np.divide(1.0, n0, out=np.zeros(b), where=n0 > 0)
        dense = (self_dense * s0[:, None]).astype(np.float32)
        out = self_sp.copy()
        out.data = (out.data * np.repeat(s0, np.diff(out.indptr))).astype(np.float32)
        out.eliminate_zeros()
        return dense, out
    m = nb_w.size
    P = sp.csr_matrix((nb_w.astype(np.float32), np.arange(m, dtype=np.int64), nb_ptr), shape=(b, m))
    v1d = np.asarray(P @ nb_dense, dtype=np.float32) if D else np.zeros((b, 0), np.float32)
    v1s = (P @ nb_sp).tocsr()
    v1s.sum_duplicates()
    n1 = np.sqrt(_row_sq(v1d, v1s.indptr, v1s.data))
    z0, z1 = (n0 > 0).astype(np.float64), (n1 > 0).astype(np.float64)
    nv = np.sqrt(z0 + a * a * z1)
    ok = nv > 0
    s0 = np.divide(1.0, n0 * nv, out=np.zeros(b), where=ok & (n0 > 0))
    s1 = np.divide(a, n1 * nv, out=np.zeros(b), where=ok & (n1 > 0))
    dense = np.empty((b, 2 * D), dtype=np.float32)
    dense[:, :D] = self_dense * s0[:, None]
    dense[:, D:] = v1d * s1[:, None]
    p0 = self_sp.indptr.astype(np.int64)
    p1 = v1s.indptr.astype(np.int64)
    c0, c1 = np.diff(p0), np.diff(p1)
    ptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(c0 + c1, out=ptr[1:])
    nnz = int(ptr[-1])
    idx = np.empty(nnz, dtype=np.int32)
    val = np.empty(nnz, dtype=np.float32)
    # V0 entries first in each row, then V1's (offset by S): ascending when both are sorted
    pos0 = np.repeat(ptr[:-1] - p0[:-1], c0) + np.arange(p0[-1])
    pos1 = np.repeat(ptr[:-1] + c0 - p1[:-1], c1) + np.arange(p1[-1])
    idx[pos0] = self_sp.indices
    val[pos0] = self_sp.data * np.repeat(s0, c0)
    idx[pos1] = v1s.indices.astype(np.int64) + sparse_dim
    val[pos1] = v1s.data * np.repeat(s1, c1)
    out = sp.csr_matrix((val, idx, ptr), shape=(b, 2 * sparse_dim))
    out.eliminate_zeros()
    return dense, out


def _arr(x):
    """A pyarrow Array from an Array or ChunkedArray."""
    import pyarrow as pa

    if isinstance(x, pa.ChunkedArray):
        return x.combine_chunks() if x.num_chunks != 1 else x.chunk(0)
    return x


def _list_array(ptr, values, value_type):
    """Arrow ListArray from int offsets and a flat numpy/Arrow array (executor side)."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.array(np.asarray(ptr, dtype=np.int32), pa.int32())
    if isinstance(values, pa.ChunkedArray):
        values = _arr(values)
    elif not isinstance(values, pa.Array):
        values = pa.array(values, value_type)
    return pa.ListArray.from_arrays(offsets, values)


def _out_batch(instance_id, split, dense, sparse, nb_ptr, nb_ids, nb_w):
    """Executor side: the output Arrow batch (schema ``io.schema(io.FEATURES)``)."""
    import numpy as np
    import pyarrow as pa

    b, W = dense.shape
    dptr = np.arange(b + 1, dtype=np.int64) * W
    cols = [
        _arr(instance_id).cast(pa.string()),
        _arr(split).cast(pa.string()),
        _list_array(dptr, dense.reshape(-1), pa.float32()),
        _list_array(sparse.indptr, sparse.indices.astype(np.int32, copy=False), pa.int32()),
        _list_array(sparse.indptr, sparse.data.astype(np.float32, copy=False), pa.float32()),
        _list_array(nb_ptr, _arr(nb_ids).cast(pa.string()), pa.string()),
        _list_array(nb_ptr, np.asarray(nb_w, dtype=np.float32), pa.float32()),
    ]
    return pa.RecordBatch.from_arrays(
        cols,
        [
            io.INSTANCE_ID,
            io.SPLIT,
            io.DENSE,
            io.SPARSE_INDICES,
            io.SPARSE_VALUES,
            io.NEIGHBOR_IDS,
            io.NEIGHBOR_WEIGHTS,
        ],
    )


def _make_broadcast_reducer(bc, a: float, with_v1: bool, fault_plan):
    """Driver side: returns the executor function of the ``broadcast`` strategy.

    ``bc`` is a Spark broadcast variable of :func:`_broadcast_payload` (``broadcast_via:
    spark``) or the spec of the tables to memory-map (``broadcast_via: files``, a dict; see
    :func:`pina_spark.embstore.open_store`). The returned ``reduce(batches)`` runs on the executors
    (mapInArrow over instance rows ``instance_index, instance_id, split, neighbor, score``); it
    opens the embeddings once per Python worker (``spark.python.worker.reuse``) and gathers
    neighbour rows with numpy fancy indexing.
    """
    chunk = _CHUNK_ROWS

    def reduce(batches: Iterator) -> Iterator:
        """Executor side (mapInArrow)."""
        faults.maybe_fail(fault_plan)
        import numpy as np
        import pyarrow as pa
        import scipy.sparse as sp

        E = embstore.open_store(bc) if isinstance(bc, dict) else bc.value
        dense_e, lookup, ids = E["dense"], E["lookup"], E["ids"]
        S = int(E["sparse_dim"])
        esp = E.get("_csr")
        if esp is None:  # built once per worker (E is cached per worker in both transports)
            esp = E["_csr"] = sp.csr_matrix(
                (E["sp_val"], E["sp_idx"], E["sp_ptr"]), shape=(dense_e.shape[0], S)
            )
        D = dense_e.shape[1]
        zero_d = np.zeros((1, D), dtype=np.float32)

        def gather(node):
            """rows of the embeddings for node indices (missing -> zero rows)."""
            node = np.asarray(node, dtype=np.int64)
            inside = (node >= 0) & (node < lookup.size)
            pos = np.full(node.size, -1, dtype=np.int64)
            pos[inside] = lookup[node[inside]]
            ok = pos >= 0
            if ok.all():
                return dense_e[pos], esp[pos]
            safe = np.where(ok, pos, 0)
            dn = dense_e[safe] if dense_e.shape[0] else np.repeat(zero_d, node.size, 0)
            dn[~ok] = 0
            spm = esp[safe] if esp.shape[0] else sp.csr_matrix((node.size, S), dtype=np.float32)
            spm = sp.diags(ok.astype(np.float32)) @ spm
            return dn, spm.tocsr()

        def id_lookup(node):
            node = np.asarray(node, dtype=np.int64)
            inside = (node >= 0) & (node < len(ids))
            take = pa.array(np.where(inside, node, 0), mask=~inside)
            return ids.take(take)

        for batch in batches:
            for off in range(0, batch.num_rows, chunk):
                part = batch.slice(off, chunk)
                inst = part.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
                self_dense, self_sp = gather(inst)
                nb_col, w_col = part.column(3), part.column(4)
                ln, lw = embstore.lengths(nb_col), embstore.lengths(w_col)
                nb_ptr = np.zeros(inst.size + 1, dtype=np.int64)
                np.cumsum(ln, out=nb_ptr[1:])
                nb = embstore.flat(nb_col, np.int64, fill=-1)
                w = _weights(ln, lw, nb_ptr, w_col)
                if with_v1:
                    nb_dense, nb_sp = gather(nb)
                else:
                    nb_dense, nb_sp = np.zeros((0, D), np.float32), None
                dense, sparse = _combine(
                    self_dense, self_sp, nb_ptr, w, nb_dense, nb_sp, a, with_v1, S
                )
                if with_v1:
                    yield _out_batch(
                        part.column(1), part.column(2), dense, sparse, nb_ptr, id_lookup(nb), w
                    )
                else:
                    yield _out_batch(
                        part.column(1),
                        part.column(2),
                        dense,
                        sparse,
                        np.zeros(inst.size + 1, np.int64),
                        pa.array([], pa.string()),
                        np.zeros(0, np.float32),
                    )

    return reduce


def _make_shuffle_reducer(a: float, with_v1: bool, dense_dim: int, sparse_dim: int, fault_plan):
    """Driver side: returns the executor function of the ``shuffle`` strategy.

    The returned ``reduce(batches)`` runs on the executors (mapInArrow) over rows
    ``instance_index, _pos, _w, instance_id, split, node_id, dense, sparse_indices,
    sparse_values`` sorted by ``(instance_index, _pos)`` within the partition; the ``_pos = -1``
    row of an instance is the instance itself. Rows of the last instance of a batch are carried
    over to the next batch, so every instance is reduced exactly once with all its rows.
    """
    D, S = int(dense_dim), int(sparse_dim)

    def reduce(batches: Iterator) -> Iterator:
        """Executor side (mapInArrow)."""
        faults.maybe_fail(fault_plan)
        import numpy as np
        import pyarrow as pa

        carry = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            tbl = pa.Table.from_batches([batch])
            if carry is not None:
                tbl = pa.concat_tables([carry, tbl])
            tbl = tbl.combine_chunks()
            key = tbl.column(0).to_numpy()
            last = key[-1]
            start = (
                int(np.searchsorted(key, last, side="left"))
                if _is_sorted(key)
                else int(np.flatnonzero(key != last)[-1] + 1 if (key != last).any() else 0)
            )
            carry = tbl.slice(start)
            if start:
                yield from _reduce_groups(tbl.slice(0, start), a, with_v1, D, S)
        if carry is not None and carry.num_rows:
            yield from _reduce_groups(carry, a, with_v1, D, S)

    return reduce


def _is_sorted(key) -> bool:
    import numpy as np

    return bool(np.all(key[1:] >= key[:-1]))


def _reduce_groups(tbl, a: float, with_v1: bool, D: int, S: int):
    """Executor side: reduce complete instance groups of a sorted table (chunked)."""
    import numpy as np
    import scipy.sparse as sp

    tbl = tbl.combine_chunks()
    key = tbl.column(0).to_numpy()
    pos = tbl.column(1).to_numpy()
    n = key.size
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    if not np.all(pos[starts] == -1):
        raise RuntimeError(
            "aggregate: an instance group does not start with its own row "
            "(input not sorted by instance, pos)"
        )
    # chunk by whole groups so that gathered rows stay bounded
    bounds = list(range(0, starts.size, _CHUNK_ROWS)) + [starts.size]
    for g0, g1 in zip(bounds[:-1], bounds[1:]):
        r0 = int(starts[g0])
        r1 = int(starts[g1]) if g1 < starts.size else n
        part = tbl.slice(r0, r1 - r0).combine_chunks()
        st = starts[g0:g1] - r0
        m = r1 - r0
        is_self = np.zeros(m, dtype=bool)
        is_self[st] = True
        dense_all, _ = embstore.dense_block(part.column(6).chunk(0), D)
        ptr, idx, val = embstore.sparse_parts(part.column(7).chunk(0), part.column(8).chunk(0))
        sp_all = sp.csr_matrix((val, idx, ptr), shape=(m, S))
        b = st.size
        self_dense, self_sp = dense_all[st], sp_all[st]
        nbm = ~is_self
        counts = np.diff(np.r_[st, m]) - 1
        nb_ptr = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(counts, out=nb_ptr[1:])
        w = part.column(2).to_numpy(zero_copy_only=False).astype(np.float32)[nbm]
        if with_v1:
            nb_rows = np.flatnonzero(nbm)
            nb_dense, nb_sp = dense_all[nb_rows], sp_all[nb_rows]
        else:
            nb_dense, nb_sp = np.zeros((0, D), np.float32), None
        dense, sparse = _combine(self_dense, self_sp, nb_ptr, w, nb_dense, nb_sp, a, with_v1, S)
        st_arr = _np_take(st)
        nb_arr = _np_take(np.flatnonzero(nbm))
        if not with_v1:
            nb_ptr = np.zeros(b + 1, dtype=np.int64)
            nb_arr = _np_take(np.zeros(0, np.int64))
            w = np.zeros(0, np.float32)
        yield _out_batch(
            part.column(3).take(st_arr),
            part.column(4).take(st_arr),
            dense,
            sparse,
            nb_ptr,
            part.column(5).take(nb_arr),
            w,
        )


def _np_take(ix):
    import numpy as np
    import pyarrow as pa

    return pa.array(np.asarray(ix, dtype=np.int64), pa.int64())
