"""The machine's CPU seconds over a span of wall time, from ``/proc/stat`` (Linux).

A benchmark on a shared virtual machine sees its wall seconds move with the host: on the
2-core machine of docs/benchmarks.md one PECOS fit took 24.6-38.7 s in runs minutes apart, with
nothing else running. Two counters of the kernel tell part of why:

- **busy** CPU seconds (user, nice, system, irq, softirq: every core's time doing work), the
  cost of the work itself. Where the host takes a core away, the guest kernel counts that as
  steal, not busy (paravirtual steal accounting), so busy seconds do not grow with time the
  host takes away. A core made slower by a neighbour (shared caches, memory bandwidth) still
  shows up in busy seconds, and on the machine of docs/benchmarks.md that was the whole
  spread: steal stayed under 0.5% of the busy seconds.
- **steal** seconds: the time the host ran something else on one of the guest's cores.

Machine-wide counters are the benchmark's only when nothing else runs, the condition every
benchmark here already states. Where ``/proc/stat`` is absent (not Linux), :func:`read`
returns ``None`` and the callers leave the CPU figures out.

Examples
--------
>>> s = Sampler.__new__(Sampler)
>>> s.samples = [Sample(0.0, 0.0, 0.0), Sample(10.0, 15.0, 1.0), Sample(20.0, 35.0, 1.0)]
>>> s.between(5.0, 20.0)
{'busy_s': 27.5, 'steal_s': 0.5}
"""

import bisect
import dataclasses as dc
import os
import threading
import time

__all__ = ["Sample", "Sampler", "read", "since"]

_FIELDS_BUSY = (0, 1, 2, 5, 6)  # user nice system irq softirq (idle 3, iowait 4, steal 7)
_FIELD_STEAL = 7


@dc.dataclass(frozen=True)
class Sample:
    """The machine's cumulative counters at wall time ``t`` (``time.time()``), in seconds."""

    t: float
    busy: float
    steal: float


def read(path: str = "/proc/stat") -> Sample | None:
    """The counters now (every core summed), or ``None`` where ``path`` cannot be read."""
    try:
        with open(path) as fh:
            head = fh.readline().split()
    except OSError:
        return None
    if not head or head[0] != "cpu":
        return None
    ticks = [int(x) for x in head[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    steal = ticks[_FIELD_STEAL] if len(ticks) > _FIELD_STEAL else 0
    busy = sum(ticks[i] for i in _FIELDS_BUSY if i < len(ticks))
    return Sample(time.time(), busy / hz, steal / hz)


def since(start: Sample | None) -> dict[str, float] | None:
    """Busy and steal seconds from ``start`` to now (``None`` if either end is unreadable).

    >>> since(None) is None
    True
    """
    end = read()
    if start is None or end is None:
        return None
    return {
        "busy_s": round(end.busy - start.busy, 2),
        "steal_s": round(end.steal - start.steal, 2),
    }


class Sampler:
    """Reads the counters every ``every`` seconds in a background thread while in a ``with``
    block, so that the CPU seconds of a span known only afterwards (a stage's start and end,
    from its run's manifest) can be taken from them (:meth:`between`)."""

    def __init__(self, every: float = 0.25):
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            s = read()
            if s is not None:
                self.samples.append(s)
            if self._stop.wait(self.every):
                break

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        s = read()
        if s is not None:
            self.samples.append(s)

    def _at(self, t: float, field: str) -> float:
        ts = [s.t for s in self.samples]
        i = bisect.bisect_left(ts, t)
        if i == 0:
            return getattr(self.samples[0], field)
        if i == len(ts):
            return getattr(self.samples[-1], field)
        a, b = self.samples[i - 1], self.samples[i]
        w = (t - a.t) / (b.t - a.t) if b.t > a.t else 1.0
        return getattr(a, field) + w * (getattr(b, field) - getattr(a, field))

    def between(self, t0: float, t1: float) -> dict[str, float] | None:
        """Busy and steal seconds from wall time ``t0`` to ``t1`` (linear between samples;
        ``None`` without samples, e.g. where ``/proc/stat`` is absent)."""
        if not self.samples:
            return None
        return {
            "busy_s": round(self._at(t1, "busy") - self._at(t0, "busy"), 2),
            "steal_s": round(self._at(t1, "steal") - self._at(t0, "steal"), 2),
        }
