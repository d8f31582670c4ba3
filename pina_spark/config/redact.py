"""Secrets out of everything a run stores or prints.

Two rules, one place, used by pina-spark and by Spark itself:

* the **key rule** :data:`SECRET_KEY_RE` (case-insensitive search in a config key or a
  Spark/Hadoop conf name): ``secret``, ``password``/``passwd``, ``token``, ``credential``,
  ``access key``, ``private key``, ``api key``, an ``account key`` or ``encryption key``
  (``fs.azure.account.key.<account>...``, ``fs.s3a.encryption.key``, the older
  ``fs.s3a.server-side-encryption.key``, their per-bucket ``fs.s3a.bucket.<b>.`` forms; not
  ``...keyprovider`` or ``spark.io.encryption.keySizeBits``), an Azure SAS
  (``fs.azure.sas.<container>.<account>...``, ``fs.azure.sas.fixed.token...``) and any name
  whose last word is ``key``. Such a value is replaced whole by :data:`REDACTED`. A key file's
  *path* (``google.cloud.auth.service.account.json.keyfile``, ``spark.ssl.keyStore``) is not a
  secret and stays in clear; so do names such as ``fs.s3a.server-side-encryption-algorithm``.
* the **value rule** :data:`SECRET_VALUE_RE`: a credential inside any value, whatever its key:
  the password of a URL's ``user:password@`` and the value of a ``password=``, ``pwd=``,
  ``secret=``, ``token=``, ``sig=`` (SAS), ``AccountKey=``... parameter (a JDBC URL such as
  ``jdbc:mysql://h/db?user=u&password=p``, an Azure connection string). Only that part is
  replaced, so the value keeps its shape (``...&password=***``).

:func:`redact_config` applies both to the config stored in the manifest and the model card and
registers each secret so that :func:`scrub` removes it from error strings stored in the manifest
and :class:`LogFilter` from log records (installed by the CLI entry points); both also apply the
value rule to free text. The registry is per process (the driver): executors never see the
config as a whole.

Spark gets the same rules (:mod:`pina_spark.orchestration.session`): ``spark.redaction.regex``
is :data:`SPARK_REDACTION_REGEX` (both rules; Spark searches it in conf keys *and* values and
hides the whole value: the UI's environment page, event logs, job properties, YARN logs) and
``spark.redaction.string.regex`` is :data:`SPARK_STRING_REDACTION_REGEX` (the value rule; Spark
replaces the matching part of query plans and explain output).

Examples
--------
>>> redact_config({"spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "XYZ",
...                                    "spark.ui.enabled": "false"}}})
{'spark': {'conf': {'spark.hadoop.fs.s3a.secret.key': '***', 'spark.ui.enabled': 'false'}}}
>>> [is_secret_key(k) for k in ("fs.s3a.access.key", "fs.s3a.bucket.b.encryption.key",
...                             "fs.azure.account.key.acc.dfs.core.windows.net", "neighbors.k",
...                             "fs.s3a.server-side-encryption-algorithm")]
[True, True, True, False, False]
>>> redact_config(["spark.conf.spark.x.url=jdbc:postgresql://u:pw9@h/db?ssl=true"])
['spark.conf.spark.x.url=jdbc:postgresql://u:***@h/db?ssl=true']
"""

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "SECRET_KEY_RE",
    "SECRET_VALUE_RE",
    "SPARK_REDACTION_REGEX",
    "SPARK_STRING_REDACTION_REGEX",
    "REDACTED",
    "is_secret_key",
    "mask_value",
    "redact_config",
    "register_secrets",
    "scrub",
    "LogFilter",
]

