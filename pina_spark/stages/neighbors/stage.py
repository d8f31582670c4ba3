"""The neighbours stage: for every instance node, the top-K output nodes of g with normalised
weights, into ``neighbors`` partitioned by ``variant``.

X for g is rebuilt from the ``embeddings`` table (``hstack([dense, sparse])`` =
``PhiPre.features``): the encoder is not run twice and the stage needs no text. PECOS scores
each row independently; candidates are ordered by (score desc, node_index asc), so the rows do
not depend on the partitioning. A row's ``route`` is the g model it needs (``f``: fold model f,
for a train row of fold f; :data:`FULL_ROUTE`: with ``out_of_fold``, every fold model of the
variant, for test and new rows -- cross-fitting, the models' scores averaged
(:func:`cross_fit_scores`) -- and with ``in_sample`` the full g) and
rows are grouped by route, so a task needs few models at a time (the executor cache is grown
to hold every model of a route). The driver decides the path once
(:func:`pina_spark.stages.neighbors.plan.plan_neighbors`, ``inference.embeddings_via``):

* ``files``: the job is ``spark.range(P)``; each task takes its slice of the instance nodes
  and their X from the memory-mapped store of its machine and writes its Parquet files itself
  (:mod:`pina_spark.stages.neighbors.files`);
* ``shuffle``: the embedding rows are joined to the instance rows, range-partitioned by
  (route, instance_index) (``out_of_fold``) or hash-partitioned by instance_index
  (``in_sample``), and written by Spark (``hdfs://``, ``s3a://``... where pyarrow does not
  reach).

Either way each published file holds its rows in instance_index order.

g's ``output_nodes.npy`` are node indices of the run that trained it; when the models are another
run's, they are mapped through ``(kind, node_id)`` into this run's ``nodes``
(:func:`~pina_spark.stages.neighbors.nodes.node_maps`). This run's ``nodes`` must therefore contain
the models run's train instances and labels; new instances may have any index and split (``new``
rows take the route of ``test`` rows).

Example::

    from pina_spark.orchestration.pipeline import run_pipeline
    run_pipeline(spark, cfg, ["embed", "neighbors"])  # {'embed': 'ran', 'neighbors': 'ran'}
"""

import dataclasses as dc
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pina_spark import runtime, storage
from pina_spark.config import variants as V
from pina_spark.models import artifacts
from pina_spark.runtime import embstore, faults
from pina_spark.runtime.arrow import (
    NEIGHBORS_SCHEMA,
    features_from_arrow,
    iter_chunks,
    list_array,
    neighbors_arrow_schema,
    nonzero_rows,
)
from pina_spark.runtime.embstore import StoreSpec
from pina_spark.stages.neighbors.files import (
    SINK_SCHEMA,
    StoreOpener,
    cached_task_order,
    route_chunks,
    task_rows,
    write_task_files,
)
from pina_spark.stages.neighbors.plan import (
    CROSS,
    FULL_ROUTE,
    GModel,
    NeighborPlan,
    Sink,
    plan_neighbors,
)
from pina_spark.stages.neighbors.stats import NeighborsStats, NeighborsVariantStats
from pina_spark.stages.neighbors.topk import normalize_scores, topk_neighbors
from pina_spark.storage.folds import fold_expr

log = logging.getLogger(__name__)

__all__ = [
    "NeighborTask",
    "neighbors_frame",
    "run",
    "cross_fit_scores",
    "MISSING_KEY",
    "count_without_embeddings",
]

ROUTE = "_route"
TWIN = "_twin"
#: accumulator key: instance rows without an embedding row (``embeddings_via: files``; the
#: ``shuffle`` path counts them on the driver, :func:`count_without_embeddings`)
MISSING_KEY = "missing|embeddings"
#: the neighbours stage broadcasts (instance_index, node_id, split, twin) up to this many rows
BROADCAST_INSTANCES_MAX_ROWS = 2_000_000


