"""What a run that trains one g variant pays for g, against a run that trains both.

A run whose ``train.variants`` holds ``pina`` but not ``pina_naive`` (one that follows a
``pina`` selection, or a retraining run told to train the chosen variant) fits g and predicts
neighbours for ``pina`` alone; before, it paid for both variants' g and neighbours.

On a finished full run root (its config: ``--config``, e.g. the ``syn<N>.yaml`` that
``bench_pipeline.py`` writes beside its ``run<N>`` root), two copies of the root, then per
repeat, alternating, in fresh processes: ``pina-spark run --stages pretrain,neighbors,aggregate
--force`` on copy *both* (the config's own ``train.variants``: every variant) and on copy *one*
(``train.variants=[VARIANT,baseline]``). graph, vectorizer and embed are the root's, and the
train stage does not depend on which g exists, so these three stages are the whole difference.

It prints and writes each stage's seconds (median of ``--repeat``), the ratio one/both, and two
checks: the *one* copy's model card lists VARIANT alone and its neighbours table holds VARIANT
alone; VARIANT's g is the same files in both copies (``_CHECKSUMS.json`` of each model but the fit's
own card, ``g_info.json``).

Usage::

    .venv/bin/python benchmarks/bench_g_variant.py --config runs/bp100k/syn100000.yaml \\
        --variant pina --repeat 1 --workdir runs/bgv --json runs/bench_g_variant_100k.json
"""

import argparse
import json
import os
import shutil
import statistics
import sys

import pyarrow.dataset as ds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_production import _cli, stage_seconds  # noqa: E402

STAGES = ("pretrain", "neighbors", "aggregate")


def _checksums(root: str, variant: str) -> dict:
    """``{file: sha256}`` of every file of ``variant``'s g models under ``root`` but
    ``g_info.json`` (the fit's own card: its seconds differ from run to run), from the
    ``_CHECKSUMS.json`` written beside them."""
    g = os.path.join(root, "models", "g", variant)
    out = {}
    for folder, _, files in os.walk(g):
        if "_CHECKSUMS.json" in files:
            for name, digest in json.load(open(os.path.join(folder, "_CHECKSUMS.json"))).items():
                if name != "g_info.json":
                    out[os.path.relpath(os.path.join(folder, name), g)] = digest
    return out


def _variants(table: str) -> list:
    t = ds.dataset(table, format="parquet", partitioning="hive").to_table(columns=["variant"])
    return sorted(set(t.column("variant").to_pylist()))


def main(argv=None) -> dict:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the full run's config (its output: the root)")
    ap.add_argument("--variant", default="pina", choices=("pina", "pina_naive"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", required=True, help="where the two copies of the root go")
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    with open(a.config) as fh:
        root = os.path.abspath(yaml.safe_load(fh)["output"])
    os.makedirs(a.workdir, exist_ok=True)
    copies = {k: os.path.join(os.path.abspath(a.workdir), k) for k in ("both", "one")}
    for path in copies.values():
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(root, path)
    sets = {"both": [], "one": [f"train.variants=[{a.variant},baseline]"]}
    runs: dict = {k: [] for k in copies}
    for i in range(a.repeat):
        for kind, out in copies.items():
            args = ["run", "--config", a.config, "--stages", ",".join(STAGES), "--force"]
            for kv in [f"output={out}", "select.follow=off"] + sets[kind]:
                args += ["--set", kv]
            wall = _cli(args, os.path.join(a.workdir, f"{kind}.{i}.log"))
            st = stage_seconds(out)
            runs[kind].append({"stages": {s: st.get(s) for s in STAGES}, "wall_s": wall})
            print(f"{kind} #{i}: {runs[kind][-1]}", flush=True)
    med = {
        kind: {s: round(statistics.median(r["stages"][s] for r in rs), 2) for s in STAGES}
        for kind, rs in runs.items()
    }
    for kind in med:
        med[kind]["total"] = round(sum(med[kind][s] for s in STAGES), 2)
    card = json.load(open(os.path.join(copies["one"], "models", "model_card.json")))
    res = {
        "root": root,
        "variant": a.variant,
        "repeat": a.repeat,
        "runs": runs,
        "median_s": med,
        "ratio_one_over_both": {
            s: round(med["one"][s] / med["both"][s], 3) if med["both"][s] else None
            for s in STAGES + ("total",)
        },
        "one_fitted": sorted(card["variants"]),
        "one_neighbors": _variants(os.path.join(copies["one"], "neighbors")),
        "both_neighbors": _variants(os.path.join(copies["both"], "neighbors")),
        "same_g_files": _checksums(copies["one"], a.variant)
        == _checksums(copies["both"], a.variant),
        "load_avg_1m": os.getloadavg()[0],
    }
    with open(a.json, "w") as fh:
        json.dump(res, fh, indent=1)
    print(json.dumps({k: res[k] for k in res if k != "runs"}, indent=1))
    return res


if __name__ == "__main__":
    main()
