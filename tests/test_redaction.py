"""Credentials stay out of everything a run stores or prints (issue #36): the key rule of
:mod:`pina_spark.config.redact` (also Spark's ``spark.redaction.regex``) and its value rule
(credentials inside a value: a URL's ``user:password@``, ``password=`` in a JDBC URL).

The unit tests check the rules on lists of credential keys and of keys that must stay in clear
(so that redacting everything fails), in Python and in the JVM's regex engine. The run tests
start ``pina-spark run --stages graph`` on the tiny inputs of test_concurrency.py twice, with
every credential set once through ``--set`` and once through the YAML, with the Spark event log
on: no credential may appear in any file under the run root, in the run's log or in the event
log, and the clear keys keep their values in the manifest and in the event log.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from pina_spark import storage
from pina_spark.config import redact
from pina_spark.storage.manifest import Manifest

from demo_run import child_env
from test_concurrency import HANG_GUARD_S, ROOT, _files_under, _tiny_inputs

#: Spark conf keys whose values are credentials (``spark.hadoop.X`` is Hadoop's ``X``)
SECRET_CONF_KEYS = [
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.s3a.server-side-encryption.key",
    "spark.hadoop.fs.s3a.bucket.b.access.key",
    "spark.hadoop.fs.s3a.bucket.b.secret.key",
    "spark.hadoop.fs.s3a.bucket.b.session.token",
    "spark.hadoop.fs.s3a.bucket.b.encryption.key",
    "spark.hadoop.fs.s3a.bucket.b.server-side-encryption.key",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net",
    "spark.hadoop.fs.azure.sas.cont.acct.blob.core.windows.net",
    "spark.hadoop.fs.azure.sas.fixed.token.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret.acct.dfs.core.windows.net",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.hadoop.fs.gs.auth.service.account.private.key.id",
    "spark.hadoop.javax.jdo.option.ConnectionPassword",
    "spark.pina.test.jdbc.password",
    "spark.ssl.keyPassword",
    "spark.ssl.keyStorePassword",
    "spark.ssl.trustStorePassword",
]
#: keys whose values must stay in clear (neighbors.k is a config key, the rest Spark conf)
CLEAR_CONF = {
    "spark.executor.memory": "1234m",
    "spark.hadoop.fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com",
    "spark.hadoop.fs.s3a.bucket.b.endpoint.region": "eu-west-1",
    "spark.hadoop.fs.s3a.server-side-encryption-algorithm": "SSE-C",
    "spark.hadoop.fs.s3a.encryption.algorithm": "SSE-C",
    "spark.ssl.enabled": "false",
    "spark.hadoop.fs.azure.account.auth.type": "SAS",
    "spark.hadoop.fs.azure.account.keyprovider.acct.dfs.core.windows.net": "a.KeyProvider",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile": "/etc/gcs/sa.json",
    "spark.hadoop.fs.gs.auth.service.account.email": "sa@proj.iam.gserviceaccount.com",
    "spark.io.encryption.keySizeBits": "192",
    "spark.pina.test.jdbc.url.clear": "jdbc:mysql://db.example:3306/shop?user=reader",
}
NEIGHBORS_K = 7


# --------------------------------------------------------------------------- the rules
SECRET_KEYS = [k.removeprefix("spark.hadoop.") for k in SECRET_CONF_KEYS] + [
    *SECRET_CONF_KEYS,
    "spark.conf.spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.bucket.my-bucket.encryption.key",
    "fs.azure.account.key.myaccount.dfs.core.windows.net",
    "fs.azure.sas.container.myaccount.blob.core.windows.net",
    "fs.azure.sas.fixed.token.myaccount.dfs.core.windows.net",
    "google.cloud.auth.service.account.private.key",
    "spark.hadoop.javax.jdo.option.ConnectionPassword",
    "spark.jdbc.password",
    "spark.ssl.ui.keyStorePassword",
    "spark.authenticate.secret",
    "spark.kubernetes.authenticate.driver.oauthToken",
    "spark.my.api_key",
    "parquet.encryption.key.list",
    "db.password",
    "passwd",
]
CLEAR_KEYS = [k.removeprefix("spark.hadoop.") for k in CLEAR_CONF] + [
    *CLEAR_CONF,
    "neighbors.k",
    "spark.sql.shuffle.partitions",
    "spark.ui.enabled",
    "spark.ssl.keyStore",
    "spark.ssl.keyStoreType",
    "fs.s3a.bucket.b.endpoint",
    "fs.gs.auth.service.account.json.keyfile",
    "fs.azure.account.oauth2.client.id",
    "fs.azure.account.keyprovider.myaccount",
    "hadoop.security.key.provider.path",
    "spark.io.encryption.keygen.algorithm",
    "spark.network.crypto.keyLength",
    "run.models",
    "input.instances",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_key_rule_redacts_credential_keys(key):
    assert redact.is_secret_key(key)
    assert re.search(redact.SPARK_REDACTION_REGEX, key)


@pytest.mark.parametrize("key", CLEAR_KEYS)
def test_key_rule_keeps_clear_keys(key):
    assert not redact.is_secret_key(key)
    assert not re.search(redact.SPARK_REDACTION_REGEX, key)


def test_no_key_of_the_config_itself_is_secret():
    """Every typed config key and default value stays in clear (only spark.conf entries and
    credentials inside values are redacted)."""
    from pina_spark.config import config_from_dict

    plain = config_from_dict({"output": "s3://bucket/runs"}).to_dict()
    assert redact.redact_config(plain) == plain


#: (value, what redact_config / scrub keep of it)
VALUES = [
    ("jdbc:mysql://h/db?user=u&password=pw-9", "jdbc:mysql://h/db?user=u&password=***"),
    ("jdbc:postgresql://u:pw-9@h:5432/db", "jdbc:postgresql://u:***@h:5432/db"),
    ("jdbc:sqlserver://h;user=u;password=pw-9;db=x", "jdbc:sqlserver://h;user=u;password=***;db=x"),
    ("s3a://AKIA1:pw-9@bucket/path", "s3a://AKIA1:***@bucket/path"),
    (
        "https://a.blob.core.windows.net/c?sv=2022&sig=pw-9",
        "https://a.blob.core.windows.net/c?sv=2022&sig=***",
    ),
    ("AccountName=a;AccountKey=pw-9;Suffix=x", "AccountName=a;AccountKey=***;Suffix=x"),
    ("jdbc:mysql://db.example:3306/shop?user=reader", None),
    ("s3a://bucket/run_date=2026-01-01/x", None),
    ("sa@proj.iam.gserviceaccount.com", None),
    ("hdfs://nn:8020/a@b", None),
]


@pytest.mark.parametrize("value,kept", VALUES)
def test_value_rule_masks_credentials_inside_values(value, kept):
    """A value that carries a credential keeps its shape, the credential itself is masked (in
    the config as stored and in free text); Spark's regexes match exactly these values."""
    kept = kept or value
    assert redact.redact_config({"spark": {"conf": {"spark.x.url": value}}}) == {
        "spark": {"conf": {"spark.x.url": kept}}
    }
    assert redact.redact_config([f"spark.conf.spark.x.url={value}"]) == [
        f"spark.conf.spark.x.url={kept}"
    ]
    assert redact.scrub(f"cannot open {value}") == f"cannot open {kept}"
    assert bool(re.search(redact.SPARK_REDACTION_REGEX, value)) == (kept != value)
    assert bool(re.search(redact.SPARK_STRING_REDACTION_REGEX, value)) == (kept != value)


