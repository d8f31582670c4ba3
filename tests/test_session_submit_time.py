"""Keys that only spark-submit reads (``spark.yarn.*``, ``spark.submit.*``,
``spark.driver.memory``): set in the config of a driver that spark-submit (or a running session)
already started, the session warns once per key, naming it; where this process starts the JVM
itself (``pina-spark run`` from a plain python) they apply, so no warning
(pina_spark/orchestration/session.py)."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from pina_spark.config import config_from_dict
from pina_spark.orchestration import session
from pina_spark.orchestration.session import get_spark, submit_time_misses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGGER = "pina_spark.orchestration.session"


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_only_submit_time_keys_not_in_effect_are_misses():
    launcher = {"spark.driver.memory": "8g", "spark.yarn.queue": "prod"}.get
    got = submit_time_misses(
        {
            "spark.driver.memory": "8g",  # the launcher's value: in effect
            "spark.yarn.queue": "adhoc",  # another value: not in effect
            "spark.yarn.maxAppAttempts": "1",  # unset: not in effect
            "spark.submit.deployMode": "cluster",
            "spark.executor.memory": "12g",  # not a submit-time key
        },
        launcher,
    )
    assert got == {
        "spark.yarn.queue": "prod",
        "spark.yarn.maxAppAttempts": None,
        "spark.submit.deployMode": None,
    }


def test_running_session_warns_once_naming_the_key(spark, caplog, monkeypatch):
    """A notebook's (or the suite's) running session: the JVM is up, its driver heap fixed."""
    monkeypatch.setattr(session, "_WARNED_SUBMIT_TIME", set())
    cfg = config_from_dict(
        {
            "output": "/tmp/x",
            "spark": {
                "conf": {
                    "spark.yarn.maxAppAttempts": "1",
                    "spark.driver.memory": "123g",
                    "spark.pina.test.plain": "yes",
                }
            },
        }
    )
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            assert get_spark(cfg.spark) is spark
            first = _warnings(caplog)
            get_spark(cfg.spark)
        assert len(first) == 2, first
        assert "spark.driver.memory=123g" in first[0] and "--driver-memory 123g" in first[0]
        assert "In effect: 3g" in first[0]  # conftest's session
        assert "spark.yarn.maxAppAttempts=1" in first[1]
        assert "--conf spark.yarn.maxAppAttempts=1" in first[1]
        assert _warnings(caplog) == first  # once per key and process
        assert not [w for w in first if "spark.pina.test.plain" in w]
    finally:
        spark.conf.unset("spark.pina.test.plain")


PROBE = """
import json, logging
from pina_spark.config import config_from_dict
from pina_spark.orchestration.session import get_spark
logging.basicConfig(level=logging.WARNING, format="LOG %(levelname)s %(message)s")
cfg = config_from_dict({"output": "/tmp/x", "spark": {"master": "local[1]", "conf": CONF}})
spark = get_spark(cfg.spark)
spark = get_spark(cfg.spark)
heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
print("RESULT " + json.dumps({"heap_mb": heap / 2**20}))
spark.stop()
"""


def _probe(tmp_path, launcher: str, conf: dict[str, str]) -> tuple[list[str], float]:
    """Run :data:`PROBE` with ``conf`` from a plain python or under ``spark-submit --master
    local[1]``, with no platform conf and no heap named in the environment: (its WARNING log
    lines, the driver JVM's max heap in MiB)."""
    exe = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(PROBE).replace("CONF", repr(conf)))
    env = dict(
        os.environ,
        PYTHONPATH=ROOT,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(tmp_path),  # no platform spark-defaults.conf
    )
    for var in ("PYSPARK_SUBMIT_ARGS", *session.DRIVER_MEMORY_ENV):
        env.pop(var, None)
    if launcher == "spark-submit":
        cmd = [exe, "--master", "local[1]", str(script)]
    else:
        cmd = [sys.executable, str(script)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    warned = [ln for ln in out.splitlines() if ln.startswith("LOG WARNING")]
    result = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return warned, float(json.loads(result[len("RESULT ") :])["heap_mb"])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spark-submit", "python"])
def test_submit_time_keys_under_spark_submit_and_from_python(tmp_path, launcher):
    """Under spark-submit the YAML's spark.yarn.maxAppAttempts and spark.driver.memory do
    nothing: one warning each, naming the key. From a plain python the config's conf is part of
    the JVM's launch: the driver gets the YAML's heap, and no warning."""
    conf = {
        "spark.yarn.maxAppAttempts": "1",
        "spark.driver.memory": "1536m",
        "spark.ui.enabled": "false",
    }
    warned, heap_mb = _probe(tmp_path, launcher, conf)
    if launcher == "spark-submit":
        assert len(warned) == 2, warned  # two keys, two get_spark calls: once each
        assert "spark.driver.memory=1536m" in warned[0] and "no effect" in warned[0]
        assert "spark.yarn.maxAppAttempts=1" in warned[1] and "no effect" in warned[1]
        assert heap_mb < 1200  # spark-submit's default 1g heap
    else:
        assert warned == []
        assert 1200 < heap_mb <= 1536  # the YAML's spark.driver.memory reached the JVM


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spark-submit", "python"])
def test_local_driver_heap_nobody_sized(tmp_path, launcher):
    """A local master whose heap neither the launcher nor the config names: from a plain python
    the JVM starts with a quarter of the machine's memory instead of Spark's 1g (every task of a
    local master runs in it); under spark-submit it is too late, so one warning names the
    --driver-memory to pass."""
    warned, heap_mb = _probe(tmp_path, launcher, {"spark.ui.enabled": "false"})
    want = session.local_driver_memory(session.machine_memory_bytes())
    if launcher == "spark-submit":
        assert len(warned) == 1, warned  # two get_spark calls: once
        assert "local master local[1]" in warned[0] and f"--driver-memory {want}" in warned[0]
        assert heap_mb < 1200  # spark-submit's default 1g heap
    else:
        assert warned == []
        want_mb = int(want[:-1]) * 1024
        assert 0.8 * want_mb < heap_mb <= want_mb, (heap_mb, want)


def test_driver_heap_named_anywhere_is_left_alone(monkeypatch):
    """The config, the launcher (--driver-memory in PYSPARK_SUBMIT_ARGS) or Spark's own
    environment variable: any of them names the heap, and the session adds nothing."""
    calls = []
    monkeypatch.setattr(session, "_size_local_driver", lambda *a: calls.append(a))
    monkeypatch.setattr(session, "_jvm_started", lambda: False)

    class Builder:
        def __getattr__(self, name):
            return lambda *a, **k: self

        def getOrCreate(self):
            raise RuntimeError("stop before a JVM starts")

    import pyspark.sql

    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    monkeypatch.setattr(pyspark.sql.SparkSession, "getActiveSession", staticmethod(lambda: None))
    for var in ("PYSPARK_SUBMIT_ARGS", *session.DRIVER_MEMORY_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", "/nonexistent")
    named = config_from_dict({"output": "/x", "spark": {"conf": {"spark.driver.memory": "2g"}}})
    plain = config_from_dict({"output": "/x"})
    cases = [(named, {}), (plain, {"PYSPARK_SUBMIT_ARGS": "--driver-memory 3g pyspark-shell"})]
    cases += [(plain, {"SPARK_DRIVER_MEMORY": "5g"}), (plain, {})]
    for cfg, env in cases:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(RuntimeError, match="stop before"):
            get_spark(cfg.spark)
        for k in env:
            monkeypatch.delenv(k)
    assert len(calls) == 1  # the last case only: nobody named it
