"""The choice rule of a variant selection: the cheapest tier unless a dearer one pays.

Pure Python on per-instance validation scores (P@1 of each validation row, the same rows in
the same order for every candidate), so it is tested on constructed tables.

Candidates come in cost *tiers*: candidates whose costs differ by what they compute, not by
the noise of measuring it. ``pina-spark select`` has two: without g (``vectorizer_only``) and
with g (every neighbour candidate: they all pay the same pretrain, and their measured seconds
differ by tens of percent at most, part of it noise). The validation rows are split in two
halves, fixed by the caller (:func:`confirm_half`, a hash of the instance id): the *selection*
half picks, the *confirmation* half tests. A tier's pick is never tested against the cheaper
tiers on the rows it was picked on (move (b) below tests a fixed set of grid points against the
base on the selection half, with Holm over that set).
The split is the same in every selection of a root: a grid changed after reading a report is
no longer judged on fresh rows.

1. the tiers are ordered by what they compute where the caller knows it (``tier_order``:
   ``pina-spark select`` puts the tier without g first, since a candidate with g pays for
   everything ``vectorizer_only`` does and for g and its neighbours besides, however the
   seconds of a small or warming-up run come out), else by cost (their cheapest member's
   stage-seconds);
2. within each tier, the *pick* is made in two moves on the selection half:

   a. among the tier's *base* candidates (each entry at the run's own grid point, or the
      grid's first point where the run's is not in the grid; an entry with no base candidate
      in the tier, or a candidate without an entry, counts all its members as base), the
      cheapest whose mean is within ``min_gain_points`` of the best base mean (a dearer
      setting, e.g. ``pifa`` label features against ``text``, is not worth a gain smaller than
      the margin asked of a dearer tier; among near-ties the measured seconds decide, noise
      included);
   b. a grid alternative of that pick's *family* (the same entry at another grid point)
      replaces it only when it gains at least ``min_gain_points`` with a paired-t p at most
      ``alpha`` after Holm-Bonferroni over the family's alternatives; among those that do, the
      highest mean. The run's own setting is the prior; a grid point must earn its place, as
      a dearer tier must;
3. a dearer tier has one or two *contenders*: its pick, and its *rival*, the best base
   candidate on the selection half, where move (a) passed that over for a cheaper one within
   the margin. The order within a tier rests on measured seconds, noise included (all its
   candidates pay for the same g), so the rule tests both rather than let that order decide;
4. each contender is compared with the *best cheaper contender* (the highest selection-half
   mean among the contenders of the cheaper tiers) on the confirmation half: gain
   ``= 100 * (mean(contender) - mean(reference))`` points, ``p`` from the instance-wise paired
   t-test of ``pina-spark compare`` (:func:`pina_spark.stages.evaluate.stage.paired_ttest`,
   two-sided; with the gain required positive this is a one-sided test at ``alpha / 2``:
   conservative);
5. the ``m`` p-values of all the dearer tiers' contenders (``tiers - 1`` to ``2 (tiers - 1)``)
   are corrected for the number of comparisons with Holm-Bonferroni (step-down; adjusted
   ``p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values), which keeps the
   family-wise error rate at ``alpha`` whatever their dependence;
6. a contender *pays* when its gain is at least ``min_gain_points`` and its adjusted p is at
   most ``alpha``; a tier pays when one of its contenders does, and stands for its cheapest
   paying contender. The choice is that of the dearest tier that pays, else the cheapest
   tier's pick. Ties go to the cheaper tier. Each half must hold at least two rows.

Why tiers and halves: comparing each of 16 neighbour candidates with the best cheaper one (in
an order set by noisy seconds) and correcting over all 16 lost a real +3 points on Instacart
(RESULTS.md, "Variant selection"): the one comparison with ``vectorizer_only`` drowned in 15
comparisons between near-equal neighbour settings. With tiers there is one comparison per
step in cost, and the split keeps that comparison's p honest after picking the best of many.
Why move (b): picking the best of 16 grid points on a few hundred rows picks noise. On
Instacart the tiered rule without it took ``pina_naive/text`` at ``neighbors.k=10,
aggregate.v1_weight=0.5`` (+0.6 points over the run's own point on the selection half, far
from significant) and lost 1.2 test points to the same variant at the run's own point
(RESULTS.md, "Variant selection": that finding came from the test split, so Instacart is no
fresh evidence for this move; citeulike-t, selected after it was fixed, is).
Why the rival (step 3): on citeulike-t the rule without it took ``pina/text`` only because its
seconds came out 6 below ``pina_naive/text``'s with g priced at the whole pretrain stage;
priced at each variant's own g fits, ``pina_naive/text`` is the cheaper, misses the test, and
``vectorizer_only`` is kept, 1.2 test points below ``pina/text`` (RESULTS.md, "Variant
selection": a finding of the test split, so this move is post hoc on both sets).

Examples
--------
>>> cheap = Candidate("vectorizer_only", 1.0, [1, 0, 1, 0])
>>> dear = Candidate("pina/text", 5.0, [1, 0, 1, 0], tier="g")
>>> choose([dear, cheap], alpha=0.05, min_gain_points=0.5).chosen
'vectorizer_only'
>>> holm_adjusted([0.01, 0.04, 0.03])
[0.03, 0.06, 0.06]
"""

