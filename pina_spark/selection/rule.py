"""The choice rule of a variant selection: the cheapest candidate unless a dearer one pays.

Pure Python on per-instance validation scores (P@1 of each validation row, the same rows in
the same order for every candidate), so it is tested on constructed tables:

1. the candidates are ordered by cost (their stage-seconds; equal costs keep the given order);
2. each dearer candidate ``c`` is compared with the *best cheaper one* ``b(c)`` (the highest
   mean score among the candidates before it): gain ``= 100 * (mean(c) - mean(b(c)))`` points,
   ``p`` from the instance-wise paired t-test of ``pina-spark compare``
   (:func:`pina_spark.stages.evaluate.stage.paired_ttest`);
3. the ``m = n - 1`` p-values are corrected for the number of comparisons with Holm-Bonferroni
   (step-down; adjusted ``p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted
   p-values), which keeps the family-wise error rate at ``alpha`` whatever their dependence;
4. ``c`` *pays* when its gain is at least ``min_gain_points`` and its adjusted p is at most
   ``alpha``; the choice is the dearest candidate that pays, else the cheapest. A candidate that
   pays beats every cheaper one, and no dearer one beats it, so ties go to the cheaper one.

Examples
--------
>>> cheap = Candidate("vectorizer_only", 1.0, [1, 0, 1, 0])
>>> dear = Candidate("pina/text", 5.0, [1, 0, 1, 0])
>>> choose([dear, cheap], alpha=0.05, min_gain_points=0.5).chosen
'vectorizer_only'
>>> holm_adjusted([0.01, 0.04, 0.03])
[0.03, 0.06, 0.06]
"""

import dataclasses as dc
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark.stages.evaluate.stage import paired_ttest

__all__ = ["Candidate", "Comparison", "Decision", "choose", "holm_adjusted", "RULE"]

#: the rule in words, as ``selection.json`` records it
RULE = (
    "order candidates by stage-seconds; take a dearer candidate only if its validation P@1 "
    "beats the best cheaper candidate's by >= min_gain_points, with the paired t-test's p "
    "<= alpha after a Holm-Bonferroni correction over the n - 1 comparisons; else the cheapest"
)


@dc.dataclass(frozen=True, eq=False)
class Candidate:
    """One candidate's validation result.

    Attributes:
        name: the candidate (``select.candidates`` entry, with its grid point if any).
        cost_s: its stage-seconds in this selection run.
        scores: per-instance P@1 on the validation rows, aligned across candidates.
    """

    name: str
    cost_s: float
    scores: Any

    def mean(self) -> float:
        """Mean score (0..1)."""
        return float(np.mean(np.asarray(self.scores, dtype=np.float64)))


@dc.dataclass(frozen=True)
class Comparison:
    """A candidate against a reference: mean score, gain in points, raw and adjusted p.

    Attributes:
        name, cost_s: the candidate.
        metric: its mean P@1 (0..1).
        against: the reference's name (``None`` for the cheapest candidate).
        gain_points: ``100 * (metric - reference's metric)``.
        p: the paired t-test's p (``None``: fewer than two rows, or no reference).
        p_adjusted: ``p`` after Holm-Bonferroni over the rule's comparisons (rule rows only).
        pays: gain >= ``min_gain_points`` and ``p_adjusted`` <= ``alpha`` (rule rows only).
    """

    name: str
    cost_s: float
    metric: float
    against: str | None = None
    gain_points: float | None = None
    p: float | None = None
    p_adjusted: float | None = None
    pays: bool = False


@dc.dataclass(frozen=True)
class Decision:
    """What :func:`choose` decided.

    Attributes:
        chosen: the chosen candidate's name.
        rule: one :class:`Comparison` per candidate, by cost: each against its best cheaper one.
        vs_cheapest: one :class:`Comparison` per candidate against the cheapest (unadjusted p).
        alpha, min_gain_points: the rule's parameters.
    """

    chosen: str
    rule: tuple[Comparison, ...]
    vs_cheapest: tuple[Comparison, ...]
    alpha: float
    min_gain_points: float


def holm_adjusted(pvalues: Sequence[float | None]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the given order (``None`` counts as 1.0).

    Examples
    --------
    >>> holm_adjusted([0.04, None])
    [0.08, 1.0]
    >>> holm_adjusted([])
    []
    """
    p = [1.0 if x is None else float(x) for x in pvalues]
    m = len(p)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p[j])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def _compare(c: Candidate, ref: Candidate | None) -> Comparison:
    if ref is None:
        return Comparison(c.name, c.cost_s, c.mean())
    gain = 100.0 * (c.mean() - ref.mean())
    return Comparison(
        c.name, c.cost_s, c.mean(), ref.name, gain, paired_ttest(c.scores, ref.scores)["p"]
    )


def choose(candidates: Sequence[Candidate], *, alpha: float, min_gain_points: float) -> Decision:
    """The candidate the rule of this module chooses (see the module docstring).

    Examples
    --------
    >>> a = Candidate("a", 1.0, [0, 1] * 50)
    >>> b = Candidate("b", 2.0, [1, 1] * 50)   # +50 points on every second row
    >>> d = choose([a, b], alpha=0.05, min_gain_points=0.5)
    >>> d.chosen, [round(c.gain_points or 0, 1) for c in d.rule]
    ('b', [0, 50.0])
    """
    if not candidates:
        raise ValueError("choose: no candidates")
    n_rows = {len(np.asarray(c.scores)) for c in candidates}
    if len(n_rows) != 1:
        raise ValueError(f"choose: the candidates scored different numbers of rows {n_rows}")
    order = sorted(candidates, key=lambda c: c.cost_s)  # stable: equal costs keep their order
    raw = []
    for i, c in enumerate(order):
        best = max(order[:i], key=lambda x: x.mean(), default=None)
        raw.append(_compare(c, best))
    adjusted = holm_adjusted([r.p for r in raw[1:]])
    rule = [raw[0]]
    for r, pa in zip(raw[1:], adjusted, strict=True):
        pays = (r.gain_points or 0.0) >= min_gain_points and pa <= alpha
        rule.append(dc.replace(r, p_adjusted=pa, pays=pays))
    paying = [r.name for r in rule if r.pays]
    chosen = paying[-1] if paying else order[0].name
    vs_cheapest = tuple(_compare(c, order[0] if i else None) for i, c in enumerate(order))
    return Decision(chosen, tuple(rule), vs_cheapest, alpha, min_gain_points)
