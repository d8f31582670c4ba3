"""What the evaluate stage returns: :class:`EvaluateStats`, recorded in the manifest."""

import dataclasses as dc
from typing import Any

from pina_spark.stages import StageStats, flattened, optional

__all__ = ["EvaluateStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class EvaluateStats(StageStats):
    """Statistics of the evaluate stage (its manifest form: :meth:`StageStats.to_dict`); the
    full metrics are in ``eval/metrics.json``.

    Attributes:
        variants: the variants of ``predictions``.
        n_test: test instances.
        n_test_scored: test instances with at least one true label (the others are excluded
            from P and R).
        promotion: ``evaluate.promote`` only, the decision of the promotion gate
            (:func:`pina_spark.orchestration.promotion.consider`).
        p_at_1: per scored variant, its P@1 (6 decimals), written as ``<variant>_P@1``.
    """

    variants: list[str]
    n_test: int
    n_test_scored: int
    promotion: dict[str, Any] | None = optional()
    p_at_1: dict[str, float] = flattened("{key}_P@1")
