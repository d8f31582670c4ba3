"""Executor-side runtime: a per-Python-worker model cache and device / thread choice.

Everything here runs inside Spark tasks (executor side), except the pure helpers
(:func:`choose_device`, :class:`ModelCache`, :class:`LoadStatsParam`) which are plain Python so
they can be unit-tested on the driver.

Model cache
-----------
Follows pyspark.ml's ``ModelCache`` / ``predict_batch_udf`` pattern: a module-level, bounded
(LRU, capacity 4), lock-protected ``OrderedDict`` keyed by ``(model URI, version, device)``.
The driver computes ``version`` (a fingerprint of the model folder's files) so a model retrained
at the same URI is never served stale. The cache lives as long as the Python worker process, so
it only pays off with ``spark.python.worker.reuse=true`` (Spark's default, and set by
:data:`pina_spark.orchestration.session.DEFAULT_CONF`); without reuse every task reloads its models.

Every load is counted per worker (``(pid, key) -> loads``); :func:`get_model` also records it
into an optional Spark accumulator (:class:`LoadStatsParam`) so the driver can report, in the
manifest, that each worker loaded each model once.

Remote model folders (``s3://...``) are copied once per worker process into a private local
cache dir (mode 0700: ``$PINA_MODEL_CACHE``, else under the executor's local dirs), keyed by URI
and version, and checked against the ``_CHECKSUMS.json`` files the pretrain stage wrote; a
missing or unreadable artifact raises :class:`ModelLoadError` naming the artifact's path, so the
task fails (no hang, no retry loop hiding it).

Examples
--------
>>> cache = ModelCache(capacity=2)
>>> cache.get_or_load("a", lambda: "model-a")
'model-a'
>>> cache.get_or_load("a", lambda: "other")       # cached: the loader is not called again
'model-a'
>>> cache.loads["a"]
1
>>> choose_device({"gpu": ["1"]}, {"CUDA_VISIBLE_DEVICES": "1"}, "auto")
'cuda:0'
"""

import collections
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, Mapping, Optional, Sequence

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = [
    "ModelCache",
    "ModelLoadError",
    "LoadStatsParam",
    "choose_device",
    "resolve_device",
    "process_device",
    "task_threads",
    "get_model",
    "local_model_dir",
    "check_artifacts",
    "require_executor",
    "summarize_loads",
    "MODEL_CACHE",
    "write_checksums",
    "verify_checksums",
]

DEFAULT_CAPACITY = 4


class ModelLoadError(RuntimeError):
    """A model artifact is missing or cannot be read; the message names the artifact path."""


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
        self._models: "collections.OrderedDict[Hashable, Any]" = collections.OrderedDict()
        self._lock = threading.RLock()
        self.loads: "collections.Counter[Hashable]" = collections.Counter()

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
_LOCAL_DIRS: Dict[Any, str] = {}
_LOCAL_LOCK = threading.Lock()


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


def summarize_loads(counters: Mapping[str, int]) -> Dict[str, Any]:
    """Driver side: turn accumulator counters into manifest statistics.

    Returns ``{"model_loads": total, "worker_processes": n, "max_loads_per_worker_model": m,
    "loads_per_worker": {"<pid>": {model: n}}}``.

    Examples
    --------
    >>> s = summarize_loads({"loads|11|g": 1, "loads|12|g": 1, "rows|x": 5})
    >>> s["model_loads"], s["worker_processes"], s["max_loads_per_worker_model"]
    (2, 2, 1)
    """
    per: Dict[str, Dict[str, int]] = {}
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


# --------------------------------------------------------------------------- guards
def require_executor(what: str) -> Any:
    """Fail fast unless running inside a Spark task; returns the ``TaskContext``.

    Examples
    --------
    >>> require_executor("get_model")
    Traceback (most recent call last):
    ...
    RuntimeError: get_model() must run inside a Spark task (executor side), not on the driver
    """
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError(
            f"{what}() must run inside a Spark task (executor side), not on the " f"driver"
        )
    return tc


# --------------------------------------------------------------------------- device / threads
def _addresses(res: Any) -> Sequence[str]:
    if res is None:
        return []
    addrs = getattr(res, "addresses", res)
    return [str(a).strip() for a in (addrs or [])]


