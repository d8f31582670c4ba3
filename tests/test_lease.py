"""The lease (no Spark needed).

The heartbeat: a failed refresh is retried, and a lease that cannot be refreshed before it would
go stale is lost, so the run publishes and commits nothing more. Failures are injected by
replacing the lease module's ``write_bytes``; the intervals are a few tens of milliseconds.

Taking over: of runs taking over one stale lease exactly one holds it, a fresh empty lease file
is held, an owner whose process is gone on this host is taken over at once, and no
``_LOCK.stale-*`` file is left. The interleavings are forced with hooks on the lease's own steps
(another run acting between two of them) and with threads meeting at a barrier; the owner
process is a child Python process that takes the lease and is then killed.
"""

import json
import logging
import os
import subprocess
import sys
import threading
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


# --------------------------------------------------------------------------- taking over
@pytest.fixture(params=["posix", "pyarrow.fs"])
def fs_kind(request, monkeypatch):
    """Take-overs on a local disk (rename, hard link) and through pyarrow.fs, the code path of
    ``s3://`` and ``hdfs://`` roots (here a LocalFileSystem, whose move is a rename as on HDFS)."""
    if request.param == "pyarrow.fs":
        monkeypatch.setattr(lease_mod, "is_remote", lambda uri: True)
    return request.param


def _write_lock(root, record=None, raw=None, age_s=0.0):
    """Write ``<root>/_LOCK`` as another run would have, with its mtime ``age_s`` ago."""
    os.makedirs(root, exist_ok=True)
    p = os.path.join(root, storage.LOCK)
    with open(p, "wb") as fh:
        fh.write(raw if raw is not None else json.dumps(record).encode())
    t = time.time() - age_s
    os.utime(p, (t, t))


def _stale_record(run_id="dead-run"):
    return {
        "run_id": run_id,
        "host": "other-host",
        "pid": 99999,
        "started": "2026-11-23T00:00:00Z",
        "heartbeat": time.time() - 10_000,
    }


def _leftovers(root):
    return sorted(n for n in os.listdir(root) if n.startswith(storage.LOCK + "."))


def _lease(root, run_id):
    return lease_mod.Lease(root, run_id, stale_s=60, heartbeat_s=30)


def _stop(*leases):
    """Stop the heartbeat threads of leases a failing test left running."""
    for lease in leases:
        if lease is not None and lease._stop is not None:
            lease._stop.set()


def test_a_taker_that_read_the_stale_lease_before_another_took_it_over_backs_off(
    tmp_path, monkeypatch, fs_kind
):
    """Runs a and b read the same stale lease; a takes it over first, then b goes on. b must not
    move a's fresh lease aside: a keeps it and b is refused, naming a."""
    root = str(tmp_path / "r")
    _write_lock(root, _stale_record())
    real = lease_mod.Lease._take_over_stale
    first: list = []

    def a_goes_first(self, *args):
        if self.run_id == "b" and not first:  # b judged the lease stale; a takes it over now
            first.append(_lease(root, "a").acquire())
        return real(self, *args)

    monkeypatch.setattr(lease_mod.Lease, "_take_over_stale", a_goes_first)
    b = _lease(root, "b")
    try:
        with pytest.raises(storage.LeaseError, match="in use by run a "):
            b.acquire()
        (a,) = first
        assert storage.read_lease(root)["run_id"] == "a"
        a.check()  # a still holds it
        a.release()
        assert _leftovers(root) == []
    finally:
        _stop(b, *first)


