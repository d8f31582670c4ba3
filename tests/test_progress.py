"""Visible progress: each stage's Spark jobs carry its job group and description, and a
periodic line reports the stage's Spark tasks done/total (pina_spark/runtime/progress.py)."""

import logging
import time

import pytest

from pina_spark.runtime.progress import StageProgress, job_group


@pytest.mark.slow
def test_stage_jobs_are_named_and_progress_is_logged(spark, caplog):
    def slow(it):
        for x in it:
            time.sleep(0.6)
            yield x

    with caplog.at_level(logging.INFO, logger="pina_spark.runtime.progress"):
        with StageProgress(spark, "embed", run_id="r1", interval_s=0.3):
            n = spark.sparkContext.parallelize(range(6), 6).mapPartitions(slow).count()
    assert n == 6
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(job_group("embed"))
    assert jobs, "the stage's job carries the job group pina-embed"
    lines = [r.getMessage() for r in caplog.records if r.name == "pina_spark.runtime.progress"]
    running = [ln for ln in lines if "tasks done" in ln]
    assert running, lines
    assert running[0].startswith("stage embed: ") and "/6 tasks done" in running[0]
    # after the block, later jobs are no longer in the stage's group
    spark.sparkContext.parallelize(range(2), 2).count()
    assert set(tracker.getJobIdsForGroup(job_group("embed"))) == set(jobs)


def test_progress_off_logs_nothing(spark, caplog):
    with caplog.at_level(logging.INFO, logger="pina_spark.runtime.progress"):
        with StageProgress(spark, "graph", run_id="r2", interval_s=0):
            spark.sparkContext.parallelize(range(2), 2).count()
    assert not [r for r in caplog.records if r.name == "pina_spark.runtime.progress"]
