"""Model folders as checked local copies: the ``_CHECKSUMS.json`` files the pretrain stage writes,
their verification, the private local cache of remote folders, and the checks a folder passes
before a native loader reads it.

Executor side (:func:`local_model_dir`, :func:`check_artifacts`), except
:func:`write_checksums` (the driver, when pretrain publishes its models).

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
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = [
    "CHECKSUMS",
    "ModelLoadError",
    "write_checksums",
    "verify_checksums",
    "local_model_dir",
    "check_artifacts",
]


class ModelLoadError(RuntimeError):
    """A model artifact is missing or cannot be read; the message names the artifact path."""


# --------------------------------------------------------------------------- local copies
#: per-directory checksum file written by the pretrain stage (sha256 of every file there)
CHECKSUMS = "_CHECKSUMS.json"
#: local folders of model URIs already checked in this process: ``(uri, version) -> folder``
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
    inside) into every folder of ``local_dir``; returns the number of files covered."""
    import json

    n = 0
    for base, _, files in os.walk(local_dir):
        sums = {
            f: _sha256(os.path.join(base, f))
            for f in sorted(files)
            if f not in (CHECKSUMS, "_SUCCESS")
        }
        with open(os.path.join(base, CHECKSUMS), "w") as fh:
            json.dump(sums, fh, indent=1, sort_keys=True)
        n += len(sums)
    return n


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
            f
            for f in files
            if f not in (CHECKSUMS, "_SUCCESS", ".pina_complete", storage.VERSION_FILE)
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


def local_model_dir(uri: str, version: str = "") -> str:
    """Executor side: a local folder holding the model folder ``uri``.

    Local paths are returned as they are, after checking they exist and, once per process and
    version, that their files match the checksums pretrain wrote; remote folders are copied
    once per worker process (and reused across processes of one machine via an atomic rename)
    with :func:`pina_spark.storage.copy_dir` into the private cache (:func:`_cache_root`), keyed by
    ``uri`` and ``version``, and checked against the checksums pretrain wrote
    (:func:`verify_checksums`) before first use in each process.

    Raises
    ------
    ModelLoadError
        The folder is missing, cannot be copied or fails its checksums; names ``uri``.
    """
    if not storage.is_remote(uri):
        p = storage.local_path(uri)
        if not os.path.isdir(p):
            raise ModelLoadError(f"model artifact missing: {uri} (no such folder)")
        with _LOCAL_LOCK:
            if (uri, version) not in _LOCAL_DIRS:
                verify_checksums(p, uri)  # once per process and version, as for copies
                _LOCAL_DIRS[(uri, version)] = p
        return p
    with _LOCAL_LOCK:
        if (uri, version) in _LOCAL_DIRS:
            return _LOCAL_DIRS[(uri, version)]
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
        except ModelLoadError:
            shutil.rmtree(dst, ignore_errors=True)  # the next attempt copies afresh
            raise
        _LOCAL_DIRS[(uri, version)] = dst
        return dst


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
