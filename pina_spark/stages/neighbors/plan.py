"""Driver side: decide once what the neighbours stage does, from config plus facts.

:func:`plan_neighbors` reads the models folder, the table sizes and whether pyarrow reaches the
tables, and returns a frozen :class:`NeighborPlan`. The stage logs the plan and writes it into
its statistics (:meth:`NeighborPlan.info`); the executor paths only follow it.

Examples
--------
>>> m = GModel("pina", 1, "/r/models/g/pina/fold=1", "v1", 12)
>>> m.name, GModel("pina", FULL_ROUTE, "/r/models/g/pina/full", "v1", 12).name
('pina/fold=1', 'pina/full')
"""

import dataclasses as dc
import logging
from collections.abc import Callable
from typing import Any

from pina_spark import runtime, storage
from pina_spark.config import variants
from pina_spark.models import artifacts, trust
from pina_spark.runtime import embstore
from pina_spark.runtime.embstore import choose_embeddings_via
from pina_spark.runtime.sizing import n_partitions
from pina_spark.stages.neighbors.nodes import node_maps
from pina_spark.stages.neighbors.topk import col_map

log = logging.getLogger(__name__)


#: g variants, in output order
VARIANTS = variants.GRAPH  # the variants with a g (pina, pina_naive)


#: the route of rows no single fold model serves: test and new rows, predicted by every fold
#: model of the variant together (``out_of_fold``: cross-fitting), or every row by the full g
#: (``in_sample``); other routes are fold numbers
FULL_ROUTE = -1
#: the name of the cross-fitted route in the statistics (``pina/cross``)
CROSS = "cross"


@dc.dataclass(frozen=True)
class Sink:
    """Where the tasks of ``embeddings_via: files`` write the neighbour rows themselves.

    Attributes:
        uri: the staging folder (``variant=<v>/part-<task>.parquet`` under it).
        compression: Parquet codec (Spark's ``spark.sql.parquet.compression.codec``).
    """

    uri: str
    compression: str | None = None


@dc.dataclass(frozen=True)
class GModel:
    """One g model of the neighbours stage.

    Attributes:
        variant: ``pina`` | ``pina_naive``.
        route: :data:`FULL_ROUTE` (the full model, ``in_sample``) or the fold of a fold model.
        uri: its folder (:func:`pina_spark.models.artifacts.g_dir`).
        version: fingerprint of the folder's files (executor cache key).
        topk: candidates PECOS returns per row (``k`` + the excluded ones, capped).
        digest: its checksums digest, as the driver vouched for it
            (:func:`pina_spark.models.trust.anchor_parts`): the executor's copy must have it
            (``""``: a folder without checksums that the policy accepts).
    """

    variant: str
    route: int
    uri: str
    version: str
    topk: int
    digest: str = ""

    @property
    def name(self) -> str:
        """``pina/full``, ``pina/fold=2``: the model's name in the statistics."""
        return artifacts.g_name(self.variant, None if self.route == FULL_ROUTE else self.route)


@dc.dataclass(frozen=True)
class NeighborPlan:
    """What the neighbours stage does; :meth:`info` is the part written to its statistics.

    Attributes:
        variants: g variants predicted, in output order.
        train_mode: ``in_sample`` | ``out_of_fold``.
        folds: fold models per variant (0 with ``in_sample``).
        fold_seed: the split the fold models were trained on (their ``folds.json``).
        instance_nodes: instance nodes of this run's ``nodes``.
        partitions: tasks.
        embeddings_via: ``files`` | ``shuffle`` (:func:`choose_embeddings_via`), and why.
        models: every g model a task may need (variants x routes).
        remapped_nodes: g's output nodes are mapped from the models run's node indices.
        writer: ``arrow`` (the ``files`` tasks write the Parquet files) | ``spark``.
        g_mmap: g is loaded in PECOS' memory-mapped form.
        dense_dim: Phi_dnn width (the ``shuffle`` path rebuilds X from it).
        use_twin: an instance's label twin is excluded like self.
        store: ``embeddings_via: files`` only, the spec of :func:`embstore.open_store`.
        selection: an incremental run's selection table (``None``: every instance).
    """

    variants: tuple[str, ...]
    train_mode: str
    folds: int
    instance_nodes: int
    partitions: int
    embeddings_via: str
    embeddings_via_reason: str
    models: tuple[GModel, ...]
    remapped_nodes: bool
    writer: str
    g_mmap: bool
    dense_dim: int
    use_twin: bool
    store: embstore.StoreSpec | None = None
    selection: str | None = None
    fold_seed: int = 0

    def info(self) -> dict[str, Any]:
        """Plain facts for the stage statistics and the manifest."""
        return {
            "variants": list(self.variants),
            "folds": self.folds,
            "fold_seed": self.fold_seed,
            "cross_fit": "mean" if self.folds else None,
            "instance_nodes": self.instance_nodes,
            "partitions": self.partitions,
            "embeddings_via": self.embeddings_via,
            "embeddings_via_reason": self.embeddings_via_reason,
            "train_mode": self.train_mode,
            "models": sorted(m.name for m in self.models),
            "candidates_per_row": {m.name: m.topk for m in self.models},
            "remapped_nodes": self.remapped_nodes,
            "writer": self.writer,
            "g_mmap": self.g_mmap,
        }