import dataclasses as dc
import hashlib
import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from pina_spark.stages.evaluate.stage import paired_ttest

__all__ = [
    "Candidate",
    "Comparison",
    "Tier",
    "Decision",
    "choose",
    "confirm_half",
    "holm_adjusted",
    "detectable_gain",
    "POWER",
    "RULE",
    "CONFIRM_SALT",
]

#: the rule in words, as ``selection.json`` records it
RULE = (
    "group candidates into cost tiers (no g; g); within each tier, on the selection half of the "
    "validation rows, pick the cheapest candidate at the run's own grid point (else the "
    "grid's first) within "
    "min_gain_points of the best such candidate's P@1, and replace it by another grid point of "
    "the same entry only when that gains >= min_gain_points with p <= alpha after "
    "Holm-Bonferroni over the entry's other grid points; a dearer tier's contenders are its "
    "pick and, where that pick was not the best such candidate, the best one too; compare each "
    "contender with the best cheaper contender (judged on the selection half) on the other "
    "(confirmation) half: it pays when it gains >= min_gain_points with the two-sided paired "
    "t-test's p <= alpha after a Holm-Bonferroni correction over all the dearer tiers' "
    "contenders; a tier pays with its cheapest paying contender; choose the dearest paying "
    "tier's, else the cheapest tier's pick"
)

#: the salt of :func:`confirm_half` (recorded in ``selection.json``)
CONFIRM_SALT = "pina-spark select confirm"
#: the power at which a selection reports the gain it can detect (:func:`detectable_gain`)
POWER = 0.8
#: float tolerance on the margin, in points: a gain of exactly ``min_gain_points`` rounds below
_TOL = 1e-9


def confirm_half(ids: Iterable[Any]) -> np.ndarray:
    """Which validation rows are in the confirmation half: a hash of the instance id (sha1 of
    the salted id, its low bit), so the split depends on nothing but the ids, the same rows
    fall in the same half in every selection, and no row order or seed enters.

    Examples
    --------
    >>> m = confirm_half([f"i{k}" for k in range(2000)])
    >>> m.dtype, 900 < int(m.sum()) < 1100
    (dtype('bool'), True)
    >>> bool(confirm_half(["a"])[0]) == bool(confirm_half(["b", "a"])[1])
    True
    """
    return np.fromiter(
        (hashlib.sha1(f"{CONFIRM_SALT}\x00{i}".encode()).digest()[-1] & 1 == 1 for i in ids),
        dtype=bool,
    )


@dc.dataclass(frozen=True, eq=False)
class Candidate:
    """One candidate's validation result.

    Attributes:
        name: the candidate (``select.candidates`` entry, with its grid point if any).
        cost_s: its stage-seconds in this selection run.
        scores: per-instance P@1 on the validation rows, aligned across candidates.
        tier: its cost tier (``None``: a tier of its own).
        family: the ``select.candidates`` entry it is a grid point of (``None``: none).
        base: whether it is at the run's own grid point (grid alternatives are not).
    """

    name: str
    cost_s: float
    scores: Any
    tier: str | None = None
    family: str | None = None
    base: bool = True

    def mean(self, rows: Any = None) -> float:
        """Mean score (0..1), over ``rows`` (a boolean mask) when given."""
        s = np.asarray(self.scores, dtype=np.float64)
        if rows is not None:
            s = s[rows]
        return float(np.mean(s)) if s.size else float("nan")

    @property
    def tier_name(self) -> str:
        """Its tier, or its own name when it has none."""
        return self.name if self.tier is None else self.tier