@dc.dataclass(frozen=True)
class NeighborTask:
    """What a neighbours task needs (the executor function closes over this one value, plus
    the broadcast column maps and the statistics accumulator).

    Attributes:
        variants: g variants, in output order.
        models: every g model a task may need (:class:`~pina_spark.stages.neighbors.plan.GModel`).
        n_folds: fold models per variant; 0: every row uses the full g.
        fold_seed: the split of the fold models (:func:`pina_spark.storage.folds.fold_of`).
        leave_self_out: a row never gets its own node...
        use_twin: ...nor its label twin (``task.labels_are_items``).
        k: neighbours kept per row.
        weighting: ``l1`` | ``softmax`` | ``raw`` (:func:`normalize_scores`).
        temperature: softmax temperature.
        dense_dim: Phi_dnn width (``shuffle``: X from the embedding columns).
        torch_threads: ``inference.torch_threads`` (0: the task's cores).
        batch_size: rows per PECOS call.
        g_mmap: load g in PECOS' memory-mapped form.
        fault_plan: :func:`pina_spark.runtime.faults.fault_plan` of the stage.
        store: ``files`` only, the spec of :func:`pina_spark.runtime.embstore.open_store`.
        n_tasks: ``files`` only, the number of task slices.
        selection: ``files`` only, an incremental run's selection table.
        sink: ``files`` only, where the tasks write their rows (``None``: yield them).
    """

    variants: tuple[str, ...]
    models: tuple[GModel, ...]
    n_folds: int
    leave_self_out: bool
    use_twin: bool
    k: int
    weighting: str
    temperature: float
    dense_dim: int
    torch_threads: int
    batch_size: int
    g_mmap: bool
    fault_plan: tuple[str, tuple[int, ...]] | None = None
    store: StoreSpec | None = None
    n_tasks: int = 0
    selection: str | None = None
    sink: Sink | None = None
    fold_seed: int = 0

    @classmethod
    def of(cls, plan: NeighborPlan, cfg, fault_plan=None, sink: Sink | None = None):
        """The task of ``plan`` with the ``neighbors`` / ``inference`` settings of ``cfg``."""
        nb, inf = cfg.neighbors, cfg.inference
        files = plan.embeddings_via == "files"
        return cls(
            variants=plan.variants,
            models=plan.models,
            n_folds=plan.folds,
            leave_self_out=bool(nb.leave_self_out),
            use_twin=plan.use_twin,
            k=int(nb.k),
            weighting=nb.weighting,
            temperature=float(nb.temperature),
            dense_dim=plan.dense_dim,
            torch_threads=int(inf.torch_threads),
            batch_size=int(inf.batch_size),
            g_mmap=plan.g_mmap,
            fault_plan=fault_plan,
            store=plan.store if files else None,
            n_tasks=plan.partitions if files else 0,
            selection=plan.selection if files else None,
            sink=sink if files else None,
            fold_seed=plan.fold_seed,
        )


@dc.dataclass(frozen=True)
class _Group:
    """Executor side: the g models one variant predicts a route's rows with (one, or every fold
    model for the cross-fitted route) and the route's name in the statistics."""

    variant: str
    name: str
    specs: tuple[GModel, ...]
    models: tuple[Any, ...]


class _Models:
    """Executor side: the g models of a route, per variant, through the worker cache (grown to
    hold every model of the cross-fitted route at once)."""

    def __init__(self, task: NeighborTask, acc):
        self._by_route = {(m.variant, m.route): m for m in task.models}
        self._variants = task.variants
        self._folds = task.n_folds
        self._loader: Callable[[str, str], Any] = (
            artifacts.load_g_mmap if task.g_mmap else artifacts.load_g
        )
        self._acc = acc
        runtime.MODEL_CACHE.capacity = max(
            runtime.MODEL_CACHE.capacity, len(task.variants) * (max(task.n_folds, 1) + 1)
        )

    def of(self, route: int) -> list[_Group]:
        out = []
        for v in self._variants:
            if route == FULL_ROUTE and self._folds:
                specs = tuple(self._by_route[(v, f)] for f in range(self._folds))
                name = f"{v}/{CROSS}"
            else:
                specs = (self._by_route[(v, route)],)
                name = specs[0].name
            models = tuple(
                runtime.get_model(
                    m.uri, self._loader, m.version, "cpu", self._acc, m.name, digest=m.digest
                )
                for m in specs
            )
            out.append(_Group(v, name, specs, models))
        return out