def test_the_jvm_reads_the_rules_as_python_does(spark):
    """Spark compiles the rules with java.util.regex and searches keys and values (find): the
    same answers as Python's re for every key and value above; the session carries them."""
    jvm = spark.sparkContext._jvm

    def java_finds(rx, s):
        return jvm.java.util.regex.Pattern.compile(rx).matcher(s).find()

    for s in SECRET_KEYS + CLEAR_KEYS + [v for v, _ in VALUES]:
        for rx in (redact.SPARK_REDACTION_REGEX, redact.SPARK_STRING_REDACTION_REGEX):
            assert java_finds(rx, s) == bool(re.search(rx, s)), (rx, s)
    assert spark.conf.get("spark.redaction.regex") == redact.SPARK_REDACTION_REGEX
    assert spark.conf.get("spark.redaction.string.regex") == redact.SPARK_STRING_REDACTION_REGEX


# --------------------------------------------------------------------------- real runs
def _secret_values(via):
    """One distinct value per credential key, free of the words the key rule looks for (so
    only the key rule, never a value match, can hide it); the JDBC-URL ones carry it inside."""
    vals = {k: f"Vq{i:02d}{via}Zx" for i, k in enumerate(SECRET_CONF_KEYS)}
    pw1, pw2 = f"UrlPw1{via}Zx", f"UrlPw2{via}Zx"
    conf = {
        **vals,
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:mysql://db.example/meta?user=hive&password={pw1}"
        ),
        "spark.pina.test.jdbc.userinfo.url": f"jdbc:postgresql://hive:{pw2}@db.example/meta",
    }
    return conf, [*vals.values(), pw1, pw2]


