"""The per-worker model cache: each Python worker loads each model at most once.

Executor side, except :class:`ModelCache`, :class:`LoadStatsParam` and :func:`summarize_loads`,
which are plain Python so they can be unit-tested on the driver.

Follows pyspark.ml's ``ModelCache`` / ``predict_batch_udf`` pattern: a module-level, bounded
(LRU, capacity 4), lock-protected ``OrderedDict`` keyed by ``(model URI, version, device,
digest)``. The driver computes ``version`` (a fingerprint of the model folder's files) so a model
retrained at the same URI is never served stale. The cache lives as long as the Python worker
process, so it only pays off with ``spark.python.worker.reuse=true`` (Spark's default, and set by
:data:`pina_spark.orchestration.session.DEFAULT_CONF`); without reuse every task reloads its models.

Every load is counted per worker (``(pid, key) -> loads``); :func:`get_model` also records it
into an optional Spark accumulator (:class:`LoadStatsParam`) so the driver can report, in the
manifest, that each worker loaded each model once. The model folder reaches the loader as a
checked local copy (:func:`pina_spark.runtime.checksums.local_model_dir`); a load that fails
raises :class:`~pina_spark.runtime.checksums.ModelLoadError` naming the artifact, so the task
fails (no hang, no retry loop hiding it).

Examples
--------
>>> cache = ModelCache(capacity=2)
>>> cache.get_or_load("a", lambda: "model-a")
'model-a'
>>> cache.get_or_load("a", lambda: "other")       # cached: the loader is not called again
'model-a'
>>> cache.loads["a"]
1
"""

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from pina_spark.runtime.checksums import ModelLoadError, local_model_dir
from pina_spark.runtime.device import require_executor

log = logging.getLogger(__name__)

__all__ = [
    "ModelCache",
    "MODEL_CACHE",
    "DEFAULT_CAPACITY",
    "LoadStatsParam",
    "summarize_loads",
    "get_model",
]

DEFAULT_CAPACITY = 4


# --------------------------------------------------------------------------- the cache
class ModelCache:
    """Bounded LRU cache of loaded models, safe for concurrent tasks in one worker.

    Parameters
    ----------
    capacity : int
        Models kept at most; the least recently used one is evicted beyond it.

    Notes
    -----
    Needs ``spark.python.worker.reuse=true`` to survive across tasks (one cache per Python
    worker process). The lock is held while loading, so two threads of one worker never load the
    same model twice.

    Examples
    --------
    >>> c = ModelCache(capacity=1)
    >>> c.get_or_load("a", lambda: 1), c.get_or_load("b", lambda: 2), c.get_or_load("a", lambda: 3)
    (1, 2, 3)
    >>> dict(c.loads)
    {'a': 2, 'b': 1}
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"ModelCache: capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._models: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.RLock()
        self.loads: collections.Counter[Hashable] = collections.Counter()

    def get_or_load(self, key: Hashable, loader: Callable[[], Any]) -> Any:
        """The cached model for ``key``, loading it with ``loader()`` on a miss."""
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            model = loader()
            self.loads[key] += 1
            self._models[key] = model
            while len(self._models) > self.capacity:
                old, _ = self._models.popitem(last=False)
                log.info("model cache: evicted %s", old)
            return model

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._models

    def __len__(self) -> int:
        with self._lock:
            return len(self._models)

    def clear(self) -> None:
        with self._lock:
            self._models.clear()


#: the per-worker cache (module global: one per Python worker process)
MODEL_CACHE = ModelCache(DEFAULT_CAPACITY)


# --------------------------------------------------------------------------- load statistics
if TYPE_CHECKING:
    from pyspark.accumulators import AccumulatorParam as _AccBase
else:
    try:
        from pyspark.accumulators import AccumulatorParam as _AccBase
    except ImportError:  # pragma: no cover - pyspark always present in this project
        _AccBase = object


class LoadStatsParam(_AccBase):
    """Accumulator of ``{str: int}`` counters merged by addition.

    Used for ``"loads|<pid>|<model>"`` (model loads per worker process) and ``"rows|<what>"``
    counters of the inference stages.

    Examples
    --------
    >>> p = LoadStatsParam()
    >>> p.addInPlace({"a": 1}, {"a": 2, "b": 1})
    {'a': 3, 'b': 1}
    """

    def zero(self, value):
        return {}

    def addInPlace(self, value1, value2):
        for k, v in (value2 or {}).items():
            value1[k] = value1.get(k, 0) + v
        return value1


def summarize_loads(counters: Mapping[str, int]) -> dict[str, Any]:
    """Driver side: turn accumulator counters into manifest statistics.

    Returns ``{"model_loads": total, "worker_processes": n, "max_loads_per_worker_model": m,
    "loads_per_worker": {"<pid>": {model: n}}}``.

    Examples
    --------
    >>> s = summarize_loads({"loads|11|g": 1, "loads|12|g": 1, "rows|x": 5})
    >>> s["model_loads"], s["worker_processes"], s["max_loads_per_worker_model"]
    (2, 2, 1)
    """
    per: dict[str, dict[str, int]] = {}
    for k, v in counters.items():
        if not k.startswith("loads|"):
            continue
        _, pid, model = k.split("|", 2)
        per.setdefault(pid, {})[model] = per.get(pid, {}).get(model, 0) + int(v)
    vals = [n for d in per.values() for n in d.values()]
    return {
        "model_loads": int(sum(vals)),
        "worker_processes": len(per),
        "max_loads_per_worker_model": int(max(vals)) if vals else 0,
        "loads_per_worker": per,
    }


# --------------------------------------------------------------------------- entry point
def get_model(
    uri: str,
    loader: Callable[[str, str], Any],
    version: str = "",
    device: str = "cpu",
    accumulator: Any = None,
    name: str | None = None,
    digest: str = "",
) -> Any:
    """Executor side: the model at ``uri`` for ``device``, loaded at most once per worker.

    Parameters
    ----------
    uri : str
        Model folder (local path or remote URI).
    loader : callable
        ``loader(local_dir, device) -> model``; any exception it raises is re-raised as
        :class:`ModelLoadError` naming ``uri`` (and the artifact the loader named, if any).
    version : str
        Driver-computed fingerprint of the folder (part of the cache key).
    device : str
        Part of the cache key.
    accumulator : pyspark Accumulator, optional
        A :class:`LoadStatsParam` accumulator; a load adds ``{"loads|<pid>|<name>": 1}``.
    name : str, optional
        Short model name for the statistics (default: ``uri``).
    digest : str
        The folder's checksums digest the driver vouched for
        (:func:`pina_spark.models.trust.anchor`, handed over in the stage's task); the local
        copy must have it (:func:`~pina_spark.runtime.checksums.local_model_dir`). Part of the
        cache key.

    Example::

        get_model("/tmp/x", lambda d, dev: d)
    """
    require_executor("get_model")
    key = (uri, version, device, digest)

    def _load():
        local = local_model_dir(uri, version, digest)
        t0 = time.time()
        try:
            model = loader(local, device)
        except Exception as e:
            raise ModelLoadError(
                f"cannot load model artifact {uri} (local copy {local}): "
                f"{type(e).__name__}: {e}"
            ) from e
        log.info("worker %d loaded %s on %s in %.2fs", os.getpid(), uri, device, time.time() - t0)
        if accumulator is not None:
            accumulator.add({f"loads|{os.getpid()}|{name or uri}": 1})
        return model

    return MODEL_CACHE.get_or_load(key, _load)