def cross_fit_scores(models, X, topk: int, threads: int = -1):
    """Executor side: one score matrix of F models of g (same output space) for the rows of
    ``X``: each model's top ``topk`` candidates, scores summed and divided by F (a candidate a
    model did not return counts 0). With one model, its top ``topk``.

    Re-scoring the union of the models' candidates with every model instead is what PECOS'
    inference form cannot do: ``selected_outputs_csr`` raises NotImplementedError for a
    predict-only (or memory-mapped) model, and loading the training form on every executor
    doubles g's memory there. Scoring each row by one fold model (what a train row gets) costs
    1.3-1.9 P@1 points, and a mean that skips the model that never saw an instance output's
    row changes no prediction measurably (``benchmarks/cross_fit_alternatives.py``;
    RESULTS.md).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> class G:
    ...     def __init__(self, s): self.s = sp.csr_matrix(np.array(s, np.float32))
    ...     def predict(self, X, only_topk=None, threads=-1): return self.s
    >>> a, b = G([[0.8, 0.0, 0.2]]), G([[0.0, 0.6, 0.4]])
    >>> np.round(cross_fit_scores([a, b], None, 2).toarray(), 6).tolist()
    [[0.4, 0.3, 0.3]]
    """
    preds = [g.predict(X, only_topk=topk, threads=threads) for g in models]
    if len(preds) == 1:
        return preds[0]
    total = preds[0].astype("float32")
    for p in preds[1:]:
        total = total + p
    total = (total / float(len(preds))).tocsr()
    total.sort_indices()
    return total


def _predict_chunk(task: NeighborTask, groups, col_maps, X, idx, own, twin, threads):
    """Executor side: ``(group, record batch)`` per variant for the rows of ``X`` (node
    indices ``idx``; ``own`` / ``twin``: the nodes each row may not get, -1 = none)."""
    import numpy as np
    import pyarrow as pa

    schema = neighbors_arrow_schema()
    has_x = nonzero_rows(X)
    n, k = len(idx), task.k
    for grp in groups:
        spec = grp.specs[0]  # a variant's fold models share one output space
        Y = cross_fit_scores(grp.models, X, spec.topk, threads)
        cmap = col_maps[spec.name]
        if Y.shape != (n, len(cmap)):
            raise runtime.ModelLoadError(
                f"g model {spec.uri} gave predictions of shape {Y.shape} for {n} rows, but "
                f"its output_nodes.npy maps {len(cmap)} outputs: the model and output_nodes.npy "
                f"come from different trainings; rerun the pretrain stage"
            )
        nodes, scores, counts = topk_neighbors(Y, cmap, own, twin, k)
        counts = np.where(has_x, counts, 0)  # an all-zero Phi_pre row has no neighbours
        weights = normalize_scores(scores, counts, task.weighting, task.temperature)
        keep = np.arange(k)[None, :] < counts[:, None]
        yield (
            grp,
            pa.RecordBatch.from_arrays(
                [
                    pa.array(idx, pa.int64()),
                    list_array(counts, nodes[keep], pa.int64()),
                    list_array(counts, weights[keep].astype(np.float32), pa.float32()),
                    pa.array([grp.variant] * n, pa.string()),
                ],
                schema=schema,
            ),
        )


def _nr_features(groups: Sequence[_Group]) -> int:
    """The width of g's input X (every model of a run has the vectorizer's)."""
    return int(groups[0].models[0].model.nr_features)


