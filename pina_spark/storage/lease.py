"""The run root's lease: one writer per run root (``<root>/_LOCK``, kept alive by a heartbeat).

The lease is what makes the publish machinery safe to share a root. :func:`held_run_id` tags
this process's staging folders, so that recovery spares a live run's files, and
:func:`check_lease_for` stops a run that lost its lease from publishing. A heartbeat that fails
is retried; once it has failed for so long that others may take the lease over as stale, the
lease counts as lost, so the run stops before it publishes anything more.
"""

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from pina_spark.storage.files import read_bytes, write_bytes
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
    import time

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


def read_lease(root: str) -> dict[str, Any] | None:
    """The content of ``<root>/_LOCK`` (``None`` when there is no lease)."""
    import json

    try:
        raw = read_bytes(_root_key(root) + "/" + LOCK)
        return json.loads(raw) if raw else None
    except ValueError:
        return {"run_id": "?", "heartbeat": 0.0, "note": "unreadable lease file"}


def live_lease_owner(root: str, stale_s: float = LEASE_STALE_S) -> dict[str, Any] | None:
    """The lease of ``root`` when it is live (heartbeat younger than ``stale_s``), else ``None``."""
    import time

    owner = read_lease(root)
    if owner is None:
        return None
    if time.time() - float(owner.get("heartbeat", 0.0)) > stale_s:
        return None
    return owner


def describe_lease(owner: dict[str, Any]) -> str:
    import time

    age = time.time() - float(owner.get("heartbeat", 0.0))
    return (
        f"run {owner.get('run_id')} (host {owner.get('host')}, pid {owner.get('pid')}, "
        f"started {owner.get('started')}, last heartbeat {age:.0f}s ago)"
    )


class Lease:
    """One writer per run root: ``<root>/_LOCK`` holds the owner's run id, host, pid and a
    heartbeat refreshed by a daemon thread. Created atomically (``O_EXCL`` on local disks;
    create-if-absent then read back on object stores, which is best effort). A second run fails
    fast naming the owner; a lease whose heartbeat is older than ``stale_s`` is taken over (the
    stale file is first renamed aside, so of two runs taking over only one wins).

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
        import json
        import socket
        import time

        return json.dumps(
            {
                "run_id": self.run_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": self.started,
                "heartbeat": time.time(),
                "stale_after_s": self.stale_s,
            }
        ).encode()

    def _create(self) -> bool:
        """Create the lease file if absent; ``True`` when this call created it."""
        if is_remote(self.uri):
            if read_bytes(self.uri) is not None:
                return False
            write_bytes(self.uri, self._content())
            got = read_lease(self.root) or {}
            return got.get("run_id") == self.run_id
        p = local_path(self.uri)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(self._content())
        return True

    def _take_over_stale(self, owner: dict[str, Any]) -> None:
        aside = f"{self.uri}.stale-{uuid.uuid4().hex[:8]}"
        log.warning("lease %s: taking over the stale lease of %s", self.uri, describe_lease(owner))
        try:
            if is_remote(self.uri):
                write_bytes(aside, read_bytes(self.uri) or b"")
                import pyarrow.fs as pafs

                fs, p = pafs.FileSystem.from_uri(self.uri)
                fs.delete_file(p)
            else:
                os.rename(local_path(self.uri), local_path(aside))
        except (OSError, FileNotFoundError):
            pass  # another run moved it first: the create below decides

    def acquire(self) -> "Lease":
        import time

        self.started = _utc(time.time())
        for _ in range(2):
            t0 = time.time()
            if self._create():
                self.last_refresh = t0
                break
            owner = read_lease(self.root) or {}
            if time.time() - float(owner.get("heartbeat", 0.0)) <= self.stale_s:
                raise LeaseError(
                    f"run root {self.root} is in use by {describe_lease(owner)}: one writer per "
                    f"run root. Wait for it to finish, or, if it is dead, remove {self.uri} (it "
                    f"is taken over automatically {self.stale_s:.0f}s after its last heartbeat)"
                )
            self._take_over_stale(owner)
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
        import time

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
        import time

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
        """Rewrite the heartbeat, unless the lease is no longer ours (then mark it lost).
        An I/O error propagates (the heartbeat thread retries)."""
        import time

        if self.lost:
            return
        t0 = time.time()
        owner = read_lease(self.root)
        if owner is None or owner.get("run_id") != self.run_id:
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
        owner = read_lease(self.root)
        if owner is None or owner.get("run_id") != self.run_id:
            self.refresh()
            self._raise_lost()

    def release(self) -> None:
        import threading

        if self._stop is not None:
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=min(self.heartbeat_s, 5.0))  # no heartbeat after removal
        owner = read_lease(self.root)
        if owner is not None and owner.get("run_id") == self.run_id:
            try:
                if is_remote(self.uri):
                    import pyarrow.fs as pafs

                    fs, p = pafs.FileSystem.from_uri(self.uri)
                    fs.delete_file(p)
                else:
                    os.remove(local_path(self.uri))
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
