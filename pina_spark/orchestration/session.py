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
"""

import logging
import os
import re
import sys
from typing import Callable, Dict, Optional, Tuple

from pina_spark.config.redact import SECRET_KEY_RE

log = logging.getLogger(__name__)

#: conf every pina-spark session gets unless the config overrides it
DEFAULT_CONF: Dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",  # the per-worker model cache relies on it
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",  # hub neighbours in the aggregate join
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.ui.showConsoleProgress": "false",
    # Spark's own redaction (UI environment page, event logs, YARN and JVM logs of the conf)
    # with the same key rule as the manifest and model card (pina_spark.config.redact); Spark's default
    # misses credential, private key and api key
    "spark.redaction.regex": "(?i)" + SECRET_KEY_RE.pattern,
}


def fill_unset(
    wanted: Dict[str, str], is_set: Callable[[str], Optional[str]]
) -> Tuple[Dict[str, str], Dict[str, Tuple[str, str]]]:
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


def _launcher_conf() -> Callable[[str], Optional[str]]:
    """Lookup of the conf the launcher gave (or will give) the driver JVM.

    Under spark-submit (or once a gateway is up) that is the JVM's ``spark.*`` system properties
    (``--conf``, spark-defaults.conf, ``PYSPARK_SUBMIT_ARGS``), which ``SparkConf()`` loads.
    From a plain ``python``/``pina-spark`` process the JVM is not started yet (and must be
    started with the config's conf, so that e.g. ``spark.driver.memory`` reaches it): then the
    platform's ``spark-defaults.conf`` and the ``--conf`` of ``PYSPARK_SUBMIT_ARGS`` are read
    here.
    """
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()  # attach to the launcher's JVM
        conf = SparkConf()
        return lambda k: conf.get(k, None)
    launcher = spark_defaults()
    launcher.update(submit_args_conf(os.environ.get("PYSPARK_SUBMIT_ARGS", "")))
    return launcher.get


def submit_args_conf(args: str) -> Dict[str, str]:
    """The ``--conf k=v`` pairs of a spark-submit argument string (``PYSPARK_SUBMIT_ARGS``).

    Examples
    --------
    >>> submit_args_conf("--master local[1] --conf spark.a=1 --conf 'spark.b=x y' pyspark-shell")
    {'spark.a': '1', 'spark.b': 'x y'}
    """
    import shlex

    words = shlex.split(args)
    out: Dict[str, str] = {}
    for i, w in enumerate(words):
        kv = (
            words[i + 1]
            if w in ("--conf", "-c") and i + 1 < len(words)
            else (w[len("--conf=") :] if w.startswith("--conf=") else None)
        )
        if kv and "=" in kv:
            k, v = kv.split("=", 1)
            out[k] = v
    return out


def spark_defaults() -> Dict[str, str]:
    """``spark-defaults.conf`` of ``$SPARK_CONF_DIR`` (else ``$SPARK_HOME/conf``), as Spark
    parses it: one ``key value`` (or ``key=value``) per line, ``#`` comments."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    out: Dict[str, str] = {}
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


def _session_value(session, key: str) -> Optional[str]:
    try:
        return session.conf.get(key, None)
    except Exception:  # pragma: no cover - a key the runtime conf refuses to read
        return None


def get_spark(spark_cfg=None, extra_conf: Optional[Dict[str, str]] = None):
    """Return the active SparkSession or build one from a :class:`~pina_spark.config.SparkConfig`.

    Under spark-submit the session is built on the launcher's conf (master and resources come
    from spark-submit); ``spark.master`` of the config is then ignored, and the config's
    ``spark.conf`` only fills keys the launcher left unset (module docstring). Refuses to run on
    an executor.
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
    if active is not None:
        apply, kept = fill_unset(conf, lambda k: _session_value(active, k))
        _log_kept(kept)
        for k, v in apply.items():
            try:
                active.conf.set(k, v)
            except Exception:  # static conf of a running session: leave as launched
                log.debug("spark conf %s cannot be set on a running session", k)
        return active
    apply, kept = fill_unset(conf, _launcher_conf())
    _log_kept(kept)
    builder = SparkSession.builder.appName(spark_cfg.app_name if spark_cfg else "pina-spark")
    master = spark_cfg.master if spark_cfg is not None else "local[2]"
    # under spark-submit the launcher's JVM is already up (PYSPARK_GATEWAY_PORT is set) and
    # --master / spark-defaults decide; setting it here would silently override the cluster
    if master and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master)
    for k, v in apply.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _log_kept(kept: Dict[str, Tuple[str, str]]) -> None:
    for k, (launcher, wanted) in sorted(kept.items()):
        log.info(
            "spark conf %s=%s kept from spark-submit/platform (config asked for %s)",
            k,
            launcher,
            wanted,
        )