def _make_shuffle_fn(task: NeighborTask, col_maps_bc, acc):
    """Driver side: the executor function of ``embeddings_via: shuffle``: the instance rows
    arrive with their embedding columns, sorted by (route, instance_index)."""

    def neighbors_partition(batches):
        """Executor side: Arrow batches of instance rows + embeddings -> neighbour batches."""
        faults.maybe_fail(task.fault_plan)
        tc = runtime.require_executor("neighbors_partition")
        import numpy as np

        from pina_spark.storage.folds import fold_of

        threads = runtime.task_threads(task.torch_threads, tc)
        col_maps = col_maps_bc.value
        models_of = _Models(task, acc).of
        counters: dict[str, int] = {}

        def route_of(rb):
            return rb.column(ROUTE).to_numpy(zero_copy_only=False)

        for route, tbl in iter_chunks(batches, route_of, task.batch_size):
            groups = models_of(route)
            n = tbl.num_rows
            idx = tbl.column(storage.INSTANCE_INDEX).to_numpy()
            if route != FULL_ROUTE:  # re-check the SQL routing against folds.fold_of
                ids = tbl.column(storage.NODE_ID).to_pylist()
                bad = [i for i in ids if fold_of(i, task.n_folds, task.fold_seed) != route]
                if bad:
                    raise RuntimeError(
                        f"fold routing mismatch for {bad[:3]}: SQL route {route} "
                        f"!= folds.fold_of"
                    )
            if task.leave_self_out:
                own = idx.astype(np.int64)
                twin = tbl.column(TWIN).fill_null(-1).to_numpy().astype(np.int64)
            else:
                own = np.full(n, -1, dtype=np.int64)
                twin = own
            X = features_from_arrow(tbl, task.dense_dim, _nr_features(groups))
            for grp, rb in _predict_chunk(task, groups, col_maps, X, idx, own, twin, threads):
                yield rb
                key = f"rows|{grp.name}"
                counters[key] = counters.get(key, 0) + n
        if acc is not None and counters:
            acc.add(counters)

    return neighbors_partition


def _make_files_fn(task: NeighborTask, col_maps_bc, acc):
    """Driver side: the executor function of ``embeddings_via: files``. Its input is one row
    per task (``spark.range(task.n_tasks)``): each task takes its slice of the instance nodes
    from the memory-mapped store (:func:`~pina_spark.stages.neighbors.files.task_rows`), gathers X
    there, and either yields neighbour batches (``task.sink`` None) or writes them as Parquet
    into ``task.sink.uri`` with pyarrow and yields one ``variant, rows, path`` row per file
    (:func:`~pina_spark.stages.neighbors.files.write_task_files`)."""

    def neighbors_task(batches):
        """Executor side: task ids -> neighbours of their slices (batches or written files)."""
        faults.maybe_fail(task.fault_plan)
        tc = runtime.require_executor("neighbors_task")
        import numpy as np
        import pyarrow as pa

        assert task.store is not None
        threads = runtime.task_threads(task.torch_threads, tc)
        col_maps = col_maps_bc.value
        # the memory-mapped embeddings open (or are built, by the first worker of the machine)
        # in a thread while the full g models load: both mostly wait on I/O or C++
        opening = StoreOpener(task.store)
        models_of = _Models(task, acc).of
        if not task.n_folds:
            models_of(FULL_ROUTE)
        E = opening.result()
        order = cached_task_order(E, task.store.key, task.n_folds, task.selection, task.fold_seed)
        counters: dict[str, int] = {}
        for rb in batches:
            for t in rb.column(0).to_pylist():
                nodes, routes = task_rows(order, task.n_tasks, int(t))
                rows = embstore.store_rows(E, nodes)
                have = rows >= 0
                if not have.all():  # instances without an embedding row: counted, skipped
                    counters[MISSING_KEY] = counters.get(MISSING_KEY, 0) + int((~have).sum())
                    nodes, routes, rows = nodes[have], routes[have], rows[have]
                out: dict[str, list[Any]] = {v: [] for v in task.variants}
                for s, e in route_chunks(routes, task.batch_size):
                    groups = models_of(int(routes[s]))
                    idx = nodes[s:e]
                    if task.leave_self_out:
                        own = idx
                        twin = (
                            np.asarray(E["twin"][idx], dtype=np.int64)
                            if task.use_twin
                            else np.full(len(idx), -1, dtype=np.int64)
                        )
                    else:
                        own = twin = np.full(len(idx), -1, dtype=np.int64)
                    X = embstore.features(E, rows[s:e], _nr_features(groups))
                    for grp, b in _predict_chunk(
                        task, groups, col_maps, X, idx, own, twin, threads
                    ):
                        out[grp.variant].append(b)
                        key = f"rows|{grp.name}"
                        counters[key] = counters.get(key, 0) + (e - s)
                # rows of a task in instance_index order, as the shuffle path writes them
                tables = {}
                for v in task.variants:
                    tbl = (
                        pa.Table.from_batches(out[v])
                        if out[v]
                        else neighbors_arrow_schema().empty_table()
                    )
                    tables[v] = tbl.take(
                        pa.array(
                            np.argsort(tbl.column(storage.INSTANCE_INDEX).to_numpy(), kind="stable")
                        )
                    )
                if task.sink is None:
                    for v in task.variants:
                        for b in tables[v].to_batches():
                            yield b
                else:
                    yield write_task_files(tables, task.sink, int(t), tc.attemptNumber())
        if acc is not None and counters:
            acc.add(counters)

    return neighbors_task


