"""Secrets out of everything a run stores or prints.

A config key whose last part matches :data:`SECRET_KEY_RE` (secret, password, token,
credential, access key; e.g. ``spark.conf.spark.hadoop.fs.s3a.secret.key``) has its value
replaced by :data:`REDACTED` in the manifest and the model card, and the value itself is
registered so that :func:`scrub` removes it from error strings stored in the manifest and
:class:`LogFilter` removes it from log records (installed by the CLI entry points).

The registry is per process (the driver): executors never see the config as a whole.

Examples
--------
>>> redact_config({"spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "XYZ",
...                                    "spark.ui.enabled": "false"}}})
{'spark': {'conf': {'spark.hadoop.fs.s3a.secret.key': '***', 'spark.ui.enabled': 'false'}}}
>>> is_secret_key("fs.s3a.access.key"), is_secret_key("neighbors.k")
(True, False)
"""

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "SECRET_KEY_RE",
    "REDACTED",
    "is_secret_key",
    "redact_config",
    "register_secrets",
    "scrub",
    "LogFilter",
]

#: a key is secret when it matches (case-insensitive): secret, password/passwd, token,
#: credential(s), access key / access_key / accesskey, private key, api key
SECRET_KEY_RE = re.compile(
    r"secret|passw(or)?d|token|credential|access[._-]?key|" r"private[._-]?key|api[._-]?key",
    re.IGNORECASE,
)
REDACTED = "***"
#: values shorter than this are not scrubbed from free text (too many false hits)
MIN_SCRUB_LEN = 3

_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def is_secret_key(key: str) -> bool:
    """Whether a config key (dotted path or Spark/Hadoop conf name) names a secret."""
    return bool(SECRET_KEY_RE.search(str(key)))


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
    return obj


def redact_config(config: Any) -> Any:
    """A copy of ``config`` (nested dicts/lists) with every secret value replaced by ``***``;
    the values are registered for :func:`scrub`."""
    found: set[str] = set()
    out = _walk(config, "", found)
    register_secrets(found)
    return out


def register_secrets(values: Iterable[str]) -> None:
    """Remember secret values so :func:`scrub` and :class:`LogFilter` remove them."""
    with _LOCK:
        _SECRETS.update(v for v in values if v and len(v) >= MIN_SCRUB_LEN)


def scrub(text: Any) -> Any:
    """``text`` with every registered secret value replaced by ``***`` (non-strings as given).

    Examples
    --------
    >>> register_secrets(["hunter22"])
    >>> scrub("login failed for key hunter22")
    'login failed for key ***'
    """
    if not isinstance(text, str) or not _SECRETS:
        return text
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


class LogFilter(logging.Filter):
    """Scrubs registered secrets from a log record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
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
