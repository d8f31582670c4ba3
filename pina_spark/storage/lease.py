"""The run root's lease: one writer per run root (``<root>/_LOCK``, kept alive by a heartbeat).

The lease is what makes the publish machinery safe to share a root. :func:`held_run_id` tags
this process's staging folders, so that recovery spares a live run's files, and
:func:`check_lease_for` stops a run that lost its lease from publishing. A heartbeat that fails
is retried; once it has failed for so long that others may take the lease over as stale, the
lease counts as lost, so the run stops before it publishes anything more.

Taking over a stale lease is a compare-and-swap: the taker moves ``_LOCK`` aside under a name of
its own, reads what it moved, and goes on only when that is the very record it judged stale;
else it puts the record back (only where no ``_LOCK`` exists) and backs off. The new ``_LOCK``
is then created exclusively, so of two takers one wins. A lease whose owner's process is gone
on this host (:mod:`pina_spark.storage.liveness`) is stale at once; elsewhere only the
heartbeat's age tells. The compare-and-swap is only as strong as the file system: on a local
disk the rename, the hard link that puts a record back and the exclusive create are atomic, and
an ``flock`` on the root folder lets one take-over of the root run at a time. Through
pyarrow.fs (``s3://``, ``s3a://`` as :func:`~pina_spark.storage.uri.arrow_uri` names it,
``hdfs://``) there is no ``flock``; HDFS renames atomically, S3 renames by
copy and delete and creates by check-then-write, so there racing take-overs are best effort.
"""

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pina_spark.storage.files import read_bytes, write_bytes
from pina_spark.storage.fs import pyarrow_fs
from pina_spark.storage.liveness import dead_reason, identity
from pina_spark.storage.schemas import LOCK
from pina_spark.storage.uri import is_remote, local_path

if TYPE_CHECKING:
    import threading

log = logging.getLogger(__name__)


class LeaseError(RuntimeError):
    """Another live run holds the lease of the run root (or this run lost it)."""


#: lease files older than this (no heartbeat) may be taken over
LEASE_STALE_S = 600.0
LEASE_HEARTBEAT_S = 30.0
#: longest wait between two tries of a failed heartbeat (capped by the heartbeat interval)
LEASE_RETRY_MAX_S = 8.0
_LEASES: dict[str, "Lease"] = {}
_LEASES_LOCK = __import__("threading").Lock()


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _root_key(root: str) -> str:
    return root.rstrip("/")


def held_run_id(root: str) -> str | None:
    """Run id of the lease this process holds on ``root`` (``None`` when it holds none)."""
    lease = _LEASES.get(_root_key(root))
    return lease.run_id if lease is not None else None


def check_lease_for(uri: str) -> None:
    """Raise :class:`LeaseError` when ``uri`` lies under a root whose lease this process held and
    lost (taken over as stale by another run, or not refreshed in time so that another run may
    take it over): publishing now could clobber that run's work."""
    for root, lease in list(_LEASES.items()):
        if uri == root or uri.startswith(root + "/"):
            lease.check()


def _read_lock(uri: str) -> tuple[bytes, int] | None:
    """``(content, mtime in ns)`` of the lease file ``uri`` (``None`` when there is none)."""
    if is_remote(uri):
        import pyarrow.fs as pafs

        fs, p = pyarrow_fs(uri)
        info = fs.get_file_info(p)
        if info.type == pafs.FileType.NotFound:
            return None
        try:
            with fs.open_input_stream(p) as fh:
                return fh.read(), int(info.mtime_ns or 0)
        except FileNotFoundError:
            return None
    try:
        with open(local_path(uri), "rb") as fh:
            return fh.read(), os.fstat(fh.fileno()).st_mtime_ns
    except FileNotFoundError:
        return None


