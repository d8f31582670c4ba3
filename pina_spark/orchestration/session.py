"""The one place that builds the SparkSession (driver side only).

Precedence of Spark conf (highest first):

1. what the launcher set: ``spark-submit --conf`` / ``--driver-memory`` ..., the platform's
   ``spark-defaults.conf`` (EMR configuration classifications), ``PYSPARK_SUBMIT_ARGS``, or
   the builder/``spark.conf.set`` of a notebook's already running session;
2. the config's ``spark.conf`` (YAML or ``--set spark.conf.KEY=VALUE``);
3. :data:`DEFAULT_CONF`.

Levels 2 and 3 only fill keys that level 1 left unset: a YAML file can never silently override
what an operator passed on the command line or what the platform configured. The keys kept from
the launcher are logged (INFO) when the config asked for another value.

Some keys count only when spark-submit submits the application (``spark.yarn.*`` such as
``spark.yarn.maxAppAttempts``, read by the YARN client; ``spark.submit.*``; ``spark.driver.memory``,
the heap of a driver JVM that is already running). When spark-submit (or a running session)
started the JVM before this code runs, such a key from the config cannot take effect: the session
warns once per key, naming it, unless the launcher already has the config's value. When this
process starts the JVM itself (``pina-spark run`` from a plain ``python``), the config's conf is
part of that launch and these keys apply: no warning.

A local master runs every task inside the driver JVM, whose heap Spark sizes at 1g unless told
otherwise: too small for a ``select`` or ``tune`` over a few thousand products with long feature
rows (its Parquet reader runs out of heap). So where this process starts a local JVM and neither
the launcher nor the config names ``spark.driver.memory``, the driver gets
:func:`local_driver_memory` of the machine (a quarter of its memory, 1-16 GiB; logged). Under
spark-submit with a local master and no ``--driver-memory`` it is too late for that: the session
warns once, naming the value to pass.
"""

import logging
import os
import re
import sys
from collections.abc import Callable

from pina_spark.config.redact import SPARK_REDACTION_REGEX, SPARK_STRING_REDACTION_REGEX

log = logging.getLogger(__name__)

#: conf every pina-spark session gets unless the config overrides it
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",  # the per-worker model cache relies on it
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",  # hub neighbours in the aggregate join
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.ui.showConsoleProgress": "false",
    # Spark's own redaction (UI environment page, event logs, job properties, YARN and JVM
    # logs of the conf; plans) with the same key and value rules as the manifest and model card
    # (pina_spark.config.redact); Spark's default misses credential, private key, api key,
    # account and encryption keys, SAS tokens and passwords inside URLs
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    "spark.redaction.string.regex": SPARK_STRING_REDACTION_REGEX,
}


#: prefixes and keys of the conf read when spark-submit submits the application
SUBMIT_TIME_PREFIXES = ("spark.yarn.", "spark.submit.")
DRIVER_MEMORY = "spark.driver.memory"
SUBMIT_TIME_KEYS = frozenset({DRIVER_MEMORY})

#: submit-time keys this process has warned about (once each)
_WARNED_SUBMIT_TIME: set[str] = set()

#: environment variables Spark's launcher reads for the driver heap when no conf names it
DRIVER_MEMORY_ENV = ("SPARK_DRIVER_MEMORY", "SPARK_MEM")
#: bounds of the driver heap given to a local master (GiB): Spark's own default at the bottom
LOCAL_HEAP_GIB = (1, 16)


def local_driver_memory(machine_bytes: int | None) -> str:
    """The ``spark.driver.memory`` of a local master that nobody sized: a quarter of the
    machine's memory in whole GiB, within :data:`LOCAL_HEAP_GIB` (the rest stays with the
    Python driver, whose PECOS fits and encoders need it more); ``1g`` when it is unknown.

    Examples
    --------
    >>> [local_driver_memory(g * 2**30) for g in (2, 7.9, 24, 128)], local_driver_memory(None)
    (['1g', '1g', '6g', '16g'], '1g')
    """
    lo, hi = LOCAL_HEAP_GIB
    if not machine_bytes:
        return f"{lo}g"
    return f"{min(hi, max(lo, int(machine_bytes // 4 // 2**30)))}g"


def machine_memory_bytes() -> int | None:
    """This machine's memory for the driver: physical memory, or the container's limit where
    cgroups set a lower one (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); ``None`` when
    unknown."""
    total: int | None = None
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        total = None
    for path in (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ):
        try:
            with open(path) as fh:
                raw = fh.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) > 0:
            total = min(total, int(raw)) if total else int(raw)
    return total


def _is_local(master: str | None) -> bool:
    """
    >>> [_is_local(m) for m in ("local", "local[2]", "local-cluster[2,1,1024]", "yarn", None)]
    [True, True, False, False, False]
    """
    return bool(master) and (master == "local" or str(master).startswith("local["))


