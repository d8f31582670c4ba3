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

:func:`run_select` is the command (``pina-spark select``) on a finished run root: the validation
split of :mod:`pina_spark.orchestration.tune` (every train row by cross-validation,
``select.cv_folds``, or with ``0`` the rows carved from TRAIN; the test rows are filtered out in
the scan and never read), one :class:`WorkStep` per aggregate setting
(:func:`work_plan`: the neighbours once per ``neighbors.*`` setting, the aggregation once per
setting, the candidates' variants trained and scored together), each candidate's per-instance
validation P@1 (the evaluate stage's ``per_instance.parquet``, as ``pina-spark compare`` reads
it), its cost in stage-seconds (:func:`candidate_costs`), the choice of
:func:`pina_spark.selection.rule.choose`, and ``selection/selection.json`` plus
``selection/report.md`` published under the root's lease.
"""

import copy
import dataclasses as dc
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError, PinaConfig, SelectConfig, config_from_dict
from pina_spark.config import variants as V
from pina_spark.orchestration.tune import (
    grid_points,
    point_config,
    point_id,
    publish_nodes,
    run_stage,
    work_tables,
)
from pina_spark.selection.rule import (
    CONFIRM_SALT,
    RULE,
    Candidate,
    Comparison,
    Decision,
    choose,
    confirm_half,
)

log = logging.getLogger(__name__)

__all__ = [
    "SelectCandidate",
    "WorkStep",
    "expand_candidates",
    "own_point",
    "base_point",
    "work_plan",
    "candidate_costs",
    "decide",
    "selection_record",
    "selection_markdown",
    "run_select",
    "SELECT_WORK",
    "VALIDATION_NOTE",
    "validation_note",
    "TIER_NO_G",
    "TIER_G",
    "tier_of",
]

#: the work folder of a selection under the run root (derived tables, no test row)
SELECT_WORK = "select_work"
#: what the validation split means, in every record and report
VALIDATION_NOTE = (
    "The vectorizer and g were fit on every train row, so they have seen the validation rows' "
    "texts and edges (their labels are in B_pre); the validation rows' neighbours are "
    "out-of-fold only with neighbors.train_mode: out_of_fold, and the downstream models are "
    "retrained without the validation rows. Validation gains therefore run optimistic; the "
    "bias is shared by every candidate. The test rows are never read."
)


def validation_note(cv_folds: int = 0) -> str:
    """The caveat of a selection's record and report: :data:`VALIDATION_NOTE`, and with
    cross-validation (``select.cv_folds`` >= 2) what is scored.

    Examples
    --------
    >>> validation_note() == VALIDATION_NOTE
    True
    >>> validation_note(5).startswith("5-fold cross-validation")
    True
    """
    if cv_folds < 2:
        return VALIDATION_NOTE
    return (
        f"{cv_folds}-fold cross-validation: every train row is a validation row once, scored by "
        f"downstream models trained without its fold ({cv_folds} fits per step). " + VALIDATION_NOTE
    )


@dc.dataclass(frozen=True)
class SelectCandidate:
    """One candidate of a selection.

    Attributes:
        name: ``VARIANT[/LABEL_FEATURES][ KEY=VALUE ...]``, unique within a selection.
        variant: the ``features`` variant it trains and scores.
        settings: the config keys (dotted) and values it runs with.
        family: its ``select.candidates`` entry.
        base: whether it is at the base grid point (:func:`base_point`): the rule takes
            another grid point only on a significant gain over it.
    """

    name: str
    variant: str
    settings: dict[str, Any]
    family: str | None = None
    base: bool = True


def own_point(config: Mapping[str, Any], grid: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the keys ``grid`` searches in ``config`` (a config as a dict: the root's
    manifest records its run's; ``None`` where a key is absent).

    Examples
    --------
    >>> cfg = config_from_dict({"output": "/r"})
    >>> own_point(cfg.to_dict(), cfg.select.grid)
    {'neighbors.k': 5, 'aggregate.v1_weight': 1.0}
    >>> own_point({}, {"neighbors.k": [5]})
    {'neighbors.k': None}
    """
    out = {}
    for key in grid:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[key] = node
    return out


def _root_own_point(cfg: PinaConfig, root: str) -> dict[str, Any]:
    """The base point's source: the grid keys' values of the run that made ``root`` (its
    manifest's config), which the root's models and full-run metrics belong to; the selection
    config's own where the manifest holds none. A difference is logged."""
    from pina_spark.storage.manifest import Manifest

    mine = own_point(cfg.to_dict(), cfg.select.grid)
    recorded = Manifest(storage.RunPaths(root).manifest).data.get("config")
    if not isinstance(recorded, Mapping):
        return mine
    theirs = own_point(recorded, cfg.select.grid)
    if theirs != mine:
        log.warning(
            "select: %s was run with %s, this config says %s: the base grid point follows the "
            "root's run",
            root,
            theirs,
            mine,
        )
    return theirs


def base_point(sel: SelectConfig, own: Mapping[str, Any] | None) -> dict[str, Any]:
    """The grid point the rule prefers: the run's own values (``own``) when they are a point
    of ``sel.grid``, else the grid's first point (its keys' first values, as listed).

    Examples
    --------
    >>> sel = SelectConfig(grid={"neighbors.k": [5, 10]})
    >>> base_point(sel, {"neighbors.k": 10}), base_point(sel, {"neighbors.k": 3})
    ({'neighbors.k': 10}, {'neighbors.k': 5})
    """
    points = grid_points(sel.grid) if sel.grid else [{}]
    mine = {k: (own or {}).get(k) for k in sel.grid}
    return mine if mine in points else points[0]


def expand_candidates(
    sel: SelectConfig, own: Mapping[str, Any] | None = None
) -> list[SelectCandidate]:
    """Every candidate of ``sel``, in ``sel.candidates`` order, grid points within each;
    ``own``: the run's values of the grid's keys (:func:`own_point`), which fix the base point
    (:func:`base_point`)."""
    points = grid_points(sel.grid) if sel.grid else [{}]
    base = base_point(sel, own)
    out = []
    for entry in sel.candidates:
        variant, label_features = SelectConfig.parse_candidate(entry)
        if variant == V.VECTORIZER_ONLY:
            out.append(SelectCandidate(entry, variant, {}, entry))
            continue
        for point in points:
            name = " ".join([entry] + [f"{k}={v}" for k, v in point.items()])
            settings = {"aggregate.label_features": label_features, **point}
            out.append(SelectCandidate(name, variant, settings, entry, point == base))
    return out


#: the cost tiers of a selection (:class:`pina_spark.selection.rule.Candidate` ``tier``): the
#: candidates with g all pay the same pretrain, and differ from each other by seconds of noise
TIER_NO_G, TIER_G = "no_g", "g"


def tier_of(variant: str) -> str:
    """The cost tier of a candidate of ``variant``.

    Examples
    --------
    >>> tier_of("vectorizer_only"), tier_of("pina_naive")
    ('no_g', 'g')
    """
    return TIER_G if variant in V.GRAPH else TIER_NO_G


def _step_row(tier: str, c: Comparison, half: str = "confirmation") -> dict[str, Any]:
    """One comparison of the record; ``half``: the validation half it was measured on, which
    names its metric (``metric_confirmation`` for tier steps, ``metric_selection`` for grid
    points against the base pick)."""
    return {
        "tier": tier,
        "candidate": c.name,
        f"metric_{half}": c.metric,
        "against": c.against,
        "gain_points": c.gain_points,
        "p": c.p,
        "p_holm": c.p_adjusted,
        "pays": c.pays,
        "se_points": c.se_points,
        "detectable_gain_points": c.detectable_points,
    }


def selection_record(
    decision: Decision,
    candidates: Sequence[SelectCandidate],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``selection.json`` record of ``decision`` over ``candidates`` (whose names the
    decision's comparisons carry): the chosen ``variant`` and ``settings``; per candidate, in
    the rule's order (the tier without g first, then by cost), its tier, its validation P@1
    (``metric``, 0..1, every validation row; and on the selection half, which picks within a
    tier), the difference in points and p against the first, its stage-seconds, whether it is at
    the base grid point and whether it is its tier's pick or rival; the rule's ``contenders``:
    every comparison on the confirmation half (each dearer tier's pick, and its rival where it
    has one, against the best cheaper contender; ``role``, and ``decides``: whether it is the
    tier's deciding step); its ``steps``, the deciding one per tier; and its ``refinement``:
    each grid alternative against the base pick of its tier on the selection half
    (``metric_selection``). ``extra`` (the validation split's size, timings, ...) is added as
    is."""
    by_name = {c.name: c for c in candidates}
    chosen = by_name[decision.chosen]
    validation = []
    for c in decision.vs_cheapest:
        tier = decision.tier_of(c.name)
        validation.append(
            {
                "candidate": c.name,
                "variant": by_name[c.name].variant,
                "settings": by_name[c.name].settings,
                "tier": tier.name,
                "stage_seconds": c.cost_s,
                "metric": c.metric,
                "metric_selection": tier.selection_metrics[tier.candidates.index(c.name)],
                "base": by_name[c.name].base,
                "picked": tier.pick == c.name,
                "rival": tier.rival == c.name,
                "gain_points_vs_cheapest": c.gain_points,
                "p_vs_cheapest": c.p,
            }
        )
    return {
        "variant": chosen.variant,
        "candidate": chosen.name,
        "settings": dict(chosen.settings),
        "metric": "P@1",
        "validation": validation,
        "steps": [_step_row(t.name, t.step) for t in decision.tiers],
        "contenders": [
            {
                **_step_row(t.name, c),
                "role": "pick" if c.name == t.pick else "rival",
                "decides": c.name == t.step.name,
            }
            for t in decision.tiers
            for c in t.contenders
        ],
        "refinement": [
            _step_row(t.name, c, "selection") for t in decision.tiers for c in t.refinement
        ],
        "rule": RULE,
        "correction": "holm-bonferroni",
        "alpha": decision.alpha,
        "min_gain_points": decision.min_gain_points,
        "halves": {
            "split": "confirmation half: low bit of sha1(salt NUL str(instance_id))[-1]",
            "salt": CONFIRM_SALT,
            "n_selection": decision.n_selection,
            "n_confirmation": decision.n_confirmation,
        },
        **dict(extra or {}),
    }


def _key(settings: Mapping[str, Any]) -> str:
    return json.dumps(dict(settings), sort_keys=True, default=str)


@dc.dataclass(frozen=True)
class WorkStep:
    """One aggregate setting of a selection and the candidates scored at it.

    Attributes:
        settings: the config keys of the step (those of its candidates; ``{}`` for the
            ``vectorizer_only`` step, which keeps the run's own values).
        variants: the ``features`` variants trained and scored at it (``train.variants``).
        candidates: the names of the candidates it scores, one per variant.
    """

    settings: dict[str, Any]
    variants: tuple[str, ...]
    candidates: tuple[str, ...]

    @property
    def needs_neighbors(self) -> bool:
        """Whether the step reads neighbours (a variant with g)."""
        return V.needs_neighbors(self.variants)

    @property
    def neighbors_key(self) -> str:
        """The step's ``neighbors.*`` settings and g variants as one string: steps sharing it
        share the neighbours table (the neighbours stage predicts the g variants of the step's
        ``train.variants`` only)."""
        nb = {k: v for k, v in self.settings.items() if k.startswith("neighbors.")}
        return _key({**nb, "g variants": list(V.g_variants(self.variants))})

    @property
    def id(self) -> str:
        """Stable short id (the work manifest's run id of its stages)."""
        return point_id({"variants": list(self.variants), **self.settings})


def work_plan(candidates: Sequence[SelectCandidate]) -> list[WorkStep]:
    """The steps that score ``candidates``: ``vectorizer_only`` first (no neighbours: the
    aggregation writes V0 alone, as a production run of it does), then one step per setting of
    the candidates with g, grouped by their ``neighbors.*`` settings so that consecutive steps
    share the neighbours table.

    Examples
    --------
    >>> steps = work_plan(expand_candidates(SelectConfig()))
    >>> len(steps), steps[0].variants, steps[1].variants
    (9, ('vectorizer_only',), ('pina_naive', 'pina'))
    >>> len({s.neighbors_key for s in steps if s.needs_neighbors})  # neighbours runs
    2
    >>> steps[1].settings
    {'aggregate.label_features': 'text', 'neighbors.k': 5, 'aggregate.v1_weight': 0.5}
    """
    v0 = [c for c in candidates if c.variant == V.VECTORIZER_ONLY]
    steps = [WorkStep({}, (V.VECTORIZER_ONLY,), (v0[0].name,))] if v0 else []
    groups: dict[str, dict[str, list[SelectCandidate]]] = {}
    for c in candidates:
        if c.variant == V.VECTORIZER_ONLY:
            continue
        nb = _key({k: v for k, v in c.settings.items() if k.startswith("neighbors.")})
        groups.setdefault(nb, {}).setdefault(_key(c.settings), []).append(c)
    for by_setting in groups.values():
        group = []
        for cs in by_setting.values():
            order = sorted(cs, key=lambda c: V.ALL.index(c.variant))
            group.append(
                WorkStep(
                    dict(cs[0].settings),
                    tuple(c.variant for c in order),
                    tuple(c.name for c in order),
                )
            )
        # steps that need the same g variants next to each other: they share a neighbours run
        steps += sorted(group, key=lambda s: V.g_variants(s.variants))
    return steps


def g_seconds(card: Any, pretrain_s: float, variants: Iterable[str]) -> dict[str, float] | None:
    """The pretrain seconds a retraining run that fits only ``variant``'s g would spend, per
    variant: its own fits (``card.variants[v]["fits_train_s"]``, every fold) plus the stage's
    seconds that no fit accounts for (reading features, the vectorizer's share: ``pretrain_s``
    less every fit of the card). ``None`` where the card (a :class:`~pina_spark.models.card.
    ModelCard`, or ``None``) lacks a variant's fit seconds: then every g candidate is priced at
    the whole stage.

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> card = NS(variants={"pina": {"fits_train_s": 700.0}, "pina_naive": {"fits_train_s": 250.0}})
    >>> g_seconds(card, 990.0, ["pina", "pina_naive"])
    {'pina': 740.0, 'pina_naive': 290.0}
    >>> g_seconds(NS(variants={"pina": {}}), 990.0, ["pina"]) is None
    True
    """
    variants = sorted(set(variants))
    fits: dict[str, float] = {}
    for v, d in (getattr(card, "variants", None) or {}).items():
        x = (d or {}).get("fits_train_s")
        if x is not None:
            fits[v] = float(x)
    if not variants or any(v not in fits for v in variants):
        return None
    shared = max(0.0, pretrain_s - sum(fits.values()))
    return {v: round(fits[v] + shared, 3) for v in variants}


def candidate_costs(
    steps: Sequence[WorkStep],
    measured: Mapping[str, Mapping[str, Any]],
    pretrain_s: float | Mapping[str, float],
) -> dict[str, dict[str, float]]:
    """Each candidate's stage-seconds, as a production run of it would spend them: ``pretrain``
    (for a candidate with g: ``pretrain_s``, the run root's stage, or per variant its own g's
    seconds, :func:`g_seconds`), plus the ``neighbors`` (with g), ``aggregate`` and
    ``train`` seconds measured for its step (``measured[step.id]``: ``neighbors_s``,
    ``aggregate_s``, ``train_s`` and ``train_s_by_variant``, the train stage's fit time per
    variant, by which a step's train seconds are shared among its variants). The stages every
    candidate pays alike (graph, vectorizer, embed, evaluate) are left out.

    Examples
    --------
    >>> steps = [WorkStep({}, ("vectorizer_only",), ("vo",)),
    ...          WorkStep({"neighbors.k": 5}, ("pina_naive", "pina"), ("pn", "p"))]
    >>> m = {steps[0].id: {"aggregate_s": 1.0, "train_s": 2.0},
    ...      steps[1].id: {"neighbors_s": 3.0, "aggregate_s": 2.0, "train_s": 4.0,
    ...                    "train_s_by_variant": {"pina_naive": 1.0, "pina": 3.0}}}
    >>> c = candidate_costs(steps, m, pretrain_s=10.0)
    >>> c["vo"]["total_s"], c["pn"]["total_s"], c["p"]["train_s"]
    (3.0, 16.0, 3.0)
    >>> candidate_costs(steps, m, {"pina_naive": 4.0, "pina": 8.0})["pn"]["total_s"]
    10.0
    """

    def g_price(v: str) -> float:
        if v not in V.GRAPH:
            return 0.0
        return float(pretrain_s[v]) if isinstance(pretrain_s, Mapping) else pretrain_s

    out: dict[str, dict[str, float]] = {}
    for step in steps:
        m = measured[step.id]
        by_v = {v: float((m.get("train_s_by_variant") or {}).get(v) or 0.0) for v in step.variants}
        total_fit = sum(by_v.values())
        for v, name in zip(step.variants, step.candidates):
            share = by_v[v] / total_fit if total_fit > 0 else 1.0 / len(step.variants)
            row = {
                "pretrain_s": g_price(v),
                "neighbors_s": float(m.get("neighbors_s") or 0.0) if v in V.GRAPH else 0.0,
                "aggregate_s": float(m.get("aggregate_s") or 0.0),
                "train_s": float(m.get("train_s") or 0.0) * share,
            }
            row = {k: round(x, 3) for k, x in row.items()}
            row["total_s"] = round(sum(row.values()), 3)
            out[name] = row
    return out


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def _signed(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}"


def _p(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def selection_markdown(rec: Mapping[str, Any]) -> str:
    """The selection's report (``selection/report.md``): the choice and its settings first,
    the rule, the caveat on the validation split, the rule's steps (one per cost tier, with the
    gain each could detect), the grid points tested against their tier's base pick, then one
    row per candidate in the rule's order (the tier without g first, then by cost).

    Examples
    --------
    >>> rec = {"variant": "vectorizer_only", "candidate": "vectorizer_only", "settings": {},
    ...        "rule": "r", "alpha": 0.05, "min_gain_points": 0.5, "note": "n", "n_valid": 3,
    ...        "halves": {"n_selection": 2, "n_confirmation": 1},
    ...        "steps": [{"tier": "no_g", "candidate": "vectorizer_only",
    ...                   "metric_confirmation": 1.0, "against": None, "gain_points": None,
    ...                   "p_holm": None, "pays": False}],
    ...        "validation": [{"candidate": "vectorizer_only", "tier": "no_g",
    ...                        "stage_seconds": 2.0, "metric": 0.5, "metric_selection": 0.25,
    ...                        "picked": True, "gain_points_vs_cheapest": None,
    ...                        "p_vs_cheapest": None}]}
    >>> print(selection_markdown(rec).splitlines()[0])
    # Selection: `vectorizer_only` (variant `vectorizer_only`)
    >>> selection_markdown(rec).splitlines()[-1]
    '| **vectorizer_only** | no_g | 2.0 | 50.00 | 25.00 | yes | yes |  |  |'
    """
    settings = rec.get("settings") or {}
    shown = ", ".join(f"`{k}: {v}`" for k, v in settings.items()) or "none (the run's own values)"
    halves = rec.get("halves") or {}
    lines = [
        f"# Selection: `{rec['candidate']}` (variant `{rec['variant']}`)",
        "",
        f"Production runs with `run.models` on this root follow it (select.follow). "
        f"Settings: {shown}.",
        "",
        f"Rule: {rec['rule']} (correction: Holm-Bonferroni, alpha {rec['alpha']}, "
        f"min_gain_points {rec['min_gain_points']}).",
        "",
        f"Validation: {rec.get('n_valid')} rows "
        + (
            f"of train, in {rec['cv_folds']}-fold cross-validation, "
            if (rec.get("cv_folds") or 0) >= 2
            else "carved from train, "
        )
        + f"{rec.get('n_valid_scored', rec.get('n_valid'))} of them scored (with a label): "
        f"{halves.get('n_selection')} in the selection half, "
        f"{halves.get('n_confirmation')} in the confirmation half. **Caveat:** {rec['note']}",
        "",
        "Values: validation P@1 in percent, gains in points, cost in stage-seconds measured by "
        "this selection ("
        + (
            "pretrain: each g variant's own fits from the model card, plus the stage's seconds "
            "outside the fits"
            if rec.get("g_cost") == "per_variant"
            else "pretrain: the run's whole stage, from its manifest"
        )
        + ").",
        "",
        "## The rule's steps (confirmation half)",
        "",
        "| tier | contender | role | P@1 | against | gain | p (Holm) | pays | decides "
        "| detectable gain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    # records before the rival have steps only: one pick per tier, each deciding
    rule_rows = rec.get("contenders") or [
        {**x, "role": "pick", "decides": True} for x in rec.get("steps") or []
    ]
    for r in rule_rows:
        det = r.get("detectable_gain_points")
        lines.append(
            f"| {r['tier']} | {r['candidate']} | {r['role']} | {_pct(r['metric_confirmation'])} | "
            f"{r['against'] or ''} | {_signed(r['gain_points'])} | {_p(r['p_holm'])} | "
            f"{'yes' if r['pays'] else 'no'} | {'yes' if r['decides'] else ''} | "
            f"{'' if det is None else f'{det:.2f}'} |"
        )
    dets = [r.get("detectable_gain_points") for r in rule_rows]
    dets = [d for d in dets if d is not None]
    if dets:
        lines += [
            "",
            f"Detectable gain: the true gain each comparison finds 80% of the time on this many "
            f"confirmation rows (largest here {max(dets):.2f} points); a smaller one is more "
            "likely missed than paid for, and the cheaper tier kept. "
            + (
                "Every train row is scored already (cross-validation): only more labelled "
                "train rows shrink it."
                if (rec.get("cv_folds") or 0) >= 2
                else "More validation rows (`task.validation_fraction`, or every train row "
                "with `select.cv_folds`) shrink it."
            ),
        ]
    refinement = rec.get("refinement") or []
    if refinement:
        lines += [
            "",
            "## Grid points against the base pick (selection half)",
            "",
            "| tier | grid point | P@1 | against | gain | p (Holm) | replaces it |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in refinement:
            lines.append(
                f"| {r['tier']} | {r['candidate']} | {_pct(r['metric_selection'])} | "
                f"{r['against'] or ''} | {_signed(r['gain_points'])} | {_p(r['p_holm'])} | "
                f"{'yes' if r['pays'] else 'no'} |"
            )
    lines += [
        "",
        "## Candidates (P@1 on every validation row, and on the selection half)",
        "",
        "| candidate | tier | stage-s | P@1 | P@1 selection half | base | picked | vs cheapest "
        "| p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rec["validation"]:
        name = (
            f"**{row['candidate']}**" if row["candidate"] == rec["candidate"] else row["candidate"]
        )
        lines.append(
            f"| {name} | {row['tier']} | {row['stage_seconds']:.1f} | {_pct(row['metric'])} | "
            f"{_pct(row['metric_selection'])} | {'yes' if row.get('base', True) else ''} | "
            f"{'yes' if row['picked'] else 'rival' if row.get('rival') else ''} | "
            f"{_signed(row['gain_points_vs_cheapest'])} | {_p(row['p_vs_cheapest'])} |"
        )
    return "\n".join(lines)


def step_config(cfg: PinaConfig, step: WorkStep, work_root: str) -> PinaConfig:
    """The config a step runs with in ``work_root``: the run's, with the step's settings, its
    variants as ``train.variants``, and no report extras (parity, examples, promotion)."""
    data = copy.deepcopy(point_config(cfg, step.settings, work_root).to_dict())
    data["train"]["variants"] = list(step.variants)
    data["evaluate"].update({"parity_max_per_split": 0, "report_examples": 0, "promote": False})
    return config_from_dict(data, source=f"<select step {step.settings}>")


def _require_g(models: str, candidates: Sequence[SelectCandidate]) -> None:
    """Stop before any work when a candidate's variant has no g in the root's models folder (a
    root trained with some of the g variants only: ``train.variants``), naming the fix."""
    from pina_spark.models.card import lacking_g

    # None (no readable card): the neighbours stage names the models folder itself
    lacking = lacking_g(models, sorted({c.variant for c in candidates if c.variant in V.GRAPH}))
    if lacking:
        raise ConfigError(
            f"select.candidates score {', '.join(lacking)}, but {models} fitted no g for "
            f"{'it' if len(lacking) == 1 else 'them'} (its run's train.variants left "
            f"{'it' if len(lacking) == 1 else 'them'} out): drop those candidates, or select "
            "on a run that trained every variant"
        )


def decide(
    candidates: Sequence[SelectCandidate],
    costs: Mapping[str, Mapping[str, float]],
    scores: Mapping[str, Any],
    sel: SelectConfig,
):
    """``(validation ids, Decision)``: the rule of :func:`pina_spark.selection.rule.choose` on
    every candidate's per-row validation P@1 (``scores``: name -> Series by instance id; every
    candidate must have scored the same rows) at its ``costs[name]["total_s"]``, with the
    confirmation half of :func:`~pina_spark.selection.rule.confirm_half`."""
    ids = sorted(set.intersection(*(set(s.index) for s in scores.values())))
    if any(len(s) != len(ids) for s in scores.values()):
        raise OSError("select: the candidates scored different validation rows")
    decision = choose(
        [
            Candidate(
                c.name,
                costs[c.name]["total_s"],
                scores[c.name].loc[ids].to_numpy(),
                tier_of(c.variant),
                c.family,
                c.base,
            )
            for c in candidates
        ],
        alpha=sel.alpha,
        min_gain_points=sel.min_gain_points,
        confirm=confirm_half(ids),
        tier_order=(TIER_NO_G, TIER_G),
    )
    return ids, decision


def g_variant_seconds(
    models: str, pretrain_s: float, candidates: Sequence[SelectCandidate]
) -> dict[str, float] | None:
    """:func:`g_seconds` of the g variants of ``candidates`` from the model card of ``models``
    (``None``: no g candidate, or no per-variant fit seconds)."""
    from pina_spark.models.card import read_model_card

    variants = {c.variant for c in candidates if c.variant in V.GRAPH}
    return g_seconds(read_model_card(models), pretrain_s, variants) if variants else None


def _require_own_models(root: str) -> None:
    """Stop before any work on a root whose run reused another run's models (``run.models``,
    from its manifest's config): its g and vectorizer are that run's, so a selection belongs
    there (and this root has no ``models/`` for the g candidates)."""
    from pina_spark.storage.manifest import Manifest

    manifest = Manifest(storage.RunPaths(root).manifest)
    recorded = manifest.data.get("config")
    other = (recorded.get("run") or {}).get("models") if isinstance(recorded, Mapping) else None
    if other and not storage.same_place(str(other), root):
        raise ConfigError(
            f"{root} was run with the models of {other} (run.models): `pina-spark select` "
            f"chooses for the models of the root that fit them; run it on {other}"
        )
    if not manifest.data.get("stages"):
        raise ConfigError(
            f"{root}: no run there ({manifest.uri} records no stage): `pina-spark select` runs "
            f"on the root of a finished run (check output and --run-date)"
        )


def _pretrain_seconds(root: str) -> float:
    from pina_spark.storage.manifest import Manifest

    st = Manifest(storage.RunPaths(root).manifest).stage("pretrain") or {}
    if st.get("duration_s") is None:
        raise ConfigError(
            f"{storage.RunPaths(root).manifest}: no pretrain duration; `pina-spark select` runs "
            "on a finished run root that fit its own g (run it without run.models)"
        )
    return float(st["duration_s"])


def _measure_step(ctx, step: WorkStep, phase1, phase2, neighbors_s: float | None):
    """Run one step in the work root; ``(measured seconds, {variant: Series of P@1 by id})``.
    ``phase2``: ``[(phase-2 nodes, validation ids), ...]`` of :func:`~pina_spark.orchestration.
    tune.work_tables`, one fit of the downstream models each (one, or one per cross-validation
    fold: the neighbours and the aggregation do not depend on which train rows are held out, so
    they run once). ``neighbors_s``: the seconds of the neighbours run this step shares
    (``None``: run it). With several folds, ``train_s`` and ``train_s_by_variant`` are the mean
    of a fit (what a production run pays once), ``train_fits_s`` their sum."""
    import pandas as pd

    from pina_spark.stages.evaluate.stage import read_metrics, read_per_instance

    spark, work = ctx.spark, ctx.paths
    m: dict[str, Any] = {}
    publish_nodes(spark, work, phase1)
    if step.needs_neighbors:
        if neighbors_s is None:
            t0 = time.time()
            run_stage(ctx, "neighbors", step.id)
            neighbors_s = time.time() - t0
        m["neighbors_s"] = neighbors_s
    t0 = time.time()
    run_stage(ctx, "aggregate", step.id)
    m["aggregate_s"] = time.time() - t0
    fits: list[float] = []
    by_variant: dict[str, list[float]] = {v: [] for v in step.variants}
    parts: dict[str, list[pd.Series]] = {v: [] for v in step.variants}
    for p2, ids in phase2:
        publish_nodes(spark, work, p2)
        t0 = time.time()
        run_stage(ctx, "train", step.id)
        fits.append(time.time() - t0)
        run_stage(ctx, "evaluate", step.id)
        metrics = (read_metrics(work.root) or {}).get("variants", {})
        per = read_per_instance(work.root)
        if per is None:
            raise OSError(
                f"select step {step.id}: {work.table(storage.EVAL)} has no per-instance file"
            )
        held_out = set(map(str, ids))
        for v in step.variants:
            by_variant[v].append(float((metrics.get(v) or {}).get("train_s") or 0.0))
            sub = per[per["variant"] == v]
            if sub.empty:
                raise OSError(f"select step {step.id}: variant {v} was not scored")
            if not set(sub["instance_id"].astype(str)) <= held_out:
                raise OSError(
                    f"select step {step.id}: variant {v} scored rows outside the validation "
                    "rows its downstream model was trained without"
                )
            parts[v].append(sub.set_index("instance_id")["P@1"].astype("float64"))
    m["train_s"] = sum(fits) / len(fits)
    m["train_s_by_variant"] = {v: sum(t) / len(t) for v, t in by_variant.items()}
    if len(fits) > 1:
        m["train_fits"] = len(fits)
        m["train_fits_s"] = sum(fits)
    scores: dict[str, pd.Series] = {}
    for v, ps in parts.items():
        scores[v] = pd.concat(ps)
        if scores[v].index.has_duplicates:
            raise OSError(f"select step {step.id}: variant {v} scored a row in two folds")
    return m, scores


#: per-step results in the work folder (``<select_work>/steps/<step id>/``): a selection that
#: stops part-way resumes from the steps it finished, when nothing they depend on changed
STEPS_DIR = "steps"
#: the root's stages whose outputs every step reads (their manifest fingerprints enter a
#: step's key, with the models' version tokens)
_UPSTREAM = ("graph", "vectorizer", "embed", "pretrain")
#: config sections that do not change a step's result: the choice rule's own (``select``:
#: a rerun with another alpha reuses every step), the run's bookkeeping, tuning, fault drills,
#: and the Spark session's settings (``spark``: no stage fingerprint holds them either), so a
#: selection that ran out of memory resumes after ``--set spark.conf.spark.driver.memory=8g``
_NOT_IN_STEP_KEY = ("select", "run", "tune", "faults", "spark")


def root_state(root: str) -> dict[str, Any]:
    """What every step of a selection on ``root`` reads from it: its upstream stage
    fingerprints and its models' version tokens (read once per selection)."""
    from pina_spark.selection.artifact import models_versions
    from pina_spark.storage.manifest import Manifest

    man = Manifest(storage.RunPaths(root).manifest)
    return {
        "upstream": {s: (man.stage(s) or {}).get("fingerprint") for s in _UPSTREAM},
        "models": models_versions(root),
    }


def step_key(scfg: PinaConfig, state: Mapping[str, Any], cv_folds: int = 0) -> str:
    """What a step's result depends on: its own config (every section but
    :data:`_NOT_IN_STEP_KEY`: the validation split, the step's settings and variants), the
    cross-validation folds (``select.cv_folds``, when on) and the root's :func:`root_state`. A
    stored result with another key is not reused.

    Examples
    --------
    >>> import tempfile
    >>> state = root_state(tempfile.mkdtemp())
    >>> a = config_from_dict({"output": "/r/w"})
    >>> b = config_from_dict({"output": "/r/w", "neighbors": {"k": 10}})
    >>> c = config_from_dict({"output": "/r/w", "select": {"alpha": 0.01}})
    >>> step_key(a, state) == step_key(c, state), step_key(a, state) == step_key(b, state)
    (True, False)
    >>> more_heap = config_from_dict(
    ...     {"output": "/r/w", "spark": {"conf": {"spark.driver.memory": "8g"}}})
    >>> step_key(a, state) == step_key(more_heap, state)
    True
    >>> step_key(a, state) == step_key(a, state, cv_folds=5)
    False
    """
    sections = [f.name for f in dc.fields(scfg) if f.name not in _NOT_IN_STEP_KEY]
    doc = {"step": scfg.fingerprint(*sections), **state}
    if cv_folds >= 2:  # the carve-out's keys stay as they were
        doc["cv_folds"] = cv_folds
    return hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _step_uri(work, step: WorkStep) -> str:
    return work.table(STEPS_DIR) + "/" + step.id


def save_step(work, step: WorkStep, key: str, measured: Mapping[str, Any], scores) -> None:
    """Keep one finished step's measured seconds and per-variant validation P@1 (a
    ``{variant: Series by instance_id}``) in the work folder, under ``key``."""
    import pandas as pd

    rows = pd.concat(
        [
            s.rename("P@1").rename_axis("instance_id").reset_index().assign(variant=v)
            for v, s in scores.items()
        ],
        ignore_index=True,
    )
    uri = _step_uri(work, step)
    storage.write_bytes(uri + "/scores.json", rows.to_json(orient="records").encode())
    storage.write_bytes(
        uri + "/step.json",
        json.dumps(
            {"key": key, "settings": step.settings, "measured": dict(measured)},
            sort_keys=True,
            default=str,
        ).encode(),
    )


def load_step(work, step: WorkStep, key: str | None):
    """``(measured, {variant: Series by instance_id})`` of a step kept under ``key`` by
    :func:`save_step`; ``None`` where there is none, or it was kept under another key, or it
    cannot be read (it is then measured again). ``key=None`` takes whatever is kept (a replay
    of a finished selection's rule, ``benchmarks/selection_cost_replay.py``)."""
    import pandas as pd

    uri = _step_uri(work, step)
    try:
        meta = json.loads(storage.read_bytes(uri + "/step.json") or b"null")
        raw = storage.read_bytes(uri + "/scores.json") if meta else None
        if not meta or (key is not None and meta.get("key") != key) or raw is None:
            return None
        rows = pd.DataFrame(json.loads(raw))
        scores = {
            v: g.set_index("instance_id")["P@1"].astype("float64")
            for v, g in rows.groupby("variant")
        }
    except (ValueError, KeyError, TypeError) as e:
        log.warning("select step %s: kept result unreadable (%s); measuring it again", step.id, e)
        return None
    if set(scores) != set(step.variants):
        return None
    return meta["measured"], scores


def run_select(cfg: PinaConfig, spark=None, run_id: str | None = None) -> dict[str, Any]:
    """``pina-spark select``: score every candidate of ``cfg.select`` on the validation split of
    the finished run root ``cfg.output`` (``run.run_date``), choose with the rule, and publish
    ``selection/selection.json`` and ``selection/report.md`` under the root's lease. Returns the
    record (as published, less ``format`` and ``models``).

    Example::

        rec = run_select(load_config("conf/local.yaml"))
        rec["variant"]  # 'vectorizer_only'
    """
    from pina_spark.selection.artifact import publish_selection, selection_uri
    from pina_spark.stages import StageContext
    from pina_spark.storage.manifest import Manifest

    src = storage.RunPaths(cfg.output, cfg.run.run_date)
    root = src.root
    if cfg.run.models and not storage.same_place(cfg.run.models, root):
        raise ConfigError(
            f"run.models={cfg.run.models}: `pina-spark select` chooses for the models of the "
            f"root it runs on ({root}); run it on the root that fit them, without run.models"
        )
    _require_own_models(root)
    base = base_point(cfg.select, _root_own_point(cfg, root))
    candidates = expand_candidates(cfg.select, base)
    steps = work_plan(candidates)
    work = storage.RunPaths(src.table(SELECT_WORK))
    step_cfgs = [step_config(cfg, s, work.output) for s in steps]  # all checked before any work
    graph = any(c.variant in V.GRAPH for c in candidates)
    pretrain_s = _pretrain_seconds(root) if graph else 0.0
    _require_g(src.table(storage.MODELS), candidates)
    run_id = run_id or uuid.uuid4().hex[:12]
    log.info(
        "select: %d candidates in %d steps (%d neighbours runs) on %s",
        len(candidates),
        len(steps),
        len({s.neighbors_key for s in steps if s.needs_neighbors}),
        root,
    )
    t_all = time.time()
    with storage.acquire_lease(
        root, run_id, stale_s=cfg.run.lease_stale_s, heartbeat_s=cfg.run.lease_heartbeat_s
    ):
        if spark is None:
            from pina_spark.orchestration.session import get_spark

            spark = get_spark(cfg.spark)
        # derived tables: the test rows are filtered out in the scan and never materialised
        cv_folds = cfg.select.cv_folds
        phase1, phase2, valid_ids, n_train = work_tables(spark, cfg, src, work, cv_folds)
        manifest = Manifest(work.manifest)
        measured: dict[str, dict[str, Any]] = {}
        scores: dict[str, Any] = {}
        nb_seconds: dict[str, float] = {}
        last_nb: str | None = None
        resumed: list[str] = []
        state = root_state(root)
        for step, scfg in zip(steps, step_cfgs):
            ctx = StageContext(
                spark=spark,
                cfg=scfg,
                paths=work,
                manifest=manifest,
                models_root=src.table(storage.MODELS),
            )
            key = step_key(scfg, state, cv_folds)
            kept = None if cfg.run.force else load_step(work, step, key)  # --force: recompute
            if kept is not None:
                m, by_variant = kept
                resumed.append(step.id)
                log.info("select step %s %s: kept result reused", step.id, step.settings)
            else:
                shared = (
                    nb_seconds.get(step.neighbors_key) if step.neighbors_key == last_nb else None
                )
                t_step = time.time()
                m, by_variant = _measure_step(ctx, step, phase1, phase2, shared)
                m["step_s"] = round(time.time() - t_step, 3)
                save_step(work, step, key, m, by_variant)
            if step.needs_neighbors and kept is None:
                nb_seconds[step.neighbors_key] = m["neighbors_s"]
                last_nb = step.neighbors_key
            measured[step.id] = m
            for v, name in zip(step.variants, step.candidates):
                scores[name] = by_variant[v]
            log.info(
                "select step %s %s: %s",
                step.id,
                step.settings,
                {n: round(float(scores[n].mean()), 4) for n in step.candidates},
            )
        g_s = g_variant_seconds(src.table(storage.MODELS), pretrain_s, candidates)
        costs = candidate_costs(steps, measured, pretrain_s if g_s is None else g_s)
        ids, decision = decide(candidates, costs, scores, cfg.select)
        extra = {
            "note": validation_note(cv_folds),
            "validation_fraction": None if cv_folds >= 2 else cfg.task.validation_fraction,
            "cv_folds": cv_folds,
            "n_valid": len(valid_ids),
            "n_valid_scored": len(ids),
            "n_train": n_train,
            "cost_basis": (
                "stage-seconds a production run of the candidate spends on the stages where "
                "candidates differ: pretrain (candidates with g: "
                + (
                    "the run's whole stage, from its manifest; its model card lacks per-variant "
                    "fit seconds"
                    if g_s is None
                    else "its variant's own g fits from the model card, plus the stage's "
                    "seconds outside the fits, from the manifest"
                )
                + "), neighbors (with g), aggregate and train (its share), measured by this "
                "selection"
            ),
            "g_cost": "whole_stage" if g_s is None else "per_variant",
            "costs": costs,
            "pretrain_s": pretrain_s,
            "pretrain_s_by_variant": g_s,
            "seconds": round(time.time() - t_all, 1),
            "resumed_steps": resumed,
            "base_point": base,
            # the steps' own seconds, kept ones included: what the selection cost from scratch
            # (less the work tables); None where a kept step predates the field
            "steps_seconds": (
                round(sum(float(m["step_s"]) for m in measured.values()), 1)
                if all("step_s" in m for m in measured.values())
                else None
            ),
        }
        rec = selection_record(decision, candidates, extra)
        publish_selection(spark, root, rec, run_id, report=selection_markdown(rec))
    log.info(
        "select: %s chosen in %.1fs; %s and report.md beside it",
        decision.chosen,
        time.time() - t_all,
        selection_uri(root),
    )
    return rec