def _require_one_output_space(variant: str, models: list[GModel], col_maps) -> None:
    """The fold models of a variant share one output space (the pretrain stage saves the same
    ``output_nodes.npy`` with each), else an :class:`~pina_spark.storage.InputError` naming
    the first model that differs."""
    import numpy as np

    first = col_maps[models[0].name]
    for m in models[1:]:
        if not np.array_equal(col_maps[m.name], first):
            raise storage.InputError(
                f"g models of {variant} have different output spaces: {m.uri} and "
                f"{models[0].uri} (output_nodes.npy); test rows add their scores column by "
                f"column (cross-fitting): retrain them with the pretrain stage"
            )


def plan_neighbors(
    spark,
    ctx,
    nodes: Callable[[], Any],
    variants: list[str] | None = None,
    sink: Sink | None = None,
) -> tuple[NeighborPlan, dict[str, Any]]:
    """The :class:`NeighborPlan` of a run, and g's output column -> node_index map per model
    name (``-1``: may not be a neighbour; broadcast to the tasks).

    ``nodes``: a function returning this run's ``nodes`` DataFrame, called only when needed.
    ``variants``: default, every variant with a g in the models folder. ``sink``: where
    ``files`` tasks write their rows (``writer == "arrow"``); ignored with ``shuffle``.
    """
    cfg = ctx.cfg
    nb, inf = cfg.neighbors, cfg.inference
    models = storage.norm(ctx.models_root)
    artifacts.require_models(spark, models)
    if variants is None:
        variants = [
            v for v in VARIANTS if storage.path_exists(spark, artifacts.g_variant_dir(models, v))
        ]
    else:
        lacking = [
            v
            for v in variants
            if not storage.path_exists(spark, artifacts.g_variant_dir(models, v))
        ]
        if lacking:
            raise storage.InputError(artifacts.missing_g_message(models, lacking))
    if not variants:
        raise storage.InputError(
            f"no g model found: expected {artifacts.g_variant_dir(models, 'pina')} and/or "
            f"{artifacts.g_variant_dir(models, 'pina_naive')}"
        )
    out_of_fold = nb.train_mode == "out_of_fold"
    n_folds, fold_seed = 0, 0
    if out_of_fold:
        folds_json = f"{models}/{artifacts.FOLDS_JSON}"
        n_folds, fold_seed = artifacts.g_folds(models)
        if n_folds < 2:
            raise storage.InputError(
                f"neighbors.train_mode=out_of_fold but {folds_json} "
                f"lists no fold models (folds={n_folds}): the models were "
                f"trained in_sample; set neighbors.train_mode=in_sample or "
                f"retrain them"
            )
        if n_folds != nb.folds:
            log.warning(
                "neighbors.folds=%d but the models were trained with %d folds; using %d",
                nb.folds,
                n_folds,
                n_folds,
            )
        if fold_seed != nb.fold_seed:
            log.warning(
                "neighbors.fold_seed=%d but the models were trained on split %d; using %d",
                nb.fold_seed,
                fold_seed,
                fold_seed,
            )
    enc = artifacts.read_json(f"{artifacts.vectorizer_dir(models)}/{artifacts.ENCODER_JSON}")
    dense_dim = int(enc["dense_dim"])

    for rel in (storage.NODES, storage.EMBEDDINGS):  # both complete, whichever way they are read
        storage.require_complete(spark, ctx.paths, rel)
    remap, label_idx, n_inst = node_maps(spark, ctx, nodes, nb.node_kinds != "both")
    emb_uri, nodes_uri = ctx.paths.table(storage.EMBEDDINGS), ctx.paths.table(storage.NODES)
    via, via_reason = choose_embeddings_via(
        inf.embeddings_via, emb_uri, nodes_uri, inf.mmap_max_mb, ctx.incremental_rows or None
    )
    # out of fold, train rows take their fold's model and the other rows every fold model
    # (cross-fitting): there is no full model to load
    routes = list(range(n_folds)) if out_of_fold else [FULL_ROUTE]
    # refuses g nothing trusted vouches for (a refit after the promotion of run.models, a
    # rewritten folder), before any task loads it; the executors check each copy's digest
    rels = {
        (v, r): artifacts.g_dir("", v, None if r == FULL_ROUTE else r).strip("/")
        for v in variants
        for r in routes
    }
    parts = sorted(rels.values())
    read_here = [f"{p}/{artifacts.OUTPUT_NODES}" for p in parts]  # col_map below
    read_here += [artifacts.FOLDS_JSON] if out_of_fold else []  # n_folds above
    digests = trust.anchor_parts(cfg, models, storage.MODELS, parts, read_here)
    g_models: list[GModel] = []
    col_maps: dict[str, Any] = {}
    extra = 2 if nb.leave_self_out else 0
    for v in variants:
        for r in routes:
            uri = artifacts.g_dir(models, v, None if r == FULL_ROUTE else r)
            if not storage.path_exists(spark, uri):
                raise storage.InputError(
                    f"model artifact missing: {uri} (train_mode={nb.train_mode})"
                )
            cmap = col_map(artifacts.read_output_nodes(uri), remap, label_idx, nb.node_kinds)
            n_out, n_bad = len(cmap), int((cmap < 0).sum())
            cap = max(100, 10 * (nb.k + extra))
            topk = int(max(1, min(n_out, nb.k + extra + n_bad, cap)))
            m = GModel(v, r, uri, artifacts.version(spark, uri), topk, digests[rels[(v, r)]])
            if nb.k + extra + n_bad > cap:
                log.warning(
                    "neighbors: %s: %d of %d outputs are excluded by node_kinds=%s; "
                    "candidates capped at %d, some rows may get fewer than k",
                    m.name,
                    n_bad,
                    n_out,
                    nb.node_kinds,
                    cap,
                )
            g_models.append(m)
            col_maps[m.name] = cmap
        if out_of_fold:  # cross-fitting adds the fold models' scores column by column
            _require_one_output_space(v, [m for m in g_models if m.variant == v], col_maps)

    store = None
    n_rows = n_inst
    if via == "files":
        # each task takes its slice of the instance nodes (every one, or an incremental run's
        # selection) and their X from the memory-mapped store of its machine (embstore)
        sparse_dim = int(enc["sparse_dim"])
        store = embstore.store_spec(emb_uri, nodes_uri, dense_dim, sparse_dim)
        if ctx.incremental_rows:
            n_sel = storage.count_rows_arrow(ctx.incremental_rows)
            n_rows = min(n_inst, n_sel) if n_sel is not None else n_inst
    plan = NeighborPlan(
        variants=tuple(variants),
        train_mode=nb.train_mode,
        folds=n_folds,
        fold_seed=fold_seed,
        instance_nodes=n_inst,
        partitions=n_partitions(n_rows, inf.rows_per_task, runtime.task_slots(spark)),
        embeddings_via=via,
        embeddings_via_reason=via_reason,
        models=tuple(g_models),
        remapped_nodes=remap is not None,
        writer="arrow" if (via == "files" and sink is not None) else "spark",
        g_mmap=bool(inf.g_mmap),
        dense_dim=dense_dim,
        use_twin=bool(nb.leave_self_out and cfg.task.labels_are_items),
        store=store,
        selection=(ctx.incremental_rows or None) if via == "files" else None,
    )
    return plan, col_maps