def _shuffle_frame(spark, ctx, nodes, plan: NeighborPlan, task: NeighborTask, bc, acc):
    """Driver side: the ``shuffle`` path. Driven by the embeddings (an incremental run hands
    this stage a subset of them): every instance with an embedding gets a row, with empty
    arrays when it has no neighbour. The narrow instance table goes to the embeddings
    (broadcast while it is small), so the wide embedding rows are shuffled once, by the
    repartition below."""
    from pyspark.sql import functions as F

    inst = (
        nodes()
        .filter(F.col(storage.KIND) == storage.KIND_INSTANCE)
        .select(
            F.col(storage.NODE_INDEX).alias(storage.INSTANCE_INDEX), storage.NODE_ID, storage.SPLIT
        )
    )
    if plan.use_twin:
        # an item's label node ("twin", same node_id) is excluded like self
        twins = (
            nodes()
            .filter(F.col(storage.KIND) == storage.KIND_LABEL)
            .select(storage.NODE_ID, F.col(storage.NODE_INDEX).alias(TWIN))
        )
        inst = inst.join(twins, storage.NODE_ID, "left")
    else:
        inst = inst.withColumn(TWIN, F.lit(None).cast("long"))
    vec_cols = [storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES]
    emb = storage.read_table(spark, ctx.paths, storage.EMBEDDINGS, contract=True).select(
        F.col(storage.NODE_INDEX).alias(storage.INSTANCE_INDEX), *vec_cols
    )
    if plan.instance_nodes <= BROADCAST_INSTANCES_MAX_ROWS:
        inst = F.broadcast(inst)
    df = emb.join(inst, storage.INSTANCE_INDEX, "inner")
    if plan.folds:
        # only co-locates the rows of one fold model; executors re-check it with folds.fold_of
        route = F.when(
            F.col(storage.SPLIT) == storage.SPLIT_TRAIN,
            fold_expr(F.col(storage.NODE_ID), plan.folds, plan.fold_seed),
        ).otherwise(F.lit(FULL_ROUTE))
    else:
        route = F.lit(FULL_ROUTE)
    df = df.withColumn(ROUTE, route.cast("int"))
    if plan.folds:  # co-locate rows of one model: a task needs few models (cache: 4)
        df = df.repartitionByRange(plan.partitions, ROUTE, storage.INSTANCE_INDEX)
    else:  # one model per variant: hash partitioning needs no sampling pass
        df = df.repartition(plan.partitions, storage.INSTANCE_INDEX)
    df = df.sortWithinPartitions(ROUTE, storage.INSTANCE_INDEX).select(
        storage.INSTANCE_INDEX, storage.NODE_ID, TWIN, ROUTE, *vec_cols
    )
    return df.mapInArrow(_make_shuffle_fn(task, bc, acc), NEIGHBORS_SCHEMA).sortWithinPartitions(
        storage.VARIANT, storage.INSTANCE_INDEX
    )


