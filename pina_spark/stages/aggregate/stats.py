"""What the aggregate stage returns: :class:`AggregateStats`, recorded in the manifest."""

import dataclasses as dc

from pina_spark.stages import StageStats, flattened, optional

__all__ = ["AggregateStats", "LabelFeaturesStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class LabelFeaturesStats(StageStats):
    """The virtual label-feature rows of ``aggregate.label_features`` ``pifa`` / ``text_pifa``.

    Attributes:
        label_features_rows: the rows written (``None`` where pyarrow does not count them).
        label_features_s: the seconds they took.
    """

    label_features_rows: int | None
    label_features_s: float


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class AggregateStats(StageStats):
    """Statistics of the aggregate stage (its manifest form: :meth:`StageStats.to_dict`). The
    fields from ``strategy`` to ``writer_reason`` are the plan's
    (:meth:`pina_spark.stages.aggregate.plan.AggregatePlan.to_dict`).

    Attributes:
        strategy: ``broadcast`` or ``shuffle``; ``reason`` says why.
        dense_dim, sparse_dim: D and S of the embeddings.
        variants: the ``features`` variants, the ``neighbors`` ones then ``vectorizer_only``.
        embeddings_mb: estimated in-memory size of the embeddings.
        partitions: partitions of the reduction (and files per variant and split).
        label_features: ``aggregate.label_features``.
        broadcast_via: ``files`` or ``spark``, ``broadcast`` only; ``broadcast_via_reason`` says
            why.
        writer: ``arrow`` or ``spark``; ``writer_reason`` says why.
        label_features_built: ``label_features`` ``pifa`` or ``text_pifa`` only, the virtual
            label-feature rows (``label_features_rows``, ``label_features_s``).
        plan_s: seconds to plan and build the job.
        rows: ``features`` rows per variant and split.
        widths: the widths of ``features`` per variant (``_pina_features.json``).
        write_s: seconds to write and publish ``features``.
        time_s: wall seconds of the stage.
    """

    strategy: str
    reason: str
    dense_dim: int
    sparse_dim: int
    variants: list[str]
    embeddings_mb: float
    partitions: int
    label_features: str
    broadcast_via: str | None = optional()
    broadcast_via_reason: str | None = optional()
    writer: str
    writer_reason: str
    label_features_built: LabelFeaturesStats | None = flattened(default_none=True)
    plan_s: float
    rows: dict[str, dict[str, int]]
    widths: dict[str, dict[str, int]]
    write_s: float
    time_s: float
