"""The pieces of ``pina-spark select`` that need no Spark: the candidates a ``select`` section
expands to, and the ``selection.json`` record of a decision.

A candidate is one ``select.candidates`` entry at one point of ``select.grid``
(:func:`pina_spark.orchestration.tune.grid_points`); ``vectorizer_only`` reads neither the
neighbours nor the aggregation weight, so it is one candidate whatever the grid. Its
``settings`` are the config keys a production run following it sets
(:mod:`pina_spark.selection.follow`). The record (:func:`selection_record`) is published by
:func:`pina_spark.selection.artifact.publish_selection`.

Examples
--------
>>> from pina_spark.config import SelectConfig
>>> cs = expand_candidates(SelectConfig(candidates=["vectorizer_only", "pina/pifa"],
...                                     grid={"neighbors.k": [5, 10]}))
>>> [c.name for c in cs]
['vectorizer_only', 'pina/pifa neighbors.k=5', 'pina/pifa neighbors.k=10']
>>> cs[2].settings
{'aggregate.label_features': 'pifa', 'neighbors.k': 10}
"""

import dataclasses as dc
from collections.abc import Mapping, Sequence
from typing import Any

from pina_spark.config import SelectConfig
from pina_spark.config import variants as V
from pina_spark.orchestration.tune import grid_points
from pina_spark.selection.rule import RULE, Comparison, Decision

__all__ = ["SelectCandidate", "expand_candidates", "selection_record"]


@dc.dataclass(frozen=True)
class SelectCandidate:
    """One candidate of a selection.

    Attributes:
        name: ``VARIANT[/LABEL_FEATURES][ KEY=VALUE ...]``, unique within a selection.
        variant: the ``features`` variant it trains and scores.
        settings: the config keys (dotted) and values it runs with.
    """

    name: str
    variant: str
    settings: dict[str, Any]


def expand_candidates(sel: SelectConfig) -> list[SelectCandidate]:
    """Every candidate of ``sel``, in ``sel.candidates`` order, grid points within each."""
    points = grid_points(sel.grid) if sel.grid else [{}]
    out = []
    for entry in sel.candidates:
        variant, label_features = SelectConfig.parse_candidate(entry)
        if variant == V.VECTORIZER_ONLY:
            out.append(SelectCandidate(entry, variant, {}))
            continue
        for point in points:
            name = " ".join([entry] + [f"{k}={v}" for k, v in point.items()])
            settings = {"aggregate.label_features": label_features, **point}
            out.append(SelectCandidate(name, variant, settings))
    return out


def _row(c: Comparison) -> dict[str, Any]:
    return {
        "candidate": c.name,
        "metric": c.metric,
        "against": c.against,
        "gain_points": c.gain_points,
        "p": c.p,
        "p_holm": c.p_adjusted,
        "pays": c.pays,
    }


def selection_record(
    decision: Decision,
    candidates: Sequence[SelectCandidate],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``selection.json`` record of ``decision`` over ``candidates`` (whose names the
    decision's comparisons carry): the chosen ``variant`` and ``settings``, and per candidate,
    by cost, its validation P@1 (``metric``, 0..1), the difference in points and p against the
    cheapest, its stage-seconds, and the rule's comparison with its best cheaper candidate.
    ``extra`` (the validation split's size, timings, ...) is added as is."""
    by_name = {c.name: c for c in candidates}
    chosen = by_name[decision.chosen]
    rule_rows = {c.name: c for c in decision.rule}
    validation = []
    for c in decision.vs_cheapest:
        validation.append(
            {
                "candidate": c.name,
                "variant": by_name[c.name].variant,
                "settings": by_name[c.name].settings,
                "stage_seconds": c.cost_s,
                "metric": c.metric,
                "gain_points_vs_cheapest": c.gain_points,
                "p_vs_cheapest": c.p,
                "rule": _row(rule_rows[c.name]),
            }
        )
    return {
        "variant": chosen.variant,
        "candidate": chosen.name,
        "settings": dict(chosen.settings),
        "metric": "P@1",
        "validation": validation,
        "rule": RULE,
        "correction": "holm-bonferroni",
        "alpha": decision.alpha,
        "min_gain_points": decision.min_gain_points,
        **dict(extra or {}),
    }