def count_without_embeddings(spark, ctx) -> int:
    """Driver side: the instance nodes the stage should predict (every one, or an incremental
    run's selection, ``ctx.incremental_rows``) that have no ``embeddings`` row. The ``shuffle``
    path joins the embeddings to the instances, so those rows never reach a task to be counted
    there as the ``files`` path counts them; this reads ``node_index`` of both tables only.

    Example::

        count_without_embeddings(spark, ctx)  # 0
    """
    from pyspark.sql import functions as F

    inst = (
        storage.read_table(spark, ctx.paths, storage.NODES, contract=True)
        .filter(F.col(storage.KIND) == storage.KIND_INSTANCE)
        .select(storage.NODE_INDEX)
    )
    if ctx.incremental_rows:
        sel = spark.read.parquet(ctx.incremental_rows).select(storage.NODE_INDEX)
        inst = inst.join(sel, storage.NODE_INDEX, "left_semi")
    emb = storage.read_table(spark, ctx.paths, storage.EMBEDDINGS, contract=True).select(
        storage.NODE_INDEX
    )
    return int(inst.join(emb, storage.NODE_INDEX, "left_anti").count())


def neighbors_frame(
    spark,
    ctx,
    variants: Sequence[str] | None = None,
    fault_plan=None,
    accumulator=None,
    sink: Sink | None = None,
):
    """Driver side: the lazy ``neighbors`` DataFrame (with a ``variant`` column) and the plain
    facts of its plan (:meth:`~pina_spark.stages.neighbors.plan.NeighborPlan.info`: variants, folds,
    rows, model names, candidates per row, ``writer``...).

    ``sink`` (used by :func:`run`): with ``embeddings_via: files`` the tasks
    write the neighbour rows themselves as Parquet under ``sink.uri``
    (``variant=<v>/part-<task>.parquet``) and the frame holds one ``variant, rows, path`` row
    per file (``info["writer"] == "arrow"``); with ``shuffle`` the sink is ignored
    (``info["writer"] == "spark"``).

    Example::

        df, info = neighbors_frame(spark, ctx)
        info["variants"]  # ['pina', 'pina_naive']
    """
    read: list[Any] = []

    def nodes():  # read with Spark only where needed (shuffle, remap, no pyarrow)
        if not read:
            read.append(storage.read_table(spark, ctx.paths, storage.NODES, contract=True))
        return read[0]

    plan, col_maps = plan_neighbors(
        spark, ctx, nodes, list(variants) if variants is not None else None, sink
    )
    log.info("neighbors: plan %s", json.dumps(plan.info(), sort_keys=True))
    bc = spark.sparkContext.broadcast(col_maps)
    task = NeighborTask.of(plan, ctx.cfg, fault_plan, sink)
    if plan.embeddings_via == "files":
        fn = _make_files_fn(task, bc, accumulator)
        out = spark.range(0, plan.partitions, 1, plan.partitions).mapInArrow(
            fn, SINK_SCHEMA if sink is not None else NEIGHBORS_SCHEMA
        )
    else:
        out = _shuffle_frame(spark, ctx, nodes, plan, task, bc, accumulator)
    return out, plan.info()


