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
"""

import argparse
import json
import os


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
    a = ap.parse_args(argv)
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
