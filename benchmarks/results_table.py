"""Markdown rows for RESULTS.md from a run's ``eval*/metrics.json`` files (no hand copying).

Usage::

    python benchmarks/results_table.py runs/citeulike-t/eval_out_of_fold/metrics.json \\
        [--in-sample runs/citeulike-t/eval_in_sample/metrics.json]

Prints one table: baseline, vectorizer_only, then pina_naive and pina for each metrics file given
(labelled out_of_fold / in_sample), with P@1/3/5, P@10, R@10 (percent), relative P@1 against
baseline, the paired t-test p-values against baseline and, where present, pina against
vectorizer_only.
"""
import argparse
import json


def _p(x):
    if x is None:
        return "—"
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}".rstrip("0").rstrip(".") if x < 0.1 else \
        f"{x:.2f}"


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
        vs_vo = sig.get(f"{name}_vs_vectorizer_only", {}).get("P@1") \
            if name.startswith("pina") else None
        tag = name if name in ("baseline", "vectorizer_only") else f"{name}, {label}"
        out.append(f"| {tag} | {100 * x['P@1']:.2f} | {100 * x['P@3']:.2f} | "
                   f"{100 * x['P@5']:.2f} | {100 * x['P@10']:.2f} | {100 * x['R@10']:.2f} | "
                   f"{rel} | {_p(s.get('P@1'))} | {_p(s.get('P@3'))} | {_p(s.get('P@5'))} | "
                   f"{_p(vs_vo) if name.startswith('pina') else '—'} |")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_of_fold", help="metrics.json of the out_of_fold run")
    ap.add_argument("--in-sample", default=None, help="metrics.json of the in_sample rerun")
    a = ap.parse_args(argv)
    m = json.load(open(a.out_of_fold))
    print(f"n_train {m['n_train']}, n_test {m['n_test']} ({m.get('n_test_scored')} scored), "
          f"n_labels {m['n_labels']}, side_info {m['side_info']}")
    print()
    print("| variant | P@1 | P@3 | P@5 | P@10 | R@10 | rel. P@1 vs baseline | p (P@1) | p (P@3) "
          "| p (P@5) | p (P@1) vs vectorizer_only |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    lines = rows(m, "out_of_fold")
    if a.in_sample:
        ins = rows(json.load(open(a.in_sample)), "in_sample")
        lines = lines[:2] + ins + lines[2:]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