def is_submit_time_key(key: str) -> bool:
    """Whether ``key`` counts only when spark-submit submits the application.

    Examples
    --------
    >>> [is_submit_time_key(k) for k in ("spark.yarn.maxAppAttempts", "spark.driver.memory",
    ...                                  "spark.submit.deployMode", "spark.executor.memory")]
    [True, True, True, False]
    """
    return key in SUBMIT_TIME_KEYS or key.startswith(SUBMIT_TIME_PREFIXES)


def submit_time_misses(
    wanted: dict[str, str], is_set: Callable[[str], str | None]
) -> dict[str, str | None]:
    """The submit-time keys of ``wanted`` whose value is not in effect in a JVM that was started
    before the config was read: ``{key: the launcher's value (None: unset)}``.

    Examples
    --------
    >>> submit_time_misses({"spark.yarn.maxAppAttempts": "1", "spark.driver.memory": "8g",
    ...                     "spark.sql.shuffle.partitions": "4"}, {"spark.driver.memory": "8g"}.get)
    {'spark.yarn.maxAppAttempts': None}
    """
    out: dict[str, str | None] = {}
    for k, v in wanted.items():
        current = is_set(k)
        if is_submit_time_key(k) and (current is None or str(current) != str(v)):
            out[k] = None if current is None else str(current)
    return out


def _warn_submit_time(wanted: dict[str, str], is_set: Callable[[str], str | None]) -> None:
    for k, current in sorted(submit_time_misses(wanted, is_set).items()):
        if k in _WARNED_SUBMIT_TIME:
            continue
        _WARNED_SUBMIT_TIME.add(k)
        v = wanted[k]
        how = f"--driver-memory {v}" if k == DRIVER_MEMORY else f"--conf {k}={v}"
        log.warning(
            "spark conf %s=%s from the config has no effect: it is read when spark-submit "
            "submits the application, before this driver runs; pass it to spark-submit "
            "(%s, e.g. in the EMR step). In effect: %s",
            k,
            v,
            how,
            current if current is not None else "the platform's or Spark's default",
        )


def fill_unset(
    wanted: dict[str, str], is_set: Callable[[str], str | None]
) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """Split ``wanted`` conf into ``(to_apply, kept)``: keys the launcher left unset, and
    ``{key: (launcher value, wanted value)}`` where the launcher's value differs and wins.

    Examples
    --------
    >>> fill_unset({"a": "1", "b": "2", "c": "3"}, {"b": "9", "c": "3"}.get)
    ({'a': '1'}, {'b': ('9', '2')})
    """
    apply, kept = {}, {}
    for k, v in wanted.items():
        current = is_set(k)
        if current is None:
            apply[k] = v
        elif str(current) != str(v):
            kept[k] = (str(current), str(v))
    return apply, kept


def _jvm_started() -> bool:
    """Whether the driver JVM is already up (spark-submit started it, or an earlier session of
    this process did): then its launch conf is fixed."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def _launcher_conf() -> Callable[[str], str | None]:
    """Lookup of the conf the launcher gave (or will give) the driver JVM.

    Under spark-submit (or once a gateway is up) that is the JVM's ``spark.*`` system properties
    (``--conf``, spark-defaults.conf, ``PYSPARK_SUBMIT_ARGS``), which ``SparkConf()`` loads.
    From a plain ``python``/``pina-spark`` process the JVM is not started yet (and must be
    started with the config's conf, so that e.g. ``spark.driver.memory`` reaches it): then the
    platform's ``spark-defaults.conf`` and the ``--conf`` of ``PYSPARK_SUBMIT_ARGS`` are read
    here.
    """
    from pyspark import SparkConf, SparkContext

    if _jvm_started():
        SparkContext._ensure_initialized()  # attach to the launcher's JVM
        conf = SparkConf()
        return lambda k: conf.get(k, None)
    launcher = spark_defaults()
    launcher.update(submit_args_conf(os.environ.get("PYSPARK_SUBMIT_ARGS", "")))
    return launcher.get


def submit_args_conf(args: str) -> dict[str, str]:
    """The conf of a spark-submit argument string (``PYSPARK_SUBMIT_ARGS``): its ``--conf k=v``
    pairs, and ``--master`` / ``--driver-memory`` as ``spark.master`` / ``spark.driver.memory``.

    Examples
    --------
    >>> submit_args_conf("--master local[1] --conf spark.a=1 --conf 'spark.b=x y' pyspark-shell")
    {'spark.master': 'local[1]', 'spark.a': '1', 'spark.b': 'x y'}
    >>> submit_args_conf("--driver-memory=4g pyspark-shell")
    {'spark.driver.memory': '4g'}
    """
    import shlex

    named = {"--master": "spark.master", "--driver-memory": DRIVER_MEMORY}
    words = shlex.split(args)
    out: dict[str, str] = {}
    for i, w in enumerate(words):
        flag, eq, inline = w.partition("=")
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else None)
        if flag in named and value is not None:
            out[named[flag]] = value
            continue
        kv = value if flag in ("--conf", "-c") else None
        if kv and "=" in kv:
            k, v = kv.split("=", 1)
            out[k] = v
    return out


def spark_defaults() -> dict[str, str]:
    """``spark-defaults.conf`` of ``$SPARK_CONF_DIR`` (else ``$SPARK_HOME/conf``), as Spark
    parses it: one ``key value`` (or ``key=value``) per line, ``#`` comments."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    out: dict[str, str] = {}
    if not conf_dir or not os.path.isfile(os.path.join(conf_dir, "spark-defaults.conf")):
        return out
    with open(os.path.join(conf_dir, "spark-defaults.conf")) as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)  # java.util.Properties rules
            if m:
                out[m.group(1)] = m.group(2).strip()
    return out


