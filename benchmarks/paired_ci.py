"""Paired difference of two runs on the same test instances, with its 95% confidence interval.

``pina-spark compare A B`` gives the paired t-test's p per variant; a non-inferiority check
also needs the interval of the mean difference. This script reads both runs'
``eval/per_instance.parquet`` (the evaluate stage's per-instance P@1/3/5), pairs the instances
both scored, and prints per variant and metric: A's and B's means, the mean of B - A in points,
its 95% t interval and the paired t-test's p (``scipy.stats.ttest_rel``, as ``compare``).

Usage::

    .venv/bin/python benchmarks/paired_ci.py runs/instacart-old runs/instacart-new \\
        --json runs/paired_instacart.json

``--pool A2,B2`` (repeatable) adds more pairs of runs (other data sets): each variant then also
gets a ``pooled`` row over the instances of every pair (their differences concatenated).

A side may join several roots of the same data with ``+`` (e.g. the fold splits
``neighbors.fold_seed`` 0, 1, 2): each instance's metrics are then their mean over those runs,
over the instances every one of them scored, so the interval is that of the mean over splits::

    .venv/bin/python benchmarks/paired_ci.py runs/instacart-old5 \
        runs/instacart-new3+runs/instacart-new3-s1+runs/instacart-new3-s2
"""

import argparse
import json
import os
import sys

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pina_spark.stages.evaluate.stage import read_per_instance  # noqa: E402

KS = ("P@1", "P@3", "P@5")


def paired(a, b) -> dict:
    """Mean, 95% t interval and p of ``b - a`` in points (inputs: per-instance P@k in [0, 1]).

    >>> r = paired(np.array([1.0, 0.0, 1.0, 0.0]), np.array([1.0, 1.0, 1.0, 0.0]))
    >>> r["diff"], r["ci95"], round(r["p"], 3)
    (25.0, [-54.561, 104.561], 0.391)
    """
    d = 100.0 * (np.asarray(b, float) - np.asarray(a, float))
    n, mean = len(d), float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    if se == 0.0:
        return {"diff": round(mean, 3), "ci95": [round(mean, 3), round(mean, 3)], "p": 1.0}
    t = float(stats.t.ppf(0.975, n - 1))
    p = float(stats.ttest_rel(b, a).pvalue)
    return {
        "diff": round(mean, 3),
        "ci95": [round(mean - t * se, 3), round(mean + t * se, 3)],
        "p": p,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", help="reference run root")
    ap.add_argument("run_b")
    ap.add_argument("--json", default=None)
    ap.add_argument("--pool", action="append", default=[], metavar="RUN_A2,RUN_B2")
    a = ap.parse_args(argv)
    pairs = [(a.run_a, a.run_b)] + [tuple(p.split(",", 1)) for p in a.pool]
    out: dict = {}
    merged = [_merged(ra, rb) for ra, rb in pairs]
    for v in sorted(set.intersection(*(set(m) for m in merged))):
        if len(pairs) > 1:
            _row(out, f"{v} pooled", pd.concat([m[v] for m in merged], ignore_index=True))
        for (ra, rb), m in zip(pairs, merged):
            _row(out, v if len(pairs) == 1 else f"{v} {ra} -> {rb}", m[v])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def per_instance(spec: str) -> pd.DataFrame:
    """The per-instance test metrics of a run root (the evaluate stage's reader), or of several
    joined with ``+`` (:func:`mean_over_runs`); exit with a message where a run has none."""
    tables = []
    for root in spec.split("+"):
        t = read_per_instance(root)
        if t is None:
            raise SystemExit(f"{root}: no eval/per_instance.parquet (run the evaluate stage on it)")
        tables.append(t)
    return tables[0] if len(tables) == 1 else mean_over_runs(tables)


def mean_over_runs(tables: list) -> pd.DataFrame:
    """Per variant and instance, the mean of each metric over ``tables`` (runs of the same
    data), for the instances every table scored.

    >>> t0 = pd.DataFrame({"variant": ["pina"] * 2, "instance_id": ["a", "b"],
    ...                    "P@1": [1.0, 0.0], "P@3": [1.0, 0.0], "P@5": [0.2, 0.0]})
    >>> t1 = pd.DataFrame({"variant": ["pina"], "instance_id": ["a"],
    ...                    "P@1": [0.0], "P@3": [1.0], "P@5": [0.4]})
    >>> mean_over_runs([t0, t1]).values.tolist()
    [['pina', 'a', 0.5, 1.0, 0.30000000000000004]]
    """
    keys = ["variant", "instance_id"]
    t = pd.concat([x[keys + list(KS)] for x in tables], ignore_index=True)
    g = t.groupby(keys, sort=True)
    n = g.size()
    mean = g[list(KS)].mean()
    return mean[n == len(tables)].reset_index()


def _merged(run_a: str, run_b: str) -> dict:
    """``{variant: the instances both runs scored, A's and B's metrics side by side}``."""
    ta, tb = per_instance(run_a), per_instance(run_b)
    return {
        v: ta[ta.variant == v].merge(tb[tb.variant == v], on="instance_id", suffixes=("_a", "_b"))
        for v in sorted(set(ta.variant) & set(tb.variant))
    }


def _row(out: dict, v: str, m) -> None:
    """Print and store variant ``v``'s paired row over the merged instances ``m``."""
    row: dict = {"n": len(m)}
    for k in KS:
        row[k] = {
            "a": round(100 * m[f"{k}_a"].mean(), 2),
            "b": round(100 * m[f"{k}_b"].mean(), 2),
            **paired(m[f"{k}_a"].to_numpy(), m[f"{k}_b"].to_numpy()),
        }
    out[v] = row
    cells = "; ".join(
        f"{k} {row[k]['a']:.2f} -> {row[k]['b']:.2f}: {row[k]['diff']:+.3f} "
        f"[{row[k]['ci95'][0]:+.3f}, {row[k]['ci95'][1]:+.3f}] p={row[k]['p']:.3g}"
        for k in KS
    )
    print(f"{v} (n={len(m)}): {cells}")


if __name__ == "__main__":
    main()
