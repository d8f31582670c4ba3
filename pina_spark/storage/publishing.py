"""Staged writes with atomic publish, and recovery after a crash.

Every table is written to ``<root>/_staging/<name>-<uuid>``. Only once that write succeeded is
it swapped into ``<root>/<name>``: the previous version is moved aside first and deleted after
the swap, and a crash in between is repaired by :func:`recover` on the next run. Readers of
``<root>/<name>`` therefore see either the old complete table or the new complete one, never a
half-written one. Renames go through Hadoop's FileSystem API, so local paths, HDFS and ``s3://``
(EMRFS) behave the same way. On S3, rename is copy+delete, atomic per object and not per
folder, so readers should check the ``_SUCCESS`` marker, written last (see
:func:`~pina_spark.storage.fs.is_complete`). The version token (``_VERSION``) written into
each published folder lets a stage commit record exactly what it published.
"""

import logging
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from pina_spark.storage.files import read_bytes, write_bytes
from pina_spark.storage.fs import (
    _jfs,
    _list_files,
    delete_path,
    is_complete,
    jpath_child,
    list_dir,
    parquet_files,
    path_exists,
    pyarrow_reaches,
)
from pina_spark.storage.lease import (
    LeaseError,
    check_lease_for,
    describe_lease,
    held_run_id,
    live_lease_owner,
)
from pina_spark.storage.paths import RunPaths
from pina_spark.storage.schemas import INCREMENTAL_SCRATCH, STAGING, STAGING_RUN_TAG, VERSION_FILE
from pina_spark.storage.uri import is_remote, local_path

log = logging.getLogger(__name__)


