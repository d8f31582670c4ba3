"""Fault injection for reliability tests (executor side).

``faults.fail_first_attempt: [graph, embed, ...]`` in the config, or env ``PINA_FAULTS=embed,...``
on the driver, makes the first attempt of the chosen stages' tasks raise; with
``spark.task.maxFailures > 1`` Spark retries them and the run must produce identical output.

The driver resolves the switch into a plain tuple (:func:`fault_plan`) that executor functions
close over and check with :func:`maybe_fail`.
"""

import os
from collections.abc import Sequence


class InjectedFault(RuntimeError):
    """Raised on purpose by :func:`maybe_fail`."""


def fault_plan(cfg, stage: str) -> tuple[str, tuple[int, ...]] | None:
    """Driver side: ``(stage, partitions)`` when ``stage`` must fail its first attempts."""
    stages = set(cfg.faults.fail_first_attempt)
    stages |= {s.strip() for s in os.environ.get("PINA_FAULTS", "").split(",") if s.strip()}
    if stage not in stages:
        return None
    return stage, tuple(cfg.faults.partitions)


def maybe_fail(plan: tuple[str, Sequence[int]] | None) -> None:
    """Executor side: raise on the first attempt of a chosen task."""
    if plan is None:
        return
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("maybe_fail() must run inside a Spark task (executor side)")
    stage, parts = plan
    if tc.attemptNumber() == 0 and (not parts or tc.partitionId() in parts):
        raise InjectedFault(
            f"injected fault: stage {stage}, partition {tc.partitionId()}, "
            f"attempt {tc.attemptNumber()}"
        )
