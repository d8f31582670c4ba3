"""Markdown rows for RESULTS.md from a run's ``eval*/metrics.json`` files (no hand copying).

Usage::

    python benchmarks/results_table.py runs/citeulike-t/eval_out_of_fold/metrics.json \\
        [--in-sample runs/citeulike-t/eval_in_sample/metrics.json]

Prints one table: baseline, vectorizer_only, then pina_naive and pina for each metrics file given
(labelled out_of_fold / in_sample), with P@1/3/5, P@10, R@10 (percent), relative P@1 against
baseline, the paired t-test p-values against baseline and, where present, pina against
vectorizer_only.

Encoder ablation (issue #18), one row per run and variant, from each run root's
``eval/metrics.json``, ``eval/encoder_parity.json`` and ``models/model_card.json``::

    python benchmarks/results_table.py --ablation runs/citeulike-t runs/citeulike-t-contrastive

Columns: encoder, label features (``aggregate.label_features`` of the run's last aggregate
stage), variant, P@1/3/5, relative P@1 and p (P@1) against baseline, p (P@1) against
vectorizer_only, g's held-out P@1 (``eval/pretrain.json``, pina / pina_naive rows), fine-tuning
seconds and pairs used, and the vectorizer's train - test parity
gaps (cos_margin, P@1; ``pina_spark/models/parity.py``).

Variant selection (issue #35), one row per data set and a pooled row, from each run root's
``selection/selection.json`` (``pina-spark select``) and the test rows' per-instance P@1
(``eval/per_instance.parquet``)::

    python benchmarks/results_table.py --selection instacart=runs/instacart \
        citeulike-t=runs/citeulike-t[,runs/citeulike-t-production] [--json OUT]

The selection's test P@1 is read from the root's own evaluation where the chosen settings are
the root's (``vectorizer_only`` always is), else from the production run given after the comma
(a run with ``run.models`` = the root, which followed the selection). Columns: the choice, its
validation P@1, its test P@1, the best fixed variant on test (chosen in hindsight), the
selection minus that variant (points, 95% paired t interval: the non-inferiority check), the
neighbours' margin (``pina`` minus ``vectorizer_only``) on test and on validation with p, and the
selection's seconds beside the full run's stage-seconds. The pooled row concatenates the data
sets' per-instance differences.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_ci import paired, per_instance  # noqa: E402


def _p(x):
    if x is None:
        return "—"
    return (
        f"{x:.2g}" if x < 0.001 else f"{x:.3f}".rstrip("0").rstrip(".") if x < 0.1 else f"{x:.2f}"
    )


def rows(m, label):
    v = m["variants"]
    base = v["baseline"]["P@1"]
    sig = m.get("significance", {})
    out = []
    for name in ("baseline", "vectorizer_only", "pina_naive", "pina"):
        if name not in v or (label != "out_of_fold" and name in ("baseline", "vectorizer_only")):
            continue
        x = v[name]
        s = sig.get(f"{name}_vs_baseline", {})
        rel = "—" if name == "baseline" else f"{100 * (x['P@1'] / base - 1):+.2f}%"
        vs_vo = (
            sig.get(f"{name}_vs_vectorizer_only", {}).get("P@1")
            if name.startswith("pina")
            else None
        )
        tag = name if name in ("baseline", "vectorizer_only") else f"{name}, {label}"
        out.append(
            f"| {tag} | {100 * x['P@1']:.2f} | {100 * x['P@3']:.2f} | "
            f"{100 * x['P@5']:.2f} | {100 * x['P@10']:.2f} | {100 * x['R@10']:.2f} | "
            f"{rel} | {_p(s.get('P@1'))} | {_p(s.get('P@3'))} | {_p(s.get('P@5'))} | "
            f"{_p(vs_vo) if name.startswith('pina') else '—'} |"
        )
    return out


def _load(path):
    return json.load(open(path)) if os.path.exists(path) else {}


def ablation_rows(root):
    """Rows of the encoder ablation for one run root."""
    m = _load(os.path.join(root, "eval", "metrics.json"))
    card = _load(os.path.join(root, "models", "model_card.json"))
    parity = m.get("encoder_parity") or _load(os.path.join(root, "eval", "encoder_parity.json"))
    enc = card.get("vectorizer", {}).get("kind") or parity.get("encoder") or "?"
    tune = card.get("contrastive") or card.get("xtransformer") or {}
    secs = card.get("times_s", {}).get("fine_tune", tune.get("seconds"))
    pairs = tune.get("pairs", tune.get("rows"))
    gap = parity.get("gap", {})
    held = _load(os.path.join(root, "eval", "pretrain.json")).get("variants", {})
    agg = _load(os.path.join(root, "_manifest.json")).get("stages", {}).get("aggregate", {})
    lf = agg.get("stats", {}).get("label_features", "text")
    v, sig = m["variants"], m.get("significance", {})
    base = v["baseline"]["P@1"]
    out = []
    for name in ("baseline", "vectorizer_only", "pina_naive", "pina"):
        if name not in v:
            continue
        x = v[name]
        rel = "—" if name == "baseline" else f"{100 * (x['P@1'] / base - 1):+.2f}%"
        p_b = sig.get(f"{name}_vs_baseline", {}).get("P@1")
        p_v = sig.get(f"{name}_vs_vectorizer_only", {}).get("P@1")
        g_p1 = held.get(name, {}).get("P@1")
        out.append(
            f"| {os.path.basename(root.rstrip('/'))} | {enc} | {lf} | {name} | "
            f"{100 * x['P@1']:.2f} | {100 * x['P@3']:.2f} | {100 * x['P@5']:.2f} | {rel} | "
            f"{_p(p_b)} | {_p(p_v)} | {'—' if g_p1 is None else f'{100 * g_p1:.2f}'} | "
            f"{'—' if secs is None else f'{secs:.0f}'} | "
            f"{'—' if pairs is None else pairs} | "
            f"{gap.get('cos_margin', float('nan')):+.4f} | "
            f"{gap.get('P@1', float('nan')):+.4f} |"
        )
    return out


def _per_instance(root):
    """``{variant: Series of test P@1 by instance_id}`` of a run root's evaluation."""
    t = per_instance(root)
    return {v: g.set_index("instance_id")["P@1"].astype("float64") for v, g in t.groupby("variant")}


