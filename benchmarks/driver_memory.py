"""The driver's resident memory, stage by stage, of stages rerun on an existing run (issue #16's
memory goal), optionally with another checkout of the code, so two versions compare on the same
tables.

Runs ``pina-spark run --config CONF --stages S --force [--set KEY=VALUE ...]`` in a fresh
process (a fresh Spark application) with the code of ``--code`` (a checkout, e.g. a git worktree
of an earlier commit; default: this one), samples the driver's Python and its JVM apart every
0.5 s (the sampler of ``bench_pipeline.py``: the executors' Python workers are left out) and
prints the peak of each per stage, from the stages' start and end times in the manifest. Memory
does not depend on the machine's load, so this may run beside other work; the seconds it prints
do.

Usage::

    cp -a RUN /tmp/mem_old && cp -a RUN /tmp/mem_new      # the same tables for both
    .venv/bin/python benchmarks/driver_memory.py --config old.yaml --code ../worktree-old \\
        --stages pretrain,train --set pretrain.train_on=executors --set train.train_on=executors \\
        --json runs/driver_memory_old.json

Writes ``{"stages": {stage: {"python_mb", "jvm_mb", "seconds"}}, "python_peak_mb",
"jvm_peak_mb", "python_at_start_mb", "settings": {...}}``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_pipeline import _Sampler, peaks_by_stage  # noqa: E402


def run_output(config: str, sets=(), code: str = ".") -> str:
    """The run root the command reruns: the last ``--set output=...``, else the config's
    ``output``, with ``run_date=<date>`` below it when ``run.run_date`` is set (config or
    ``--set``); a relative local path is relative to ``code`` (the command's working directory).

    Read as plain YAML, not through this checkout's strict config, so that ``--code`` may be a
    revision whose keys differ.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(p, "w").write("output: runs/a\\n")
    >>> run_output(p, ["train.k=3"], "/x"), run_output(p, ["output=/y", "output=/z"], "/x")
    ('/x/runs/a', '/z')
    >>> run_output(p, ["output=s3://b/r", "run.run_date=2026-11-26"], "/x")
    's3://b/r/run_date=2026-11-26'
    """
    import yaml

    doc = yaml.safe_load(open(config)) or {}
    out, date = doc["output"], (doc.get("run") or {}).get("run_date")
    for kv in sets:
        key, _, value = kv.partition("=")
        if key.strip() == "output":
            out = yaml.safe_load(value)
        elif key.strip() == "run.run_date":
            date = yaml.safe_load(value)
    out = str(out)
    if "://" not in out:
        out = os.path.join(os.path.abspath(code), out)
    return f"{out.rstrip('/')}/run_date={date}" if date else out


def measure(config: str, stages: str, code: str, sets=(), log_path: str = "") -> dict:
    """Rerun ``stages`` of ``config``'s run with the code at ``code``; the driver's peaks."""
    cmd = [sys.executable, "-m", "pina_spark.cli", "run", "--config", os.path.abspath(config)]
    cmd += ["--stages", stages, "--force"]
    for kv in sets:
        cmd += ["--set", kv]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(code))
    with open(log_path or os.devnull, "w") as log_fh:
        proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=log_fh, stderr=log_fh)
        sampler = _Sampler(proc.pid)
        sampler.start()
        rc = proc.wait()
        sampler.stop.set()
        sampler.join()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {rc}); see {log_path or 'its output'}")
    man = json.load(open(os.path.join(run_output(config, sets, code), "_manifest.json")))
    st = {s: man["stages"][s] for s in stages.split(",")}
    peaks = peaks_by_stage(sampler.series, st)
    for s in peaks:
        peaks[s]["seconds"] = st[s].get("duration_s")
    return {
        "stages": peaks,
        "python_peak_mb": round(max((p for _, p, _ in sampler.series), default=0), 1),
        "jvm_peak_mb": round(max((j for _, _, j in sampler.series), default=0), 1),
        "python_at_start_mb": round(sampler.series[0][1], 1) if sampler.series else None,
        "pretrain_driver_read_x_s": (
            man["stages"].get("pretrain", {}).get("stats", {}).get("detail", {})
        )
        .get("times_s", {})
        .get("read_features"),
        "load_avg_1m": os.getloadavg()[0],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the run's config (its output is rerun)")
    ap.add_argument("--stages", required=True, help="comma list of stages to rerun")
    ap.add_argument("--code", default=os.path.dirname(HERE), help="checkout whose code runs")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", required=True, help="where to write the figures")
    args = ap.parse_args(argv)
    t0 = time.time()
    got = measure(args.config, args.stages, args.code, args.set, args.json + ".log")
    got["settings"] = {
        "config": args.config,
        "stages": args.stages,
        "code": os.path.abspath(args.code),
        "sets": args.set,
        "wall_s": round(time.time() - t0, 1),
    }
    with open(args.json, "w") as fh:
        json.dump(got, fh, indent=1, sort_keys=True)
    print("| stage | driver Python peak MB | driver JVM peak MB | seconds |")
    print("|---|---|---|---|")
    for s, p in got["stages"].items():
        print(f"| {s} | {p['python_mb']:.0f} | {p['jvm_mb']:.0f} | {p['seconds']} |")
    print(f"Python at start {got['python_at_start_mb']} MB; code {got['settings']['code']}")


if __name__ == "__main__":
    main()
