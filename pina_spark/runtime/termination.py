"""SIGTERM ends a command the way an error does: the lease is released, staging folders are
discarded, the manifest records the run as failed, and the exit code is 143 (128 + SIGTERM).

YARN kills a container (a step cancelled, a preempted or over-limit container, an application
killed) with SIGTERM and, a moment later, SIGKILL. Python's default for SIGTERM ends the process
at once, running no ``finally``, so the run root's ``_LOCK`` stayed until the next run took it
over as stale. :func:`exit_on_sigterm`, called by the entry points, turns the first SIGTERM into
:class:`Terminated` (a ``SystemExit``, so no ``except Exception`` swallows it) raised in the main
thread; a second SIGTERM ends the process at once, as before. SIGKILL cannot be caught: only
such a death (``kill -9``, the kernel's OOM killer, a lost node) leaves the lease behind.

A driver is nearly always waiting in a JVM call when the signal comes (a Spark job). Raised
there, the exception would leave that thread's py4j connection half-read, and every JVM call of
the clean-up after it (the job group's reset, the staging folders' removal, the manifest) would
fail with py4j's own errors, replacing the exit code 143 with 1. So inside a py4j call the
handler asks Spark, from another thread (another connection), to cancel every job, and lets the
cancelled call end the command with its own error, which unwinds through the clean-up
undisturbed and exits 143 (the entry point asks :func:`requested`, then :func:`disarm`). A
check every :data:`RETRY_S` seconds raises :class:`Terminated` only where that does not come:
the main thread out of py4j for :data:`GRACE_S` seconds and still running (its call was no
Spark job); while it keeps entering py4j, the jobs it starts are cancelled again.

Example::

    exit_on_sigterm()  # first thing in a command's entry point
"""

import logging
import signal
import sys
import threading
import time
from types import FrameType

log = logging.getLogger(__name__)

#: the exit code of a command ended by SIGTERM (the shell's 128 + signal number)
EXIT_SIGTERM = 128 + int(signal.SIGTERM)


class Terminated(SystemExit):
    """Raised in the main thread by the first SIGTERM; exits with :data:`EXIT_SIGTERM`."""

    def __init__(self) -> None:
        super().__init__(EXIT_SIGTERM)

    def __str__(self) -> str:
        return f"terminated by SIGTERM (exit code {EXIT_SIGTERM})"


#: seconds between the checks of the main thread after a SIGTERM that came inside py4j
RETRY_S = 0.05
#: seconds the main thread may run outside py4j after such a SIGTERM (the cancelled call's error
#: unwinding through the clean-up) before :class:`Terminated` is raised in it
GRACE_S = 10.0
#: at most one job cancellation per this many seconds while the main thread keeps calling the JVM
CANCEL_EVERY_S = 1.0

_requested = threading.Event()


def requested() -> bool:
    """Whether a SIGTERM asked this process to stop (then any error that ends the command is
    reported as the termination: the cancelled Spark job's error, say)."""
    return _requested.is_set()


def reason(e: BaseException) -> str:
    """How an error that ended a stage or a command is recorded and reported: the termination
    (naming the error it came as: ``Terminated``, or the cancelled Spark job's) after a
    SIGTERM, else the error itself."""
    if requested():
        return f"{Terminated()} ({type(e).__name__})"
    return f"{type(e).__name__}: {e}"


def in_py4j(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it runs py4j's code (a JVM call in flight).

    >>> import sys
    >>> in_py4j(sys._getframe())
    False
    """
    while frame is not None:
        if "/py4j/" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def _cancel_spark_jobs() -> None:
    """Cancel every job of the active SparkContext (from another thread: its own connection),
    so that the main thread's JVM call returns."""
    try:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is not None:
            sc.cancelAllJobs()
    except Exception as e:  # the process is stopping: say why it may take longer
        log.warning("SIGTERM: could not cancel the Spark jobs: %s", e)


class _Deferred:
    """Whether the checks run, when the main thread was found outside py4j (since), and the
    last cancellation."""

    armed: bool = False
    out_since: float | None = None
    cancelled_at: float = float("-inf")


def _cancel_soon(now: bool = False) -> None:
    """Cancel the Spark jobs from another thread (at most once per :data:`CANCEL_EVERY_S`
    unless ``now``): a job may also run while the main thread is outside py4j (an Arrow
    collect reads its result from a local socket in pyspark's own code)."""
    t = time.monotonic()
    if now or t - _Deferred.cancelled_at >= CANCEL_EVERY_S:
        _Deferred.cancelled_at = t
        threading.Thread(target=_cancel_spark_jobs, name="pina-sigterm", daemon=True).start()


def _raise() -> None:
    disarm()
    _cancel_soon(now=True)  # whatever job still runs must not hold up the clean-up
    raise Terminated()


def _check(signum: int, frame: FrameType | None) -> None:
    """The SIGALRM tick after a SIGTERM that came inside py4j (see the module docstring)."""
    if not _Deferred.armed:  # a tick that fired as disarm() ran
        return
    t = time.monotonic()
    if in_py4j(frame):
        _Deferred.out_since = None
        _cancel_soon()
    elif sys.exc_info()[0] is not None:  # an error is being handled: the clean-up runs
        _Deferred.out_since = None
    elif _Deferred.out_since is None:
        _Deferred.out_since = t
    elif t - _Deferred.out_since >= GRACE_S:
        _raise()
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def disarm() -> None:
    """Stop the checks (the command is ending: its entry point reports the termination)."""
    _Deferred.armed = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # a tick already on its way is dropped
        signal.setitimer(signal.ITIMER_REAL, 0)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    _requested.set()
    log.error("SIGTERM: stopping (releasing the lease, discarding staging folders)")
    if not in_py4j(frame):
        _raise()
    _cancel_soon(now=True)
    _Deferred.armed = True
    signal.signal(signal.SIGALRM, _check)
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def exit_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (a no-op elsewhere: Python
    installs signal handlers only there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
