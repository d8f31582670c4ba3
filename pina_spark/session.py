"""The one place that builds the SparkSession (driver side only)."""
import logging
import os
import sys
from typing import Dict, Optional

log = logging.getLogger(__name__)

#: conf every pina-spark session gets unless the config overrides it
DEFAULT_CONF: Dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",          # the per-worker model cache relies on it
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",  # hub neighbours in the aggregate join
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.ui.showConsoleProgress": "false",
}


def get_spark(spark_cfg=None, extra_conf: Optional[Dict[str, str]] = None):
    """Return the active SparkSession or build one from a :class:`~pina_spark.config.SparkConfig`.

    Under spark-submit the session already exists (master and resources come from spark-submit);
    ``spark.master`` of the config is then ignored. Refuses to run on an executor.
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
        for k, v in conf.items():
            try:
                active.conf.set(k, v)
            except Exception:  # static conf of a running session: leave as launched
                pass
        return active
    builder = SparkSession.builder.appName(spark_cfg.app_name if spark_cfg else "pina-spark")
    master = spark_cfg.master if spark_cfg is not None else "local[2]"
    # under spark-submit the launcher's JVM is already up (PYSPARK_GATEWAY_PORT is set) and
    # --master / spark-defaults decide; setting it here would silently override the cluster
    if master and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
