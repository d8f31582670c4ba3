"""The demo pipeline run once per test session through the real ``spark-submit`` (one
``jobs/<stage>.py`` per stage, as EMR steps run them); shared by test_submit.py (checks each
stage), test_incremental.py and test_notebooks.py (executes the notebooks on the finished run).
Used through the session fixture ``demo_submit_run`` of conftest.py."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from pina_spark.datasets import write_demo_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: stage -> its spark-submit entry point, in pipeline order
JOBS = {
    "graph": "graph.py",
    "vectorizer": "vectorizer.py",
    "embed": "embed.py",
    "pretrain": "pretrain.py",
    "neighbors": "neighbors.py",
    "aggregate": "aggregate.py",
    "train": "train.py",
    "evaluate": "evaluate.py",
}


def spark_submit_exe():
    exe = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    return exe if os.path.exists(exe) else None


def child_env(**extra) -> dict:
    """The environment of a child process that runs the CLI (or a script starting Spark) with
    this interpreter: PySpark's Python on both sides, a loopback Spark address, and none of the
    parent's Py4J gateway or fault-injection variables (the child starts its own JVM and runs
    clean). ``extra`` adds or replaces variables."""
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        **extra,
    )
    for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PINA_FAULTS"):
        env.pop(k, None)
    return env


def run_demo_via_spark_submit(tmp_dir, timeout_s=1500):
    """Write the demo data and a config into ``tmp_dir``, then spark-submit every stage in
    order, stopping at the first failure. Returns ``{"config", "output", "results", "error"}``;
    ``results[stage]`` is ``{"rc", "stdout", "stderr"}``, or ``{"not_run": reason}`` after a
    failed stage. A failure is recorded, not raised: each test that needs the run fails with it
    (:func:`require_finished`), the stages before it still pass."""
    out = {
        "config": None,
        "output": os.path.join(str(tmp_dir), "out"),
        "results": {},
        "error": None,
    }
    exe = spark_submit_exe()
    if exe is None:
        out["error"] = f"spark-submit not found beside {sys.executable}"
        return out
    inputs = write_demo_data(os.path.join(str(tmp_dir), "input"))
    cfg = yaml.safe_load(open(os.path.join(ROOT, "pina_spark", "conf", "demo.yaml")))
    cfg["output"] = out["output"]
    cfg["input"] = inputs
    cfg["spark"]["master"] = None  # spark-submit decides
    out["config"] = os.path.join(str(tmp_dir), "submit.yaml")
    with open(out["config"], "w") as fh:
        yaml.safe_dump(cfg, fh)
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    for stage, job in JOBS.items():
        if out["error"]:
            out["results"][stage] = {"not_run": f"an earlier stage failed: {out['error']}"}
            continue
        cmd = [
            exe,
            "--master",
            "local[2]",
            "--driver-memory",
            "2g",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            os.path.join(ROOT, "jobs", job),
            "--config",
            out["config"],
            "--log-level",
            "INFO",
        ]
        try:
            r = subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
            )
            res = {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
        except subprocess.TimeoutExpired as e:
            res = {"rc": -1, "stdout": "", "stderr": f"timeout after {timeout_s}s: {e}"}
        out["results"][stage] = res
        if res["rc"] != 0:
            out["error"] = f"spark-submit jobs/{job} exited {res['rc']}"
    return out


def failure(run):
    """Why the demo run did not finish, with the failed stage's stderr; ``None`` if it did."""
    if not run["error"]:
        return None
    lines = [f"the demo run through spark-submit did not finish: {run['error']}"]
    for stage, res in run["results"].items():
        if res.get("rc", 0) != 0:
            lines.append(f"--- jobs/{JOBS[stage]} stderr (end):\n{res['stderr'][-4000:]}")
    return "\n".join(lines)


def require_finished(run):
    """``run`` when every stage of the demo ran; else fails the calling test with the error (a
    broken demo must fail the tests that need it, never skip them)."""
    reason = failure(run)
    if reason:
        pytest.fail(reason, pytrace=False)
    return run


def last_json(stdout):
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON report in stdout: {stdout[-2000:]}")
