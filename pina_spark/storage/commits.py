"""Stage commits: one atomic record per stage of the versions of the tables it published.

A stage's tables become valid together only when its commit record lists them, so a reader can
refuse a mix left by a stage that died half way (:func:`uncommitted_tables`).
:func:`input_fingerprint` identifies the input files a run read.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pina_spark.storage.files import read_bytes, write_bytes
from pina_spark.storage.fs import _jfs
from pina_spark.storage.lease import check_lease_for
from pina_spark.storage.paths import RunPaths
from pina_spark.storage.publishing import table_version
from pina_spark.storage.schemas import COMMITS, InputError


class UncommittedError(InputError):
    """A stage's input was published by an upstream stage run that never committed."""


def commit_stage(paths: RunPaths, stage: str, rels: Sequence[str], run_id: str) -> dict[str, Any]:
    """Record, in one atomic write (``<root>/_commits/<stage>.json``), the version token of every
    output ``rels`` of ``stage``: the point where all its tables become valid together.
    Refuses (:class:`~pina_spark.storage.lease.LeaseError`) when this process held the root's
    lease and lost it, as :func:`~pina_spark.storage.publishing.publish` does."""
    import json
    import time

    check_lease_for(paths.root)
    rec = {
        "stage": stage,
        "run_id": run_id,
        "committed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tables": {rel: table_version(paths.table(rel)) for rel in rels},
    }
    write_bytes(
        paths.table(f"{COMMITS}/{stage}.json"), json.dumps(rec, indent=1, sort_keys=True).encode()
    )
    return rec


def read_commit(paths: RunPaths, stage: str) -> dict[str, Any] | None:
    import json

    raw = read_bytes(paths.table(f"{COMMITS}/{stage}.json"))
    return json.loads(raw) if raw else None


def uncommitted_tables(
    paths: RunPaths, owners: Mapping[str, Sequence[str]], unfinished: Iterable[str] = ()
) -> dict[str, list[str]]:
    """``{stage: [tables]}`` of the tables in ``owners`` (stage -> its outputs) whose published
    version no commit record lists. A table no commit has ever listed counts only when its
    stage is in ``unfinished`` (the manifest shows a run of it that did not finish) and the
    table carries a version token; tables published by hand or before commit records existed
    are accepted. A table listed by some commit (e.g. ``nodes`` by ``graph`` or by the nodes
    pre-step) is committed when any of them lists its current version."""
    unfinished = set(unfinished)
    records = {st: read_commit(paths, st) or {} for st in owners}
    committed: dict[str, set] = {}
    for rec in records.values():
        for rel, v in rec.get("tables", {}).items():
            committed.setdefault(rel, set()).add(v)
    out: dict[str, list[str]] = {}
    for st, rels in owners.items():
        for rel in rels:
            v = table_version(paths.table(rel))
            if v is None or v in committed.get(rel, ()):
                continue
            if st in unfinished or rel in records[st].get("tables", {}):
                out.setdefault(st, []).append(rel)
    return out


def input_fingerprint(spark, uris: Iterable[str | None]) -> str:
    """Hash of (path, size, modification time) of every file under the given inputs."""
    import hashlib

    h = hashlib.sha256()
    for uri in sorted(u for u in uris if u):
        fs, p = _jfs(spark, uri)
        if not fs.exists(p):
            h.update(f"{uri}:missing".encode())
            continue
        it = fs.listFiles(p, True)
        entries = []
        while it.hasNext():
            st = it.next()
            entries.append(f"{st.getPath().toString()}:{st.getLen()}:{st.getModificationTime()}")
        for e in sorted(entries):
            h.update(e.encode())
    return h.hexdigest()[:16]
