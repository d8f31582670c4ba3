"""Per-run manifest ``<root>/_manifest.json``: per-stage status, statistics, timings,
fingerprints, library versions and the config.

A stage's entry is written last, after its tables were published, so "entry present with status
``complete``" means "outputs complete" (see :mod:`pina_spark.storage`).

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
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pina_spark.config import redact
from pina_spark.storage.files import read_bytes, write_bytes

log = logging.getLogger(__name__)

_MAX_HISTORY = 50


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _now_us() -> str:
    """UTC time with microseconds: also a version token of a stage's outputs."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_LIBS = ("pyspark", "pyarrow", "numpy", "scipy", "pandas", "libpecos", "torch", "transformers")


def library_versions(names=_LIBS) -> dict[str, str | None]:
    """Installed versions of ``names`` (default: the stack) and of Python (``None`` for a
    missing package): the run manifest's ``libraries`` and the model cards' ``versions``."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return {}
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
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
        self._steps: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self._steps[name] = self._steps.get(name, 0.0) + dt
            log.info("%s: %s took %.2fs", self.stage, name, dt)

    def as_dict(self) -> dict[str, float]:
        """``{step: seconds}`` rounded to milliseconds, in first-run order."""
        return {k: round(v, 3) for k, v in self._steps.items()}


#: a line naming an exception, as Python tracebacks end (``pkg.mod.NameError: message``)
_CAUSE_RE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Fault)\b: .*$", re.M)


def stored_error(error: str, limit: int = 2000) -> str:
    r"""An error as the manifest keeps it: secrets scrubbed, at most ``limit`` characters. A
    longer one (a Spark job failure quotes whole JVM stack traces, longer on Spark 3.5) keeps its
    head and then the exception lines found further down, so the Python cause raised in a task
    (e.g. ``pina_spark.runtime.faults.InjectedFault: ...``) survives the cut.

    >>> e = "Py4JJavaError: job aborted\n" + "\tat x.y\n" * 500 + "mod.BadThing" + "Error: why\n"
    >>> stored_error(e, 200).splitlines()[-1]
    'mod.BadThingError: why'
    """
    text = redact.scrub(error)
    if len(text) <= limit:
        return text
    head = text[: limit // 2]
    causes = [c for c in dict.fromkeys(_CAUSE_RE.findall(text)) if c not in head]
    tail = "\n".join(causes)[-(limit - len(head) - 16) :]
    return f"{head}\n... [cut] ...\n{tail}"[:limit]


class Manifest:
    """JSON manifest, driver side. Every change is a read-modify-write of the file as it is now
    (under the run root's lease, :func:`pina_spark.storage.acquire_lease`), so an entry written by
    another stage or another ``Manifest`` object is never lost; writes are atomic replaces.
    Config values and error strings go through :mod:`pina_spark.config.redact` first."""

    def __init__(self, uri: str):
        self.uri = uri
        self.data: dict[str, Any] = self._read()

    def _read(self) -> dict[str, Any]:
        raw = read_bytes(self.uri)
        data = json.loads(raw) if raw else {"stages": {}}
        data.setdefault("stages", {})
        return data

    def _update(self, change) -> None:
        """Apply ``change(data)`` to the manifest as stored now and write it back."""
        data = self._read()
        change(data)
        data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_bytes(self.uri, json.dumps(data, indent=2, sort_keys=True, default=str).encode())
        self.data = data

    def save(self) -> None:
        """Write the top-level keys of ``self.data`` (stage entries are merged one by one)."""
        mine = dict(self.data)

        def change(data):
            stages = data["stages"]
            data.update({k: v for k, v in mine.items() if k != "stages"})
            for name, entry in mine.get("stages", {}).items():
                stages[name] = entry

        self._update(change)

    def stage(self, name: str) -> dict[str, Any] | None:
        return self.data["stages"].get(name)

    def set_run_info(self, config: dict[str, Any]) -> None:
        cfg = redact.redact_config(config)

        def change(data):
            data["config"] = cfg
            data["libraries"] = library_versions()

        self._update(change)

    def _update_stage(self, name: str, fn) -> None:
        def change(data):
            entry = data["stages"].get(name, {})
            fn(entry)
            data["stages"][name] = entry

        self._update(change)

    def mark_started(self, name: str, fingerprint: str) -> None:
        self._update_stage(
            name,
            lambda e: e.update(
                {
                    "status": "running",
                    "fingerprint": fingerprint,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ),
        )

    def mark_failed(self, name: str, error: str) -> None:
        self._update_stage(
            name, lambda e: e.update({"status": "failed", "error": stored_error(error)})
        )

    def record_stage(
        self, name: str, stats: dict[str, Any], fingerprint: str, duration_s: float, **extra: Any
    ) -> None:
        """Mark ``name`` complete (after its outputs were published). ``extra``: e.g.
        ``rows_out={table: n}``, ``rows_per_s``."""

        def fn(entry):
            entry.update(
                {
                    "status": "complete",
                    "stats": stats,
                    "fingerprint": fingerprint,
                    "duration_s": round(duration_s, 3),
                    "finished": _now_us(),
                }
            )
            entry.update(extra)
            entry["runs"] = int(entry.get("runs", 0)) + 1
            entry["version"] = uuid.uuid4().hex  # changes whenever the outputs are republished
            entry.pop("error", None)

        self._update_stage(name, fn)

    def start_run(self, run_id: str, stages: list[str], **info: Any) -> None:
        """Append an entry to the run history (one per ``run_pipeline`` call)."""

        def change(data):
            hist = data.setdefault("history", [])
            hist.append(dict(info, run_id=run_id, stages=stages, status="running", started=_now()))
            del hist[:-_MAX_HISTORY]

        self._update(change)

    def finish_run(
        self, run_id: str, result: dict[str, str], status: str, error: str | None = None
    ) -> None:
        def change(data):
            for h in reversed(data.get("history", [])):
                if h.get("run_id") == run_id:
                    h.update({"status": status, "result": dict(result), "finished": _now()})
                    if error:
                        h["error"] = stored_error(error)
                    break

        self._update(change)

    def is_complete(self, name: str, fingerprint: str) -> bool:
        e = self.stage(name)
        return bool(e and e.get("status") == "complete" and e.get("fingerprint") == fingerprint)
