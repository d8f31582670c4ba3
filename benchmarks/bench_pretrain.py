"""The pretrain stage against its floor: one single-process PECOS fit of g (issue #34).

For N products: ``pina-spark prepare-data --source synthetic --instances N`` (the scale
generator), then ``pina-spark run --stages graph,vectorizer,embed,pretrain`` in a fresh process
with the settings of ``bench_pipeline.py`` (``task.labels: given``, ``side_info: label_text``,
``--set`` overrides). The pretrain stage is then rerun ``--repeat`` times (``--force``, the
same tables), and, right after, in a fresh process, the ``pina`` variant's B_pre is built as the
stage builds it (:func:`pina_spark.models.bpre.load_problems`, X read from ``embeddings``) and
ONE ``XLinearModel.train`` of g on all of its rows (:func:`pina_spark.stages.pretrain.fits.
train_g`, the run's ``pretrain.xlinear``, the threads the stage's driver fits use) is timed
``--repeat`` times. That fit is the paper's in-sample recipe: the floor that out-of-fold g
(F fold models per variant, two variants) is measured against.

Prints and writes ``pretrain_s`` (the whole stage, both variants; median of the repeats),
``single_fit_s`` (median), ``ratio`` = pretrain_s / single_fit_s, ``folds``, the variants
fitted, ``fits`` (models trained by the stage), the threads, ``pretrain.train_on`` and where the
fits ran, with every repeat's seconds. Goal (issue #34): ``ratio <= folds + 0.5``.

``--fold-fits`` also times, beside each single fit in the same process, every variant's fold-0
model on the rows the stage trains it on, and writes ``fits_in_single_fits`` = F x the sum over
variants of (median fold-0 fit / median single fit): the stage's fits alone in single fits,
without the spread between the stage's process and the reference's (the rest of ``ratio`` is
the stage's work outside the fits' training, plus that spread).

``--alternate`` runs the reference in a fresh child right after each stage run (an untimed
warm-up fit, then one single fit, and the fold-0 fits with ``--fold-fits``) instead of all of
them after the last stage run, and also writes each run's own ratio to the fit timed right
after it (``ratio_runs``, their median ``ratio_paired``) and each run's fits alone in those
units (``stage_fits_in_single_fits_runs``: the training seconds of the stage's fits, from its
model card, over that single fit). The single fit has taken 24.6-38.7 s at 30k and 105.5-168.8 s
at 100k in different runs of this benchmark; a pair taken minutes apart is meant to carry less
of that spread than the ratio of two medians taken in two blocks (on the 2-core machine of
docs/benchmarks.md it did not always: the speed there changed by up to 50% between minutes).

Beside the wall seconds it writes the same figures in the machine's busy CPU seconds
(:mod:`cpu_clock`, from ``/proc/stat``: every core's time doing work, over the stage's span in
its manifest and over each fit in the child): ``pretrain_busy_s``, ``single_fit_busy_s``,
``cpu_ratio`` (with ``--alternate`` also ``cpu_ratio_runs`` and ``cpu_ratio_paired``), with
``--fold-fits`` ``fits_in_single_fits_busy``, and each run's steal seconds (the time the host
gave one of the machine's cores to something else). Busy seconds leave out steal and idle
cores; the stage's work on one core (reading inputs, saving models) weighs half what it does
in wall seconds on two cores, so the CPU ratio is not the goal's measure, only a second view
of the same runs. On the machine of docs/benchmarks.md steal stayed under 0.5% of the busy
seconds and the busy ratio rose and fell with the wall ratio: there the spread is the cores'
speed, which CPU seconds carry too.

Usage::

    .venv/bin/python benchmarks/bench_pretrain.py --instances 30000 --repeat 3 \\
        --json runs/bench_pretrain_30k.json
    .venv/bin/python benchmarks/bench_pretrain.py --instances 30000 --repeat 3 --fold-fits \\
        --json runs/bench_pretrain_30k.json    # and the fold fits beside the single fit
    .venv/bin/python benchmarks/bench_pretrain.py --instances 30000 --repeat 3 --fold-fits \\
        --alternate --json runs/bench_pretrain_30k.json  # a reference after each stage run
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import cpu_clock  # noqa: E402
from bench_pipeline import _config, _set  # noqa: E402

from pina_spark.config import config_from_dict  # noqa: E402

UPSTREAM = "graph,vectorizer,embed"


def _cli(args, log_path: str) -> float:
    """Run ``pina-spark ARGS`` in a fresh process; its wall seconds (raises on failure)."""
    t0 = time.time()
    with open(log_path, "a") as fh:
        rc = subprocess.call([sys.executable, "-m", "pina_spark.cli", *args], stdout=fh, stderr=fh)
    if rc:
        raise RuntimeError(f"pina-spark {' '.join(args)} failed (rc {rc}); see {log_path}")
    return time.time() - t0


def single_fit(conf: str, repeat: int, fold_fits: bool = False, warmup: bool = False) -> dict:
    """Child process: the ``pina`` variant's X and Y as the pretrain stage builds them, then one
    g fit on every row, ``repeat`` times; the seconds of each and the problem's size.

    ``fold_fits`` (out of fold only): each repeat also trains, right after the single fit, every
    variant's fold-0 model on exactly the rows the stage gives it (all but fold 0's instance rows
    and their twin label rows; fold 0 stands for every fold, the folds being equal by hash), so
    the fold fits are timed in the same process as the reference, free of the spread between
    processes.

    ``warmup``: one untimed single fit first, so that no timed fit is the first of its process
    (``--alternate`` starts a child per repeat; a process's first fit has run up to ~10% slower
    than the next ones)."""
    import numpy as np

    from pina_spark.config import load_config
    from pina_spark.models import artifacts, bpre
    from pina_spark.orchestration import pipeline, session
    from pina_spark.stages.pretrain.fits import train_g
    from pina_spark.stages.pretrain.stage import features_from_embeddings

    cfg = load_config(conf)
    spark = session.get_spark(cfg.spark)
    ctx = pipeline.make_context(spark, cfg)
    _, problems, _ = bpre.load_problems(spark, ctx.paths, cfg)
    F = cfg.neighbors.folds if cfg.neighbors.train_mode == "out_of_fold" else 0
    timed = sorted(problems) if fold_fits and F else []  # variants whose fold-0 fit is timed
    variants = timed or ["pina"]
    models = ctx.paths.table("models")
    enc = artifacts.read_json(f"{artifacts.vectorizer_dir(models)}/{artifacts.ENCODER_JSON}")
    X = {
        v: features_from_embeddings(
            spark, ctx.paths, problems[v].rows, int(enc["dense_dim"]), int(enc["sparse_dim"])
        )
        for v in variants
    }
    spark.stop()
    pb, xcfg = problems["pina"], cfg.pretrain.xlinear_of("pina")
    secs: list[float] = []
    fold_secs: dict[str, list[float]] = {v: [] for v in timed}
    seed = cfg.neighbors.fold_seed
    fold0_rows = {v: bpre.row_folds(problems[v].entity, F, seed) != 0 for v in timed}
    cpu: list[dict | None] = []  # the machine's busy and steal seconds of each single fit
    fold_cpu: dict[str, list[dict | None]] = {v: [] for v in timed}
    if warmup:
        train_g(X["pina"], pb.Y, xcfg, what="g[pina, warm-up]", threads=-1)
    for _ in range(repeat):
        t0, c0 = time.time(), cpu_clock.read()
        train_g(X["pina"], pb.Y, xcfg, what="g[pina, single fit]", threads=-1)
        secs.append(round(time.time() - t0, 2))
        cpu.append(cpu_clock.since(c0))
        for v, keep in fold0_rows.items():
            t0, c0 = time.time(), cpu_clock.read()
            # each variant with the stage's own settings (pina_naive: pretrain.naive_max_leaf_size)
            vx = cfg.pretrain.xlinear_of(v)
            train_g(X[v][keep], problems[v].Y[keep], vx, what=f"g[{v}, fold 0]")
            fold_secs[v].append(round(time.time() - t0, 2))
            fold_cpu[v].append(cpu_clock.since(c0))
    out = {
        "single_fit_runs_s": secs,
        "single_fit_runs_cpu": cpu,
        "rows": int(X["pina"].shape[0]),
        "outputs": int(pb.Y.shape[1]),
        "positives": int(pb.Y.nnz),
        "threads": os.cpu_count(),
        "nnz_x": int(np.int64(X["pina"].nnz)),
        "folds": F,
        "warmup": warmup,
    }
    if fold_secs:
        out["fold0_fit_runs_s"] = fold_secs
        out["fold0_fit_runs_cpu"] = fold_cpu
    return out


def merge_fits(parts: list[dict]) -> dict:
    """One child result from those of several child processes (``--alternate`` runs one child
    per repeat): their seconds concatenated in order, then the fold fits' share of the
    reference, ``fold0_over_single`` (median fold-0 fit / median single fit, per variant), and
    ``fits_in_single_fits`` = F x their sum.

    Examples
    --------
    >>> a = {"single_fit_runs_s": [10.0], "folds": 3, "fold0_fit_runs_s": {"pina": [7.0]}}
    >>> b = {"single_fit_runs_s": [12.0], "folds": 3, "fold0_fit_runs_s": {"pina": [9.0]}}
    >>> m = merge_fits([a, b])
    >>> m["single_fit_runs_s"], m["fold0_over_single"], m["fits_in_single_fits"]
    ([10.0, 12.0], {'pina': 0.727}, 2.181)
    """
    out = dict(parts[-1])
    out["single_fit_runs_s"] = [s for p in parts for s in p["single_fit_runs_s"]]
    out["single_fit_runs_cpu"] = [c for p in parts for c in p.get("single_fit_runs_cpu", [None])]
    if "fold0_fit_runs_s" in out:
        fold_secs = {
            v: [s for p in parts for s in p["fold0_fit_runs_s"][v]] for v in out["fold0_fit_runs_s"]
        }
        single = statistics.median(out["single_fit_runs_s"])
        out["fold0_fit_runs_s"] = fold_secs
        out["fold0_over_single"] = {
            v: round(statistics.median(s) / single, 3) for v, s in fold_secs.items()
        }
        # the stage's F fits per variant, in single fits, measured beside the reference
        out["fits_in_single_fits"] = round(out["folds"] * sum(out["fold0_over_single"].values()), 3)
        fold_cpu = {
            v: [c for p in parts for c in p.get("fold0_fit_runs_cpu", {}).get(v, [None])]
            for v in fold_secs
        }
        single_busy = busy_median(out["single_fit_runs_cpu"])
        fold_busy = {v: busy_median(c) for v, c in fold_cpu.items()}
        out["fold0_fit_runs_cpu"] = fold_cpu
        if single_busy and all(fold_busy.values()):
            # the same in the machine's busy CPU seconds
            share = {v: round(b / single_busy, 3) for v, b in fold_busy.items() if b}
            out["fold0_over_single_busy"] = share
            out["fits_in_single_fits_busy"] = round(out["folds"] * sum(share.values()), 3)
    return out


def busy_median(runs: list[dict | None]) -> float | None:
    """The median of the runs' busy CPU seconds (:mod:`cpu_clock`); ``None`` if any run has none.

    >>> busy_median([{"busy_s": 3.0}, {"busy_s": 1.0}, {"busy_s": 2.0}]), busy_median([None])
    (2.0, None)
    """
    if not runs or any(r is None for r in runs):
        return None
    return statistics.median(float(r["busy_s"]) for r in runs if r is not None)


def paired_ratios(pretrain_runs_s: list[float], single_runs_s: list[float]) -> dict:
    """``--alternate``: each stage run over the single fit timed right after it, and their
    median, which a drift of the machine's speed over the benchmark moves less than the ratio
    of the two medians does.

    Examples
    --------
    >>> paired_ratios([100.0, 120.0, 90.0], [30.0, 33.0, 30.0])
    {'ratio_runs': [3.333, 3.636, 3.0], 'ratio_paired': 3.333}
    """
    runs = [round(p / s, 3) for p, s in zip(pretrain_runs_s, single_runs_s, strict=True)]
    return {"ratio_runs": runs, "ratio_paired": statistics.median(runs)}


def stage_span_cpu(clock: "cpu_clock.Sampler", entry: dict) -> dict | None:
    """The machine's busy and steal seconds over a stage run: from the manifest entry's
    ``finished`` (UTC, microseconds) less its ``duration_s`` to ``finished``."""
    import datetime

    end = datetime.datetime.strptime(entry["finished"], "%Y-%m-%dT%H:%M:%S.%fZ")
    t1 = end.replace(tzinfo=datetime.timezone.utc).timestamp()
    return clock.between(t1 - float(entry["duration_s"]), t1)


def cpu_figures(stage: list[dict | None], single: list[dict | None], paired: bool) -> dict:
    """The stage against the single fit in the machine's busy CPU seconds (:mod:`cpu_clock`),
    beside the wall-second figures: ``pretrain_busy_s`` and ``single_fit_busy_s`` (medians),
    ``cpu_ratio`` (their ratio), each run's busy and steal seconds, and with ``paired``
    (``--alternate``) each run's ratio to the fit after it and their median. Empty where the
    counters are unreadable.

    Examples
    --------
    >>> st = [{"busy_s": 200.0, "steal_s": 1.0}, {"busy_s": 220.0, "steal_s": 9.0}]
    >>> sf = [{"busy_s": 60.0, "steal_s": 0.5}, {"busy_s": 55.0, "steal_s": 0.2}]
    >>> f = cpu_figures(st, sf, paired=True)
    >>> f["cpu_ratio"], f["cpu_ratio_runs"], f["pretrain_steal_runs_s"]
    (3.652, [3.333, 4.0], [1.0, 9.0])
    >>> cpu_figures([None], sf, paired=False)
    {}
    """
    pb, sb = busy_median(stage), busy_median(single)
    if not pb or not sb:
        return {}
    out = {
        "pretrain_busy_s": round(pb, 2),
        "single_fit_busy_s": round(sb, 2),
        "cpu_ratio": round(pb / sb, 3),
        "pretrain_busy_runs_s": [c["busy_s"] for c in stage if c],
        "pretrain_steal_runs_s": [c["steal_s"] for c in stage if c],
        "single_fit_busy_runs_s": [c["busy_s"] for c in single if c],
        "single_fit_steal_runs_s": [c["steal_s"] for c in single if c],
    }
    if paired:
        pr = paired_ratios(out["pretrain_busy_runs_s"], out["single_fit_busy_runs_s"])
        out["cpu_ratio_runs"], out["cpu_ratio_paired"] = pr["ratio_runs"], pr["ratio_paired"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--repeat", type=int, default=1, help="pretrain reruns and single fits")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--workdir", default=None, help="where data and runs go (default: temp)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--fold-fits",
        action="store_true",
        help="also time every variant's fold-0 fit beside each single fit (same process)",
    )
    ap.add_argument(
        "--alternate",
        action="store_true",
        help="time one single fit (a fresh child, after an untimed warm-up fit) right after "
        "each stage run, and report each run's ratio to the fit after it",
    )
    ap.add_argument("--warmup", action="store_true", help=argparse.SUPPRESS)  # the child's
    ap.add_argument("--single-fit", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    if a.single_fit:  # the child process
        with open(a.json, "w") as fh:
            json.dump(single_fit(a.single_fit, a.repeat, a.fold_fits, a.warmup), fh)
        return {}
    work = a.workdir or tempfile.mkdtemp(prefix="bench-pretrain-")
    os.makedirs(work, exist_ok=True)
    n = a.instances
    data, out = os.path.join(work, f"syn{n}"), os.path.join(work, f"run{n}")
    log_path = os.path.join(work, f"run{n}.log")
    if not os.path.exists(os.path.join(data, "prepare_stats.json")):
        _cli(
            ["prepare-data", "--source", "synthetic", "--instances", str(n)]
            + ["--seed", str(a.seed), "--output", data],
            log_path,
        )
    doc = _config(data, out, a.threads, a.driver_memory)
    for kv in a.set:
        _set(doc, kv)
    conf = os.path.join(work, f"syn{n}.yaml")
    with open(conf, "w") as fh:
        yaml.safe_dump(doc, fh)
    _cli(["run", "--config", conf, "--stages", UPSTREAM], log_path)
    fit_json = os.path.join(work, "single_fit.json")

    def child(repeat: int) -> dict:
        """The reference, ``repeat`` single fits in a fresh process (:func:`single_fit`)."""
        subprocess.check_call(
            [sys.executable, __file__, "--instances", str(n), "--json", fit_json]
            + ["--repeat", str(repeat), "--single-fit", conf]
            + (["--fold-fits"] if a.fold_fits else [])
            + (["--warmup"] if a.alternate else [])
        )
        return json.load(open(fit_json))

    runs, stage_fits, parts, stage_cpu = [], [], [], []
    for r in range(a.repeat):
        with cpu_clock.Sampler() as clock:
            _cli(["run", "--config", conf, "--stages", "pretrain", "--force"], log_path)
        man = json.load(open(os.path.join(out, "_manifest.json")))
        runs.append(man["stages"]["pretrain"])
        stage_cpu.append(stage_span_cpu(clock, runs[-1]))
        run_card = json.load(open(os.path.join(out, "models", "model_card.json")))
        stage_fits.append(
            round(sum(float(c["fits_train_s"]) for c in run_card["variants"].values()), 2)
        )
        print(f"pretrain run {r + 1}: {runs[-1]['duration_s']} s, cpu {stage_cpu[-1]}", flush=True)
        if a.alternate:
            parts.append(child(1))
            print(
                f"single fit {r + 1}: {parts[-1]['single_fit_runs_s'][0]} s, "
                f"cpu {parts[-1]['single_fit_runs_cpu'][0]}",
                flush=True,
            )
    if not a.alternate:
        parts.append(child(a.repeat))
    fit = merge_fits(parts)
    card = run_card  # the last stage run's model card
    pre = [float(r["duration_s"]) for r in runs]
    pretrain_s = statistics.median(pre)
    single_s = statistics.median(fit["single_fit_runs_s"])
    folds = int(card.get("folds", {}).get("folds") or 0)
    pcfg = config_from_dict(doc).pretrain  # the settings the stage ran with
    result = {
        "instances": n,
        "pretrain_s": round(pretrain_s, 2),
        "pretrain_runs_s": pre,
        "single_fit_s": round(single_s, 2),
        "ratio": round(pretrain_s / single_s, 3),
        "goal_ratio_at_most": folds + 0.5 if folds else None,
        "folds": folds,
        "variants": sorted(card.get("variants", {})),
        "fits": int(
            sum(len(v.get("folds", [])) + ("full" in v) for v in card["variants"].values())
        ),
        "fits_on": card.get("fits_on"),
        "train_on": doc.get("pretrain", {}).get("train_on", "auto"),
        "threads": fit["threads"],
        "spark_master": doc["spark"]["master"],
        # each fitted variant's label-tree leaf, as the stage decides it
        "max_leaf_size": {
            v: int(pcfg.xlinear_of(v).max_leaf_size) for v in sorted(card.get("variants", {}))
        },
        "fits_train_s": {v: c.get("fits_train_s") for v, c in card["variants"].items()},
        "fits_in_single_fits": fit.get("fits_in_single_fits"),
        # the stage's own fits (training seconds of every fold model, both variants) per run
        "stage_fits_train_runs_s": stage_fits,
        "alternate": a.alternate,
        "single_fit": fit,
        "sets": a.set,
    }
    result.update(cpu_figures(stage_cpu, fit["single_fit_runs_cpu"], a.alternate))
    if a.alternate:
        result.update(paired_ratios(pre, fit["single_fit_runs_s"]))
        # the stage's fits alone, each run over the single fit timed right after it
        result["stage_fits_in_single_fits_runs"] = paired_ratios(
            stage_fits, fit["single_fit_runs_s"]
        )["ratio_runs"]
    with open(a.json, "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "single_fit"}, indent=1))
    return result


if __name__ == "__main__":
    main()
