"""Model folders as checked local copies: the ``_CHECKSUMS.json`` files the pretrain stage writes,
their verification, the digest and signature that vouch for them, the private local cache of
remote folders, and the checks a folder passes before a native loader reads it.

Executor side (:func:`local_model_dir`, :func:`check_artifacts`), except
:func:`write_checksums` (the driver, when pretrain publishes its models).

``_CHECKSUMS.json`` files sit in the folder they vouch for: they catch a truncated or half-copied
file, not someone who can write the folder. :func:`checksums_digest` condenses them into one
value that can be kept elsewhere (the promotion record, the task a driver hands its executors:
:func:`local_model_dir` refuses a copy whose digest differs) and :func:`signature` is its HMAC
under the key in ``$PINA_SPARK_MODEL_KEY`` (:data:`MODEL_KEY_ENV`), written as
``_CHECKSUMS.sig`` when that key is set. :mod:`pina_spark.models.trust` decides which folders a
run loads.

Remote model folders (``s3://...``) are copied once per worker process into a private local
cache dir (mode 0700: ``$PINA_MODEL_CACHE``, else under the executor's local dirs), keyed by URI
and version, and checked against the ``_CHECKSUMS.json`` files the pretrain stage wrote; a
missing or unreadable artifact raises :class:`ModelLoadError` naming the artifact's path, so the
task fails (no hang, no retry loop hiding it).

Examples
--------
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "w.bin"), "wb").write(b"weights")
>>> write_checksums(d), verify_checksums(d, "w")
(1, True)
"""

import hashlib
import hmac
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = [
    "CHECKSUMS",
    "SIGNATURE",
    "MODEL_KEY_ENV",
    "ModelLoadError",
    "write_checksums",
    "verify_checksums",
    "checksums_digest",
    "local_digest",
    "local_listed",
    "part_digest",
    "model_key",
    "signature",
    "local_model_dir",
    "check_artifacts",
]


class ModelLoadError(RuntimeError):
    """A model artifact is missing or cannot be read; the message names the artifact path."""


# --------------------------------------------------------------------------- local copies
#: per-directory checksum file written by the pretrain stage (sha256 of every file there)
CHECKSUMS = "_CHECKSUMS.json"
#: HMAC of the folder's :func:`checksums_digest` (top folder only), written when a key is set
SIGNATURE = "_CHECKSUMS.sig"
#: environment variable holding the HMAC key of model folders (never a file in a run root)
MODEL_KEY_ENV = "PINA_SPARK_MODEL_KEY"
#: shortest key accepted (bytes)
MIN_KEY_BYTES = 16
#: files of a folder no ``_CHECKSUMS.json`` lists (markers; :data:`SIGNATURE` at the top only)
_UNLISTED = (CHECKSUMS, "_SUCCESS", ".pina_complete", storage.VERSION_FILE)
#: local folders of model URIs already checked in this process:
#: ``(uri, version, digest) -> folder``
_LOCAL_DIRS: dict[Any, str] = {}
_LOCAL_LOCK = threading.Lock()


def _cache_root() -> str:
    """A private (0700, owned by this user) folder for local model copies: ``$PINA_MODEL_CACHE``,
    else under the executor's local dirs (``SPARK_LOCAL_DIRS`` / YARN's ``LOCAL_DIRS``), else the
    temp dir. A folder that exists but is not ours or is open to others is refused."""
    base = os.environ.get("PINA_MODEL_CACHE")
    if not base:
        local = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("LOCAL_DIRS") or ""
        first = next((d for d in local.split(",") if d.strip()), tempfile.gettempdir())
        base = os.path.join(first.strip(), f"pina-models-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    st = os.stat(base)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ModelLoadError(
            f"model cache {base} is not private (owner uid {st.st_uid}, mode "
            f"{oct(st.st_mode & 0o777)}); refusing to load models from it. "
            f"Remove it or set PINA_MODEL_CACHE to a folder only you can read"
        )
    return base