@dc.dataclass(frozen=True)
class Comparison:
    """A candidate against a reference: mean score, gain in points, raw and adjusted p.

    Attributes:
        name, cost_s: the candidate.
        metric: its mean P@1 (0..1) on the rows compared.
        against: the reference's name (``None`` for the cheapest candidate or tier).
        gain_points: ``100 * (metric - reference's metric)``.
        p: the paired t-test's p (``None``: fewer than two rows, or no reference).
        p_adjusted: ``p`` after Holm-Bonferroni over the rule's comparisons (rule rows only).
        pays: gain >= ``min_gain_points`` and ``p_adjusted`` <= ``alpha`` (rule rows only).
        se_points: the standard error of the paired difference, in points.
        detectable_points: the true gain this step pays for with probability :data:`POWER`
            (:func:`detectable_gain`; tier steps only): smaller gains are more likely missed.
    """

    name: str
    cost_s: float
    metric: float
    against: str | None = None
    gain_points: float | None = None
    p: float | None = None
    p_adjusted: float | None = None
    pays: bool = False
    se_points: float | None = None
    detectable_points: float | None = None


@dc.dataclass(frozen=True)
class Tier:
    """One cost tier, its contenders and its outcome.

    Attributes:
        name: the tier.
        candidates: its candidates, by cost.
        selection_metrics: their mean P@1 on the selection half, in the same order.
        pick: the *economical pick* (moves (a) and (b) on the selection half).
        contenders: the comparisons the rule tests for this tier on the confirmation half:
            ``pick``'s, then ``rival``'s (a dearer tier's, against the best cheaper contender;
            the cheapest tier's ``pick`` has no reference).
        rival: the tier's best base candidate on the selection half where move (a) passed it
            over for a cheaper ``pick`` within the margin (a dearer tier's only; else ``None``).
        refinement: move (b) of the pick: each grid alternative of the base pick against it on
            the selection half (Holm over them), empty when there were none.
    """

    name: str
    candidates: tuple[str, ...]
    selection_metrics: tuple[float, ...]
    pick: str
    contenders: tuple[Comparison, ...]
    refinement: tuple[Comparison, ...] = ()
    rival: str | None = None

    @property
    def step(self) -> Comparison:
        """The comparison that decides the tier: its cheapest paying contender, else the
        economical pick's."""
        paying = [c for c in self.contenders if c.pays]
        return min(paying, key=lambda c: c.cost_s) if paying else self.contenders[0]

    @property
    def outcome(self) -> str:
        """The candidate the tier stands for when it pays: :attr:`step`'s."""
        return self.step.name


@dc.dataclass(frozen=True)
class Decision:
    """What :func:`choose` decided.

    Attributes:
        chosen: the chosen candidate's name.
        tiers: the tiers in the rule's order (``tier_order``, then cost), each with its pick
            and its rule step.
        vs_cheapest: one :class:`Comparison` per candidate (in that order) against the first, on
            every validation row (unadjusted p; reported, not used by the rule).
        alpha, min_gain_points: the rule's parameters.
        n_selection, n_confirmation: rows in each half.
    """

    chosen: str
    tiers: tuple[Tier, ...]
    vs_cheapest: tuple[Comparison, ...]
    alpha: float
    min_gain_points: float
    n_selection: int
    n_confirmation: int

    @property
    def rule(self) -> tuple[Comparison, ...]:
        """The rule's deciding steps, one per tier in the rule's order (:attr:`Tier.step`)."""
        return tuple(t.step for t in self.tiers)

    def tier_of(self, name: str) -> Tier:
        """The tier holding candidate ``name``."""
        for t in self.tiers:
            if name in t.candidates:
                return t
        raise KeyError(f"no candidate {name!r} in this decision")


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


