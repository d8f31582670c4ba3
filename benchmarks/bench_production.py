"""What a production run costs when it follows a ``vectorizer_only`` selection (issue #35).

On a finished full run root (its config: ``--config``, e.g. the ``syn<N>.yaml`` that
``bench_pipeline.py`` writes beside its ``run<N>`` root), in fresh processes, one after another:

1. *today's production run*: ``pina-spark run`` with ``run.models`` = the root and
   ``select.follow: off`` (the root's g and vectorizer reused, neighbours for every instance, the
   four variants trained and evaluated), into ``<root>-prod-today``;
2. with ``--default-select``: ``pina-spark select`` with the config's own ``select`` section
   (the selection's cost, beside the full run's; the record is kept in the JSON);
3. ``pina-spark select --set select.candidates=[vectorizer_only]``: the choice forced, as the
   issue's cost goal asks when the data would select otherwise;
4. the production run that follows it (``run.models`` = the root): no g, no neighbours stage,
   ``vectorizer_only`` and ``baseline`` trained, into ``<root>-prod-vo``.

Stage-seconds are the sum of a manifest's stage durations (``_manifest.json``). It prints and
writes the full run's, each production run's (median of ``--repeat`` runs), the ratios
``vectorizer_only production / full run`` (goal <= 0.3 at 100k) and ``/ today's production``
(goal <= 0.7), and whether the ``vectorizer_only`` test metrics of the following run equal the
full run's (per instance, every metric).

Usage::

    .venv/bin/python benchmarks/bench_pipeline.py --sizes 100000 --workdir runs/bp100k \\
        --json runs/bp100k.json
    .venv/bin/python benchmarks/bench_production.py --config runs/bp100k/syn100000.yaml \\
        --default-select --json runs/bench_production_100k.json
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from paired_ci import per_instance  # noqa: E402

from pina_spark.stages import STAGES as _STAGE_SPECS  # noqa: E402

STAGES = tuple(_STAGE_SPECS)


def stage_seconds(root: str) -> dict:
    """``{stage: seconds}`` of a run root's manifest (the pipeline's stages only).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "_manifest.json"), "w").write(json.dumps(
    ...     {"stages": {"graph": {"duration_s": 2.0}, "embed": {"duration_s": 3.5}}}))
    >>> stage_seconds(d)
    {'graph': 2.0, 'embed': 3.5}
    """
    with open(os.path.join(root, "_manifest.json")) as fh:
        st = json.load(fh).get("stages", {})
    return {s: float(st[s]["duration_s"]) for s in STAGES if st.get(s, {}).get("duration_s")}


def _cli(args: list, log: str) -> float:
    """Run ``pina-spark ARGS`` in a fresh process; its wall seconds (raises on failure)."""
    t0 = time.time()
    with open(log, "w") as fh:
        rc = subprocess.run(
            [sys.executable, "-m", "pina_spark.cli"] + args,
            stdout=fh,
            stderr=fh,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT),
        ).returncode
    if rc != 0:
        raise SystemExit(f"pina-spark {' '.join(args[:1])} failed (rc {rc}); see {log}")
    return round(time.time() - t0, 1)


def _per_instance(root: str, variant: str):
    t = per_instance(root)
    t = t[t["variant"] == variant].drop(columns=["variant"])
    return t.sort_values("instance_id").reset_index(drop=True)


def production(conf: str, root: str, out: str, sets: list, repeat: int, log: str) -> dict:
    """``repeat`` production runs of ``root``'s models into ``out`` (fresh each time)."""
    totals, runs = [], []
    for i in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        # run.trust_models: the benchmark's own root, which nothing else writes
        args = ["run", "--config", conf, "--set", f"output={out}", "--set", f"run.models={root}"]
        args += ["--set", "run.trust_models=true"]
        for kv in sets:
            args += ["--set", kv]
        wall = _cli(args, f"{log}.{i}.log")
        st = stage_seconds(out)
        runs.append({"stages": st, "total_s": round(sum(st.values()), 2), "wall_s": wall})
        totals.append(sum(st.values()))
    return {"runs": runs, "total_s": round(statistics.median(totals), 2), "root": out}