def test_a_lease_refreshed_between_the_check_and_the_rename_is_put_back(
    tmp_path, monkeypatch, fs_kind
):
    """Run a's lease looks stale to b (its heartbeat stalled), and a's heartbeat comes in just
    before b renames ``_LOCK`` aside: b reads what it moved, sees a's new record instead of the
    stale one, puts it back and backs off; a keeps its lease."""
    root = str(tmp_path / "r")
    a = _lease(root, "a").acquire()
    b = _lease(root, "b")
    try:
        stalled = {**storage.read_lease(root), "heartbeat": time.time() - 10_000}
        _write_lock(root, stalled)
        real = lease_mod.Lease._move

        def a_beats_just_then(self, src, dst):
            if self is b and src.endswith("/" + storage.LOCK):
                a.refresh()
            return real(self, src, dst)

        monkeypatch.setattr(lease_mod.Lease, "_move", a_beats_just_then)
        with pytest.raises(storage.LeaseError, match="in use by run a "):
            b.acquire()
        assert storage.read_lease(root)["heartbeat"] > stalled["heartbeat"]
        a.check()  # a still holds it
        assert a.lost is None
        a.release()
        assert _leftovers(root) == []
    finally:
        _stop(a, b)


def _race(root, n, monkeypatch):
    """``n`` threads take the lease of ``root``, meeting at a barrier before their first
    take-over; returns the leases held, the LeaseErrors and any other errors."""
    real = lease_mod.Lease._take_over_stale
    barrier = threading.Barrier(n)
    waited: set = set()

    def together(self, *args):
        if self.run_id not in waited:  # the first take-over of each thread
            waited.add(self.run_id)
            barrier.wait(timeout=10)
        return real(self, *args)

    monkeypatch.setattr(lease_mod.Lease, "_take_over_stale", together)
    held: list = []
    refused: list = []
    other: list = []

    def take(i):
        try:
            held.append(_lease(root, f"t{i}").acquire())
        except storage.LeaseError as e:
            refused.append(e)
        except Exception as e:  # reported by the caller
            other.append(e)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    monkeypatch.setattr(lease_mod.Lease, "_take_over_stale", real)
    return held, refused, other


def test_of_runs_racing_to_take_over_a_stale_lease_exactly_one_holds_it(tmp_path, monkeypatch):
    """Six threads read one stale lease and meet at a barrier before taking it over, ten times
    over: each time exactly one holds the lease, the others are refused, nothing is left."""
    n = 6
    for k in range(10):
        root = str(tmp_path / f"r{k}")
        _write_lock(root, _stale_record())
        held, refused, other = _race(root, n, monkeypatch)
        try:
            assert not other, other
            assert len(held) == 1, f"round {k}: {[x.run_id for x in held]} all hold the lease"
            assert len(refused) == n - 1
            assert storage.read_lease(root)["run_id"] == held[0].run_id
            held[0].release()
            assert _leftovers(root) == []
        finally:
            _stop(*held)


def test_an_empty_or_partly_written_lease_file_is_held_until_its_mtime_is_stale(tmp_path, fs_kind):
    """The moment between a run's exclusive create and its first write: the lease file is held,
    its mtime standing for the heartbeat, and is taken over once older than ``stale_s``."""
    root = str(tmp_path / "r")
    _write_lock(root, raw=b"")
    with pytest.raises(storage.LeaseError, match="in use by an empty lease file"):
        _lease(root, "me").acquire()
    _write_lock(root, raw=b'{"run_id": "w", "heartb')
    with pytest.raises(storage.LeaseError, match="in use by an unreadable lease file"):
        _lease(root, "me").acquire()
    assert storage.live_lease_owner(root, 60)["note"] == "unreadable lease file"
    assert storage.read_lease(root)["run_id"] == "?"

    _write_lock(root, raw=b"", age_s=120)  # its writer died before writing, 2 minutes ago
    assert storage.live_lease_owner(root, 60) is None
    lease = _lease(root, "me").acquire()
    try:
        assert storage.read_lease(root)["run_id"] == "me"
        assert _leftovers(root) == []
    finally:
        lease.release()


_HOLDER = """
import sys, time
from pina_spark import storage
storage.acquire_lease(sys.argv[1], "child")
print("held", flush=True)
time.sleep(120)
"""