def _compare(c: Candidate, ref: Candidate | None, rows: Any = None) -> Comparison:
    metric = c.mean(rows)
    if ref is None:
        return Comparison(c.name, c.cost_s, metric)
    a, b = (np.asarray(x.scores, dtype=np.float64) for x in (c, ref))
    if rows is not None:
        a, b = a[rows], b[rows]
    gain = 100.0 * (metric - ref.mean(rows))
    se = 100.0 * float(np.std(a - b, ddof=1)) / math.sqrt(a.size) if a.size >= 2 else None
    return Comparison(
        c.name, c.cost_s, metric, ref.name, gain, paired_ttest(a, b)["p"], se_points=se
    )


def detectable_gain(
    se_points: float | None, alpha: float, comparisons: int, min_gain_points: float = 0.0
) -> float | None:
    """The true gain (points) a tier step with paired standard error ``se_points`` pays for
    with probability :data:`POWER`: its observed gain must clear both the test, two-sided at
    ``alpha / comparisons`` (the Bonferroni bound of Holm's first step), and the margin, so
    ``max(z(1 - alpha / 2m) * se, min_gain_points) + z(POWER) * se`` (normal approximation).

    >>> round(detectable_gain(0.7, 0.05, 1), 2)
    1.96
    >>> round(detectable_gain(0.1, 0.05, 1, min_gain_points=0.5), 2)   # the margin binds
    0.58
    """
    if se_points is None:
        return None
    z = NormalDist()
    m = max(1, comparisons)
    bar = max(z.inv_cdf(1.0 - alpha / (2.0 * m)) * se_points, min_gain_points)
    return bar + z.inv_cdf(POWER) * se_points


def _best(cands: Sequence[Candidate], rows: Any) -> Candidate:
    """The highest mean on ``rows``; equal means keep the first (the cheaper: ``cands`` are by
    cost)."""
    best = cands[0]
    for c in cands[1:]:
        if c.mean(rows) > best.mean(rows):
            best = c
    return best


def _pays(c: Comparison, p_adjusted: float, alpha: float, min_gain_points: float) -> Comparison:
    pays = (c.gain_points or 0.0) >= min_gain_points - _TOL and p_adjusted <= alpha
    return dc.replace(c, p_adjusted=p_adjusted, pays=pays)


def _pick(
    members: Sequence[Candidate], rows: Any, min_gain_points: float, alpha: float
) -> tuple[Candidate, tuple[Comparison, ...], Candidate | None]:
    """A tier's economical pick on ``rows`` (moves (a) and (b) of the module docstring), the
    comparisons of move (b), and its *rival*: the best base candidate on ``rows`` where move
    (a) passed it over for a cheaper one within the margin (else ``None``)."""
    based = {c.family for c in members if c.base and c.family is not None}
    # move (a) runs over the base candidates, and over every member of an entry that has none
    bases = [c for c in members if c.base or c.family is None or c.family not in based]
    best = _best(bases, rows)
    top = best.mean(rows)
    first = next(c for c in bases if 100.0 * (top - c.mean(rows)) <= min_gain_points + _TOL)
    alternatives = [
        c
        for c in members
        if not c.base and first.base and c.family is not None and c.family == first.family
    ]
    rival = None if best is first else best
    if not alternatives:
        return first, (), rival
    raw = [_compare(c, first, rows) for c in alternatives]
    adjusted = holm_adjusted([r.p for r in raw])
    refinement = tuple(
        _pays(r, pa, alpha, min_gain_points) for r, pa in zip(raw, adjusted, strict=True)
    )
    winners = [c for c, r in zip(alternatives, refinement, strict=True) if r.pays]
    return (_best(winners, rows) if winners else first), refinement, rival


