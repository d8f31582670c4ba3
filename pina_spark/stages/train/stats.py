"""What the train stage returns: :class:`TrainStats`, recorded in the manifest."""

import dataclasses as dc

from pina_spark.stages import StageStats, flattened, optional

__all__ = ["TrainStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class TrainStats(StageStats):
    """Statistics of the train stage (its manifest form: :meth:`StageStats.to_dict`).

    Attributes:
        n_train, n_test: train instances trained on (those with a label) and test instances.
        n_train_without_labels: train instances left out of training for having no label
            (every label row of theirs quarantined, say), so nothing is dropped uncounted.
        n_labels_trained: the label space (labels with at least one train instance).
        variants: the variants trained, in ``train.variants`` order.
        skipped: the variants not trained, with why (no features).
        train_on: where the models were fitted: ``driver`` or ``executors``.
        features_read_by: ``executors`` only, who read the feature matrices: ``tasks`` or
            ``driver``.
        train_s: per trained variant, its training seconds, written as ``<variant>_train_s``.
    """

    n_train: int
    n_test: int
    n_labels_trained: int
    n_train_without_labels: int = 0
    variants: list[str]
    skipped: dict[str, str]
    train_on: str
    features_read_by: str | None = optional()
    train_s: dict[str, float] = flattened("{key}_train_s")
