"""Per-run manifest ``<root>/_manifest.json``: per-stage status, statistics, timings,
fingerprints, library versions and the config.

A stage's entry is written last, after its tables were published, so "entry present with status
``complete``" means "outputs complete" (see :mod:`pina_spark.io`).

Examples
--------
>>> import tempfile
>>> m = Manifest(tempfile.mkdtemp() + "/_manifest.json")
>>> m.record_stage("graph", {"edges": 10}, fingerprint="abc", duration_s=1.5)
>>> Manifest(m.uri).stage("graph")["stats"]["edges"]
10
"""
import contextlib
import json
import logging
import platform
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

from . import io

log = logging.getLogger(__name__)

_MAX_HISTORY = 50


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _now_us() -> str:
    """UTC time with microseconds: also a version token of a stage's outputs."""
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_LIBS = ("pyspark", "pyarrow", "numpy", "scipy", "pandas", "libpecos", "torch", "transformers")


def library_versions() -> Dict[str, Optional[str]]:
    """Installed versions of the stack (``None`` for a missing package)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return {}
    out: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in _LIBS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


class StepTimer:
    """Wall-clock seconds of the named steps of a stage, in the order they ran: logged at INFO
    as each step ends and recorded in the stage's manifest statistics (``steps_s``).

    A step that runs again adds to its total. Spark is lazy: a step's time is the time of the
    actions inside it, so each step should end with the action that materialises it (a write,
    a count, a persist + count).

    Examples
    --------
    >>> t = StepTimer("graph")
    >>> with t.step("nodes"):
    ...     pass
    >>> list(t.as_dict())
    ['nodes']
    """

    def __init__(self, stage: str):
        self.stage = stage
        self._steps: Dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self._steps[name] = self._steps.get(name, 0.0) + dt
            log.info("%s: %s took %.2fs", self.stage, name, dt)

    def as_dict(self) -> Dict[str, float]:
        """``{step: seconds}`` rounded to milliseconds, in first-run order."""
        return {k: round(v, 3) for k, v in self._steps.items()}


class Manifest:
    """Read-modify-write JSON manifest (driver side only; writes are atomic replaces)."""

    def __init__(self, uri: str):
        self.uri = uri
        raw = io.read_bytes(uri)
        self.data: Dict[str, Any] = json.loads(raw) if raw else {"stages": {}}
        self.data.setdefault("stages", {})

    def save(self) -> None:
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        io.write_bytes(self.uri, json.dumps(self.data, indent=2, sort_keys=True,
                                            default=str).encode())

    def stage(self, name: str) -> Optional[Dict[str, Any]]:
        return self.data["stages"].get(name)

    def set_run_info(self, config: Dict[str, Any]) -> None:
        self.data["config"] = config
        self.data["libraries"] = library_versions()
        self.save()

    def mark_started(self, name: str, fingerprint: str) -> None:
        entry = self.data["stages"].get(name, {})
        entry.update({"status": "running", "fingerprint": fingerprint,
                      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        self.data["stages"][name] = entry
        self.save()

    def mark_failed(self, name: str, error: str) -> None:
        entry = self.data["stages"].get(name, {})
        entry.update({"status": "failed", "error": error[:2000]})
        self.data["stages"][name] = entry
        self.save()

    def record_stage(self, name: str, stats: Dict[str, Any], fingerprint: str,
                     duration_s: float, **extra: Any) -> None:
        """Mark ``name`` complete (after its outputs were published). ``extra``: e.g.
        ``rows_out={table: n}``, ``rows_per_s``."""
        entry = self.data["stages"].get(name, {})
        entry.update({"status": "complete", "stats": stats, "fingerprint": fingerprint,
                      "duration_s": round(duration_s, 3),
                      "finished": _now_us()})
        entry.update(extra)
        entry["runs"] = int(entry.get("runs", 0)) + 1
        entry["version"] = uuid.uuid4().hex  # changes whenever the outputs are republished
        entry.pop("error", None)
        self.data["stages"][name] = entry
        self.save()

    def start_run(self, run_id: str, stages: List[str], **info: Any) -> None:
        """Append an entry to the run history (one per ``run_pipeline`` call)."""
        hist = self.data.setdefault("history", [])
        hist.append(dict(info, run_id=run_id, stages=stages, status="running", started=_now()))
        del hist[:-_MAX_HISTORY]
        self.save()

    def finish_run(self, run_id: str, result: Dict[str, str], status: str,
                   error: Optional[str] = None) -> None:
        for h in reversed(self.data.get("history", [])):
            if h.get("run_id") == run_id:
                h.update({"status": status, "result": dict(result), "finished": _now()})
                if error:
                    h["error"] = error[:2000]
                break
        self.save()

    def is_complete(self, name: str, fingerprint: str) -> bool:
        e = self.stage(name)
        return bool(e and e.get("status") == "complete" and e.get("fingerprint") == fingerprint)
