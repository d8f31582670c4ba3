"""What the pretrain stage returns: :class:`PretrainStats` (with a :class:`PretrainVariantStats`
per g variant), recorded in the manifest."""

import dataclasses as dc
from typing import Any

from pina_spark.stages import StageStats, flattened, optional

__all__ = ["PretrainStats", "PretrainVariantStats"]

#: the held-out metrics the statistics carry per variant (the model card has them all)
HELDOUT_KEYS = ("P@1", "P@3", "P@5", "R@10")


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class PretrainVariantStats(StageStats):
    """The summary of one g variant, written as ``<variant>_<key>`` keys of the stage's.

    Attributes:
        heldout: the variant's held-out B_pre metrics among :data:`HELDOUT_KEYS` (those of its
            model card's ``heldout_eval``; none without held-out rows).
        output_nodes: g's output nodes.
        folds_train_s: training seconds of the fold models (0.0 without them).
    """

    heldout: dict[str, float] = flattened()
    output_nodes: int
    folds_train_s: float

    @classmethod
    def of_card(cls, vcard: dict[str, Any]) -> "PretrainVariantStats":
        """The summary of a variant's model card entry
        (:func:`pina_spark.stages.pretrain.fits.variant_card`)."""
        ev = vcard.get("heldout_eval", {})
        return cls(
            heldout={k: ev[k] for k in HELDOUT_KEYS if k in ev},
            output_nodes=vcard["output_nodes"],
            folds_train_s=vcard.get("folds_train_s", 0.0),
        )


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class PretrainStats(StageStats):
    """Statistics of the pretrain stage (its manifest form: :meth:`StageStats.to_dict`).

    A run that reuses the models of ``run.models`` records ``reused_models`` and
    ``encoded_rows`` only (:meth:`reused`); a training run records every other field.

    Attributes:
        reused_models: the reused models folder (``run.models`` set), else ``None``.
        variants: the g variants trained, comma-separated.
        input_rows: the pretraining rows (of every variant).
        encoder: ``pretrain.encoder``.
        encoded_rows: always 0: X is read from ``embeddings``.
        dense_dim, sparse_dim: D and S of the vectorizer.
        seconds: wall seconds of the stage.
        per_variant: per variant, its summary, written as ``<variant>_P@1``,
            ``<variant>_output_nodes``, ``<variant>_folds_train_s``, ...
        detail: ``{"variants": the model card's variants, "times_s": its times}``.
    """

    reused_models: str | None = optional()
    variants: str | None = optional()
    input_rows: int | None = optional()
    encoder: str | None = optional()
    encoded_rows: int = 0
    dense_dim: int | None = optional()
    sparse_dim: int | None = optional()
    seconds: float | None = optional()
    per_variant: dict[str, PretrainVariantStats] = flattened("{key}_{name}")
    detail: dict[str, Any] | None = optional()

    @classmethod
    def reused(cls, models_root: str) -> "PretrainStats":
        """The statistics of a run that reuses the models at ``models_root`` (no training)."""
        return cls(reused_models=models_root)
