"""What candidate changes to g would save per fit, and what they do to g's own held-out report.

Issue #34 (g at half the cost) leaves the pretrain stage at about 3.65 single fits at 30k
against a goal of 3.5, and the fits alone at about 3.27 (docs/benchmarks.md). This script
measures options that change g itself, on a root that ``bench_pretrain.py`` made (its config
``syn<N>.yaml``). It fits every variant's F fold models in one process, as the stage does
(:func:`pina_spark.stages.pretrain.fits.oof_metrics` for the report), under each option:

- ``pina/tree=fold``: the stage's g, a label tree per fold model (PIFA on that model's rows);
- ``pina/tree=shared``: one tree for all F fold models, from PIFA on the rows every fold model
  trains on (``fold == -1``: the label rows in label-text mode; none in i2i mode). That tree
  learns nothing a fold model does not see, so it leaks no held-out row;
- ``pina_naive/leaf=L``: ``pina_naive`` with ``max_leaf_size`` L (``--leaves``; the config's
  own value first);
- ``pina_naive/solver=S``: ``pina_naive`` at its own leaf with more of PECOS' solver parameters
  (``--solvers``, a JSON list of objects such as ``{"eps": 0.5}`` or ``{"max_iter": 7}``: a
  looser stopping rule for each ranker's dual coordinate descent; PECOS' defaults are
  ``eps`` 0.1 and ``max_iter`` 100).

``--variants pina_naive`` measures that variant's options only (the single fits of ``pina``
still run, as the unit).

Every fit goes through the stage's own :func:`~pina_spark.stages.pretrain.fits.train_g` (the
shared tree through its ``chain``). A single fit of ``pina`` on all of its rows
(``bench_pretrain.py``'s reference) runs first and last. Each option's seconds are given as
single fits (over the median of those two).

Before any option becomes g, it must be judged like any other change to g: the accuracy goal
of #34, paired on Instacart and citeulike-t test rows over three fold splits
(``neighbors.fold_seed``; RESULTS.md, "Other fold splits"). On synthetic data g's held-out P@1
is near 98%, so the report here only flags a large loss.

Usage::

    .venv/bin/python benchmarks/bench_g_options.py --config runs/b30k/syn30000.yaml \\
        --json runs/bench_g_options_30k.json
"""

import argparse
import dataclasses as dc
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _leaf(xcfg, leaf: int):
    """``pretrain.xlinear`` with ``max_leaf_size`` ``leaf``."""
    return dc.replace(xcfg, max_leaf_size=int(leaf))


