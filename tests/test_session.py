"""Spark conf precedence: spark-submit --conf and the platform's spark-defaults win over the
config's spark.conf, which only fills keys they left unset (pina_spark/orchestration/session.py)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pina_spark.config import config_from_dict
from pina_spark.orchestration.session import fill_unset, get_spark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

YAML_CONF = {
    "spark.sql.shuffle.partitions": "3",  # spark-submit --conf says 7
    "spark.pina.test.platform": "yaml",  # spark-defaults.conf says platform
    "spark.pina.test.only_yaml": "yaml",
}  # nobody else sets it


def test_spark_defaults_parsing(tmp_path, monkeypatch):
    from pina_spark.orchestration.session import spark_defaults

    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.a  1\nspark.b=two words\n\nspark.c\tx=y\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert spark_defaults() == {"spark.a": "1", "spark.b": "two words", "spark.c": "x=y"}


def test_fill_unset_keeps_what_is_set():
    apply, kept = fill_unset(
        YAML_CONF, {"spark.sql.shuffle.partitions": "7", "spark.pina.test.platform": "yaml"}.get
    )
    assert apply == {"spark.pina.test.only_yaml": "yaml"}
    assert kept == {"spark.sql.shuffle.partitions": ("7", "3")}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spark-submit", "python"])
def test_spark_submit_and_platform_defaults_win_over_yaml(tmp_path, launcher):
    """The real launchers: a spark-defaults.conf in SPARK_CONF_DIR (what EMR's configuration
    classifications write) and a --conf on the spark-submit line (PYSPARK_SUBMIT_ARGS for a
    plain python driver, as notebooks set it), against the config."""
    exe = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    assert os.path.exists(exe), f"spark-submit not found beside {sys.executable}"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.pina.test.platform  platform\nspark.ui.enabled  false\n"
    )
    script = tmp_path / "probe.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, logging
        from pina_spark.config import config_from_dict
        from pina_spark.orchestration.session import get_spark
        logging.basicConfig(level=logging.INFO)
        cfg = config_from_dict({{"output": "/tmp/x", "spark": {{"master": None,
                                 "conf": {json.dumps(YAML_CONF)}}}}})
        spark = get_spark(cfg.spark)
        print("RESULT " + json.dumps({{k: spark.conf.get(k) for k in {list(YAML_CONF)!r}}}))
        spark.stop()
    """)
    )
    env = dict(
        os.environ,
        SPARK_CONF_DIR=str(conf_dir),
        PYTHONPATH=ROOT,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    if launcher == "spark-submit":
        cmd = [exe, "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=7", str(script)]
    else:
        env["PYSPARK_SUBMIT_ARGS"] = (
            "--master local[1] --conf spark.sql.shuffle.partitions=7 " "pyspark-shell"
        )
        cmd = [sys.executable, str(script)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    got = json.loads(line[len("RESULT ") :])
    assert got == {
        "spark.sql.shuffle.partitions": "7",  # spark-submit --conf
        "spark.pina.test.platform": "platform",  # platform spark-defaults
        "spark.pina.test.only_yaml": "yaml",
    }  # filled from the config
    if launcher == "spark-submit":  # (its PythonRunner merges the driver's stderr into stdout)
        assert (
            "spark.sql.shuffle.partitions=7 kept from spark-submit/platform" in r.stdout + r.stderr
        )


def test_running_session_keeps_its_conf(spark):
    """A notebook's session: what it set stays; the config fills the rest."""
    spark.conf.set("spark.pina.test.notebook", "notebook")
    try:
        cfg = config_from_dict(
            {
                "output": "/tmp/x",
                "spark": {
                    "conf": {"spark.pina.test.notebook": "yaml", "spark.pina.test.fill": "yaml"}
                },
            }
        )
        assert get_spark(cfg.spark) is spark
        assert spark.conf.get("spark.pina.test.notebook") == "notebook"
        assert spark.conf.get("spark.pina.test.fill") == "yaml"
    finally:
        spark.conf.unset("spark.pina.test.notebook")
        spark.conf.unset("spark.pina.test.fill")


def test_spark_redacts_the_same_secret_keys_as_the_manifest(spark):
    """Spark's own redaction (UI, event logs, YARN/JVM logs of the conf) uses pina-spark's rule,
    which also covers keys Spark's default regex misses."""
    import re

    from pina_spark.config.redact import is_secret_key

    rx = spark.conf.get("spark.redaction.regex")
    for key in (
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.azure.account.oauth2.client.credential",
        "spark.my.api_key",
        "spark.hadoop.fs.s3a.access.key",
    ):
        assert re.search(rx, key) and is_secret_key(key), key
    assert not re.search(rx, "spark.sql.shuffle.partitions")
    redacted = spark.sparkContext._jvm.org.apache.spark.util.Utils.redact(
        spark.sparkContext._jsc.sc().conf(),
        spark.sparkContext._jvm.PythonUtils.toSeq(
            [spark.sparkContext._jvm.scala.Tuple2("spark.my.api_key", "XYZ")]
        ),
    )
    assert "XYZ" not in str(redacted)