def _session_value(session, key: str) -> str | None:
    try:
        return session.conf.get(key, None)
    except Exception:  # pragma: no cover - a key the runtime conf refuses to read
        return None


def get_spark(spark_cfg=None, extra_conf: dict[str, str] | None = None):
    """Return the active SparkSession or build one from a :class:`~pina_spark.config.SparkConfig`.

    Under spark-submit the session is built on the launcher's conf (master and resources come
    from spark-submit); ``spark.master`` of the config is then ignored, and the config's
    ``spark.conf`` only fills keys the launcher left unset (module docstring), and a key of it
    that only spark-submit reads is warned about (once). Refuses to run on an executor.
    """
    from pyspark import TaskContext

    if TaskContext.get() is not None:
        raise RuntimeError("get_spark() must not be invoked from the executor side")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    conf = dict(DEFAULT_CONF)
    if spark_cfg is not None:
        conf.update(spark_cfg.conf)
    conf.update(extra_conf or {})
    from_config = dict(spark_cfg.conf) if spark_cfg is not None else {}
    if active is not None:
        _warn_submit_time(from_config, lambda k: _session_value(active, k))
        apply, kept = fill_unset(conf, lambda k: _session_value(active, k))
        _log_kept(kept)
        for k, v in apply.items():
            try:
                active.conf.set(k, v)
            except Exception:  # static conf of a running session: leave as launched
                log.debug("spark conf %s cannot be set on a running session", k)
        return active
    launcher = _launcher_conf()
    master = spark_cfg.master if spark_cfg is not None else "local[2]"
    started = _jvm_started()
    if started:
        _warn_submit_time(from_config, launcher)
    sized = (
        DRIVER_MEMORY in conf
        or launcher(DRIVER_MEMORY) is not None
        or any(os.environ.get(v) for v in DRIVER_MEMORY_ENV)
    )
    if not sized:
        _size_local_driver(conf, master, launcher, started)
    apply, kept = fill_unset(conf, launcher)
    _log_kept(kept)
    builder = SparkSession.builder.appName(spark_cfg.app_name if spark_cfg else "pina-spark")
    # under spark-submit the launcher's JVM is already up (PYSPARK_GATEWAY_PORT is set) and
    # --master / spark-defaults decide; setting it here would silently override the cluster
    if master and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master)
    for k, v in apply.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _size_local_driver(
    conf: dict[str, str], master: str | None, launcher: Callable[[str], str | None], started: bool
) -> None:
    """Nobody named the driver's heap: give a local JVM this process starts
    :func:`local_driver_memory` (into ``conf``), or warn once where spark-submit started a local
    one with Spark's 1g."""
    # spark-submit's JVM runs on its own master; one this process starts, on the launcher's
    # or else the config's
    master = launcher("spark.master") or (None if started else master)
    if not _is_local(master):
        return
    value = local_driver_memory(machine_memory_bytes())
    if not started:
        conf[DRIVER_MEMORY] = value
        log.info(
            "spark conf %s=%s for the local master %s (a quarter of this machine's memory; "
            "set spark.conf.%s in the config to change it)",
            DRIVER_MEMORY,
            value,
            master,
            DRIVER_MEMORY,
        )
    elif DRIVER_MEMORY not in _WARNED_SUBMIT_TIME:
        _WARNED_SUBMIT_TIME.add(DRIVER_MEMORY)
        log.warning(
            "the local master %s runs every task in the driver JVM, started by spark-submit "
            "with Spark's default 1g heap: pass --driver-memory (e.g. --driver-memory %s, a "
            "quarter of this machine's memory) if a stage runs out of Java heap",
            master,
            value,
        )


def _log_kept(kept: dict[str, tuple[str, str]]) -> None:
    for k, (launcher, wanted) in sorted(kept.items()):
        log.info(
            "spark conf %s=%s kept from spark-submit/platform (config asked for %s)",
            k,
            launcher,
            wanted,
        )
