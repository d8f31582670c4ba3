"""Whether the process that wrote a lease still runs, when it ran on this host.

A lease (:mod:`pina_spark.storage.lease`) records who wrote it: the host name, the pid, and
where they are known the boot id, the pid namespace and the process start time. A run on the
same host (same name, same boot, same pid namespace) can then tell for sure that the owner is
gone (no such pid, a zombie, or a pid reused by a process that started at another time) and
take the root over at once instead of waiting ``lease_stale_s``. Anything else (another host,
another container, a lease without these fields, a system with neither ``/proc`` nor psutil)
answers "unknown", and only the heartbeat's age decides.

Examples
--------
>>> import os
>>> me = identity()
>>> me["pid"] == os.getpid()
True
>>> dead_reason(me) is None  # this process runs
True
>>> dead_reason({"host": "elsewhere", "pid": 1}) is None  # another host: unknown
True
"""

import os
import socket
from typing import Any

_PROC = "/proc"


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _psutil() -> Any:
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    return psutil


def _boot_id() -> str | None:
    """This boot of this machine: a pid recorded before a reboot means nothing after it."""
    boot = _read(f"{_PROC}/sys/kernel/random/boot_id")
    if boot:
        return boot
    ps = _psutil()
    return f"boot-{ps.boot_time():.0f}" if ps is not None else None


def _pid_ns() -> str:
    """The pid namespace of this process (containers on one host have their own pids)."""
    try:
        return os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        return ""


def _proc_state(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of ``pid`` from ``/proc/<pid>/stat`` (fields 3 and 22; the start
    time in clock ticks since boot), or ``None`` when ``/proc`` does not show it."""
    stat = _read(f"{_PROC}/{pid}/stat")
    if not stat or ")" not in stat:
        return None
    rest = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return (rest[0], rest[19]) if len(rest) > 19 else None


def _start_time(pid: int) -> str | None:
    """The start time of the process ``pid`` (``None`` when unknown or gone)."""
    st = _proc_state(pid)
    if st is not None:
        return st[1]
    ps = _psutil()
    if ps is None:
        return None
    try:
        return repr(ps.Process(pid).create_time())
    except Exception:  # NoSuchProcess, AccessDenied, ...
        return None


def identity() -> dict[str, Any]:
    """What a lease records about its writer: ``host``, ``pid``, ``boot_id``, ``pid_ns`` and
    ``pid_start`` (the last three ``None``/empty where the system does not tell)."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "boot_id": _boot_id(),
        "pid_ns": _pid_ns(),
        "pid_start": _start_time(pid),
    }


def same_host(owner: dict[str, Any]) -> bool:
    """Whether ``owner`` (a lease's content) was written by a process whose pid means the same
    here: same host name, same boot and same pid namespace, each recorded and known here."""
    me = identity()
    return bool(
        owner.get("host") == me["host"]
        and me["boot_id"]
        and owner.get("boot_id") == me["boot_id"]
        and owner.get("pid_ns", "") == me["pid_ns"]
        and owner.get("pid_start")
    )


def dead_reason(owner: dict[str, Any]) -> str | None:
    """Why the process that wrote ``owner`` certainly no longer runs (a sentence), or ``None``
    when it runs or that cannot be told from here (see the module docstring)."""
    try:
        pid = int(owner.get("pid") or 0)
    except (TypeError, ValueError):
        return None
    if pid <= 0 or not same_host(owner):
        return None
    st = _proc_state(pid)
    if st is not None:
        if st[0] in ("Z", "X"):
            return f"its process (pid {pid}) has exited"
        if st[1] != str(owner.get("pid_start")):
            return f"its pid {pid} is now another process (started at another time)"
        return None
    start = _start_time(pid)  # no /proc: psutil, if installed
    if start is not None:
        if start != str(owner.get("pid_start")):
            return f"its pid {pid} is now another process (started at another time)"
        return None
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return f"its process (pid {pid}) is gone"
    except OSError:  # PermissionError: it exists, run by another user
        return None
    return None
