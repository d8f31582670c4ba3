"""The embed stage: Phi_pre of every node of ``nodes`` (instances of every split, new ones
included, and labels) into ``embeddings``, with ``mapInArrow``.

Length-sorted batches: the nodes are ranked by (text length, node index) across the whole
table (:data:`~.plan.LENGTH_SQL`; the driver counts the nodes per length and chunk of node
indices once and plans the first rank of each, :func:`~.plan.length_offsets`; a window ranks
the nodes within a (length, chunk), so no task sorts more than ``RANK_CHUNK`` rows), and a
batch is ``batch_size`` consecutive ranks: it pads to texts of nearly one length, and every
batch is full but the last, as in a single process that sorts every text by length. Batches
are a function of the texts and node indices alone and never straddle two tasks, so every
encoder call sees the same texts (hence the same numbers) whatever the number of partitions.
They are dealt to the tasks round robin, so every task gets every length.

Example::

    from pina_spark.orchestration.pipeline import run_pipeline
    run_pipeline(spark, cfg, ["embed"])  # {'embed': 'ran'}
"""

import dataclasses as dc
import logging
import time
from collections.abc import Callable
from typing import Any

from pina_spark import runtime, storage
from pina_spark.models import artifacts, trust
from pina_spark.runtime import faults
from pina_spark.runtime.arrow import EMBED_SCHEMA, embed_arrow_schema, iter_chunks, list_array
from pina_spark.stages.embed.plan import LENGTH_SQL, RANK_CHUNK, EmbedPlan, plan_embed
from pina_spark.stages.embed.stats import EmbedStats

log = logging.getLogger(__name__)

__all__ = ["EmbedTask", "embed_frame", "length_counts", "run"]

LENGTH = "_length"
CHUNK = "_chunk"
OFFSET = "_offset"
RANK = "_rank"
BATCH_KEY = "_batch"
DEAL = "_deal"


@dc.dataclass(frozen=True)
class EmbedTask:
    """What an embed task needs (the executor function closes over this one value).

    Attributes:
        plan: the stage's plan (vectorizer folder and version, batch size).
        device: ``inference.device`` (``auto`` | ``cpu`` | ``cuda``), resolved per task.
        torch_threads: ``inference.torch_threads`` (0: the task's cores).
        fault_plan: :func:`pina_spark.runtime.faults.fault_plan` of the stage.
    """

    plan: EmbedPlan
    device: str
    torch_threads: int
    fault_plan: tuple[str, tuple[int, ...]] | None = None

    @classmethod
    def of(cls, plan: EmbedPlan, inference_cfg, fault_plan=None) -> "EmbedTask":
        """The task of ``plan`` with the ``inference`` settings ``inference_cfg``."""
        return cls(plan, inference_cfg.device, int(inference_cfg.torch_threads), fault_plan)


def nonfinite_rows(dense, sparse):
    """Row positions (sorted) whose dense or sparse half holds a NaN or an infinity: such a row
    would spread NaN into every instance that takes it as a neighbour (the aggregation's
    norms cannot remove it), so the embed stage fails on it rather than write it.

    >>> import numpy as np, scipy.sparse as sp
    >>> d = np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0]], dtype=np.float32)
    >>> s = sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 0.0], [np.inf, 0.0]], dtype=np.float32))
    >>> nonfinite_rows(d, s).tolist()
    [1, 2]
    """
    import numpy as np

    bad = ~np.isfinite(dense).all(axis=1)
    off = ~np.isfinite(sparse.data)
    if off.any():
        bad[np.repeat(np.arange(sparse.shape[0]), np.diff(sparse.indptr))[off]] = True
    return np.flatnonzero(bad)