def run_option(
    pb, X, F: int, seed: int, xcfg, leaf: int, shared: bool, solver: dict | None = None
) -> dict:
    """One variant's F fold fits with max_leaf_size ``leaf``, a tree per fold or ``shared``, and
    PECOS solver parameters ``solver`` (None: its defaults): seconds (the shared tree counted
    once) and g's held-out report."""
    from pina_spark.models import bpre
    from pina_spark.stages.pretrain import fits

    fold = bpre.row_folds(pb.entity, F, seed)
    b = fits.make_bundle(pb, X, fold, np.zeros(len(pb.rows), bool))
    vx = _leaf(xcfg, leaf)
    common = fold < 0
    tree_s, runs, parts = 0.0, [], []
    if shared:
        if not common.any():
            return {
                "variant": pb.variant,
                "leaf": leaf,
                "shared_tree": True,
                "skipped": "no row is in every fold model (i2i mode): no leak-free shared tree",
            }
        t0 = time.time()
        # X (features_from_embeddings) and Y (bpre.build_y) are csr float32 with sorted
        # indices, and so are their row slices: what train_g hands label_tree
        chain = fits.label_tree(X[common], pb.Y[common], vx)
        tree_s = time.time() - t0
    for f in range(F):
        keep = fold != f
        t0 = time.time()
        m = fits.train_g(
            X[keep],
            pb.Y[keep],
            vx,
            f"g[{pb.variant}, fold {f}]",
            chain=chain if shared else None,
            solver=solver,
        )
        runs.append(round(time.time() - t0, 2))
        parts.append(fits.oof_metrics(m, b, ~keep & np.asarray(pb.is_inst, bool), xcfg))
    ev = fits.combine_metrics(
        [{k: x for k, x in p.items() if k != "finetune_heldout"} for p in parts]
    )
    return {
        "variant": pb.variant,
        "leaf": leaf,
        "shared_tree": shared,
        "solver": solver or {},
        "rows_in_every_fold_model": int(common.sum()),
        "fits_s": round(sum(runs) + tree_s, 2),
        "fit_runs_s": runs,
        "shared_tree_s": round(tree_s, 2),
        **{k: ev[k] for k in ("P@1", "P@3", "P@5", "R@10", "rows")},
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the syn<N>.yaml of a bench_pretrain root")
    ap.add_argument("--json", required=True)
    ap.add_argument("--leaves", default="50,25", help="pina_naive max_leaf_size values to try")
    ap.add_argument(
        "--solvers",
        default="[]",
        help='pina_naive PECOS solver parameters to try, a JSON list: [{"eps": 0.5}]',
    )
    ap.add_argument(
        "--variants", default="pina,pina_naive", help="the variants whose options to measure"
    )
    a = ap.parse_args(argv)
    solvers = json.loads(a.solvers)
    if not isinstance(solvers, list) or not all(isinstance(x, dict) for x in solvers):
        ap.error('--solvers: a JSON list of objects, such as [{"eps": 0.5}]')
    from pecos.xmc.base import MLModel

    # PECOS ignores keys it does not know; train_g sets these from the config
    open_keys = {f.name for f in dc.fields(MLModel.TrainParams)}
    open_keys -= {"threshold", "solver_type", "Cp", "Cn", "threads"}
    bad = sorted({k for x in solvers for k in x if k not in open_keys})
    if bad:
        ap.error(f"--solvers: {bad} not among PECOS' solver parameters {sorted(open_keys)}")
    from pina_spark.config import load_config
    from pina_spark.models import artifacts, bpre
    from pina_spark.orchestration import pipeline, session
    from pina_spark.stages.pretrain import fits
    from pina_spark.stages.pretrain.stage import features_from_embeddings

    cfg = load_config(a.config)
    spark = session.get_spark(cfg.spark)
    ctx = pipeline.make_context(spark, cfg)
    _, problems, _ = bpre.load_problems(spark, ctx.paths, cfg)
    enc = artifacts.read_json(
        f"{artifacts.vectorizer_dir(ctx.paths.table('models'))}/{artifacts.ENCODER_JSON}"
    )
    D, S = int(enc["dense_dim"]), int(enc["sparse_dim"])
    X = {v: features_from_embeddings(spark, ctx.paths, problems[v].rows, D, S) for v in problems}
    spark.stop()
    F, seed, xcfg = int(cfg.neighbors.folds), int(cfg.neighbors.fold_seed), cfg.pretrain.xlinear
    if not F:
        ap.error("the config trains g in_sample: there are no fold models to compare")

    def single() -> float:
        t0 = time.time()
        fits.train_g(X["pina"], problems["pina"].Y, xcfg, "g[pina, single fit]")
        return round(time.time() - t0, 2)

    leaf0 = int(xcfg.max_leaf_size)
    naive0 = int(cfg.pretrain.xlinear_of("pina_naive").max_leaf_size)  # the stage's own
    options = [("pina", leaf0, False, None), ("pina", leaf0, True, None)]
    options += [("pina_naive", naive0, False, None)]
    options += [
        ("pina_naive", int(x), False, None)
        for x in a.leaves.split(",")
        if x.strip() and int(x) != naive0
    ]
    options += [("pina_naive", naive0, False, x) for x in solvers]
    wanted = {v.strip() for v in a.variants.split(",") if v.strip()}
    singles = [single()]
    res = []
    for v, leaf, shared, solver in options:
        if v in problems and v in wanted:
            res.append(run_option(problems[v], X[v], F, seed, xcfg, leaf, shared, solver))
            print(json.dumps(res[-1]), flush=True)
    singles.append(single())
    s = statistics.median(singles)
    for r in res:
        if "fits_s" in r:
            r["in_single_fits"] = round(r["fits_s"] / s, 3)
    out = {
        "config": a.config,
        "folds": F,
        "single_fit_runs_s": singles,
        "options": res,
        "load_avg_1m": os.getloadavg()[0],
    }
    with open(a.json, "w") as fh:
        json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