@pytest.fixture(scope="module", params=["set", "yaml"])
def secret_run(request, tmp_path_factory):
    """``pina-spark run --stages graph`` with every credential and clear key set through
    ``--set`` (param "set") or through the YAML (param "yaml"), the event log on."""
    via = request.param
    tmp = tmp_path_factory.mktemp(f"secrets_{via}")
    events = tmp / "events"
    events.mkdir()
    out = tmp / "out"
    secret_conf, secrets = _secret_values(via)
    conf = {**secret_conf, **CLEAR_CONF}
    cfg = {
        "output": str(out),
        "input": _tiny_inputs(tmp / "in"),
        "spark": {
            "master": "local[1]",
            "conf": {
                "spark.ui.enabled": "false",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": str(events),
                "spark.eventLog.compress": "false",  # plain JSON lines to search
            },
        },
    }
    sets = []
    if via == "yaml":
        cfg["spark"]["conf"].update(conf)
        cfg["neighbors"] = {"k": NEIGHBORS_K}
    else:
        sets = [f"spark.conf.{k}={v}" for k, v in conf.items()] + [f"neighbors.k={NEIGHBORS_K}"]
    cfg_file = tmp / "run.yaml"
    cfg_file.write_text(json.dumps(cfg))
    env = child_env(PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "pina_spark.cli", "run", "--config", str(cfg_file)]
    cmd += ["--stages", "graph"] + [a for s in sets for a in ("--set", s)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    return {"via": via, "p": p, "out": out, "events": events, "secrets": secrets}


def _event_env(events_dir):
    """The SparkListenerEnvironmentUpdate event of the event log in ``events_dir`` (one file,
    or Spark 4's rolling ``eventlog_v2_*/events_*`` files)."""
    for log in sorted(_files_under(str(events_dir))):
        if os.path.basename(log).startswith((".", "appstatus")):  # checksums, status marker
            continue
        for line in open(log, encoding="utf-8"):
            event = json.loads(line)
            if event["Event"] == "SparkListenerEnvironmentUpdate":
                return event
    raise AssertionError(f"no environment update in {events_dir}")


@pytest.mark.slow
def test_no_credential_in_the_run_root_the_log_or_the_event_log(secret_run):
    p = secret_run["p"]
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    files = list(_files_under(str(secret_run["out"]))) + list(
        _files_under(str(secret_run["events"]))
    )
    assert any(f.endswith("_manifest.json") for f in files) and len(files) > 10, files
    blobs = {f: open(f, "rb").read() for f in files}
    blobs["the run's log"] = (p.stdout + p.stderr).encode()
    leaks = [(s, f) for s in secret_run["secrets"] for f, b in blobs.items() if s.encode() in b]
    assert not leaks, leaks
    env = dict(_event_env(secret_run["events"])["Spark Properties"])
    for key in SECRET_CONF_KEYS:
        assert env[key] == "*********(redacted)", key


@pytest.mark.slow
def test_clear_keys_stay_in_clear_in_the_manifest_and_the_event_log(secret_run):
    assert secret_run["p"].returncode == 0
    config = Manifest(storage.RunPaths(str(secret_run["out"])).manifest).data["config"]
    assert config["neighbors"]["k"] == NEIGHBORS_K
    conf = config["spark"]["conf"]
    for key, value in CLEAR_CONF.items():
        assert conf[key] == value, key
    for key in SECRET_CONF_KEYS:
        assert conf[key] == redact.REDACTED, key
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"].endswith("password=***")
    assert conf["spark.pina.test.jdbc.userinfo.url"].startswith("jdbc:postgresql://hive:***@")
    event = _event_env(secret_run["events"])
    spark_env = dict(event["Spark Properties"])
    hadoop_env = dict(event["Hadoop Properties"])
    for key, value in CLEAR_CONF.items():
        assert spark_env[key] == value, key
        if key.startswith("spark.hadoop."):
            assert hadoop_env[key.removeprefix("spark.hadoop.")] == value, key