def _parse(raw: bytes) -> dict[str, Any] | None:
    """The lease record in ``raw``, or ``None`` when it is empty, partly written or not one."""
    try:
        rec = json.loads(raw)
        float(rec["heartbeat"])
    except (ValueError, TypeError, KeyError):
        return None
    return rec if isinstance(rec, dict) else None


def _record(seen: tuple[bytes, int]) -> dict[str, Any]:
    """The lease record of a lease file as read. An empty or unreadable file (being written,
    or left by a writer that died while writing it) counts as held, its heartbeat being the
    file's modification time: it goes stale ``stale_s`` after it was created."""
    raw, mtime_ns = seen
    rec = _parse(raw)
    if rec is not None:
        return rec
    note = "empty lease file" if not raw.strip() else "unreadable lease file"
    return {"run_id": "?", "heartbeat": mtime_ns / 1e9, "note": note}


def _token(seen: tuple[bytes, int], with_mtime: bool = True) -> tuple[bytes, int | None]:
    """What identifies one lease record for a compare-and-swap: its bytes (a record holds a
    nonce and a heartbeat); for an empty or unreadable file also its mtime, where the file
    system keeps it across a rename (``with_mtime``)."""
    raw, mtime_ns = seen
    return raw, (mtime_ns if with_mtime and _parse(raw) is None else None)


def read_lease(root: str) -> dict[str, Any] | None:
    """The content of ``<root>/_LOCK`` (``None`` when there is no lease). An empty or unreadable
    lease file reads as held by run ``?`` with the file's mtime as its heartbeat."""
    seen = _read_lock(_root_key(root) + "/" + LOCK)
    return _record(seen) if seen is not None else None


def _age(owner: dict[str, Any]) -> float:
    return time.time() - float(owner.get("heartbeat", 0.0))


def stale_after(owner: dict[str, Any], stale_s: float = LEASE_STALE_S) -> float:
    """Seconds after its last heartbeat that the lease ``owner`` goes stale: the larger of the
    reader's ``stale_s`` and the ``stale_after_s`` its owner recorded (the owner heartbeats for
    its own timeout, so a reader with a smaller ``run.lease_stale_s`` cannot take over a
    healthy owner).

    >>> stale_after({"stale_after_s": 600.0}, 5), stale_after({}, 5), stale_after({"x": 1}, 60)
    (600.0, 5.0, 60.0)
    """
    try:
        recorded = float(owner.get("stale_after_s") or 0.0)
    except (TypeError, ValueError):
        recorded = 0.0
    return max(float(stale_s), recorded)


def stale_reason(owner: dict[str, Any], stale_s: float = LEASE_STALE_S) -> str | None:
    """Why the lease ``owner`` may be taken over (a sentence), or ``None`` while it is live:
    its heartbeat is older than :func:`stale_after` (``stale_s``, or the owner's own longer
    timeout), or its process is gone on this host."""
    age = _age(owner)
    stale_s = stale_after(owner, stale_s)
    if age > stale_s:
        return f"its last heartbeat is {age:.0f}s old (more than {stale_s:g}s)"
    return dead_reason(owner)


def live_lease_owner(root: str, stale_s: float = LEASE_STALE_S) -> dict[str, Any] | None:
    """The lease of ``root`` when it is live (:func:`stale_reason` has none), else ``None``."""
    owner = read_lease(root)
    if owner is None or stale_reason(owner, stale_s) is not None:
        return None
    return owner


def describe_lease(owner: dict[str, Any]) -> str:
    age = _age(owner)
    if owner.get("note"):
        return f"an {owner['note']} (written {age:.0f}s ago, the writer's record not readable)"
    return (
        f"run {owner.get('run_id')} (host {owner.get('host')}, pid {owner.get('pid')}, "
        f"started {owner.get('started')}, last heartbeat {age:.0f}s ago)"
    )


#: longest wait for another run's take-over of the same root (it takes milliseconds)
_GUARD_WAIT_S = 5.0