def main(argv=None) -> dict:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the full run's config (its output: the root)")
    ap.add_argument("--repeat", type=int, default=1, help="production runs of each kind")
    ap.add_argument(
        "--default-select",
        action="store_true",
        help="also run `pina-spark select` with the config's own candidates (its cost)",
    )
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    with open(a.config) as fh:
        root = os.path.abspath(yaml.safe_load(fh)["output"])
    full = stage_seconds(root)
    if "pretrain" not in full:
        raise SystemExit(f"{root}: not a full run (no pretrain stage in its manifest)")
    logs = os.path.dirname(os.path.abspath(a.json))
    res: dict = {"root": root, "full": {"stages": full, "total_s": round(sum(full.values()), 2)}}
    res["today"] = production(
        a.config, root, root + "-prod-today", ["select.follow=off"], a.repeat, f"{logs}/prod-today"
    )
    sel_path = os.path.join(root, "selection", "selection.json")
    if a.default_select:
        wall = _cli(["select", "--config", a.config], f"{logs}/select-default.log")
        rec = json.load(open(sel_path))
        res["default_selection"] = {
            "wall_s": wall,
            "seconds": rec.get("seconds"),
            "variant": rec["variant"],
            "candidate": rec["candidate"],
            "validation": rec["validation"],
            "over_full_run": round(float(rec.get("seconds") or wall) / res["full"]["total_s"], 3),
        }
    wall = _cli(
        ["select", "--config", a.config, "--set", "select.candidates=[vectorizer_only]"],
        f"{logs}/select-forced.log",
    )
    rec = json.load(open(sel_path))
    if rec["variant"] != "vectorizer_only":
        raise SystemExit(f"{sel_path}: forced selection chose {rec['variant']}")
    res["forced_selection"] = {"wall_s": wall, "seconds": rec.get("seconds")}
    res["vectorizer_only"] = production(
        a.config, root, root + "-prod-vo", [], a.repeat, f"{logs}/prod-vo"
    )
    vo = res["vectorizer_only"]
    vo["stages_run"] = sorted(vo["runs"][0]["stages"])
    a_full = _per_instance(root, "vectorizer_only")
    a_prod = _per_instance(vo["root"], "vectorizer_only")
    res["vectorizer_only_metrics_identical"] = bool(a_full.equals(a_prod))
    res["ratio_vo_over_full"] = round(vo["total_s"] / res["full"]["total_s"], 3)
    res["ratio_vo_over_today"] = round(vo["total_s"] / res["today"]["total_s"], 3)
    res["goals"] = {"ratio_vo_over_full": 0.3, "ratio_vo_over_today": 0.7}
    res["load_avg_1m"] = os.getloadavg()[0]
    with open(a.json, "w") as fh:
        json.dump(res, fh, indent=1)
    print(
        f"full run {res['full']['total_s']:.1f} stage-s; today's production "
        f"{res['today']['total_s']:.1f}; vectorizer_only production {vo['total_s']:.1f} "
        f"(stages {', '.join(vo['stages_run'])})"
    )
    print(
        f"vectorizer_only / full = {res['ratio_vo_over_full']} (goal <= 0.3); "
        f"/ today's production = {res['ratio_vo_over_today']} (goal <= 0.7); "
        f"vectorizer_only metrics identical to the full run's: "
        f"{res['vectorizer_only_metrics_identical']}"
    )
    if "default_selection" in res:
        d = res["default_selection"]
        print(
            f"default selection: {d['candidate']} in {d['seconds']} s "
            f"({d['over_full_run']}x the full run's stage-seconds)"
        )
    return res


if __name__ == "__main__":
    main()