def _config_value(config, key):
    x = config
    for part in key.split("."):
        if not isinstance(x, dict) or part not in x:
            return None
        x = x[part]
    return x


def _stage_seconds(root):
    stages = _load(os.path.join(root, "_manifest.json")).get("stages", {})
    return round(sum(float(s.get("duration_s") or 0.0) for s in stages.values()), 1)


def selection_row(name, root, production=None):
    """One data set's selection facts (a dict) and the per-instance differences
    ``selected - best fixed`` on test (for the pooled row)."""
    path = os.path.join(root, "selection", "selection.json")
    if not os.path.exists(path):
        raise SystemExit(f"{path}: missing (run `pina-spark select` on {root})")
    rec = json.load(open(path))
    config = _load(os.path.join(root, "_manifest.json")).get("config", {})
    own = all(_config_value(config, k) == v for k, v in rec["settings"].items())
    test = _per_instance(root)
    chosen = rec["variant"]
    if production:
        src = _per_instance(production)
        where = production
    elif own:
        src, where = test, root
    else:
        raise SystemExit(
            f"{name}: the selection's settings {rec['settings']} are not {root}'s own: give the "
            "production run that followed it (NAME=ROOT,PRODUCTION_ROOT)"
        )
    if chosen not in src:
        raise SystemExit(f"{name}: {where} did not evaluate the chosen variant {chosen}")
    sel = src[chosen]
    best = max(test, key=lambda v: test[v].mean())
    ids = sel.index.intersection(test[best].index)
    if len(ids) != len(test[best]):
        raise SystemExit(f"{name}: {where} scored other test rows than {root}")
    diff = paired(test[best].loc[ids].to_numpy(), sel.loc[ids].to_numpy())
    margin = None
    if "pina" in test and "vectorizer_only" in test:
        margin = paired(
            test["vectorizer_only"].to_numpy(),
            test["pina"].loc[test["vectorizer_only"].index].to_numpy(),
        )
    rows = {r["candidate"]: r for r in rec["validation"]}
    chosen_row = rows[rec["candidate"]]
    pina_rows = [r for r in rec["validation"] if r["variant"] == "pina"]
    best_pina = max(pina_rows, key=lambda r: r["metric"]) if pina_rows else None
    out = {
        "data_set": name,
        "n_test": int(len(ids)),
        "n_valid": rec.get("n_valid_scored"),
        "selected": rec["candidate"],
        "variant": chosen,
        "validation_P@1": round(100 * chosen_row["metric"], 2),
        "test_P@1": round(100 * float(sel.loc[ids].mean()), 2),
        "test_from": where,
        "best_fixed": best,
        "best_fixed_test_P@1": round(100 * float(test[best].mean()), 2),
        "selected_minus_best": diff,
        "pina_minus_vectorizer_only_test": margin,
        "best_pina_on_validation": None
        if best_pina is None
        else {
            "candidate": best_pina["candidate"],
            "gain_points": best_pina["gain_points_vs_cheapest"],
            "p": best_pina["p_vs_cheapest"],
        },
        # the steps' seconds; a resumed selection's wall time is not its cost: None where
        # kept steps predate steps_seconds
        "selection_s": rec.get("steps_seconds")
        or (None if rec.get("resumed_steps") else rec.get("seconds")),
        "full_run_stage_s": _stage_seconds(root),
    }
    d = 100.0 * (sel.loc[ids].to_numpy() - test[best].loc[ids].to_numpy())
    return out, d