def _flock(fd: int, wait_s: float) -> bool:
    """Take an exclusive ``flock`` on ``fd`` within ``wait_s``; ``True`` when taken or when the
    file system has no ``flock`` (then nothing is guarded), ``False`` on timeout."""
    import fcntl

    deadline = time.time() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.time() > deadline:
                return False
            time.sleep(0.01)
        except OSError:  # e.g. NFS: no flock on a folder
            return True


#: the prefix of the names a take-over moves the old ``_LOCK`` to: ``<LOCK>.stale-<ms>-<nonce>``
_ASIDE = ".stale-"


def _aside_time(name: str) -> float | None:
    """When a take-over moved ``_LOCK`` to ``name`` (seconds), from the name; else ``None``."""
    head = LOCK + _ASIDE
    if not name.startswith(head):
        return None
    try:
        return int(name[len(head) :].split("-", 1)[0]) / 1000.0
    except ValueError:
        return None


class Lease:
    """One writer per run root: ``<root>/_LOCK`` holds the owner's run id, a nonce, its host and
    pid (with the boot id, pid namespace and process start time, see
    :mod:`pina_spark.storage.liveness`) and a heartbeat refreshed by a daemon thread. Created
    atomically (``O_EXCL`` on local disks; create-if-absent then read back on object stores,
    which is best effort). A second run fails fast naming the owner. A lease is taken over when
    :func:`stale_reason` says so: its heartbeat is older than ``stale_s``, or its owner's process
    is gone on this host. The take-over is a compare-and-swap (:meth:`_take_over_stale`), so of
    two runs taking over one stale lease exactly one gets it.

    A failed heartbeat is logged and retried with a short backoff. When no heartbeat has been
    written for ``stale_s - heartbeat_s`` (one interval short of going stale), the lease is lost:
    :meth:`check`, which every publish and stage commit calls, raises :class:`LeaseError`.

    Reentrant inside one process: :func:`acquire_lease` on a root this process already holds
    returns the same lease.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with acquire_lease(root, "r1") as lease:
    ...     held_run_id(root)
    'r1'
    >>> held_run_id(root) is None
    True
    """

    def __init__(
        self,
        root: str,
        run_id: str,
        stale_s: float = LEASE_STALE_S,
        heartbeat_s: float = LEASE_HEARTBEAT_S,
    ):
        self.root = _root_key(root)
        self.run_id = run_id
        self.stale_s = float(stale_s)
        self.heartbeat_s = float(heartbeat_s)
        self.uri = self.root + "/" + LOCK
        #: this lease's own token in ``_LOCK``: two leases of one run id are still told apart
        self.nonce = uuid.uuid4().hex
        self._me = identity()  # host, pid, boot, pid namespace, process start time
        self.lost: str | None = None
        #: when the last heartbeat written was taken (``time.time()``), and the failures since
        self.last_refresh: float | None = None
        self.failures = 0
        self.last_error: str | None = None
        self._depth = 0
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self.started: str | None = None

    def _content(self) -> bytes:
        return json.dumps(
            {
                "run_id": self.run_id,
                "nonce": self.nonce,
                **self._me,
                "started": self.started,
                "heartbeat": time.time(),
                "stale_after_s": self.stale_s,
            }
        ).encode()

    def _is_mine(self, owner: dict[str, Any] | None) -> bool:
        return (
            owner is not None
            and owner.get("run_id") == self.run_id
            and owner.get("nonce") == self.nonce
        )

    def _create(self) -> bool:
        """Create the lease file if absent; ``True`` when this call created it."""
        if is_remote(self.uri):
            if read_bytes(self.uri) is not None:
                return False
            write_bytes(self.uri, self._content())
            return self._is_mine(read_lease(self.root))
        p = local_path(self.uri)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:  # until written, others read it as a fresh empty lease
            fh.write(self._content())
        return True

    # ------------------------------------------------------------------ the take-over
    def _move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (on S3 a copy then a delete: pyarrow's ``move``)."""
        if is_remote(src):
            fs, p = pyarrow_fs(src)
            fs.move(p, pyarrow_fs(dst)[1])
        else:
            os.rename(local_path(src), local_path(dst))

    def _remove(self, uri: str) -> None:
        try:
            if is_remote(uri):
                fs, p = pyarrow_fs(uri)
                fs.delete_file(p)
            else:
                os.remove(local_path(uri))
        except FileNotFoundError:
            pass

    def _put_back(self, aside: str) -> bool:
        """Move ``aside`` back to ``_LOCK`` unless a ``_LOCK`` exists again (hard link on local
        disks, which fails if it exists; check-then-move elsewhere). ``True`` when put back."""
        if not is_remote(self.uri):
            try:
                os.link(local_path(aside), local_path(self.uri))
                os.remove(local_path(aside))
                return True
            except FileExistsError:
                return False
            except OSError:  # no hard links on this file system: check, then rename
                pass
        if _read_lock(self.uri) is not None:
            return False
        self._move(aside, self.uri)
        return True

    def _take_over_stale(self, owner: dict[str, Any], seen: tuple[bytes, int], why: str) -> bool:
        """Compare-and-swap ``_LOCK`` from the stale record ``seen`` (``owner``, parsed) to
        nothing; ``True`` when done (the caller then creates its own ``_LOCK`` exclusively).

        Under the take-over guard (:meth:`_guard`), ``_LOCK`` is checked to be ``seen`` still,
        renamed to ``_LOCK.stale-<ms>-<nonce>`` (a name only this lease uses), and what was
        moved is read back. If it is not ``seen`` (its owner refreshed it, or another run took
        it over in between), it is put back where no ``_LOCK`` exists meanwhile, and this run
        backs off. The renamed record is removed once the take-over stands."""
        with self._guard() as guarded:
            if not guarded or self._read_token() != _token(seen):
                return False  # another take-over is under way, or done: decide again
            aside = f"{self.uri}{_ASIDE}{int(time.time() * 1000)}-{self.nonce[:12]}"
            try:
                self._move(self.uri, aside)
            except FileNotFoundError:
                return False  # moved or removed since the check: decide again
            except OSError:
                if _read_lock(self.uri) is None:
                    return False  # (S3, HDFS: the error of a missing source)
                raise
            moved = _read_lock(aside)
            keeps_mtime = not is_remote(self.uri)  # S3's copy gives the moved file a new mtime
            if moved is None or _token(moved, keeps_mtime) != _token(seen, keeps_mtime):
                if moved is not None and not self._put_back(aside):
                    # a new _LOCK appeared meanwhile: the record moved aside lost its lease
                    log.warning(
                        "lease %s: moved %s aside while taking over and could not put it back",
                        self.uri,
                        describe_lease(_record(moved)),
                    )
                    self._remove(aside)
                return False
            self._remove(aside)
        log.warning("lease %s: took over the lease of %s: %s", self.uri, describe_lease(owner), why)
        return True

    @contextlib.contextmanager
    def _guard(self) -> Iterator[bool]:
        """One take-over of this root at a time on a local disk: an exclusive ``flock`` on the
        root folder, which the kernel drops when its process dies (so it never goes stale).
        Yields ``False`` when another take-over holds it for longer than
        :data:`_GUARD_WAIT_S`. Where there is no ``flock`` (object stores, HDFS, NFS, not
        POSIX) it yields ``True`` at once and the compare-and-swap stands alone."""
        fd = None
        if os.name == "posix" and not is_remote(self.uri):
            try:
                fd = os.open(local_path(self.root), os.O_RDONLY)
            except OSError:
                fd = None
        try:
            yield fd is None or _flock(fd, _GUARD_WAIT_S)
        finally:
            if fd is not None:
                os.close(fd)  # drops the flock

    def _read_token(self) -> tuple[bytes, int | None] | None:
        seen = _read_lock(self.uri)
        return _token(seen) if seen is not None else None

    def _tidy(self) -> None:
        """Remove the ``_LOCK.stale-*`` records that take-overs left (a taker that died between
        its rename and its removal) and the temporary files of heartbeat writes, once older than
        ``stale_s``. Best effort: a failure is logged and ignored."""
        try:
            if is_remote(self.root):
                import pyarrow.fs as pafs

                fs, p = pyarrow_fs(self.root)
                infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True))
                found = [(i.base_name, (i.mtime_ns or 0) / 1e9) for i in infos]
            else:
                found = []
                root = local_path(self.root)
                for entry in os.scandir(root) if os.path.isdir(root) else []:
                    if entry.name.startswith(LOCK + "."):
                        try:
                            found.append((entry.name, entry.stat().st_mtime))
                        except FileNotFoundError:  # removed meanwhile
                            pass
            now = time.time()
            for name, mtime in found:
                t = _aside_time(name) if name.startswith(LOCK + _ASIDE) else None
                if t is None and name.startswith(LOCK + ".tmp-"):
                    t = mtime  # a heartbeat write (files.write_bytes) that did not finish
                if t is not None and now - t > self.stale_s:
                    self._remove(self.root + "/" + name)
                    log.info("lease %s: removed the leftover %s", self.uri, name)
        except (OSError, ValueError) as e:  # ValueError: pyarrow.fs does not know the scheme
            log.warning("lease %s: could not tidy leftover lease files: %s", self.uri, e)

    def acquire(self) -> "Lease":
        self.started = _utc(time.time())
        self._tidy()
        for _ in range(3):
            t0 = time.time()
            if self._create():
                self.last_refresh = t0
                break
            seen = _read_lock(self.uri)
            if seen is None:
                continue  # released meanwhile: try to create it again
            owner = _record(seen)
            why = stale_reason(owner, self.stale_s)
            if why is None:
                raise LeaseError(
                    f"run root {self.root} is in use by {describe_lease(owner)}: one writer per "
                    f"run root. Wait for it to finish, or, if it is dead, remove {self.uri} (it "
                    f"is taken over automatically {stale_after(owner, self.stale_s):.0f}s after "
                    f"its last heartbeat, "
                    f"or at once by a run on the same host once its process is gone)"
                )
            self._take_over_stale(owner, seen, why)
        else:
            raise LeaseError(
                f"could not take the lease {self.uri}: another run took it over "
                f"at the same time ({describe_lease(read_lease(self.root) or {})})"
            )
        self._start_heartbeat()
        log.info("lease %s taken by run %s", self.uri, self.run_id)
        return self

    def _start_heartbeat(self) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(self._stop,), name=f"lease-{self.run_id}", daemon=True
        )
        self._thread.start()

    def _beat(self, stop: "threading.Event") -> None:
        """The heartbeat thread: refresh every ``heartbeat_s``; after a failure retry sooner
        (1 s, 2 s, 4 s ..., at most :data:`LEASE_RETRY_MAX_S` and ``heartbeat_s``, and once more
        just before the deadline) until a refresh succeeds or the lease is overdue (lost)."""
        wait = self.heartbeat_s
        while not stop.wait(wait):
            try:
                self.refresh()
            except Exception as e:  # any failure: an I/O error, a timeout, a bad reply
                self.failures += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning(
                    "run %s: could not refresh the lease %s (failure %d since %s): %s",
                    self.run_id,
                    self.uri,
                    self.failures,
                    _utc(self.last_refresh or 0.0),
                    self.last_error,
                )
                if self._overdue():
                    self._lose_unrefreshed()
                    return
                left = (self.last_refresh or 0.0) + self._deadline_s() - time.time()
                backoff = min(2.0 ** (self.failures - 1), LEASE_RETRY_MAX_S, self.heartbeat_s)
                wait = max(0.0, min(backoff, left))
                continue
            if self.lost:
                return
            wait = self.heartbeat_s

    def _deadline_s(self) -> float:
        """How long the lease may go without a heartbeat before it counts as lost: one heartbeat
        interval short of ``stale_s``, so a publish never starts on a lease others may take."""
        return self.stale_s - self.heartbeat_s

    def _overdue(self) -> bool:
        return (
            self.last_refresh is not None and time.time() - self.last_refresh > self._deadline_s()
        )

    def _lose_unrefreshed(self) -> None:
        """Mark the lease lost because its heartbeat could not be written in time."""
        self.lost = (
            f"could not refresh it since {_utc(self.last_refresh or 0.0)} "
            f"({self.failures} failed tries; last error: {self.last_error or 'none'}), so "
            f"another run may take it over as stale {self.stale_s:g}s after that"
        )
        log.error("run %s: lease on %s lost: %s", self.run_id, self.root, self.lost)
        if self._stop is not None:
            self._stop.set()

    def refresh(self) -> None:
        """Rewrite the heartbeat, unless the lease is no longer ours (then mark it lost) or is
        overdue (no heartbeat for ``stale_s - heartbeat_s``, say after the process was paused:
        others may be taking it over, so it is lost rather than rewritten). An I/O error
        propagates (the heartbeat thread retries)."""
        if self.lost:
            return
        if self._overdue():
            self._lose_unrefreshed()
            return
        t0 = time.time()
        owner = self._read_own()
        if not self._is_mine(owner):
            self.lost = (
                f"the lease {self.uri} was taken over by "
                f"{describe_lease(owner) if owner else 'nobody (file removed)'}"
            )
            log.error("run %s: %s", self.run_id, self.lost)
            if self._stop is not None:
                self._stop.set()
            return
        write_bytes(self.uri, self._content())
        self.last_refresh = t0
        self.failures = 0

    def _read_own(self) -> dict[str, Any] | None:
        """``_LOCK`` as read, once more after a moment when it is missing: a take-over that
        backs off puts a record it moved aside back at once."""
        owner = read_lease(self.root)
        if owner is None:
            time.sleep(0.1)
            owner = read_lease(self.root)
        return owner

    def _raise_lost(self) -> None:
        raise LeaseError(
            f"run {self.run_id} lost its lease on {self.root}: {self.lost}; "
            f"stopping before publishing"
        )

    def check(self) -> None:
        """Raise :class:`LeaseError` when the lease is lost: taken over by another run, or not
        refreshed for longer than ``stale_s - heartbeat_s`` (see :meth:`_beat`)."""
        if not self.lost and self._overdue():
            self._lose_unrefreshed()
        if self.lost:
            self._raise_lost()
        if not self._is_mine(read_lease(self.root)):
            self.refresh()
            if self.lost:
                self._raise_lost()

    def release(self) -> None:
        import threading

        if self._stop is not None:
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=min(self.heartbeat_s, 5.0))  # no heartbeat after removal
        if self._is_mine(read_lease(self.root)):
            try:
                self._remove(self.uri)
            except OSError as e:  # pragma: no cover
                log.warning("could not remove lease %s: %s", self.uri, e)
        log.info("lease %s released by run %s", self.uri, self.run_id)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        with _LEASES_LOCK:
            self._depth -= 1
            if self._depth > 0:
                return
            _LEASES.pop(self.root, None)
        self.release()


def acquire_lease(
    root: str, run_id: str, stale_s: float = LEASE_STALE_S, heartbeat_s: float = LEASE_HEARTBEAT_S
) -> Lease:
    """Take (or re-enter) the lease of run root ``root``; use as a context manager.

    Raises
    ------
    LeaseError
        Another live run holds it; the message names that run, its host and pid.
    """
    key = _root_key(root)
    with _LEASES_LOCK:
        lease = _LEASES.get(key)
        if lease is None:
            lease = Lease(key, run_id, stale_s, heartbeat_s).acquire()
            _LEASES[key] = lease
        lease._depth += 1
        return lease