def choose(
    candidates: Sequence[Candidate],
    *,
    alpha: float,
    min_gain_points: float,
    confirm: Any = None,
    tier_order: Sequence[str] = (),
) -> Decision:
    """The candidate the rule of this module chooses (see the module docstring).

    ``confirm``: the confirmation half, a boolean per validation row (:func:`confirm_half` of
    the row ids); ``None``: every second row. ``tier_order``: tiers whose order is known
    from what they compute, cheapest first; they come before any other tier, and the
    measured seconds order only the candidates within a tier and the tiers not named.

    Examples
    --------
    >>> a = Candidate("a", 1.0, [0, 1] * 50)
    >>> b = Candidate("b", 2.0, [1, 1] * 50)   # +50 points on every second row
    >>> d = choose([a, b], alpha=0.05, min_gain_points=0.5, confirm=[False, False, True, True] * 25)
    >>> d.chosen, [round(c.gain_points or 0, 1) for c in d.rule]
    ('b', [0, 50.0])
    """
    if not candidates:
        raise ValueError("choose: no candidates")
    n_rows = {len(np.asarray(c.scores)) for c in candidates}
    if len(n_rows) != 1:
        raise ValueError(f"choose: the candidates scored different numbers of rows {n_rows}")
    n = n_rows.pop()
    if confirm is None:
        b_rows = np.arange(n) % 2 == 1
    else:
        b_rows = np.asarray(confirm, dtype=bool)
        if b_rows.shape != (n,):
            raise ValueError(f"choose: confirm has shape {b_rows.shape} for {n} rows")
    a_rows = ~b_rows
    if min(int(a_rows.sum()), int(b_rows.sum())) < 2:
        raise ValueError(
            f"choose: {int(a_rows.sum())} selection and {int(b_rows.sum())} confirmation rows; "
            "each half needs at least 2 (raise task.validation_fraction, or set select.cv_folds)"
        )
    if not all(np.isfinite(np.asarray(c.scores, dtype=np.float64)).all() for c in candidates):
        raise ValueError("choose: a candidate has a non-finite score")
    rank = {t: i for i, t in enumerate(tier_order)}
    # stable: equal costs keep their order
    order = sorted(candidates, key=lambda c: (rank.get(c.tier_name, len(rank)), c.cost_s))
    groups: dict[str, list[Candidate]] = {}
    for c in order:  # tiers by their known order, then by their cheapest member's cost
        groups.setdefault(c.tier_name, []).append(c)
    moves = [_pick(members, a_rows, min_gain_points, alpha) for members in groups.values()]
    # a dearer tier's contenders: its economical pick, and its rival where move (a) passed the
    # best over for a cheaper one (the order within a tier rests on measured seconds, noise
    # included: testing both keeps the choice from turning on it); the cheapest tier's is its
    # pick alone, the choice when no dearer tier pays
    rivals = [rival if i else None for i, (_, _, rival) in enumerate(moves)]
    contenders = [
        [pick] + ([rival] if rival is not None else [])
        for (pick, _, _), rival in zip(moves, rivals, strict=True)
    ]
    raw = [[_compare(moves[0][0], None, b_rows)]]
    for i, cs in enumerate(contenders[1:], start=1):
        ref = _best([c for cheaper in contenders[:i] for c in cheaper], a_rows)
        raw.append([_compare(c, ref, b_rows) for c in cs])
    flat = [r for rs in raw[1:] for r in rs]
    adjusted = iter(holm_adjusted([r.p for r in flat]))
    steps = [raw[0]]
    for rs in raw[1:]:
        steps.append(
            [
                dc.replace(
                    _pays(r, next(adjusted), alpha, min_gain_points),
                    detectable_points=detectable_gain(
                        r.se_points, alpha, len(flat), min_gain_points
                    ),
                )
                for r in rs
            ]
        )
    tiers = tuple(
        Tier(
            name,
            tuple(c.name for c in members),
            tuple(c.mean(a_rows) for c in members),
            pick.name,
            tuple(tier_steps),
            refinement,
            None if rival is None else rival.name,
        )
        for (name, members), (pick, refinement, _), rival, tier_steps in zip(
            groups.items(), moves, rivals, steps, strict=True
        )
    )
    paying = [t.outcome for t in tiers if t.step.pays]
    chosen = paying[-1] if paying else tiers[0].pick
    vs_cheapest = tuple(_compare(c, order[0] if i else None) for i, c in enumerate(order))
    return Decision(
        chosen,
        tiers,
        vs_cheapest,
        alpha,
        min_gain_points,
        int(a_rows.sum()),
        int(b_rows.sum()),
    )