def _rename(spark, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst``, refusing an existing ``dst`` (Hadoop's rename would move
    ``src`` *inside* an existing folder and nest one table in another). Local paths use
    ``os.rename``, which cannot replace a non-empty folder, so the refusal is atomic there."""
    import errno

    exists = OSError(
        f"could not rename {src} -> {dst}: the destination exists (another "
        f"writer published it; refusing to nest or overwrite)"
    )
    if not is_remote(src) and not is_remote(dst):
        s, d = local_path(src), local_path(dst)
        os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
        if os.path.lexists(d):
            raise exists
        try:
            os.rename(s, d)
        except OSError as e:
            # another writer renamed into place between the check and the rename
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and os.path.lexists(d):
                raise exists from e
            raise OSError(f"could not rename {src} -> {dst}: {e}") from e
        return
    fs, s = _jfs(spark, src)
    _, d = _jfs(spark, dst)
    if fs.exists(d):
        raise exists
    parent = d.getParent()
    if parent is not None and not fs.exists(parent):
        fs.mkdirs(parent)
    if not fs.rename(s, d):
        raise exists if fs.exists(d) else OSError(f"could not rename {src} -> {dst}")


def _version_info(uri: str) -> dict[str, Any] | None:
    """The content of ``<uri>/_VERSION`` (``{"version", "files": {path: size} or None}``)."""
    import json

    try:
        raw = read_bytes(uri.rstrip("/") + "/" + VERSION_FILE)
    except Exception:
        return None
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return {"version": raw.decode("utf-8", "replace").strip(), "files": None}
    return info if isinstance(info, dict) else None


def table_version(uri: str) -> str | None:
    """The version token written into a published folder by :func:`publish` (``None`` for a
    folder published before version tokens existed, or a missing one)."""
    info = _version_info(uri)
    return info.get("version") if info else None


def _relative_files(uri: str) -> dict[str, int] | None:
    """``{relative path: size}`` of every file under ``uri`` but the markers and hidden files
    (e.g. Hadoop's local ``.crc`` files) (pyarrow listing; ``None`` where pyarrow does not
    reach)."""
    listed = _list_files(uri) if pyarrow_reaches(uri) else None
    if listed is None:
        return None
    _, root, files = listed
    out = {}
    for fi in files:
        rel = fi.path[len(root) + 1 :]
        if rel not in ("_SUCCESS", VERSION_FILE) and not any(
            part.startswith(".") for part in rel.split("/")
        ):
            out[rel] = int(fi.size)
    return out


def holds_its_files(uri: str) -> bool:
    """Whether the published folder ``uri`` holds every file (with its size) that its
    ``_VERSION`` lists: false for a folder whose copy-and-delete rename (S3) stopped half way,
    even though ``_SUCCESS`` (copied early: ``_`` sorts first) is there. Folders without a list
    count as complete."""
    info = _version_info(uri)
    if not info or not info.get("files"):
        return True
    have = _relative_files(uri)
    if have is None:
        return True
    return all(have.get(f) == n for f, n in info["files"].items())


def publish(spark, staging: str, final: str) -> None:
    """Swap a fully written ``staging`` folder into ``final`` (see module docstring).

    The staging folder gets a version token (``_VERSION``, its own unique name) first, so a
    stage commit can record exactly which version of each table it published. Refuses to run
    when this process held the root's lease and lost it. If another writer published ``final``
    in between, the rename refuses the existing destination and this publish fails (its moved
    aside copy is put back when ``final`` is gone, else dropped)."""
    check_lease_for(final)
    if not is_complete(spark, staging):
        raise OSError(f"refusing to publish {staging}: no _SUCCESS marker (incomplete write)")
    import json

    write_bytes(
        staging.rstrip("/") + "/" + VERSION_FILE,
        json.dumps(
            {"version": staging.rstrip("/").rsplit("/", 1)[-1], "files": _relative_files(staging)},
            sort_keys=True,
        ).encode("utf-8"),
    )
    old = None
    if path_exists(spark, final):
        old = f"{final}.__old-{uuid.uuid4().hex[:8]}"
        _rename(spark, final, old)
    try:
        _rename(spark, staging, final)
    except BaseException:
        if old is not None:
            if not path_exists(spark, final):
                _rename(spark, old, final)  # nobody replaced it: put the old version back
            elif is_complete(spark, final) and holds_its_files(final):
                delete_path(spark, old)  # another writer's complete version won
        raise
    if old:
        delete_path(spark, old)
    log.info("published %s", final)


def recover(spark, paths: RunPaths, rels: Iterable[str]) -> list[str]:
    """Repair an interrupted publish: if ``<t>`` is missing, or present without ``_SUCCESS``
    (an S3-style rename copies object by object and can stop half way), and a complete
    ``<t>.__old-*`` exists, restore it; delete leftover staging folders of runs that do not
    hold the root's lease. Returns the repaired table names.

    Refuses (:class:`LeaseError`) when another live run holds the lease of the root: the
    staging folders and moved-aside versions are then that run's in-flight work.

    Besides ``rels``, every ``*.__old-*`` folder found under the run root (two levels deep, e.g.
    ``quarantine/<table>``) is repaired the same way, so no published table is forgotten."""
    owner = live_lease_owner(paths.root)
    if owner is not None and owner.get("run_id") != held_run_id(paths.root):
        raise LeaseError(
            f"recover {paths.root}: {describe_lease(owner)} holds the lease; "
            f"refusing to touch its staging folders"
        )
    repaired = []
    rels = list(rels)
    for rel in _stray_olds(spark, paths):
        if rel not in rels:
            rels.append(rel)
    for rel in rels:
        final = paths.table(rel)
        fs, p = _jfs(spark, final)
        parent = p.getParent()
        if not fs.exists(parent):
            continue
        base = p.getName()
        olds = [
            st.getPath()
            for st in fs.listStatus(parent)
            if st.getPath().getName().startswith(base + ".__old-")
        ]
        complete_olds = [
            o
            for o in olds
            if fs.exists(jpath_child(spark, o, "_SUCCESS"))
            and holds_its_files(final.rsplit("/", 1)[0] + "/" + o.getName())
        ]
        if (
            complete_olds
            and fs.exists(p)
            and not (is_complete(spark, final) and holds_its_files(final))
        ):
            log.warning(
                "recover: %s is incomplete (a rename stopped half way); restoring the "
                "previous complete version",
                final,
            )
            fs.delete(p, True)
        if complete_olds and not fs.exists(p):
            fs.rename(complete_olds[0], p)
            olds = [o for o in olds if o.getName() != complete_olds[0].getName()]
            repaired.append(rel)
        for o in olds:
            fs.delete(o, True)
    _clean_staging(spark, paths)
    # an incremental stage's scratch (rows selected, output before the merge) outlives a run
    # killed mid-stage; recover runs under the root's lease, before any stage of its run
    # (a finished stage removes its own folder and leaves the empty parent: not a warning)
    scratch = paths.table(INCREMENTAL_SCRATCH)
    if path_exists(spark, scratch):
        left = [name for name, _ in list_dir(spark, scratch)]
        if left:
            log.warning(
                "recover: removing %s (%s), left by a run that did not finish",
                scratch,
                ", ".join(sorted(left)),
            )
        delete_path(spark, scratch)
    return repaired


def _clean_staging(spark, paths: RunPaths) -> None:
    """Delete the staging folders of every run except the one holding the root's lease."""
    staging = paths.table(STAGING)
    if not path_exists(spark, staging):
        return
    keep = held_run_id(paths.root)
    fs, p = _jfs(spark, staging)
    left = 0
    for st in fs.listStatus(p):
        name = st.getPath().getName()
        if keep and name.endswith(STAGING_RUN_TAG + keep):
            left += 1
            continue
        fs.delete(st.getPath(), True)
    if not left:
        fs.delete(p, True)


def _stray_olds(spark, paths: RunPaths, depth: int = 2) -> list[str]:
    """Relative names ``t`` of every ``<root>/t.__old-*`` folder (``depth`` levels deep)."""
    fs, root = _jfs(spark, paths.root)
    if not fs.exists(root):
        return []
    found: list[str] = []
    level = [("", root)]
    for _ in range(depth):
        nxt = []
        for prefix, d in level:
            for st in fs.listStatus(d):
                if not st.isDirectory():
                    continue
                name = st.getPath().getName()
                if name == "_staging":
                    continue
                if ".__old-" in name:
                    rel = prefix + name.split(".__old-")[0]
                    if rel not in found:
                        found.append(rel)
                elif "=" not in name:  # never descend into partition folders
                    nxt.append((prefix + name + "/", st.getPath()))
        level = nxt
    return found


def discard_staging(spark, staging: str, settle_s: float = 1.0, max_rounds: int = 30) -> None:
    """Remove a half-written staging folder after a failed write (best effort: :func:`recover`
    removes it next run otherwise).

    When a Spark job fails, its other running tasks are killed but may still be finishing (or
    aborting their output) after the job has returned, and such a straggler recreates the
    folder. So the folder is deleted until it stays absent for ``settle_s`` seconds (at most
    ``max_rounds`` rounds)."""
    for _ in range(max_rounds):
        try:
            delete_path(spark, staging)
        except Exception:  # pragma: no cover - best effort
            log.warning("could not remove staging folder %s", staging)
            return
        time.sleep(settle_s)
        if not path_exists(spark, staging):
            return
    log.warning("staging folder %s keeps reappearing; recover removes it", staging)


def publish_written(spark, df, staging: str, final: str, what: str) -> int:
    """Run the job ``df`` whose executors wrote their files into ``staging`` (one row per file,
    with its ``path`` and ``rows``), check that the staging folder holds exactly those files with
    those row counts, then mark it complete (``_SUCCESS``) and publish it at ``final`` as
    :func:`~pina_spark.storage.tables.write_table` does; on failure the staging folder is
    removed. Returns the number of files.

    The check catches a staging folder that was emptied while the job ran (another process's
    cleanup: the writers of later tasks recreate the folder, so it looks fine but lacks the
    earlier tasks' files) and stray files nobody reported.
    """
    try:
        written = df.collect()
        n = len(written)
        log.info("%s: %d files written by the executors into %s", what, n, staging)
        _check_written(staging, [(r["path"], int(r["rows"])) for r in written], what)
        write_bytes(staging.rstrip("/") + "/_SUCCESS", b"")
        publish(spark, staging, final)
    except BaseException:
        discard_staging(spark, staging)
        raise
    return n


def _check_written(staging: str, reported: Sequence[tuple[str, int]], what: str) -> None:
    """Raise ``IOError`` unless the data files under ``staging`` are exactly ``reported`` (path,
    rows), each with that row count in its Parquet footer."""
    import pyarrow.parquet as pq

    found = parquet_files(staging)
    if found is None:
        raise OSError(f"{what}: cannot list {staging} to check the written files")
    fs, files = found
    on_disk = {fi.path for fi in files}
    want: dict[str, int] = {}
    for path, rows in reported:
        want[path] = want.get(path, 0) + rows  # pyarrow paths, as the writers report them
    missing = sorted(set(want) - on_disk)
    extra = sorted(on_disk - set(want))
    if missing or extra:
        raise OSError(
            f"{what}: the files in {staging} are not those the tasks reported "
            f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected "
            f"{extra[:3]}{'...' if len(extra) > 3 else ''}); was the staging folder "
            f"cleaned by another run? Not publishing"
        )
    for path, rows in want.items():
        with fs.open_input_file(path) as fh:
            got = pq.ParquetFile(fh).metadata.num_rows
        if got != rows:
            raise OSError(
                f"{what}: {path} holds {got} rows, its task reported {rows}; not " f"publishing"
            )