def _make_embed_fn(task: EmbedTask, acc, load_fn: Callable[[str, str], Any]):
    """Driver side: build the executor function of the embed stage (closes over ``task``)."""

    def embed_partition(batches):
        """Executor side: Arrow batches (node_index, text) -> embedding record batches."""
        faults.maybe_fail(task.fault_plan)
        tc = runtime.require_executor("embed_partition")
        import numpy as np
        import pyarrow as pa

        bs = task.plan.batch_size
        device = runtime.resolve_device(task.device, task.torch_threads)
        threads = runtime.task_threads(task.torch_threads, tc)
        phi = None
        rows = 0
        schema = embed_arrow_schema()

        def block_of(rb):
            return rb.column(BATCH_KEY).to_numpy()

        for _, tbl in iter_chunks(batches, block_of, bs):
            if phi is None:
                phi = runtime.get_model(
                    task.plan.vectorizer,
                    load_fn,
                    task.plan.version,
                    device,
                    acc,
                    "vectorizer",
                    digest=task.plan.digest,
                )
                if hasattr(phi, "tfidf_threads"):
                    phi.tfidf_threads = threads
            texts = tbl.column(storage.TEXT).to_pylist()
            dense, sparse = phi.transform(texts, batch_size=bs)
            dense = np.ascontiguousarray(dense, dtype=np.float32)
            sparse = sparse.tocsr().astype(np.float32)
            sparse.sort_indices()
            if dense.shape[0] != tbl.num_rows or sparse.shape[0] != tbl.num_rows:
                raise RuntimeError(
                    f"vectorizer returned {dense.shape[0]}/{sparse.shape[0]} "
                    f"rows for {tbl.num_rows} texts"
                )
            bad = nonfinite_rows(dense, sparse)
            if bad.size:
                ids = tbl.column(storage.NODE_INDEX).to_numpy()[bad[:5]].tolist()
                raise ValueError(
                    f"the vectorizer returned NaN or infinite values for {bad.size} of "
                    f"{tbl.num_rows} texts of this batch (node_index {ids}"
                    f"{', ...' if bad.size > 5 else ''}); nothing of the stage is published. "
                    "Check the vectorizer's encoder (half precision on a GPU can overflow: "
                    "compare with inference.device: cpu)"
                )
            n, d = dense.shape
            rows += n
            yield pa.RecordBatch.from_arrays(
                [
                    tbl.column(storage.NODE_INDEX).combine_chunks(),
                    list_array(np.full(n, d, dtype=np.int64), dense.ravel(), pa.float32()),
                    list_array(np.diff(sparse.indptr), sparse.indices.astype(np.int32), pa.int32()),
                    list_array(np.diff(sparse.indptr), sparse.data, pa.float32()),
                ],
                schema=schema,
            )
        if acc is not None and rows:
            acc.add({"rows|embed": rows})

    return embed_partition


def _embed_frame(nodes_df, task: EmbedTask, acc, load_fn):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bs, parts = task.plan.batch_size, task.plan.partitions
    if task.plan.rows and not task.plan.length_offsets:
        raise ValueError(
            "embed: the plan has no text-length counts (plan_embed(..., length_counts=...), "
            "from length_counts(nodes))"
        )
    spark = nodes_df.sparkSession
    # global rank = the first rank of the text's (length, chunk) (planned) + rank by node index
    # within it; batch = rank div batch_size, dealt round robin (batch mod parts), so every task
    # gets a mix of long and short texts
    offsets = spark.createDataFrame(
        list(task.plan.length_offsets), f"{LENGTH} int, {CHUNK} long, {OFFSET} long"
    ).hint("broadcast")
    in_group = Window.partitionBy(LENGTH, CHUNK).orderBy(storage.NODE_INDEX)
    first = F.coalesce(
        F.col(OFFSET),
        F.raise_error(F.lit("embed: a text length the plan did not count (nodes changed?)")),
    )
    df = (
        _with_length_keys(
            nodes_df.select(
                F.col(storage.NODE_INDEX).cast("long").alias(storage.NODE_INDEX),
                F.col(storage.TEXT),
            )
        )
        .join(offsets, [LENGTH, CHUNK], "left")
        .withColumn(RANK, first + F.row_number().over(in_group) - 1)
        .withColumn(BATCH_KEY, F.expr(f"{RANK} div {bs}"))
        .withColumn(DEAL, F.expr(f"pmod({BATCH_KEY}, {parts})"))
        .repartitionByRange(parts, DEAL, BATCH_KEY)
        .sortWithinPartitions(BATCH_KEY, storage.NODE_INDEX)
        .select(storage.NODE_INDEX, storage.TEXT, BATCH_KEY)
    )
    return df.mapInArrow(_make_embed_fn(task, acc, load_fn), EMBED_SCHEMA)


def _with_length_keys(df):
    """``df`` with the (text length, chunk of node indices) of every node (:data:`LENGTH`,
    :data:`CHUNK`): the keys :func:`length_counts` counts and the stage ranks within, so both
    read them from here."""
    from pyspark.sql import functions as F

    return df.withColumn(LENGTH, F.expr(LENGTH_SQL)).withColumn(
        CHUNK, F.expr(f"CAST({storage.NODE_INDEX} AS BIGINT) div {RANK_CHUNK}")
    )


def length_counts(nodes_df) -> dict[tuple[int, int], int]:
    """Driver side: nodes per (text length, chunk of node indices) (:data:`~.plan.LENGTH_SQL`,
    ``node_index div RANK_CHUNK``), one aggregate."""
    rows = (
        _with_length_keys(nodes_df.select(storage.NODE_INDEX, storage.TEXT))
        .groupBy(LENGTH, CHUNK)
        .count()
        .collect()
    )
    return {(int(r[0]), int(r[1])): int(r[2]) for r in rows}


