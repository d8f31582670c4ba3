"""Where a task runs and with how many threads: the executor-side guard, the task's device
from its Spark resources, and the task slots and fit placement the driver sizes work by.

:func:`choose_device` and :func:`task_threads` are pure so they can be unit-tested on the driver;
:func:`resolve_device` applies them inside a task; :func:`task_slots`, :func:`one_task_each` and
:func:`fits_where` run on the driver.

Examples
--------
>>> choose_device({"gpu": ["1"]}, {"CUDA_VISIBLE_DEVICES": "1"}, "auto")
'cuda:0'
>>> task_threads(0, None)
1
"""

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "require_executor",
    "choose_device",
    "task_slots",
    "one_task_each",
    "fits_where",
    "task_threads",
    "process_device",
    "resolve_device",
]


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
    resources: Mapping[str, Any] | None,
    env: Mapping[str, str],
    cfg_device: str = "auto",
    cuda_available: bool | None = None,
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


def one_task_each(spark, n: int, work: Callable[[int, int], dict[str, Any]], schema: str):
    """Run ``work(i, threads)`` for ``i`` in ``range(n)``, one Spark task each (independent
    model fits); ``threads`` is the task's ``spark.task.cpus``. ``work`` returns the row of
    ``schema`` without ``i``. Returns ``{i: Row}``, checked complete.

    Example::

        one_task_each(spark, 2, lambda i, t: {"sq": i * i}, "sq long")[1]["sq"]  # 1
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

    Example::

        resolve_device("auto")  # 'cpu'
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