def choose_device(
    resources: Optional[Mapping[str, Any]],
    env: Mapping[str, str],
    cfg_device: str = "auto",
    cuda_available: Optional[bool] = None,
) -> str:
    """Device for a task: the task's own GPU when it has one, else ``cpu``.

    Parameters
    ----------
    resources : mapping
        ``TaskContext.get().resources()``: name -> ``ResourceInformation`` (or a plain list of
        addresses, for tests). ``resources['gpu'].addresses`` are Spark's GPU addresses.
    env : mapping
        Process environment; when the cluster manager set ``CUDA_VISIBLE_DEVICES`` the Spark
        address is mapped to its position in that list (CUDA renumbers visible devices from 0).
    cfg_device : str
        ``inference.device``: ``auto`` | ``cpu`` | ``cuda``.
    cuda_available : bool, optional
        Only consulted when ``cuda`` is requested and the task owns no GPU; ``None`` asks torch.

    Returns
    -------
    str
        ``'cpu'`` or ``'cuda:<ordinal>'``.

    Raises
    ------
    RuntimeError
        ``cuda`` requested but no GPU is available to the task.

    Examples
    --------
    >>> choose_device({"gpu": ["1"]}, {}, "auto")
    'cuda:1'
    >>> choose_device({"gpu": ["1"]}, {"CUDA_VISIBLE_DEVICES": "1"}, "auto")
    'cuda:0'
    >>> choose_device({}, {}, "auto")
    'cpu'
    >>> choose_device({"gpu": ["0"]}, {}, "cpu")
    'cpu'
    """
    if cfg_device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"inference.device: expected auto|cpu|cuda, got {cfg_device!r}")
    if cfg_device == "cpu":
        return "cpu"
    addrs = _addresses((resources or {}).get("gpu"))
    if addrs:
        addr = addrs[0]
        cvd = (env.get("CUDA_VISIBLE_DEVICES") or "").strip()
        if cvd and cvd not in ("-1", "NoDevFiles"):
            visible = [v.strip() for v in cvd.split(",") if v.strip()]
            if addr in visible:
                return f"cuda:{visible.index(addr)}"
            if addr.isdigit() and int(addr) < len(visible):
                # the resource manager already reports addresses relative to the visible set
                return f"cuda:{int(addr)}"
            raise RuntimeError(
                f"task GPU address {addr!r} is not among CUDA_VISIBLE_DEVICES="
                f"{cvd!r}; check the GPU discovery script of the cluster"
            )
        if not addr.isdigit():
            raise RuntimeError(f"task GPU address {addr!r} is not a device ordinal")
        return f"cuda:{int(addr)}"
    if cfg_device == "cuda":
        if cuda_available is None:
            try:
                import torch

                cuda_available = bool(torch.cuda.is_available())
            except ImportError:
                cuda_available = False
        if not cuda_available:
            raise RuntimeError(
                "inference.device=cuda but no GPU is available to this task: the "
                "task owns no 'gpu' resource (set spark.task.resource.gpu.amount "
                "and spark.executor.resource.gpu.amount) and torch sees no CUDA "
                "device; use inference.device=auto or cpu"
            )
        log.warning("inference.device=cuda: the task owns no 'gpu' resource; using cuda:0")
        return "cuda:0"
    return "cpu"