#: the key rule (case-insensitive search; see the module docstring). Java's regex engine reads it
#: the same way (Spark compiles it with java.util.regex): plain groups and look-arounds only
SECRET_KEY_RE = re.compile(
    r"secret|passw(?:or)?d|token|credential|access[._-]?key|private[._-]?key|api[._-]?key"
    r"|(?:account|encryption)[._-]?key(?![a-z])"  # not ...keyprovider, ...keySizeBits
    r"|azure[._-]sas[._-]"
    r"|[._-]key$",
    re.IGNORECASE,
)
#: the value rule: group 1 is a URL's password (``scheme://user:PASSWORD@host``), group 2 the
#: value of a credential parameter (``password=``, ``sig=``, ``AccountKey=``...; up to ``&;``)
SECRET_VALUE_RE = re.compile(
    r"://[^/@:\s]+:([^/@\s]+)@"
    r"|(?<![a-z0-9])(?:password|passwd|pwd|secret|token|sig|signature|accountkey"
    r"|sharedaccesssignature|api[._-]?key)=([^&;\s]+)",
    re.IGNORECASE,
)
#: Spark's ``spark.redaction.regex``: searched in conf keys and values, hides the whole value
SPARK_REDACTION_REGEX = "(?i)" + SECRET_KEY_RE.pattern + "|" + SECRET_VALUE_RE.pattern
#: Spark's ``spark.redaction.string.regex``: the matching part of plans and explain output
SPARK_STRING_REDACTION_REGEX = "(?i)" + SECRET_VALUE_RE.pattern
REDACTED = "***"
#: values shorter than this are not scrubbed from free text (too many false hits)
MIN_SCRUB_LEN = 3

_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def is_secret_key(key: str) -> bool:
    """Whether a config key (dotted path or Spark/Hadoop conf name) names a secret."""
    return bool(SECRET_KEY_RE.search(str(key)))


def mask_value(text: str, found: set[str] | None = None) -> str:
    """``text`` with each credential the value rule finds replaced by ``***`` (added to
    ``found``).

    Examples
    --------
    >>> mask_value("jdbc:mysql://h/db?user=u&password=p4ss&ssl=1")
    'jdbc:mysql://h/db?user=u&password=***&ssl=1'
    >>> mask_value("s3a://bucket/run_date=2026-01-01/x")
    's3a://bucket/run_date=2026-01-01/x'
    """

    def sub(m: re.Match[str]) -> str:
        g = 1 if m.group(1) is not None else 2
        if found is not None:
            found.add(m.group(g))
        start, end = m.start(g) - m.start(), m.end(g) - m.start()
        return m.group(0)[:start] + REDACTED + m.group(0)[end:]

    return SECRET_VALUE_RE.sub(sub, text)


def _walk(obj: Any, path: str, found: set[str]) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            key = f"{path}.{k}" if path else str(k)
            if is_secret_key(str(k)) and not isinstance(v, dict | list) and v not in (None, ""):
                found.add(str(v))
                out[k] = REDACTED
            else:
                out[k] = _walk(v, key, found)
        return out
    if isinstance(obj, list):
        return [_walk(v, path, found) for v in obj]
    if isinstance(obj, str) and "=" in obj:  # "key=value" items (e.g. --set lists)
        k, _, v = obj.partition("=")
        if is_secret_key(k) and v:
            found.add(v)
            return f"{k}={REDACTED}"
        return f"{k}={mask_value(v, found)}"
    if isinstance(obj, str):
        return mask_value(obj, found)
    return obj


def redact_config(config: Any) -> Any:
    """A copy of ``config`` (nested dicts/lists) with every secret value (key rule) replaced by
    ``***`` and every credential inside a value (value rule) masked; both are registered for
    :func:`scrub`."""
    found: set[str] = set()
    out = _walk(config, "", found)
    register_secrets(found)
    return out


def register_secrets(values: Iterable[str]) -> None:
    """Remember secret values so :func:`scrub` and :class:`LogFilter` remove them."""
    with _LOCK:
        _SECRETS.update(v for v in values if v and len(v) >= MIN_SCRUB_LEN)


def scrub(text: Any) -> Any:
    """``text`` with every registered secret value replaced by ``***`` and the value rule
    applied (non-strings as given).

    Examples
    --------
    >>> register_secrets(["hunter22"])
    >>> scrub("login failed for key hunter22")
    'login failed for key ***'
    """
    if not isinstance(text, str):
        return text
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return mask_value(text)


class LogFilter(logging.Filter):
    """Scrubs registered secrets and value-rule credentials from a log record's message and
    arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # pragma: no cover - a broken format string: leave it
            return True
        clean = scrub(msg)
        if clean != msg:
            record.msg, record.args = clean, ()
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True
