"""SIGTERM ends a command the way an error does: the lease is released, staging folders are
discarded, the manifest records the run as failed, and the exit code is 143 (128 + SIGTERM).

YARN kills a container (a step cancelled, a preempted or over-limit container, an application
killed) with SIGTERM and, a moment later, SIGKILL. Python's default for SIGTERM ends the process
at once, running no ``finally``, so the run root's ``_LOCK`` stayed until the next run took it
over as stale. :func:`exit_on_sigterm`, called by the entry points, turns the first SIGTERM into
:class:`Terminated` (a ``SystemExit``, so no ``except Exception`` swallows it) raised in the main
thread; a second SIGTERM ends the process at once, as before. SIGKILL cannot be caught: only
such a death (``kill -9``, the kernel's OOM killer, a lost node) leaves the lease behind.

Example::

    exit_on_sigterm()  # first thing in a command's entry point
"""

import logging
import signal
import threading
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


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    log.error("SIGTERM: stopping (releasing the lease, discarding staging folders)")
    raise Terminated()


def exit_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (a no-op elsewhere: Python
    installs signal handlers only there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