def task_slots(spark) -> int:
    """Driver side: how many tasks the application runs at once (``defaultParallelism``, the
    executor cores, divided by ``spark.task.cpus``); stages size their task counts as a multiple
    of it, so no slot idles through a stage's last wave.

    Examples
    --------
    >>> task_slots(spark) >= 1
    True
    """
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    cpus = max(1, int(spark.conf.get("spark.task.cpus", "1") or 1))
    return max(1, cores // cpus)


def one_task_each(spark, n: int, work: Callable[[int, int], Dict[str, Any]], schema: str):
    """Run ``work(i, threads)`` for ``i`` in ``range(n)``, one Spark task each (independent
    model fits); ``threads`` is the task's ``spark.task.cpus``. ``work`` returns the row of
    ``schema`` without ``i``. Returns ``{i: Row}``, checked complete.

    Examples
    --------
    >>> one_task_each(spark, 2, lambda i, t: {"sq": i * i}, "sq long")[1]["sq"]  # doctest: +SKIP
    1
    """

    def run(batches):
        import pandas as pd

        tc = require_executor("one_task_each")
        threads = task_threads(0, tc)
        for pdf in batches:
            rows = [{"i": int(i), **work(int(i), threads)} for i in pdf["i"].tolist()]
            yield pd.DataFrame(rows, columns=["i"] + [c.split()[0] for c in schema.split(",")])

    df = spark.range(0, n, 1, max(n, 1)).withColumnRenamed("id", "i")
    got = {int(r["i"]): r for r in df.mapInPandas(run, f"i long, {schema}").collect()}
    if sorted(got) != list(range(n)):
        raise RuntimeError(f"{n} tasks returned {len(got)} results")
    return got


def fits_where(spark, value: str) -> str:
    """Where independent model fits run (``pretrain.train_on``, ``train.train_on``): ``driver``
    or ``executors``; ``auto`` is executors on a cluster and the driver in local mode, whose
    executors share the driver's cores.

    Examples
    --------
    >>> fits_where(None, "driver")
    'driver'
    """
    if value != "auto":
        return value
    master = str(spark.sparkContext.master or "")
    return "driver" if master.startswith("local") else "executors"


def task_threads(cfg_threads: int = 0, tc: Any = None) -> int:
    """Threads a task may use: ``cfg_threads`` when > 0, else ``spark.task.cpus``.

    Examples
    --------
    >>> task_threads(3)
    3
    """
    if cfg_threads and cfg_threads > 0:
        return int(cfg_threads)
    if tc is not None:
        try:
            return max(1, int(tc.cpus()))
        except Exception:  # pragma: no cover - TaskContext.cpus() exists in Spark >= 3.3
            try:
                return max(1, int(tc.getLocalProperty("spark.task.cpus") or 1))
            except Exception:
                return 1
    return 1


def process_device(device: str) -> str:
    """Device of a process that owns no Spark task (the driver fine-tuning or encoding, an
    encoder built by hand): ``cpu``, ``cuda``, ``cuda:<n>`` as given, ``auto`` -> ``cuda`` where
    torch sees a GPU, else ``cpu``. Executor tasks use :func:`resolve_device` (the task's GPU).

    >>> process_device("cuda:1")
    'cuda:1'
    >>> process_device("gpu")
    Traceback (most recent call last):
    ...
    ValueError: device: expected 'cpu', 'cuda', 'cuda:<n>' or 'auto', got 'gpu'
    """
    if device not in ("cpu", "cuda", "auto") and not device.startswith("cuda:"):
        raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:<n>' or 'auto', got {device!r}")
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_device(cfg_device: str = "auto", cfg_threads: int = 0) -> str:
    """Executor side: choose the task's device and set torch's thread count.

    Examples
    --------
    >>> resolve_device("auto")        # doctest: +SKIP
    'cpu'
    """
    tc = require_executor("resolve_device")
    try:
        resources = tc.resources()
    except Exception:  # pragma: no cover
        resources = {}
    device = choose_device(resources, os.environ, cfg_device)
    n = task_threads(cfg_threads, tc)
    try:
        import torch

        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    except ImportError:  # pragma: no cover
        pass
    return device


# --------------------------------------------------------------------------- local copies
#: per-directory checksum file written by the pretrain stage (sha256 of every file there)
CHECKSUMS = "_CHECKSUMS.json"


def _cache_root() -> str:
    """A private (0700, owned by this user) folder for local model copies: ``$PINA_MODEL_CACHE``,
    else under the executor's local dirs (``SPARK_LOCAL_DIRS`` / YARN's ``LOCAL_DIRS``), else the
    temp dir. A folder that exists but is not ours or is open to others is refused."""
    base = os.environ.get("PINA_MODEL_CACHE")
    if not base:
        local = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("LOCAL_DIRS") or ""
        first = next((d for d in local.split(",") if d.strip()), tempfile.gettempdir())
        base = os.path.join(first.strip(), f"pina-models-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    st = os.stat(base)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ModelLoadError(
            f"model cache {base} is not private (owner uid {st.st_uid}, mode "
            f"{oct(st.st_mode & 0o777)}); refusing to load models from it. "
            f"Remove it or set PINA_MODEL_CACHE to a folder only you can read"
        )
    return base


def write_checksums(local_dir: str) -> int:
    """Driver side (pretrain): write ``_CHECKSUMS.json`` (``{file: sha256}`` of the files directly
    inside) into every folder of ``local_dir``; returns the number of files covered."""
    import json

    n = 0
    for base, _, files in os.walk(local_dir):
        sums = {
            f: _sha256(os.path.join(base, f))
            for f in sorted(files)
            if f not in (CHECKSUMS, "_SUCCESS")
        }
        with open(os.path.join(base, CHECKSUMS), "w") as fh:
            json.dump(sums, fh, indent=1, sort_keys=True)
        n += len(sums)
    return n


def verify_checksums(local_dir: str, what: str) -> bool:
    """Check every file of ``local_dir`` against the ``_CHECKSUMS.json`` files pretrain wrote
    (``False`` when the folder has none: models published before checksums existed).

    Raises
    ------
    ModelLoadError
        A file differs, is missing or is not listed; names it and ``what``.
    """
    import json

    if not os.path.isfile(os.path.join(local_dir, CHECKSUMS)):
        return False
    for base, _, files in os.walk(local_dir):
        listed_file = os.path.join(base, CHECKSUMS)
        if not os.path.isfile(listed_file):
            raise ModelLoadError(f"model artifact {what}: {base} has no {CHECKSUMS}")
        try:
            with open(listed_file) as fh:
                listed = json.load(fh)
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"model artifact {what}: {listed_file} is unreadable ({type(e).__name__}: {e})"
            ) from e
        if not isinstance(listed, dict):
            raise ModelLoadError(f"model artifact {what}: {listed_file} is not a checksum map")
        present = {
            f
            for f in files
            if f not in (CHECKSUMS, "_SUCCESS", ".pina_complete", storage.VERSION_FILE)
        }
        for f in sorted(present | set(listed)):
            p = os.path.join(base, f)
            if f not in listed:
                raise ModelLoadError(
                    f"model artifact {what}: {p} is not in {CHECKSUMS} (a file "
                    f"nobody published)"
                )
            if not os.path.isfile(p) or _sha256(p) != listed[f]:
                raise ModelLoadError(
                    f"model artifact {what}: {p} does not match its checksum "
                    f"(missing, truncated or replaced)"
                )
    return True


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def local_model_dir(uri: str, version: str = "") -> str:
    """Executor side: a local folder holding the model folder ``uri``.

    Local paths are returned as they are, after checking they exist and, once per process and
    version, that their files match the checksums pretrain wrote; remote folders are copied
    once per worker process (and reused across processes of one machine via an atomic rename)
    with :func:`pina_spark.storage.copy_dir` into the private cache (:func:`_cache_root`), keyed by
    ``uri`` and ``version``, and checked against the checksums pretrain wrote
    (:func:`verify_checksums`) before first use in each process.

    Raises
    ------
    ModelLoadError
        The folder is missing, cannot be copied or fails its checksums; names ``uri``.
    """
    if not storage.is_remote(uri):
        p = storage.local_path(uri)
        if not os.path.isdir(p):
            raise ModelLoadError(f"model artifact missing: {uri} (no such folder)")
        with _LOCAL_LOCK:
            if (uri, version) not in _LOCAL_DIRS:
                verify_checksums(p, uri)  # once per process and version, as for copies
                _LOCAL_DIRS[(uri, version)] = p
        return p
    with _LOCAL_LOCK:
        if (uri, version) in _LOCAL_DIRS:
            return _LOCAL_DIRS[(uri, version)]
        key = hashlib.sha1(f"{uri}\x1f{version}".encode()).hexdigest()[:16]
        dst = os.path.join(_cache_root(), key)
        marker = os.path.join(dst, ".pina_complete")
        if not os.path.exists(marker):
            tmp = f"{dst}.tmp-{os.getpid()}-{time.time_ns()}"
            t0 = time.time()
            try:
                storage.copy_dir(uri, tmp)
            except Exception as e:
                shutil.rmtree(tmp, ignore_errors=True)
                raise ModelLoadError(
                    f"cannot copy model artifact {uri}: " f"{type(e).__name__}: {e}"
                ) from e
            with open(os.path.join(tmp, ".pina_complete"), "w") as fh:
                fh.write(uri)
            try:
                os.replace(tmp, dst)
            except OSError:  # another process of this machine won the race
                shutil.rmtree(tmp, ignore_errors=True)
            log.info("copied %s to %s in %.1fs", uri, dst, time.time() - t0)
        try:
            verify_checksums(dst, uri)
        except ModelLoadError:
            shutil.rmtree(dst, ignore_errors=True)  # the next attempt copies afresh
            raise
        _LOCAL_DIRS[(uri, version)] = dst
        return dst


