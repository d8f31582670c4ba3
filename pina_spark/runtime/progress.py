"""Visible progress of a running stage (driver side).

:class:`StageProgress` wraps one pipeline stage: every Spark job it starts carries the job group
``pina-<stage>`` and the description ``pina-spark <stage> (run <id>)``, so the Spark UI and the
history server name the jobs instead of showing anonymous ``mapInArrow`` ones; and a daemon
thread logs one line every ``run.progress_s`` seconds with the stage's active Spark stages and
their tasks done/total, from Spark's status tracker (Spark's own console progress bar is off:
:data:`pina_spark.orchestration.session.DEFAULT_CONF`). Lines look like::

    stage neighbors: 2m30s, Spark stage 14 (mapInArrow at ...): 35/100 tasks done, 4 running

Example::

    with StageProgress(spark, "embed", run_id="abc", interval_s=30):
        run(ctx)
"""

import contextlib
import logging
import threading
import time

log = logging.getLogger(__name__)


def job_group(stage: str) -> str:
    """The Spark job group of a pipeline stage's jobs."""
    return f"pina-{stage}"


def _elapsed(s: float) -> str:
    m, sec = divmod(int(s), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def progress_line(tracker, group: str, stage: str, elapsed_s: float) -> str:
    """One progress line for the active Spark stages of ``group`` (``tracker``: a
    ``pyspark.StatusTracker``)."""
    stage_ids: list[int] = []
    for jid in tracker.getJobIdsForGroup(group) or []:
        info = tracker.getJobInfo(jid)
        if info is not None and info.status == "RUNNING":
            stage_ids.extend(info.stageIds)
    active = set(tracker.getActiveStageIds() or [])
    parts = []
    for sid in sorted(set(stage_ids) & active):
        st = tracker.getStageInfo(sid)
        if st is None:
            continue
        failed = f", {st.numFailedTasks} failed" if st.numFailedTasks else ""
        parts.append(
            f"Spark stage {sid} ({st.name.split(chr(10))[0][:60]}): "
            f"{st.numCompletedTasks}/{st.numTasks} tasks done, "
            f"{st.numActiveTasks} running{failed}"
        )
    what = "; ".join(parts) if parts else "no Spark job running (driver-side work)"
    return f"stage {stage}: {_elapsed(elapsed_s)}, {what}"


class StageProgress:
    """Context manager: job group + description for the stage's jobs, periodic progress log."""

    def __init__(self, spark, stage: str, run_id: str, interval_s: float):
        self.sc = spark.sparkContext
        self.stage = stage
        self.group = job_group(stage)
        self.description = f"pina-spark {stage} (run {run_id})"
        self.interval_s = float(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> "StageProgress":
        self._t0 = time.time()
        self.sc.setJobGroup(self.group, self.description, interruptOnCancel=False)
        if self.interval_s > 0:
            self._thread = threading.Thread(
                target=self._loop, name=f"pina-progress-{self.stage}", daemon=True
            )
            self._thread.start()
        return self

    def _loop(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(self.interval_s):
            try:
                log.info(progress_line(tracker, self.group, self.stage, time.time() - self._t0))
            except Exception as e:  # the tracker must never break a stage
                log.debug("progress line failed: %s", e)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        self.sc.setLocalProperty("spark.job.description", None)


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = 30.0):
    """Log ``what``'s start, a line every ``every_s`` seconds while it runs, and its end: for
    long driver-side steps that start no Spark job (model training, fine-tuning).

    Examples
    --------
    >>> with heartbeat("nothing much", every_s=60):
    ...     pass
    """
    t0 = time.time()
    stop = threading.Event()

    def beat():
        while not stop.wait(every_s):
            log.info("%s: still running after %.0fs", what, time.time() - t0)

    th = threading.Thread(target=beat, daemon=True, name="pina-heartbeat")
    log.info("%s: start", what)
    th.start()
    try:
        yield
    finally:
        stop.set()
        log.info("%s: done in %.1fs", what, time.time() - t0)