def write_checksums(local_dir: str) -> int:
    """Driver side (pretrain): write ``_CHECKSUMS.json`` (``{file: sha256}`` of the files directly
    inside) into every folder of ``local_dir``, then, when ``$PINA_SPARK_MODEL_KEY`` is set,
    ``_CHECKSUMS.sig`` (:func:`signature`) at its top; returns the number of files covered."""
    import json

    n = 0
    top_sig = os.path.join(local_dir, SIGNATURE)
    if os.path.exists(top_sig):
        os.remove(top_sig)  # never listed, and rewritten below under the current key only
    for base, _, files in os.walk(local_dir):
        sums = {
            f: _sha256(os.path.join(base, f))
            for f in sorted(files)
            if f not in (CHECKSUMS, "_SUCCESS")
        }
        with open(os.path.join(base, CHECKSUMS), "w") as fh:
            json.dump(sums, fh, indent=1, sort_keys=True)
        n += len(sums)
    key = model_key()
    if key is not None:
        digest = local_digest(local_dir)
        assert digest is not None  # written just above
        with open(top_sig, "w") as fh:
            fh.write(signature(digest, key) + "\n")
    return n


def checksums_digest(listed: Mapping[str, bytes]) -> str:
    """One sha256 over every ``_CHECKSUMS.json`` of a folder: ``listed`` maps each one's folder,
    relative to the top (``""`` for the top, ``/``-separated), to its bytes. Together with
    :func:`verify_checksums` it pins every file of the folder.

    Examples
    --------
    >>> checksums_digest({"": b"{}"}) == checksums_digest({"": b"{}", "sub": b"{}"})
    False
    """
    h = hashlib.sha256(b"pina-spark checksums v1\n")
    for rel in sorted(listed):
        h.update(f"{rel}\x1f{hashlib.sha256(listed[rel]).hexdigest()}\x1e".encode())
    return h.hexdigest()


def local_listed(local_dir: str) -> dict[str, bytes]:
    """The ``_CHECKSUMS.json`` files of a local folder: ``{folder relative to the top ("" for
    the top, ``/``-separated): bytes}`` (what :func:`checksums_digest` takes)."""
    listed = {}
    for base, _, files in os.walk(local_dir):
        if CHECKSUMS in files:
            rel = os.path.relpath(base, local_dir)
            with open(os.path.join(base, CHECKSUMS), "rb") as fh:
                listed["" if rel == "." else rel.replace(os.sep, "/")] = fh.read()
    return listed


def part_digest(listed: Mapping[str, bytes], part: str = "") -> str | None:
    """:func:`checksums_digest` of the sub-folder ``part`` (relative, ``/``-separated; ``""``:
    the whole folder) from the listing of its top folder, ``None`` where ``part`` has no
    ``_CHECKSUMS.json`` of its own. Equals :func:`local_digest` of that sub-folder.

    Examples
    --------
    >>> listed = {"": b"{}", "g": b"{}", "g/a": b"{1}"}
    >>> part_digest(listed, "g") == checksums_digest({"": b"{}", "a": b"{1}"})
    True
    >>> part_digest(listed, "h") is None
    True
    """
    if not part:
        return checksums_digest(listed) if "" in listed else None
    sub = {
        rel[len(part) + 1 :] if rel != part else "": raw
        for rel, raw in listed.items()
        if rel == part or rel.startswith(part + "/")
    }
    return checksums_digest(sub) if "" in sub else None


def local_digest(local_dir: str) -> str | None:
    """:func:`checksums_digest` of a local folder, ``None`` when its top has no
    ``_CHECKSUMS.json``."""
    if not os.path.isfile(os.path.join(local_dir, CHECKSUMS)):
        return None
    return checksums_digest(local_listed(local_dir))


def model_key() -> bytes | None:
    """The HMAC key of model folders, from ``$PINA_SPARK_MODEL_KEY`` (``None`` when unset).

    Raises
    ------
    ModelLoadError
        The key is shorter than :data:`MIN_KEY_BYTES`.
    """
    raw = os.environ.get(MODEL_KEY_ENV, "")
    if not raw:
        return None
    key = raw.encode()
    if len(key) < MIN_KEY_BYTES:
        raise ModelLoadError(
            f"{MODEL_KEY_ENV} is set but shorter than {MIN_KEY_BYTES} bytes; use a long "
            f"random key (e.g. `openssl rand -hex 32`)"
        )
    return key