def check_artifacts(
    local_dir: str,
    required: Sequence[str] = (),
    counted_text: Sequence[str] = (),
    counted_under: str = "",
) -> None:
    """Check a local model folder before a native loader reads it.

    Native loaders (PECOS C++) abort the whole Python worker on a truncated file, which Spark
    reports as "worker crashed" without a path; this check raises :class:`ModelLoadError` naming
    the broken file instead. ``required`` files must exist; every ``.json`` must parse, every
    ``.npz`` must be a readable zip archive, every ``.npy`` must have a valid header, and text
    files named in ``counted_text`` (PECOS tf-idf ``tfidf-model.txt`` / ``vocab.txt``: a count
    line, then that many tab-separated lines) must hold as many lines as they announce; with
    ``counted_under``, only those inside that subfolder (a Hugging Face encoder beside the
    tf-idf has a ``vocab.txt`` of another format).

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "param.json"), "w").write("{not json")
    >>> check_artifacts(d)                                  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.runtime.ModelLoadError: corrupt model artifact .../param.json: ...
    """
    import json
    import zipfile

    if not os.path.isdir(local_dir):
        raise ModelLoadError(f"model artifact missing: {local_dir} (no such folder)")
    for rel in required:
        if not os.path.isfile(os.path.join(local_dir, rel)):
            raise ModelLoadError(f"model artifact missing: {os.path.join(local_dir, rel)}")
    for base, _, files in os.walk(local_dir):
        for f in files:
            p = os.path.join(base, f)
            try:
                if f.endswith(".json"):
                    with open(p) as fh:
                        json.load(fh)
                elif f.endswith(".npz"):
                    with zipfile.ZipFile(p) as z:
                        if not z.namelist():
                            raise ValueError("empty archive")
                elif f.endswith(".npy"):
                    import numpy as np

                    with open(p, "rb") as fh:
                        version = np.lib.format.read_magic(fh)
                        # private numpy reader (no public one covers every format version);
                        # numpy's stubs do not declare it
                        np.lib.format._read_array_header(  # type: ignore[attr-defined]
                            fh, version
                        )
                elif f in counted_text and os.path.relpath(p, local_dir).startswith(
                    os.path.join(counted_under, "")
                ):
                    with open(p, "rb") as fh:
                        data = fh.read()
                    first, _, rest = data.partition(b"\n")
                    n = int(first.strip())
                    lines = rest.count(b"\n") + (1 if rest and not rest.endswith(b"\n") else 0)
                    if lines != n or rest.count(b"\t") < n:
                        raise ValueError(f"announces {n} entries, holds {lines} lines")
            except Exception as e:
                raise ModelLoadError(f"corrupt model artifact {p}: {type(e).__name__}: {e}") from e


# --------------------------------------------------------------------------- entry point
def get_model(
    uri: str,
    loader: Callable[[str, str], Any],
    version: str = "",
    device: str = "cpu",
    accumulator: Any = None,
    name: Optional[str] = None,
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

    Examples
    --------
    >>> get_model("/tmp/x", lambda d, dev: d)   # doctest: +SKIP
    """
    require_executor("get_model")
    key = (uri, version, device)

    def _load():
        local = local_model_dir(uri, version)
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
