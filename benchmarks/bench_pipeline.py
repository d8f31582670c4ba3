"""The whole pipeline against the number of products (issue #16 item 5).

For every size N: ``pina-spark prepare-data --source synthetic --instances N --seed S`` (the
scale generator, ~50 N co-purchase events, ~N/10 keyword labels with text), then ``pina-spark
run`` on it in a fresh process (a fresh Spark application per size, ``local[T]``), with
``task.labels: given``, ``side_info: label_text`` and otherwise the defaults (``--set KEY=VALUE``
overrides any of them, e.g. ``--set pretrain.train_on=executors``, what ``auto`` picks on a
cluster). While the run lasts, the driver's resident memory is sampled from /proc every 0.5 s:
the ``pina-spark`` Python process and its JVM, apart (in local mode the JVM also hosts the
executors' threads, so its figure is an upper bound of a cluster driver's JVM; the executors'
Python workers are left out), with the peak of each per stage (``peak_rss_mb_by_stage``, from
the stages' start and end times in the manifest).

What it reports per size, from the run's ``_manifest.json``: seconds per stage, the total,
``encoded_rows`` (rows put through the text encoder, the sum of every stage's ``encoded_rows``
in the manifest, split into the driver's and the executors'; the goal of issue #16 is
``encoded_rows == nodes``: the embed stage alone encodes, once per node), nodes, events, and
the driver's peak RSS. The reference is the pipeline itself: time per 1,000 instances at each
size against the smallest, so growth shows as a ratio (goal: at most 1.2x from 100k to 300k).

Usage::

    .venv/bin/python benchmarks/bench_pipeline.py --sizes 10000,100000,300000 \\
        --json runs/bench_pipeline.json

Writes ``{"results": [{"n", "nodes", "events", "stages": {stage: s}, "total_s", "encoded_rows",
"driver_peak_rss_mb", "driver_python_peak_rss_mb", "driver_jvm_peak_rss_mb",
"peak_rss_mb_by_stage", "g_fits", ...}], "settings": {...}}``, a PNG beside the JSON (seconds
per 1,000 instances per stage against N, log x axis) and prints a Markdown table.

``--merge A.json,B.json --json OUT`` runs nothing: it puts the results of earlier runs (sizes
measured in separate sessions, with the same settings) into one JSON, table and PNG, with each
result's settings kept beside it (``settings_of`` per result).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pina_spark.stages import STAGES as _STAGE_SPECS  # noqa: E402

STAGES = tuple(_STAGE_SPECS)


def _driver_rss_mb(pid: int) -> tuple:
    """Resident MB of ``pid`` itself (the driver's Python) and of its descendants (its JVM,
    which in local mode also hosts the executors' threads), from /proc, leaving out the Python
    worker processes (``pyspark.daemon`` and what it forks: the executors' side) and what is
    gone."""
    children: dict = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    own, rest, todo = 0, 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                if b"pyspark.daemon" in fh.read():
                    continue
            with open(f"/proc/{p}/statm") as fh:
                rss = int(fh.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        if p == pid:
            own += rss
        else:
            rest += rss
        todo += children.get(p, [])
    return own / 2**20, rest / 2**20


class _Sampler(threading.Thread):
    """Samples :func:`_driver_rss_mb` of a process while it runs: ``series`` holds
    ``(unix time, python MB, jvm MB)``."""

    def __init__(self, pid: int, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every_s, self.stop = pid, every_s, threading.Event()
        self.series: list = []

    def run(self):
        while not self.stop.is_set():
            self.series.append((time.time(), *_driver_rss_mb(self.pid)))
            self.stop.wait(self.every_s)

    @property
    def peak(self) -> float:
        return max((py + jvm for _, py, jvm in self.series), default=0.0)


def _stamp(iso: str) -> float:
    from datetime import datetime, timezone

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def peaks_by_stage(series, stages_meta: dict) -> dict:
    """Per stage of the manifest (its ``started`` / ``finished`` times), the peak resident MB
    of the driver's Python and of its JVM sampled while it ran.

    >>> peaks_by_stage([(10.0, 1.0, 2.0), (11.0, 5.0, 1.0), (20.0, 9.0, 9.0)],
    ...     {"a": {"started": "1970-01-01T00:00:09Z", "finished": "1970-01-01T00:00:12Z"}})
    {'a': {'python_mb': 5.0, 'jvm_mb': 2.0}}
    """
    out = {}
    for s, e in stages_meta.items():
        if not e.get("started") or not e.get("finished"):
            continue
        a, b = _stamp(e["started"]), _stamp(e["finished"]) + 1.0
        inside = [(py, jvm) for t, py, jvm in series if a <= t <= b]
        if inside:
            out[s] = {
                "python_mb": round(max(p for p, _ in inside), 1),
                "jvm_mb": round(max(j for _, j in inside), 1),
            }
    return out


def _set(doc: dict, dotted: str) -> None:
    """Apply one ``KEY=VALUE`` override (dotted key, YAML value) to the run's config.

    >>> d = {"a": {"b": 1}}; _set(d, "a.c=executors"); _set(d, "x.y=2"); d
    {'a': {'b': 1, 'c': 'executors'}, 'x': {'y': 2}}
    """
    import yaml

    key, _, value = dotted.partition("=")
    if not key or not _:
        raise SystemExit(f"--set wants KEY=VALUE, got {dotted!r}")
    *parents, leaf = key.split(".")
    for k in parents:
        doc = doc.setdefault(k, {})
    doc[leaf] = yaml.safe_load(value)


def _config(data: str, out: str, threads: int, driver_memory: str) -> dict:
    return {
        "input": {
            "instances": f"{data}/instances.parquet",
            "labels": f"{data}/labels.parquet",
            "instance_labels": f"{data}/instance_labels.parquet",
            "events": f"{data}/events.parquet",
        },
        "output": out,
        "side_info": "label_text",
        "task": {"labels": "given"},
        "spark": {
            "master": f"local[{threads}]",
            "conf": {"spark.driver.memory": driver_memory},
        },
    }


def run_size(
    n: int,
    seed: int,
    work: str,
    threads: int,
    driver_memory: str,
    sets=(),
    code: str = ROOT,
    side: str = "",
) -> dict:
    """Generate N products (once per ``work``: both sides of ``--against`` run on the same
    data), run the whole pipeline with the code at ``code`` in a fresh process, read its
    manifest."""
    import yaml

    py = sys.executable
    data = os.path.join(work, f"syn{n}")
    t0 = time.time()
    if not os.path.exists(os.path.join(data, "prepare_stats.json")):
        subprocess.run(
            [py, "-m", "pina_spark.cli", "prepare-data", "--source", "synthetic"]
            + ["--instances", str(n), "--seed", str(seed), "--output", data],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    gen_s = time.time() - t0
    out = os.path.join(work, f"run{n}{side}")
    conf = os.path.join(work, f"syn{n}{side}.yaml")
    doc = _config(data, out, threads, driver_memory)
    for kv in sets:
        _set(doc, kv)
    with open(conf, "w") as fh:
        yaml.safe_dump(doc, fh)
    log_path = os.path.join(work, f"run{n}{side}.log")
    t1 = time.time()
    with open(log_path, "w") as log_fh:
        proc = subprocess.Popen(
            [py, "-m", "pina_spark.cli", "run", "--config", conf],
            stdout=log_fh,
            stderr=log_fh,
            cwd=code,
            env=dict(os.environ, PYTHONPATH=code),
        )
        sampler = _Sampler(proc.pid)
        sampler.start()
        rc = proc.wait()
        sampler.stop.set()
        sampler.join()
    wall_s = time.time() - t1
    if rc != 0:
        raise RuntimeError(f"pipeline at N={n} failed (rc {rc}); see {log_path}")
    man = json.load(open(os.path.join(out, "_manifest.json")))
    st = man["stages"]
    stats = json.load(open(os.path.join(data, "prepare_stats.json")))
    stages = {s: st[s]["duration_s"] for s in STAGES if s in st}
    nodes = (st["graph"].get("rows_out") or {}).get("nodes")
    # rows each stage put through the encoder (stages record ``encoded_rows``; a run of the
    # older design, where pretrain encoded its input rows on the driver, recorded none)
    on_exec = {"embed"}
    enc = {
        s: int(
            e["stats"].get(
                "encoded_rows", e["stats"].get("input_rows", 0) if s == "pretrain" else 0
            )
        )
        for s, e in st.items()
        if s in STAGES
    }
    driver_rows = sum(v for s, v in enc.items() if s not in on_exec)
    exec_rows = sum(v for s, v in enc.items() if s in on_exec)
    encoded = driver_rows + exec_rows
    return {
        "n": n,
        "side": side.lstrip("-") or "new",
        "nodes": nodes,
        "events": stats.get("events", {}).get("rows"),
        "labels": stats.get("labels", {}).get("rows"),
        "stages": stages,
        "total_s": round(sum(stages.values()), 2),
        "wall_s": round(wall_s, 2),
        "generate_s": round(gen_s, 2),
        "encoded_rows": encoded,
        "encoded_rows_driver": driver_rows,
        "encoded_rows_executors": exec_rows,
        "driver_peak_rss_mb": round(sampler.peak, 1),
        "driver_python_peak_rss_mb": round(max((p for _, p, _ in sampler.series), default=0), 1),
        "driver_jvm_peak_rss_mb": round(max((j for _, _, j in sampler.series), default=0), 1),
        "peak_rss_mb_by_stage": peaks_by_stage(sampler.series, st),
        # one g fit per variant (the full one in_sample, else fold 0): rows, seconds per step
        # and per level of its label tree
        "g_fits": {
            v: {"rows": one.get("rows"), **one.get("steps_s", {})}
            for v, d in (st.get("pretrain", {}).get("stats", {}).get("detail", {}))
            .get("variants", {})
            .items()
            for one in [d.get("full") or (d.get("folds") or [{}])[0]]
            if one
        },
        "p_at_1": {
            v: round(m["P@1"], 4)
            for v, m in json.load(open(os.path.join(out, "eval", "metrics.json")))[
                "variants"
            ].items()
        },
        "load_avg_1m": os.getloadavg()[0],
    }


def plot(results, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in STAGES:
        ys = [1000.0 * r["stages"].get(s, 0.0) / r["n"] for r in results]
        ax.plot(ns, ys, marker="o", label=s)
    ax.plot(ns, [1000.0 * r["total_s"] / r["n"] for r in results], "k--", marker="s", label="total")
    ax.set_xscale("log")
    ax.set_xlabel("products N")
    ax.set_ylabel("seconds per 1,000 products")
    ax.set_title("pina-spark pipeline, local[2]")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def table(results) -> str:
    head = "| N | nodes | events | " + " | ".join(STAGES) + " | total s | s / 1k | "
    head += "encoded rows (driver + executors) | encoded / nodes | "
    head += "driver peak RSS MB (peaks of Python / JVM) |"
    lines = [head, "|" + "---|" * (len(STAGES) + 8)]
    for r in results:
        lines.append(
            f"| {r['n']:,} | {r['nodes']:,} | {r['events']:,} | "
            + " | ".join(f"{r['stages'].get(s, 0):.1f}" for s in STAGES)
            + f" | {r['total_s']:.1f} | {1000 * r['total_s'] / r['n']:.2f} | "
            f"{r['encoded_rows']:,} ({r['encoded_rows_driver']:,} + "
            f"{r['encoded_rows_executors']:,}) | {r['encoded_rows'] / r['nodes']:.2f} | "
            f"{r['driver_peak_rss_mb']:.0f} ({r.get('driver_python_peak_rss_mb', 0):.0f} / "
            f"{r.get('driver_jvm_peak_rss_mb', 0):.0f}) |"
        )
    if len(results) > 1:
        per = [r["total_s"] / r["n"] for r in results]
        lines.append("")
        lines.append(
            "time per product, each size against the previous: "
            + ", ".join(
                f"{results[i]['n']:,}: x{per[i] / per[i - 1]:.2f}" for i in range(1, len(results))
            )
        )
    return "\n".join(lines)


def merge(sources, out: str) -> None:
    """One JSON, table and PNG of the results of earlier runs, by N; the first run of a size
    wins, and every result keeps its run's settings (``settings_of``)."""
    by_n = {}
    for src in sources:
        doc = json.load(open(src))
        for r in doc["results"]:
            settings = r.get("settings_of") or {**doc["settings"], "json": src}
            by_n.setdefault(r["n"], dict(r, settings_of=settings))
    results = [by_n[n] for n in sorted(by_n)]
    with open(out, "w") as fh:
        json.dump({"results": results, "settings": {"merged": list(sources)}}, fh, indent=1)
    plot(results, os.path.splitext(out)[0] + ".png")
    print(f"`python benchmarks/bench_pipeline.py --merge {','.join(sources)} --json {out}`\n")
    print(table(results))


def against(a, work: str) -> None:
    """``--against REV``: per size, the pipeline with REV's code (a ``git worktree``) and with
    this checkout, one after the other on the same generated data (old first), then a table of
    the stages' seconds, old / new / new-over-old, and seconds per 1,000 products."""
    old = os.path.join(work, "old-code")
    if not os.path.isdir(old):
        subprocess.run(["git", "worktree", "add", "-f", old, a.against], cwd=ROOT, check=True)
    rev = subprocess.run(
        ["git", "rev-parse", "--short", a.against], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    pairs = []
    try:
        for n in [int(x) for x in a.sizes.split(",") if x.strip()]:
            pair = {}
            for side, code in (("old", old), ("new", ROOT)):
                pair[side] = run_size(
                    n, a.seed, work, a.threads, a.driver_memory, a.set, code, f"-{side}"
                )
                print(json.dumps(pair[side]), flush=True)
            pairs.append(pair)
            with open(a.json, "w") as fh:
                json.dump({"against": rev, "pairs": pairs, "sets": a.set}, fh, indent=1)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", old], cwd=ROOT, check=False)
    print(f"`python benchmarks/bench_pipeline.py --sizes {a.sizes} --against {a.against}`\n")
    print("| N | side | " + " | ".join(STAGES) + " | total s | s / 1k products |")
    print("|---|---|" + "---|" * (len(STAGES) + 2))
    for pair in pairs:
        for side in ("old", "new"):
            r = pair[side]
            cells = [f"{r['stages'].get(s, 0.0):.1f}" for s in STAGES]
            print(
                f"| {r['n']:,} | {side} ({rev if side == 'old' else 'this'}) | "
                + " | ".join(cells)
                + f" | {r['total_s']:.1f} | {1000 * r['total_s'] / r['n']:.2f} |"
            )
        o, w = pair["old"], pair["new"]
        cells = [
            f"{w['stages'].get(s, 0.0) / o['stages'][s]:.2f}" if o["stages"].get(s) else "-"
            for s in STAGES
        ]
        ratio = w["total_s"] / o["total_s"]
        print(f"| {o['n']:,} | new / old | " + " | ".join(cells) + f" | {ratio:.2f} | |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,300000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every size's run (dotted key, YAML value), repeatable",
    )
    ap.add_argument("--workdir", default=None, help="where data and runs go (default: a temp dir)")
    ap.add_argument(
        "--against",
        default=None,
        help="git revision: every size runs with its code (a worktree) and with this checkout, "
        "alternating, on the same data; prints new / old per stage",
    )
    ap.add_argument("--json", required=True)
    ap.add_argument(
        "--merge",
        default=None,
        help="comma list of earlier --json outputs to combine into --json (runs nothing)",
    )
    a = ap.parse_args(argv)
    if a.merge:
        return merge([x.strip() for x in a.merge.split(",") if x.strip()], a.json)
    work = a.workdir or tempfile.mkdtemp(prefix="pina-bench-pipeline-")
    os.makedirs(work, exist_ok=True)
    if a.against:
        return against(a, work)
    results = []
    for n in [int(x) for x in a.sizes.split(",") if x.strip()]:
        results.append(run_size(n, a.seed, work, a.threads, a.driver_memory, a.set))
        print(json.dumps(results[-1]), flush=True)
        doc = {
            "results": results,
            "settings": {
                "sizes": a.sizes,
                "seed": a.seed,
                "threads": a.threads,
                "driver_memory": a.driver_memory,
                "sets": a.set,
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "workdir": work,
            },
        }
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    plot(results, os.path.splitext(a.json)[0] + ".png")
    print(f"`python benchmarks/bench_pipeline.py --sizes {a.sizes} --json {a.json}`\n")
    print(table(results))


if __name__ == "__main__":
    main()
