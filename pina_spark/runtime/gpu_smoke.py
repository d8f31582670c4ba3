"""GPU smoke check for a GPU cluster (the first step of ``conf/emr/steps-gpu.json``): one task
per requested slot asserts that Spark gave it a GPU address (YARN GPU scheduling works) and
that ``torch.cuda.is_available()`` in its Python worker (the archive's torch is a CUDA build and
the device is visible inside the container's cgroup). Exits 1 naming what is missing.

    spark-submit --deploy-mode cluster --archives .../pina-env-gpu-<v>.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        --conf spark.executor.resource.gpu.amount=1 --conf spark.task.resource.gpu.amount=1 \\
        jobs/gpu_smoke.py [--tasks N]
"""

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


def check_task(
    resources: dict[str, Any], cuda_available: bool, device_names: list[str]
) -> dict[str, Any]:
    """The verdict of one task, from plain values (testable without a GPU).

    Examples
    --------
    >>> check_task({}, False, [])["problems"]  # doctest: +NORMALIZE_WHITESPACE
    ['the task owns no GPU (spark.task.resource.gpu.amount unset, or YARN GPU scheduling is
      off)', 'torch.cuda.is_available() is False in the task (a CPU build of torch, or the
      device is not visible in the container)']
    """
    gpu = resources.get("gpu")
    addresses = list(getattr(gpu, "addresses", []) or []) if gpu is not None else []
    problems = []
    if not addresses:
        problems.append(
            "the task owns no GPU (spark.task.resource.gpu.amount unset, or YARN "
            "GPU scheduling is off)"
        )
    if not cuda_available:
        problems.append(
            "torch.cuda.is_available() is False in the task (a CPU build of torch, "
            "or the device is not visible in the container)"
        )
    return {
        "addresses": addresses,
        "cuda_available": cuda_available,
        "devices": device_names,
        "problems": problems,
    }


def _task(_: Iterator[Any]) -> Iterator[str]:
    import torch
    from pyspark import TaskContext

    ok = torch.cuda.is_available()
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if ok else []
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("gpu_smoke: _task runs inside a Spark task only")
    yield json.dumps(check_task(ctx.resources(), ok, names))


def run(spark, tasks: int) -> list[dict[str, Any]]:
    """Run ``tasks`` smoke tasks; return their verdicts."""
    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    return [json.loads(s) for s in rdd.mapPartitions(_task).collect()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jobs/gpu_smoke.py", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1, help="smoke tasks (default 1)")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("pina-spark gpu smoke").getOrCreate()
    try:
        results = run(spark, args.tasks)
    finally:
        spark.stop()
    bad = [r for r in results if r["problems"]]
    print(json.dumps({"tasks": results}, indent=1))
    for r in bad:
        log.error("gpu smoke: %s", "; ".join(r["problems"]))
    return 1 if bad else 0