def signature(digest: str, key: bytes) -> str:
    """HMAC-SHA256 (hex) of a folder's :func:`checksums_digest` under ``key``.

    Examples
    --------
    >>> len(signature("ab" * 32, b"k" * 16))
    64
    """
    return hmac.new(key, f"pina-spark model folder\n{digest}".encode(), hashlib.sha256).hexdigest()


def verify_checksums(local_dir: str, what: str) -> bool:
    """Check every file of ``local_dir`` against the ``_CHECKSUMS.json`` files pretrain wrote
    (``False`` when the folder has none: models published before checksums existed).

    Raises
    ------
    ModelLoadError
        A file differs, is missing or is not listed; names it and ``what``.
    """
    import json

    if not os.path.isfile(os.path.join(local_dir, CHECKSUMS)):
        return False
    for base, _, files in os.walk(local_dir):
        listed_file = os.path.join(base, CHECKSUMS)
        if not os.path.isfile(listed_file):
            raise ModelLoadError(f"model artifact {what}: {base} has no {CHECKSUMS}")
        try:
            with open(listed_file) as fh:
                listed = json.load(fh)
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"model artifact {what}: {listed_file} is unreadable ({type(e).__name__}: {e})"
            ) from e
        if not isinstance(listed, dict):
            raise ModelLoadError(f"model artifact {what}: {listed_file} is not a checksum map")
        present = {
            f for f in files if f not in _UNLISTED and not (f == SIGNATURE and base == local_dir)
        }
        for f in sorted(present | set(listed)):
            p = os.path.join(base, f)
            if f not in listed:
                raise ModelLoadError(
                    f"model artifact {what}: {p} is not in {CHECKSUMS} (a file "
                    f"nobody published)"
                )
            if not os.path.isfile(p) or _sha256(p) != listed[f]:
                raise ModelLoadError(
                    f"model artifact {what}: {p} does not match its checksum "
                    f"(missing, truncated or replaced)"
                )
    return True


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def local_model_dir(uri: str, version: str = "", digest: str = "") -> str:
    """Executor side: a local folder holding the model folder ``uri``.

    Local paths are returned as they are, after checking they exist and, once per process and
    version, that their files match the checksums pretrain wrote; remote folders are copied
    once per worker process (and reused across processes of one machine via an atomic rename)
    with :func:`pina_spark.storage.copy_dir` into the private cache (:func:`_cache_root`), keyed by
    ``uri`` and ``version``, and checked against the checksums pretrain wrote
    (:func:`verify_checksums`) before first use in each process. With ``digest`` (what the
    driver vouched for, :func:`pina_spark.models.trust.anchor`), the folder's
    :func:`local_digest` must equal it too.

    Raises
    ------
    ModelLoadError
        The folder is missing, cannot be copied, fails its checksums or is not the one the
        driver vouched for; names ``uri``.
    """
    if not storage.is_remote(uri):
        p = storage.local_path(uri)
        if not os.path.isdir(p):
            raise ModelLoadError(f"model artifact missing: {uri} (no such folder)")
        with _LOCAL_LOCK:
            if (uri, version, digest) not in _LOCAL_DIRS:
                verify_checksums(p, uri)  # once per process and version, as for copies
                _check_digest(p, uri, digest)
                _LOCAL_DIRS[(uri, version, digest)] = p
        return p
    with _LOCAL_LOCK:
        if (uri, version, digest) in _LOCAL_DIRS:
            return _LOCAL_DIRS[(uri, version, digest)]
        key = hashlib.sha1(f"{uri}\x1f{version}".encode()).hexdigest()[:16]
        dst = os.path.join(_cache_root(), key)
        marker = os.path.join(dst, ".pina_complete")
        if not os.path.exists(marker):
            tmp = f"{dst}.tmp-{os.getpid()}-{time.time_ns()}"
            t0 = time.time()
            try:
                storage.copy_dir(uri, tmp)
            except Exception as e:
                shutil.rmtree(tmp, ignore_errors=True)
                raise ModelLoadError(
                    f"cannot copy model artifact {uri}: " f"{type(e).__name__}: {e}"
                ) from e
            with open(os.path.join(tmp, ".pina_complete"), "w") as fh:
                fh.write(uri)
            try:
                os.replace(tmp, dst)
            except OSError:  # another process of this machine won the race
                shutil.rmtree(tmp, ignore_errors=True)
            log.info("copied %s to %s in %.1fs", uri, dst, time.time() - t0)
        try:
            verify_checksums(dst, uri)
            _check_digest(dst, uri, digest)
        except ModelLoadError:
            shutil.rmtree(dst, ignore_errors=True)  # the next attempt copies afresh
            raise
        _LOCAL_DIRS[(uri, version, digest)] = dst
        return dst


