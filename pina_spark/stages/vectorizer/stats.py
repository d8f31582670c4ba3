"""What the vectorizer stage returns: :class:`VectorizerStats`, recorded in the manifest."""

import dataclasses as dc

from pina_spark.stages import StageStats, optional

__all__ = ["VectorizerStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class VectorizerStats(StageStats):
    """Statistics of the vectorizer stage (its manifest form: :meth:`StageStats.to_dict`).

    A run that reuses the vectorizer of ``run.models`` records ``reused_vectorizer`` and
    ``encoded_rows`` only (:meth:`reused`); a fitting run records every other field but
    ``reused_vectorizer``, and the fine-tuning fields of its encoder.

    Attributes:
        reused_vectorizer: the reused vectorizer folder (``run.models`` set), else ``None``.
        encoder: ``pretrain.encoder``.
        fitted_on_rows: the pretraining rows Phi_stat (and a fine-tuned Phi_dnn) were fitted on.
        dense_dim, sparse_dim: D and S of Phi_pre.
        encoded_rows: always 0: the embed stage encodes; fine-tuning trains on pairs, not rows.
        seconds: wall seconds of the stage.
        contrastive_pairs: the fine-tuning pairs (``encoder: contrastive`` only).
        xtransformer_rows: the fine-tuning rows (``encoder: xtransformer`` only).
    """

    reused_vectorizer: str | None = optional()
    encoder: str | None = optional()
    fitted_on_rows: int | None = optional()
    dense_dim: int | None = optional()
    sparse_dim: int | None = optional()
    encoded_rows: int = 0
    seconds: float | None = optional()
    contrastive_pairs: int | None = optional()
    xtransformer_rows: int | None = optional()

    @classmethod
    def reused(cls, vectorizer: str) -> "VectorizerStats":
        """The statistics of a run that reuses ``vectorizer`` (nothing fitted)."""
        return cls(reused_vectorizer=vectorizer)
