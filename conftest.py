"""Fixtures shared by the test suite (tests/) and the docstring examples (pytest --doctest-modules
pina_spark, run by `make test`): the test environment (offline Hugging Face, local IP, this
interpreter for Spark's Python workers) and ONE session-scoped local SparkSession.

Docstring examples see ``spark`` (that session) in their namespace; the session starts only when
a module's examples use it, so `pytest --doctest-modules pina_spark/config` stays Spark-free.
"""

import os
import re
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPARK_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.task.maxFailures": "1",
    "spark.default.parallelism": "2",
    "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
    "spark.python.worker.faulthandler.enabled": "true",
    "spark.driver.memory": "3g",
}


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from pina_spark.orchestration.session import DEFAULT_CONF

    b = SparkSession.builder.master("local[2]").appName("pina-spark-tests")
    for k, v in {**DEFAULT_CONF, **SPARK_TEST_CONF}.items():
        b = b.config(k, v)
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _doctest_spark(request):
    """Puts the shared ``spark`` into a doctest's namespace when its module's examples use it."""
    item = request.node
    if not isinstance(item, pytest.DoctestItem):
        return
    text = "\n".join(ex.source for ex in item.dtest.examples)
    if re.search(r"\bspark\b", text):
        item.dtest.globs.setdefault("spark", request.getfixturevalue("spark"))