def _check_digest(local: str, uri: str, digest: str) -> None:
    if digest and local_digest(local) != digest:
        raise ModelLoadError(
            f"model artifact {uri}: its {CHECKSUMS} files are not the ones the driver "
            f"checked (digest {local_digest(local)}, expected {digest}): the folder changed "
            f"after the run vouched for it; refusing to load it"
        )


def check_artifacts(
    local_dir: str,
    required: Sequence[str] = (),
    counted_text: Sequence[str] = (),
    counted_under: str = "",
) -> None:
    """Check a local model folder before a native loader reads it.

    Native loaders (PECOS C++) abort the whole Python worker on a truncated file, which Spark
    reports as "worker crashed" without a path; this check raises :class:`ModelLoadError` naming
    the broken file instead. ``required`` files must exist; every ``.json`` must parse, every
    ``.npz`` must be a readable zip archive, every ``.npy`` must have a valid header, and text
    files named in ``counted_text`` (PECOS tf-idf ``tfidf-model.txt`` / ``vocab.txt``: a count
    line, then that many tab-separated lines) must hold as many lines as they announce; with
    ``counted_under``, only those inside that subfolder (a Hugging Face encoder beside the
    tf-idf has a ``vocab.txt`` of another format).

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "param.json"), "w").write("{not json")
    >>> check_artifacts(d)                                  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.runtime.checksums.ModelLoadError: corrupt model artifact .../param.json: ...
    """
    import json
    import zipfile

    if not os.path.isdir(local_dir):
        raise ModelLoadError(f"model artifact missing: {local_dir} (no such folder)")
    for rel in required:
        if not os.path.isfile(os.path.join(local_dir, rel)):
            raise ModelLoadError(f"model artifact missing: {os.path.join(local_dir, rel)}")
    for base, _, files in os.walk(local_dir):
        for f in files:
            p = os.path.join(base, f)
            try:
                if f.endswith(".json"):
                    with open(p) as fh:
                        json.load(fh)
                elif f.endswith(".npz"):
                    with zipfile.ZipFile(p) as z:
                        if not z.namelist():
                            raise ValueError("empty archive")
                elif f.endswith(".npy"):
                    import numpy as np

                    with open(p, "rb") as fh:
                        version = np.lib.format.read_magic(fh)
                        # private numpy reader (no public one covers every format version);
                        # numpy's stubs do not declare it
                        np.lib.format._read_array_header(  # type: ignore[attr-defined]
                            fh, version
                        )
                elif f in counted_text and os.path.relpath(p, local_dir).startswith(
                    os.path.join(counted_under, "")
                ):
                    with open(p, "rb") as fh:
                        data = fh.read()
                    first, _, rest = data.partition(b"\n")
                    n = int(first.strip())
                    lines = rest.count(b"\n") + (1 if rest and not rest.endswith(b"\n") else 0)
                    if lines != n or rest.count(b"\t") < n:
                        raise ValueError(f"announces {n} entries, holds {lines} lines")
            except Exception as e:
                raise ModelLoadError(f"corrupt model artifact {p}: {type(e).__name__}: {e}") from e