def run(ctx) -> NeighborsStats:
    """Driver side: write ``neighbors`` (partitioned by ``variant``) for every instance node, for
    the g variants the run trains (``train.variants``:
    :func:`pina_spark.config.variants.g_variants`).

    Returns
    -------
    NeighborsStats
        ``rows``, ``seconds``, ``rows_per_s`` (all variants are predicted in one pass: per
        variant, rows / pass time), ``variants: {v: {rows, rows_per_s, rows_per_model}}``,
        ``model_loads``, ``worker_processes``, ``max_loads_per_worker_model``.

    Example::

        run(ctx)["variants"]["pina"]["rows"]  # 1000
    """
    spark, cfg = ctx.spark, ctx.cfg
    acc = spark.sparkContext.accumulator({}, runtime.LoadStatsParam())
    plan = faults.fault_plan(cfg, "neighbors")
    staging = ctx.paths.staging(storage.NEIGHBORS)
    sink = None
    if storage.pyarrow_reaches(staging):
        sink = Sink(staging, spark.conf.get("spark.sql.parquet.compression.codec", "snappy"))
    # the g variants the run trains: a run following a pina selection predicts no pina_naive.
    # None (every g of the models): a caller that runs the stage for a run training no g
    # variant (tune's baseline-only grid; the pipeline itself skips the stage then)
    variants = V.g_variants(cfg.train.variants) or None
    df, info = neighbors_frame(spark, ctx, variants, fault_plan=plan, accumulator=acc, sink=sink)
    t0 = time.time()
    if info["writer"] == "arrow":  # the tasks wrote the files: mark complete and publish
        storage.publish_written(spark, df, staging, ctx.paths.table(storage.NEIGHBORS), "neighbors")
    else:
        storage.write_table(df, ctx.paths, storage.NEIGHBORS, partition_by=[storage.VARIANT])
    dt = time.time() - t0
    counters = dict(acc.value)
    per_variant: dict[str, NeighborsVariantStats] = {}
    for v in info["variants"]:
        per_model = {
            k.split("|", 1)[1].split("/", 1)[1]: int(c)
            for k, c in counters.items()
            if k.startswith(f"rows|{v}/")
        }
        rows = int(sum(per_model.values()))
        per_variant[v] = NeighborsVariantStats(
            rows=rows,
            rows_per_s=round(rows / dt, 2) if dt else None,
            rows_per_model=per_model,
        )
    rows = per_variant[info["variants"][0]].rows  # instance rows (each variant has them all)
    if info["embeddings_via"] == "files":
        missing = int(counters.get(MISSING_KEY, 0))
    else:  # the join left them out before any task saw them
        missing = count_without_embeddings(spark, ctx)
    stats = NeighborsStats(
        variants=per_variant,
        folds=info["folds"],
        instance_nodes=info["instance_nodes"],
        partitions=info["partitions"],
        embeddings_via=info["embeddings_via"],
        embeddings_via_reason=info["embeddings_via_reason"],
        train_mode=info["train_mode"],
        models=info["models"],
        candidates_per_row=info["candidates_per_row"],
        remapped_nodes=info["remapped_nodes"],
        writer=info["writer"],
        g_mmap=info["g_mmap"],
        rows=rows,
        seconds=round(dt, 3),
        rows_per_s=round(rows / dt, 2) if dt else None,
        k=cfg.neighbors.k,
        weighting=cfg.neighbors.weighting,
        node_kinds=cfg.neighbors.node_kinds,
        **runtime.summarize_loads(counters),
        instances_without_embeddings=missing,
    )
    if missing:
        log.warning(
            "neighbors: %d instance nodes have no row in %s: no neighbours for "
            "them (run the embed stage for them)",
            missing,
            ctx.paths.table(storage.EMBEDDINGS),
        )
    log.info(
        "neighbors: %d instance rows x %d variants in %.1fs, %d model loads (embeddings " "via %s)",
        rows,
        len(info["variants"]),
        dt,
        stats.model_loads,
        info["embeddings_via"],
    )
    return stats