def _ci(r):
    return f"{r['diff']:+.2f} [{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]"


def selection_table(specs, json_out=None):
    """Print the selection table of ``specs`` (``NAME=ROOT[,PRODUCTION]``); return its rows."""
    rows, diffs = [], []
    for spec in specs:
        name, _, rest = spec.partition("=")
        if not rest:
            raise SystemExit(f"--selection {spec}: expected NAME=ROOT[,PRODUCTION_ROOT]")
        root, _, prod = rest.partition(",")
        r, d = selection_row(name, root, prod or None)
        rows.append(r)
        diffs.append(d)
    print(
        "| data set | test rows | selected | validation P@1 | test P@1 | best fixed on test "
        "(hindsight) | selected - best, points [95% CI] | pina - vectorizer_only on test "
        "(p) | best pina - vectorizer_only on validation (p) | selection s / full run "
        "stage-s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, bp = r["pina_minus_vectorizer_only_test"], r["best_pina_on_validation"]
        margin = "—" if m is None else f"{m['diff']:+.2f} ({_p(m['p'])})"
        valid = "—" if bp is None else f"{bp['gain_points']:+.2f} ({_p(bp['p'])})"
        print(
            f"| {r['data_set']} | {r['n_test']} | {r['selected']} | {r['validation_P@1']:.2f} | "
            f"{r['test_P@1']:.2f} | {r['best_fixed']} {r['best_fixed_test_P@1']:.2f} | "
            f"{_ci(r['selected_minus_best'])} | {margin} | {valid} | "
            f"{'—' if r['selection_s'] is None else r['selection_s']} / "
            f"{r['full_run_stage_s']} |"
        )
    pooled = None
    if len(rows) > 1:
        d = np.concatenate(diffs)
        pooled = paired(np.zeros(len(d)), d / 100.0)
        print(f"| pooled | {len(d)} | | | | | {_ci(pooled)} | | | |")
    if json_out:
        with open(json_out, "w") as fh:
            json.dump({"rows": rows, "pooled_selected_minus_best": pooled}, fh, indent=1)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_of_fold", nargs="?", help="metrics.json of the out_of_fold run")
    ap.add_argument(
        "--ablation",
        nargs="+",
        metavar="RUN_ROOT",
        default=None,
        help="run roots of the encoder ablation (one table)",
    )
    ap.add_argument("--in-sample", default=None, help="metrics.json of the in_sample rerun")
    ap.add_argument(
        "--selection",
        nargs="+",
        metavar="NAME=ROOT[,PRODUCTION_ROOT]",
        default=None,
        help="run roots with a selection (one table, a row per data set and a pooled row)",
    )
    ap.add_argument("--json", default=None, help="with --selection: the rows as JSON")
    a = ap.parse_args(argv)
    if a.selection:
        selection_table(a.selection, a.json)
        return
    if a.ablation:
        print(
            "| run | encoder | label features | variant | P@1 | P@3 | P@5 | rel. P@1 vs baseline "
            "| p (P@1) | p (P@1) vs vectorizer_only | g held-out P@1 | fine-tuning s | pairs | "
            "parity gap cos_margin | parity gap P@1 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for root in a.ablation:
            print("\n".join(ablation_rows(root)))
        return
    if not a.out_of_fold:
        ap.error("give a metrics.json, or --ablation RUN_ROOT ...")
    m = json.load(open(a.out_of_fold))
    print(
        f"n_train {m['n_train']}, n_test {m['n_test']} ({m.get('n_test_scored')} scored), "
        f"n_labels {m['n_labels']}, side_info {m['side_info']}"
    )
    print()
    print(
        "| variant | P@1 | P@3 | P@5 | P@10 | R@10 | rel. P@1 vs baseline | p (P@1) | p (P@3) "
        "| p (P@5) | p (P@1) vs vectorizer_only |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    lines = rows(m, "out_of_fold")
    if a.in_sample:
        ins = rows(json.load(open(a.in_sample)), "in_sample")
        lines = lines[:2] + ins + lines[2:]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