def embed_frame(
    nodes_df,
    vectorizer_uri: str,
    inference_cfg,
    n_rows: int,
    fault_plan=None,
    version: str = "",
    accumulator=None,
    load_fn: Callable[[str, str], Any] | None = None,
    slots: int = 1,
    digest: str = "",
):
    """Driver side: the lazy ``embeddings`` DataFrame of ``nodes_df`` (node_index, text).

    Parameters
    ----------
    nodes_df : DataFrame
        At least ``node_index`` and ``text``.
    vectorizer_uri : str
        The saved ``PhiPre`` folder.
    inference_cfg : config.InferenceConfig
        ``rows_per_task``, ``batch_size``, ``device``, ``torch_threads``.
    n_rows : int
        Row count of ``nodes_df`` (sizes the partitions).
    fault_plan : tuple, optional
        ``faults.fault_plan(cfg, "embed")``.
    version : str
        Fingerprint of the vectorizer folder (cache key).
    accumulator : Accumulator, optional
        :class:`runtime.LoadStatsParam` accumulator for loads and rows.
    load_fn : callable, optional
        ``load_fn(local_dir, device) -> object with .transform(texts, batch_size)``;
        default :func:`pina_spark.models.artifacts.load_vectorizer` (``PhiPre.load``).
    slots : int
        Task slots of the application (:func:`runtime.task_slots`); the task count is a
        multiple of it.
    digest : str
        The vectorizer folder's checksums digest every task's copy must have
        (:func:`pina_spark.models.trust.anchor`; ``""``: its own checksums only).

    Example::

        df = embed_frame(nodes, "/r/models/vectorizer", cfg.inference,
                         nodes.count())
        df.columns  # ['node_index', 'dense', 'sparse_indices', 'sparse_values']
    """
    counts = length_counts(nodes_df)
    task = EmbedTask.of(
        plan_embed(vectorizer_uri, inference_cfg, n_rows, version, slots, counts, digest),
        inference_cfg,
        fault_plan,
    )
    return _embed_frame(nodes_df, task, accumulator, load_fn or artifacts.load_vectorizer)


def run(ctx) -> EmbedStats:
    """Driver side: write ``embeddings`` for every node of ``nodes``.

    Returns
    -------
    EmbedStats
        ``rows``, ``encoded_rows``, ``partitions``, ``rows_per_s``, ``seconds``, ``model_loads``,
        ``worker_processes``, ``max_loads_per_worker_model``, ``loads_per_worker``.

    Example::

        run(ctx)["rows"]  # 1200
    """
    spark, cfg = ctx.spark, ctx.cfg
    vec_uri = artifacts.require_vectorizer(spark, ctx.models_root)
    # refuses a vectorizer nothing trusted vouches for; the executors check their copies
    # against the digest it vouched for
    digest = trust.anchor(cfg, vec_uri, storage.VECTORIZER)
    nodes = storage.read_table(spark, ctx.paths, storage.NODES).select(
        storage.NODE_INDEX, storage.TEXT
    )
    counts = length_counts(nodes)
    n = sum(counts.values())
    acc = spark.sparkContext.accumulator({}, runtime.LoadStatsParam())
    slots = runtime.task_slots(spark)
    plan = plan_embed(
        vec_uri, cfg.inference, n, artifacts.version(spark, vec_uri), slots, counts, digest
    )
    log.info("embed: %s, %d text lengths", plan, len(plan.length_offsets))
    task = EmbedTask.of(plan, cfg.inference, faults.fault_plan(cfg, "embed"))
    df = _embed_frame(nodes, task, acc, artifacts.load_vectorizer)
    t0 = time.time()
    storage.write_table(df, ctx.paths, storage.EMBEDDINGS)
    dt = time.time() - t0
    counters = dict(acc.value)
    stats = EmbedStats(
        rows=n,
        rows_written=int(counters.get("rows|embed", 0)),
        # rows put through the vectorizer (the only stage that encodes; with --incremental, the
        # new and changed nodes only)
        encoded_rows=int(counters.get("rows|embed", 0)),
        partitions=plan.partitions,
        seconds=round(dt, 3),
        rows_per_s=round(n / dt, 2) if dt else None,
        vectorizer=vec_uri,
        **runtime.summarize_loads(counters),
    )
    log.info(
        "embed: %d rows in %.1fs (%.1f rows/s), %d model loads in %d workers",
        n,
        dt,
        n / max(dt, 1e-9),
        stats.model_loads,
        stats.worker_processes,
    )
    return stats
