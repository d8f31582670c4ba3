"""What the vectorizer stage returns: :class:`VectorizerStats`, recorded in the manifest."""

import dataclasses as dc
from typing import Optional

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

    reused_vectorizer: Optional[str] = optional()
    encoder: Optional[str] = optional()
    fitted_on_rows: Optional[int] = optional()
    dense_dim: Optional[int] = optional()
    sparse_dim: Optional[int] = optional()
    encoded_rows: int = 0
    seconds: Optional[float] = optional()
    contrastive_pairs: Optional[int] = optional()
    xtransformer_rows: Optional[int] = optional()

    @classmethod
    def reused(cls, vectorizer: str) -> "VectorizerStats":
        """The statistics of a run that reuses ``vectorizer`` (nothing fitted)."""
        return cls(reused_vectorizer=vectorizer)
