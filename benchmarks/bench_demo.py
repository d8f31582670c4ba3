"""The demo pipeline, this checkout against another revision, alternating on the same machine.

Each repeat runs ``pina-spark demo`` (the README's first command, on the built-in demo data) once
with the other revision's code (a ``git worktree`` of ``--against``) and once with this checkout,
each in a fresh process, and reads every stage's seconds and ``encoded_rows`` (rows put through
the text encoder; older revisions recorded none, so theirs are read as the pretrain stage's
input rows plus the embed stage's rows) from the run's ``_manifest.json``. Alternating the two
sides puts both under the same background load.

Usage::

    .venv/bin/python benchmarks/bench_demo.py --against 2e6de00 --repeat 3 --json runs/demo_ab.json

Prints the median seconds per stage and in total for each side, the ratio new / old, and writes
every measurement to the JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what older revisions recorded instead of ``encoded_rows``
OLD_ENCODED = {"pretrain": "input_rows", "embed": "rows"}


def run_demo(code: str, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=code)
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "pina_spark.cli", "demo", "--output", out],
        cwd=code,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.time() - t0
    stages = json.load(open(os.path.join(out, "run", "_manifest.json")))["stages"]
    enc = sum(
        int(e["stats"].get("encoded_rows", e["stats"].get(OLD_ENCODED.get(s, "-"), 0)))
        for s, e in stages.items()
    )
    return {
        "wall_s": round(wall, 2),
        "stages": {s: round(e["duration_s"], 2) for s, e in stages.items()},
        "stages_total_s": round(sum(e["duration_s"] for e in stages.values()), 2),
        "encoded_rows": enc,
        "nodes": (stages["graph"].get("rows_out") or {}).get("nodes"),
        "load_avg_1m": os.getloadavg()[0],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", required=True, help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="pina-bench-demo-")
    old = os.path.join(work, "old-code")
    subprocess.run(["git", "worktree", "add", "-f", old, a.against], cwd=ROOT, check=True)
    runs = []
    try:
        for r in range(a.repeat):
            for side, code in (("old", old), ("new", ROOT)):
                res = run_demo(code, os.path.join(work, f"{side}-{r}"))
                runs.append(dict(res, side=side, repeat=r))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", old], cwd=ROOT, check=False)
    med = {}
    for side in ("old", "new"):
        mine = [x for x in runs if x["side"] == side]
        names = sorted({s for x in mine for s in x["stages"]})
        med[side] = {
            "stages": {s: statistics.median(x["stages"].get(s, 0.0) for x in mine) for s in names},
            "stages_total_s": statistics.median(x["stages_total_s"] for x in mine),
            "wall_s": statistics.median(x["wall_s"] for x in mine),
            "encoded_rows": statistics.median(x["encoded_rows"] for x in mine),
        }
    print("| side | " + " | ".join(sorted(med["new"]["stages"])) + " | stages total s | wall s |")
    for side in ("old", "new"):
        m = med[side]
        print(
            f"| {side} | "
            + " | ".join(f"{m['stages'].get(s, 0):.1f}" for s in sorted(med["new"]["stages"]))
            + f" | {m['stages_total_s']:.1f} | {m['wall_s']:.1f} |"
        )
    ratio = med["new"]["stages_total_s"] / med["old"]["stages_total_s"]
    print(f"new / old (stages total, medians of {a.repeat}): {ratio:.3f}")
    with open(a.json, "w") as fh:
        json.dump(
            {"against": a.against, "runs": runs, "medians": med, "ratio": ratio}, fh, indent=1
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
