"""The lease heartbeat: a failed refresh is retried, and a lease that cannot be refreshed before
it would go stale is lost, so the run publishes and commits nothing more (no Spark needed).

Failures are injected by replacing the lease module's ``write_bytes``; the intervals are a few
tens of milliseconds so each test takes well under a second.
"""

import json
import logging
import os
import time

import pytest

from pina_spark import storage
from pina_spark.storage import lease as lease_mod


def _wait_for(cond, what, timeout_s=5.0):
    deadline = time.time() + timeout_s
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


def _heartbeat(root):
    return float(storage.read_lease(root)["heartbeat"])


def test_a_transient_refresh_failure_is_retried_and_the_heartbeat_goes_on(
    tmp_path, monkeypatch, caplog
):
    root = str(tmp_path / "r")
    real_write = lease_mod.write_bytes
    calls = []

    def flaky_write(uri, data):
        calls.append(uri)
        if len(calls) == 1:
            raise OSError("injected: connection reset")
        real_write(uri, data)

    monkeypatch.setattr(lease_mod, "write_bytes", flaky_write)
    caplog.set_level(logging.WARNING, logger=lease_mod.__name__)
    with storage.acquire_lease(root, "me", stale_s=5.0, heartbeat_s=0.05) as lease:
        first = _heartbeat(root)
        _wait_for(lambda: len(calls) >= 4, "three heartbeats after the failed one")
        assert lease.lost is None
        assert lease.failures == 0
        assert _heartbeat(root) > first
        storage.check_lease_for(root + "/nodes")  # still held: no error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("could not refresh the lease" in r.getMessage() for r in warnings)
    assert any("injected: connection reset" in r.getMessage() for r in warnings)
    assert storage.read_lease(root) is None  # released


def test_a_lease_that_cannot_be_refreshed_is_lost_and_nothing_is_published(
    tmp_path, monkeypatch, caplog
):
    paths = storage.RunPaths(str(tmp_path / "out"))
    root = paths.root

    def broken_write(uri, data):
        raise OSError("injected: disk gone")

    monkeypatch.setattr(lease_mod, "write_bytes", broken_write)
    caplog.set_level(logging.WARNING, logger=lease_mod.__name__)
    with storage.acquire_lease(root, "me", stale_s=0.3, heartbeat_s=0.05) as lease:
        _wait_for(lambda: lease.lost is not None, "the lease to count as lost")
        assert lease.failures >= 2, "the heartbeat did not retry before giving up"
        # the lease file still names this run: only the missing heartbeat makes it lost
        assert storage.read_lease(root)["run_id"] == "me"

        with pytest.raises(storage.LeaseError, match=r"lost its lease on .*could not refresh"):
            storage.check_lease_for(root + "/nodes")

        staging = paths.staging("nodes")
        os.makedirs(staging)
        with open(os.path.join(staging, "_SUCCESS"), "w"):
            pass
        final = paths.table("nodes")
        with pytest.raises(storage.LeaseError, match="injected: disk gone.*stopping before"):
            storage.publish(None, staging, final)  # the lease check comes before any I/O
        assert not os.path.exists(final)
        assert os.listdir(staging) == ["_SUCCESS"]  # not even the version token written

        with pytest.raises(storage.LeaseError, match="lost its lease"):
            storage.commit_stage(paths, "graph", [], "me")
        assert not os.path.exists(paths.table(storage.COMMITS))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("could not refresh the lease" in m for m in errors) >= 2
    assert any("lease on" in m and "lost" in m for m in errors)


def test_a_lease_refreshed_on_time_is_not_lost(tmp_path):
    root = str(tmp_path / "r")
    with storage.acquire_lease(root, "me", stale_s=0.3, heartbeat_s=0.05) as lease:
        time.sleep(0.5)  # longer than stale_s: only a working heartbeat keeps it
        storage.check_lease_for(root + "/nodes")
        assert lease.lost is None
        assert json.loads(open(os.path.join(root, storage.LOCK)).read())["run_id"] == "me"
