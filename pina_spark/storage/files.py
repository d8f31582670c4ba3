"""Small files and folder copies on local paths or ``pyarrow.fs`` URIs.

Manifests, leases, commit records, version tokens and the inputs handed to tasks are small
files. They are written atomically: tmp + rename on a local disk, one PUT (atomic per object)
on S3. :func:`copy_dir` moves model folders to and from object stores.
"""

import os
import uuid

from pina_spark.storage.fs import pyarrow_fs
from pina_spark.storage.schemas import InputError
from pina_spark.storage.uri import is_remote, local_path


def write_bytes(uri: str, data: bytes) -> None:
    """Write a small file atomically (tmp + rename) to a local path or a pyarrow.fs URI."""
    if is_remote(uri):
        fs, p = pyarrow_fs(uri)
        with fs.open_output_stream(p) as fh:  # S3 PUT is atomic per object
            fh.write(data)
        return
    p = local_path(uri)
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    tmp = f"{p}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, p)


def read_inputs_of(uri: str, what: str) -> bytes:
    """The bytes a task was handed at ``uri`` (:func:`read_bytes`), or an :class:`InputError`
    naming ``what`` when they are gone (e.g. the scratch folder was removed by a rerun).

    Examples
    --------
    >>> read_inputs_of("/missing/x.npz", "fit g[pina/full]")
    Traceback (most recent call last):
    ...
    pina_spark.storage.schemas.InputError: fit g[pina/full]: its inputs /missing/x.npz are missing
    """
    raw = read_bytes(uri)
    if raw is None:
        raise InputError(f"{what}: its inputs {uri} are missing")
    return raw


def read_bytes(uri: str) -> bytes | None:
    """Read a small file; ``None`` when it does not exist."""
    if is_remote(uri):
        import pyarrow.fs as pafs

        fs, p = pyarrow_fs(uri)
        if fs.get_file_info(p).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(p) as fh:
            return fh.read()
    p = local_path(uri)
    if not os.path.exists(p):
        return None
    with open(p, "rb") as fh:
        return fh.read()


def copy_dir(src: str, dst: str) -> None:
    """Copy a folder between local paths and/or URIs (models to and from S3)."""
    import pyarrow.fs as pafs

    if not is_remote(src) and not is_remote(dst):
        import shutil

        if os.path.exists(local_path(dst)):
            shutil.rmtree(local_path(dst))
        shutil.copytree(local_path(src), local_path(dst))
        return
    pafs.copy_files(
        src if is_remote(src) else os.path.abspath(local_path(src)),
        dst if is_remote(dst) else os.path.abspath(local_path(dst)),
    )
