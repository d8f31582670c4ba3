"""What the neighbors stage returns: :class:`NeighborsStats` (with a
:class:`NeighborsVariantStats` per variant), recorded in the manifest."""

import dataclasses as dc

from pina_spark.stages import StageStats, optional

__all__ = ["NeighborsStats", "NeighborsVariantStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class NeighborsVariantStats(StageStats):
    """The rows of one g variant.

    Attributes:
        rows: instance rows predicted.
        rows_per_s: ``rows`` / the seconds of the one pass that predicts every variant
            (``None`` for a pass of no measurable time).
        rows_per_model: rows per g route (``fold=<f>``; ``cross``: test and new rows, every fold
            model together; ``full``: ``in_sample``).
    """

    rows: int
    rows_per_s: float | None
    rows_per_model: dict[str, int]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class NeighborsStats(StageStats):
    """Statistics of the neighbors stage (its manifest form: :meth:`StageStats.to_dict`). The
    fields from ``variants`` to ``g_mmap`` are the plan's
    (:meth:`pina_spark.stages.neighbors.plan.NeighborPlan.info`).

    Attributes:
        variants: per g variant, in output order, its rows.
        folds: fold models per variant (0 with ``in_sample``).
        instance_nodes: instance nodes of this run's ``nodes``.
        partitions: tasks.
        embeddings_via: ``files`` | ``shuffle``; ``embeddings_via_reason`` says why.
        train_mode: ``in_sample`` | ``out_of_fold``.
        models: every g model a task may need, sorted by name.
        candidates_per_row: per g model, the candidates PECOS returns per row.
        remapped_nodes: g's output nodes are mapped from the models run's node indices.
        writer: ``arrow`` (the ``files`` tasks write the Parquet files) | ``spark``.
        g_mmap: g is loaded in PECOS' memory-mapped form.
        rows: instance rows (each variant has them all).
        seconds: wall seconds of the job that wrote ``neighbors``.
        rows_per_s: ``rows / seconds`` (``None`` for a job of no measurable time).
        k, weighting, node_kinds: the ``neighbors`` settings predicted with.
        model_loads, worker_processes, max_loads_per_worker_model, loads_per_worker: the g
            loads of the executors (:func:`pina_spark.runtime.summarize_loads`).
        instances_without_embeddings: the instance nodes (of an incremental run: of its
            selection) with no row in ``embeddings`` (no neighbours for them); ``None`` in
            manifests written before the ``shuffle`` path counted them.
    """

    variants: dict[str, NeighborsVariantStats]
    folds: int
    instance_nodes: int
    partitions: int
    embeddings_via: str
    embeddings_via_reason: str
    train_mode: str
    models: list[str]
    candidates_per_row: dict[str, int]
    remapped_nodes: bool
    writer: str
    g_mmap: bool
    rows: int
    seconds: float
    rows_per_s: float | None
    k: int
    weighting: str
    node_kinds: str
    model_loads: int
    worker_processes: int
    max_loads_per_worker_model: int
    loads_per_worker: dict[str, dict[str, int]]
    instances_without_embeddings: int | None = optional()