def _child_holding(root):
    """A Python process on this host that takes the lease of ``root`` (600 s stale time) and
    sleeps."""
    code = os.path.dirname(os.path.dirname(os.path.abspath(lease_mod.__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(code))
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, root], env=env, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held", "the child did not take the lease"
    return p


def _proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


@needs_proc
def test_an_owner_whose_process_is_gone_on_this_host_is_taken_over_at_once(tmp_path):
    """A live owner on this host is refused; once its process is killed (first a zombie not yet
    reaped, then a reaped pid) its lease is taken over at once, though its heartbeat is fresh."""
    root = str(tmp_path / "r")
    child = _child_holding(root)
    try:
        with pytest.raises(storage.LeaseError, match=f"run child .*pid {child.pid}"):
            storage.acquire_lease(root, "me")
        assert storage.live_lease_owner(root)["run_id"] == "child"
        record = storage.read_lease(root)
        child.kill()
        _wait_for(lambda: _proc_state(child.pid) in ("Z", None), "the child to exit")
        assert storage.live_lease_owner(root) is None
        with storage.acquire_lease(root, "me"):  # stale_s 600: the heartbeat is seconds old
            assert storage.read_lease(root)["run_id"] == "me"
    finally:
        child.kill()
        child.wait()
    assert _leftovers(root) == [] and storage.read_lease(root) is None

    _write_lock(root, {**record, "heartbeat": time.time()})  # the pid now reaped
    assert storage.live_lease_owner(root) is None
    with storage.acquire_lease(root, "me"):
        assert storage.read_lease(root)["run_id"] == "me"
    assert _leftovers(root) == []


@needs_proc
def test_a_reused_pid_counts_as_dead_and_another_hosts_pid_is_not_checked(tmp_path):
    """The owner's pid runs, but started at another time than the lease records: the pid was
    reused, the owner is dead. A record from another host (or boot) is judged by its heartbeat
    alone, even when its pid is not running here."""
    root = str(tmp_path / "r")
    child = _child_holding(root)
    try:
        record = storage.read_lease(root)
        _write_lock(root, {**record, "pid_start": "1"})  # same pid, another process
        with storage.acquire_lease(root, "me"):
            assert storage.read_lease(root)["run_id"] == "me"
    finally:
        child.kill()
        child.wait()
    for other in ({"host": "other-host"}, {"boot_id": "another-boot"}):
        _write_lock(root, {**record, **other, "heartbeat": time.time()})  # its pid is gone here
        with pytest.raises(storage.LeaseError, match="in use by run child"):
            storage.acquire_lease(root, "me")
    assert _leftovers(root) == []


def test_a_take_over_leaves_no_stale_record_and_tidies_old_ones(tmp_path, fs_kind):
    """The record moved aside is removed once the take-over stands; records that earlier takers
    left (older than ``stale_s``, by the time in their name) are removed, a fresh one is not."""
    root = str(tmp_path / "r")
    _write_lock(root, _stale_record())
    now_ms = int(time.time() * 1000)
    old = f"{storage.LOCK}.stale-{now_ms - 3_600_000}-deadbeefdead"
    fresh = f"{storage.LOCK}.stale-{now_ms}-0123456789ab"
    for name in (old, fresh):
        with open(os.path.join(root, name), "w") as fh:
            fh.write("{}")
    with storage.acquire_lease(root, "me", stale_s=60) as lease:
        assert storage.read_lease(root)["run_id"] == "me"
        assert _leftovers(root) == [fresh]
        assert lease.lost is None
    assert _leftovers(root) == [fresh]


def test_a_taker_with_a_smaller_stale_timeout_does_not_take_over_a_healthy_owner(tmp_path):
    """The owner recorded ``stale_after_s`` 600 and heartbeated 30 s ago (on another host, so
    only the heartbeat tells): a run started with ``run.lease_stale_s`` 5 is refused, the owner
    judged by its own timeout; once the heartbeat is older than that, the lease is taken over."""
    root = str(tmp_path / "r")
    owner = {**_stale_record("healthy"), "heartbeat": time.time() - 30, "stale_after_s": 600.0}
    _write_lock(root, owner)
    with pytest.raises(storage.LeaseError, match=r"in use by run healthy.*600s after"):
        storage.acquire_lease(root, "me", stale_s=5)
    assert storage.live_lease_owner(root, 5)["run_id"] == "healthy"
    assert storage.read_lease(root)["run_id"] == "healthy"

    _write_lock(root, {**owner, "heartbeat": time.time() - 700})
    assert storage.live_lease_owner(root, 5) is None
    with storage.acquire_lease(root, "me", stale_s=5):
        assert storage.read_lease(root)["run_id"] == "me"
    assert _leftovers(root) == []


_SIGTERMED = """
import sys, time
import pina_spark.cli.check as check
from pina_spark.cli import commands
from pina_spark.orchestration import session

def hold(spark_conf):  # called under the lease, where Spark would start
    print("held", flush=True)
    time.sleep(60)

session.get_spark = hold
check.require_inputs = lambda cfg, stages: None
sys.exit(commands.main(["run", "--config", sys.argv[1], "--stages", "graph"]))
"""


def test_a_cli_run_ended_by_sigterm_releases_its_lease_and_exits_143(tmp_path):
    """YARN ends a container with SIGTERM (a cancelled step, preemption): ``pina-spark run``
    then exits like a failed run, releasing the lease, with exit code 143."""
    out = tmp_path / "out"
    conf = tmp_path / "c.yaml"
    conf.write_text(f"output: {out}\ninput: {{instances: i.parquet}}\n")
    code = os.path.dirname(os.path.dirname(os.path.abspath(lease_mod.__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(code))
    p = subprocess.Popen(
        [sys.executable, "-c", _SIGTERMED, str(conf)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "held", p.stderr.read()
        root = storage.RunPaths(str(out)).root
        assert storage.read_lease(root)["pid"] == p.pid
        p.send_signal(15)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 143, err
    assert "SIGTERM" in err
    assert storage.read_lease(root) is None
    assert _leftovers(root) == []


_SIGTERMED_IN_A_JOB = """
import os, sys
import pina_spark.cli.check as check
import pina_spark.stages.graph as graph_stage
from pina_spark import storage
from pina_spark.cli import commands

MARK = sys.argv[2]

def slow(ctx):  # a stage whose Spark job is running (the driver waits in py4j) at SIGTERM
    def sleepy(batches):
        import time
        open(MARK, "w").close()
        time.sleep(120)
        yield from batches
    df = ctx.spark.range(2).mapInPandas(sleepy, "id long")
    storage.write_table(df, ctx.paths, storage.NODES)

graph_stage.run = slow
check.require_inputs = lambda cfg, stages: None
sys.exit(commands.main(["run", "--config", sys.argv[1], "--stages", "graph"]))
"""


def test_sigterm_while_a_spark_job_runs_exits_143_and_cleans_up(tmp_path):
    """The usual case on YARN: SIGTERM reaches a driver blocked in a JVM call (a Spark job).
    The job is cancelled and the command exits 143, its lease released and its staging folder
    discarded, the manifest naming the termination; no py4j error (a half-read connection)
    takes over the exit code."""
    out, mark = tmp_path / "out", tmp_path / "job-started"
    conf = tmp_path / "c.yaml"
    conf.write_text(f"output: {out}\ninput: {{instances: i.parquet}}\n")
    code = os.path.dirname(os.path.dirname(os.path.abspath(lease_mod.__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(code))
    p = subprocess.Popen(
        [sys.executable, "-c", _SIGTERMED_IN_A_JOB, str(conf), str(mark)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 240
        while not mark.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert mark.exists(), p.stderr.read() if p.poll() is not None else "no job started"
        time.sleep(1)
        p.send_signal(15)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 143, err[-4000:]
    assert "Traceback" not in err and "KeyError" not in err, err[-4000:]
    root = storage.RunPaths(str(out)).root
    assert storage.read_lease(root) is None and _leftovers(root) == []
    staging = os.path.join(root, "_staging")
    assert not os.path.exists(staging) or os.listdir(staging) == [], os.listdir(staging)
    data = json.load(open(storage.RunPaths(str(out)).manifest))
    entry = data["stages"]["graph"]
    assert entry["status"] == "failed" and "SIGTERM" in entry["error"], entry
    assert "SIGTERM" in data["history"][-1]["error"], data["history"][-1]


def test_an_s3a_root_takes_its_lease_through_pyarrow_as_s3(tmp_path, fake_s3):
    """Hadoop's ``s3a://`` names the objects ``s3://`` does; pyarrow knows only the latter
    (here a fake ``FileSystem.from_uri`` that refuses other schemes as pyarrow does, and maps
    ``s3://bucket/...`` to a local folder)."""
    seen = fake_s3
    (tmp_path / "bucket" / "run").mkdir(parents=True)
    lock = tmp_path / "bucket" / "run" / storage.LOCK
    with lease_mod.acquire_lease("s3a://bucket/run", "me", stale_s=60, heartbeat_s=30):
        assert json.loads(lock.read_text())["run_id"] == "me"
        storage.check_lease_for("s3a://bucket/run/nodes")
        assert storage.read_bytes("s3a://bucket/run/_LOCK") == lock.read_bytes()
    assert not lock.exists()
    assert seen and all(u.startswith("s3://bucket/run") for u in seen)


def test_an_s3a_root_on_another_store_than_aws_is_refused_before_the_run(monkeypatch, tmp_path):
    """S3A pointed at MinIO (a Hadoop endpoint setting, in the config's spark.conf or in the
    cluster's core-site.xml) while pyarrow would write the lease to AWS: `pina-spark check`
    lists it and `run` stops with a config error (exit 2) before any lease; an AWS endpoint,
    or an s3:// root, is fine; the config's spark.hadoop.* key wins over core-site.xml."""
    from pina_spark.cli.check import check_run, require_inputs, s3a_endpoint_problem
    from pina_spark.config import ConfigError, config_from_dict

    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)

    def cfg(output, endpoint):
        conf = {"spark.hadoop.fs.s3a.bucket.b.endpoint": endpoint}
        return config_from_dict({"output": output, "spark": {"conf": conf}})

    minio = cfg("s3a://b/run", "http://minio:9000")
    with pytest.raises(ConfigError, match="pyarrow, which reads no Hadoop setting"):
        require_inputs(minio, ("train",))
    assert any("minio:9000" in p for p in check_run(minio, ("train",)).problems)
    assert s3a_endpoint_problem(cfg("s3a://b/run", "s3.eu-west-1.amazonaws.com")) is None
    assert s3a_endpoint_problem(cfg("s3://b/run", "http://minio:9000")) is None
    assert s3a_endpoint_problem(cfg("/tmp/run", "http://minio:9000")) is None

    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.s3a.bucket.b.endpoint</name>"
        "<value>http://ceph:7480</value></property></configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    plain = config_from_dict({"output": "s3a://b/run"})
    with pytest.raises(ConfigError, match="core-site.xml sets fs.s3a.bucket.b.endpoint"):
        require_inputs(plain, ("train",))
    assert s3a_endpoint_problem(cfg("s3a://b/run", "s3.eu-west-1.amazonaws.com")) is None
    assert s3a_endpoint_problem(config_from_dict({"output": "s3://b/run"})) is None
    # per bucket, as Hadoop resolves it: another bucket's endpoint is not this root's; a
    # per-bucket AWS endpoint beats a global MinIO one; an empty value is AWS's default
    site = {"fs.s3a.bucket.other.endpoint": "http://ceph:7480"}
    assert s3a_endpoint_problem(plain, site) is None
    site = {"fs.s3a.endpoint": "http://minio:9000"}
    assert "fs.s3a.endpoint=http://minio:9000" in s3a_endpoint_problem(plain, site)
    assert s3a_endpoint_problem(cfg("s3a://b/run", "s3.amazonaws.com"), site) is None
    assert s3a_endpoint_problem(plain, {"fs.s3a.endpoint": " "}) is None
