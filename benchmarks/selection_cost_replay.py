"""Replay a finished selection's rule from its kept steps under two cost bases (issue #35).

``pina-spark select`` prices a candidate with g at its own variant's g fits (the model card's
``variants.<v>.fits_train_s``) plus the pretrain stage's seconds outside the fits
(``per_variant``), or, where the card lacks those, at the root's whole pretrain stage
(``whole_stage``; selections before the per-variant price used it throughout). This script
applies the same rule (:func:`pina_spark.selection.rule.choose`, through
:func:`pina_spark.orchestration.select.decide`) to the same per-row validation scores under both
bases, so a choice that turns on the price of g shows: the price orders the candidates within
the g tier (the tier without g always comes first, whatever the seconds). It reads no test row
and starts no Spark; the command's own ``selection.json`` stays the result, and the replay under
the record's basis (``g_cost``) must reproduce its choice (it exits 1 where it does not). A
selection made before the tiers' order was fixed (8c9a38d), in which a g candidate measured
cheaper than ``vectorizer_only``, replays to another choice: rerun ``pina-spark select --force``
there.

Usage::

    python benchmarks/selection_cost_replay.py --config conf/citeulike-t.yaml \\
        --root runs/citeulike-t [--set KEY=VALUE ...] [--json OUT]

Prints, per cost basis, the chosen candidate and every contender the rule tested, then each
base candidate with g on the confirmation half against ``vectorizer_only`` (gain in points,
paired t-test p).
"""

import argparse
import json
import sys

import numpy as np
from scipy.stats import ttest_rel

from pina_spark import storage
from pina_spark.config import load_config
from pina_spark.config import variants as V
from pina_spark.orchestration import select as S
from pina_spark.selection.artifact import selection_uri
from pina_spark.selection.rule import confirm_half


def _kept_steps(root, steps, cv_folds):
    work = storage.RunPaths(storage.RunPaths(root).table(S.SELECT_WORK))
    measured, scores = {}, {}
    for st in steps:
        kept = S.load_step(work, st, None)
        if kept is None:
            sys.exit(f"{root}: no kept step {st.id} {st.settings}: run `pina-spark select` first")
        m, by_variant = kept
        fits = m.get("train_fits", 1)
        if cv_folds >= 2 and fits != cv_folds:
            sys.exit(f"{root}: step {st.id} was kept with {fits} fits, the record has {cv_folds}")
        measured[st.id] = m
        for v, name in zip(st.variants, st.candidates, strict=True):
            scores[name] = by_variant[v]
    return measured, scores


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--root", required=True, help="the run root that `pina-spark select` ran on")
    ap.add_argument("--json", help="write the replay here")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override the selection ran with (e.g. select.grid={}), repeatable",
    )
    a = ap.parse_args(argv)
    raw = storage.read_bytes(selection_uri(a.root))
    if raw is None:
        sys.exit(f"{a.root}: no selection; run `pina-spark select` first")
    rec = json.loads(raw)
    cv = int(rec.get("cv_folds") or 0)
    cfg = load_config(a.config, overrides=[*a.set, f"output={a.root}", f"select.cv_folds={cv}"])
    cands = S.expand_candidates(cfg.select, dict(rec["base_point"]))
    recorded = sorted(r["candidate"] for r in rec.get("validation") or [])
    if recorded and sorted(c.name for c in cands) != recorded:
        sys.exit(
            f"{a.root}: the config's select section expands to other candidates than the "
            f"record's ({len(cands)} against {len(recorded)}): pass the --set overrides the "
            "selection ran with"
        )
    steps = S.work_plan(cands)
    measured, scores = _kept_steps(a.root, steps, cv)
    models = storage.RunPaths(a.root).table(storage.MODELS)
    per_variant = S.g_variant_seconds(models, rec["pretrain_s"], cands)
    if per_variant is None:
        sys.exit(
            f"{a.root}: no g candidate, or {models} has no model card with per-variant g fit "
            "seconds"
        )
    recorded_basis = rec.get("g_cost", "whole_stage")
    out = {
        "root": a.root,
        "recorded": rec["candidate"],
        "recorded_basis": recorded_basis,
        "cv_folds": cv,
        "bases": {},
    }
    for basis, pretrain in (("whole_stage", rec["pretrain_s"]), ("per_variant", per_variant)):
        costs = S.candidate_costs(steps, measured, pretrain)
        ids, d = S.decide(cands, costs, scores, cfg.select)
        steps_out = [
            {
                "tier": t.name,
                "candidate": c.name,
                "role": "pick" if c.name == t.pick else "rival",
                "cost_s": round(costs[c.name]["total_s"], 1),
                "gain_points": c.gain_points,
                "p_holm": c.p_adjusted,
                "pays": c.pays,
                "decides": c.name == t.step.name,
            }
            for t in d.tiers
            for c in t.contenders
        ]
        out["bases"][basis] = {"chosen": d.chosen, "steps": steps_out}
        print(f"{basis}: chosen {d.chosen}")
        for s in steps_out:
            g = "" if s["gain_points"] is None else f" gain {s['gain_points']:+.2f}"
            p = "" if s["p_holm"] is None else f" p_holm {s['p_holm']:.3g}"
            print(
                f"  {s['tier']} {s['role']}: {s['candidate']} ({s['cost_s']} s){g}{p} "
                f"pays={s['pays']}{' decides' if s['decides'] else ''}"
            )
    out["g_seconds_per_variant"] = {v: round(x, 1) for v, x in per_variant.items()}
    conf = confirm_half(ids)
    vo = scores[V.VECTORIZER_ONLY].loc[ids].to_numpy()
    print("base candidates with g, confirmation half, against vectorizer_only:")
    for c in cands:
        if c.base and c.variant in V.GRAPH:
            x = scores[c.name].loc[ids].to_numpy()
            gain = 100.0 * float(np.mean(x[conf]) - np.mean(vo[conf]))
            p = float(ttest_rel(x[conf], vo[conf]).pvalue)
            sel = 100.0 * float(np.mean(x[~conf]))
            out.setdefault("confirmation", {})[c.name] = {"gain_points": gain, "p": p}
            print(f"  {c.name}: selection half {sel:.2f}, confirmation {gain:+.2f} (p {p:.3g})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1, sort_keys=True)
    if out["bases"][recorded_basis]["chosen"] != rec["candidate"]:
        print(f"the {recorded_basis} replay does not reproduce the record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
