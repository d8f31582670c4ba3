"""Safe under concurrent, overlapping and interrupted runs (issue #19): one writer per run root
(the lease ``<root>/_LOCK``), publishes that refuse an existing destination, ``publish_written``
checking what the tasks wrote, ``recover`` sparing a live run's staging and repairing
half-copied (S3-style) renames, per-stage commit records, staged and checksummed models, a full
recompute after a retrain, a read-modify-write manifest and redacted secrets.

The two-runs test starts the CLI twice as child processes on one tiny data set (graph stage
only); the other tests use the session's SparkSession and small hand-made tables.
"""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from pina_spark import runtime, storage
from pina_spark.config import config_from_dict
from pina_spark.orchestration import pipeline
from pina_spark.storage import publishing
from pina_spark.storage.manifest import Manifest

from demo_run import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "XYZ-not-a-real-key-4711"
HANG_GUARD_S = 600  # not a timing assertion: only stops a test that would wait forever


# --------------------------------------------------------------------------- tiny inputs
def _csv(path, header, lines):
    path.write_text(header + "\n" + "".join(ln + "\n" for ln in lines))
    return str(path)


def _tiny_inputs(d):
    d.mkdir(parents=True, exist_ok=True)
    return {
        "instances": _csv(
            d / "instances.csv",
            "instance_id,text,split",
            [
                f"i{n:02d},product number {n} text,{'test' if n > 9 else 'train'}"
                for n in range(1, 13)
            ],
        ),
        "labels": _csv(
            d / "labels.csv", "label_id,text", [f"L{n},label text {n}" for n in range(1, 5)]
        ),
        "instance_labels": _csv(
            d / "il.csv", "instance_id,label_id", [f"i{n:02d},L{1 + n % 4}" for n in range(1, 13)]
        ),
    }


def _wait_for(cond, what):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > HANG_GUARD_S:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def _files_under(root):
    for dp, _, fs in os.walk(root):
        for f in fs:
            yield os.path.join(dp, f)


# --------------------------------------------------------------------------- two CLI runs
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Run 1 (`pina-spark run --stages graph`, with a secret in --set) holds the root; run 2 on
    the same root starts once run 1's lease exists."""
    tmp = tmp_path_factory.mktemp("two_runs")
    inputs = _tiny_inputs(tmp / "in")
    out = tmp / "out"
    cfg_file = tmp / "run.yaml"
    cfg_file.write_text(
        json.dumps(
            {
                "output": str(out),
                "input": inputs,
                "spark": {"master": "local[1]", "conf": {"spark.ui.enabled": "false"}},
            }
        )
    )
    code = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__)))
    )  # the code under test (storage is pina_spark/storage/__init__.py)
    env = child_env(PYTHONPATH=code)
    cmd = [
        sys.executable,
        "-m",
        "pina_spark.cli",
        "run",
        "--config",
        str(cfg_file),
        "--stages",
        "graph",
        "--set",
        f"spark.conf.spark.hadoop.fs.s3a.secret.key={SECRET}",
    ]
    lock = out / storage.LOCK
    p1 = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lambda: lock.exists() or p1.poll() is not None, "run 1's lease")
        owner = json.loads(lock.read_text()) if lock.exists() else {}
        p2 = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
        )
        lock_after_run2 = json.loads(lock.read_text()) if lock.exists() else None
        out1, err1 = p1.communicate(timeout=HANG_GUARD_S)
    finally:
        if p1.poll() is None:
            p1.kill()
    return {
        "out": out,
        "owner": owner,
        "p1": p1,
        "log1": out1 + err1,
        "p2": p2,
        "lock_after_run2": lock_after_run2,
    }


@pytest.mark.slow
def test_second_run_on_one_root_fails_at_once_naming_the_first(two_runs):
    """The second `pina-spark run` on the same root exits non-zero before doing anything, naming
    the first run (id, host, pid); the first completes untouched."""
    p2, owner = two_runs["p2"], two_runs["owner"]
    assert owner.get("run_id"), "run 1 never took the lease"
    assert owner["pid"] == two_runs["p1"].pid
    assert p2.returncode == 2, p2.stderr[-3000:]
    assert f"run {owner['run_id']}" in p2.stderr and f"pid {owner['pid']}" in p2.stderr, p2.stderr[
        -3000:
    ]
    assert "Traceback" not in p2.stderr
    # run 2 did not touch the lease, the manifest or any table of run 1
    assert two_runs["lock_after_run2"]["run_id"] == owner["run_id"]
    assert two_runs["p1"].returncode == 0, two_runs["log1"][-4000:]
    paths = storage.RunPaths(str(two_runs["out"]))
    m = Manifest(paths.manifest)
    assert m.stage("graph")["status"] == "complete"
    assert [h["run_id"] for h in m.data["history"]] == [owner["run_id"]]
    assert m.data["history"][0]["status"] == "complete"
    assert storage.read_commit(paths, "graph")["run_id"] == owner["run_id"]
    assert not (two_runs["out"] / storage.LOCK).exists(), "run 1 did not release its lease"


@pytest.mark.slow
def test_secret_in_set_is_nowhere_under_the_output_or_in_the_log(two_runs):
    """`--set spark.conf.spark.hadoop.fs.s3a.secret.key=XYZ` leaves no XYZ in any file under the
    output root (manifest, tables, quarantine, commits) nor in either run's log; the manifest
    keeps the key with a redacted value."""
    assert two_runs["p1"].returncode == 0, two_runs["log1"][-4000:]
    hits = [
        f for f in _files_under(str(two_runs["out"])) if SECRET.encode() in open(f, "rb").read()
    ]
    assert not hits, hits
    for text in (two_runs["log1"], two_runs["p2"].stdout + two_runs["p2"].stderr):
        assert SECRET not in text
    conf = Manifest(storage.RunPaths(str(two_runs["out"])).manifest).data["config"]["spark"]["conf"]
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "***"


def test_redaction_of_stored_errors_and_config_lists():
    from pina_spark.config import redact

    d = redact.redact_config(
        {
            "run": {"models": "s3://b/m"},
            "x": ["spark.hadoop.fs.s3a.access.key=AKIA12345", "k=v"],
            "db": {"password": "pw-123", "user": "me"},
        }
    )
    assert d == {
        "run": {"models": "s3://b/m"},
        "x": ["spark.hadoop.fs.s3a.access.key=***", "k=v"],
        "db": {"password": "***", "user": "me"},
    }
    assert redact.scrub("403 for AKIA12345 with pw-123") == "403 for *** with ***"


# --------------------------------------------------------------------------- the lease
def _fake_lease(root, run_id, age_s):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, storage.LOCK), "w") as fh:
        json.dump(
            {
                "run_id": run_id,
                "host": "other-host",
                "pid": 99999,
                "started": "2026-11-23T00:00:00Z",
                "heartbeat": time.time() - age_s,
            },
            fh,
        )


def test_lease_refuses_a_live_owner_takes_over_a_stale_one_and_detects_loss(tmp_path):
    root = str(tmp_path / "r")
    _fake_lease(root, "live-run", age_s=5)
    with pytest.raises(storage.LeaseError, match="run live-run .*host other-host, pid 99999"):
        storage.acquire_lease(root, "me")
    assert storage.read_lease(root)["run_id"] == "live-run"
    _fake_lease(root, "dead-run", age_s=10_000)
    with storage.acquire_lease(root, "me", stale_s=60) as lease:
        assert storage.read_lease(root)["run_id"] == "me"
        assert storage.held_run_id(root) == "me"
        with storage.acquire_lease(root, "ignored") as again:  # reentrant in one process
            assert again is lease
        assert storage.held_run_id(root) == "me"
        _fake_lease(root, "thief", age_s=0)  # someone took it over
        with pytest.raises(storage.LeaseError, match="lost its lease"):
            storage.check_lease_for(root + "/nodes")
        os.remove(os.path.join(root, storage.LOCK))
    assert storage.held_run_id(root) is None


def test_recover_refuses_while_another_live_run_holds_the_lease(spark, tmp_path):
    paths = storage.RunPaths(str(tmp_path / "r"))
    inflight = os.path.join(paths.root, storage.STAGING, "nodes-abc.run-live-run")
    os.makedirs(inflight)
    _fake_lease(paths.root, "live-run", age_s=1)
    with pytest.raises(storage.LeaseError, match="live-run"):
        storage.recover(spark, paths, [storage.NODES])
    assert os.path.isdir(inflight)
    # the owner itself (this process holding the lease) keeps its own staging, drops others
    os.remove(os.path.join(paths.root, storage.LOCK))
    dead = os.path.join(paths.root, storage.STAGING, "nodes-def.run-dead-run")
    os.makedirs(dead)
    with storage.acquire_lease(paths.root, "live-run"):
        storage.recover(spark, paths, [storage.NODES])
        assert os.path.isdir(inflight) and not os.path.exists(dead)


def test_manifest_updates_never_lose_another_writers_entry(tmp_path):
    uri = str(tmp_path / storage.MANIFEST)
    a, b = Manifest(uri), Manifest(uri)  # both read the (empty) manifest first
    a.record_stage("graph", {"n": 1}, "fa", 1.0)
    b.record_stage("embed", {"n": 2}, "fb", 2.0)
    stages = Manifest(uri).data["stages"]
    assert stages["graph"]["fingerprint"] == "fa" and stages["embed"]["fingerprint"] == "fb"


# --------------------------------------------------------------------------- publishing
def _frame(spark, lo, hi, tag, parts=2):
    return spark.range(lo, hi, numPartitions=parts).selectExpr(
        "id as x", f"concat('{tag}-', cast(id as string)) as tag"
    )


def _rows(spark, paths, rel):
    return sorted(tuple(r) for r in storage.read_table(spark, paths, rel).collect())


def _expected(lo, hi, tag):
    return sorted((i, f"{tag}-{i}") for i in range(lo, hi))


@pytest.mark.slow
def test_interleaved_publishes_leave_one_version_and_no_nested_folder(spark, tmp_path, monkeypatch):
    """Two publishes of one table: A moves the old version aside and waits at a barrier before
    its final rename; B then finds no table, reaches the barrier, and both rename at once.
    Exactly one of them wins; the other fails; the table is one complete version with no
    folder nested inside it."""
    paths = storage.RunPaths(str(tmp_path / "r"))
    storage.write_table(_frame(spark, 0, 10, "v0"), paths, "t")
    final = paths.table("t")
    stagings = {}
    for tag, (lo, hi) in {"A": (100, 130), "B": (200, 250)}.items():
        st = paths.staging("t")
        _frame(spark, lo, hi, tag).write.parquet(st)
        stagings[tag] = st
    barrier = threading.Barrier(2, timeout=HANG_GUARD_S)
    real_rename = publishing._rename

    def rename(sp, src, dst):
        if dst == final and src in stagings.values():
            barrier.wait()
        return real_rename(sp, src, dst)

    monkeypatch.setattr(publishing, "_rename", rename)
    errors = {}

    def publish(tag):
        try:
            storage.publish(spark, stagings[tag], final)
        except Exception as e:  # the loser
            errors[tag] = e

    ta = threading.Thread(target=publish, args=("A",))
    ta.start()
    _wait_for(lambda: barrier.n_waiting == 1 or not ta.is_alive(), "publish A at the barrier")
    tb = threading.Thread(target=publish, args=("B",))
    tb.start()
    ta.join(HANG_GUARD_S)
    tb.join(HANG_GUARD_S)
    assert len(errors) == 1, f"expected exactly one publish to fail, got {errors}"
    assert "destination exists" in str(next(iter(errors.values())))
    nested = [d for d in os.listdir(final) if os.path.isdir(os.path.join(final, d))]
    assert not nested, f"folders nested inside the table: {nested}"
    got = _rows(spark, paths, "t")
    assert got in (_expected(100, 130, "A"), _expected(200, 250, "B")), got[:3]
    assert not [n for n in os.listdir(paths.root) if ".__old-" in n]


def _file_writer(staging, gate_dir):
    """Executor side (mapInArrow): partition p writes ``part-<p>.parquet`` (tmp + rename) with
    5 rows and reports ``path, rows``; partition 1 waits until ``gate_dir/go`` exists."""

    def write(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        for _ in batches:
            pass
        pid = TaskContext.get().partitionId()
        if pid == 1:
            t0 = time.time()
            while not os.path.exists(os.path.join(gate_dir, "go")):
                if time.time() - t0 > HANG_GUARD_S:
                    raise RuntimeError("gate never opened")
                time.sleep(0.05)
        os.makedirs(staging, exist_ok=True)
        path = f"{staging}/part-{pid:05d}.parquet"
        tbl = pa.table(
            {
                "x": pa.array(range(pid * 5, pid * 5 + 5), pa.int64()),
                "tag": pa.array([f"new-{i}" for i in range(pid * 5, pid * 5 + 5)]),
            }
        )
        pq.write_table(tbl, path + ".tmp")
        os.replace(path + ".tmp", path)
        if pid == 0:
            open(os.path.join(gate_dir, "part0-written"), "w").close()
        yield pa.RecordBatch.from_arrays(
            [pa.array([path]), pa.array([5], pa.int64())], ["path", "rows"]
        )

    return write


@pytest.mark.slow
def test_recover_called_mid_stage_fails_the_stage_and_keeps_the_previous_table(spark, tmp_path):
    """A cleanup by another process (storage.recover of a run that holds no lease) deletes the
    staging folder while the executors write into it; the later task recreates the folder.
    publish_written compares the files with what the tasks reported and refuses to publish the
    half table; the previous version stays complete."""
    paths = storage.RunPaths(str(tmp_path / "r"))
    storage.write_table(_frame(spark, 0, 7, "old"), paths, "t")
    staging = paths.staging("t")
    gate = str(tmp_path / "gate")
    os.makedirs(gate)
    df = spark.range(0, 2, numPartitions=2).mapInArrow(
        _file_writer(staging, gate), "path string, rows long"
    )

    def other_run():
        _wait_for(lambda: os.path.exists(os.path.join(gate, "part0-written")), "task 0's file")
        storage.recover(spark, paths, ["t"])
        open(os.path.join(gate, "go"), "w").close()

    t = threading.Thread(target=other_run)
    t.start()
    with pytest.raises(IOError, match="not those the tasks reported"):
        storage.publish_written(spark, df, staging, paths.table("t"), "test writer")
    t.join(HANG_GUARD_S)
    assert _rows(spark, paths, "t") == _expected(0, 7, "old")
    assert not os.path.exists(staging)


def test_publish_written_checks_row_counts(spark, tmp_path):
    paths = storage.RunPaths(str(tmp_path / "r"))
    staging = paths.staging("t")
    gate = str(tmp_path / "gate")
    os.makedirs(gate)
    open(os.path.join(gate, "go"), "w").close()
    df = (
        spark.range(0, 2, numPartitions=2)
        .mapInArrow(_file_writer(staging, gate), "path string, rows long")
        .selectExpr("path", "rows + 1 as rows")
    )
    with pytest.raises(IOError, match="holds 5 rows, its task reported 6"):
        storage.publish_written(spark, df, staging, paths.table("t"), "test writer")
    assert not storage.path_exists(spark, paths.table("t"))


def test_s3_style_rename_crash_is_repaired_by_recover(spark, tmp_path, monkeypatch):
    """A fake object-store rename: files are copied one by one in key order (so ``_SUCCESS`` and
    ``_VERSION`` land first) and the source deleted afterwards; it crashes half way through
    the copy of the new version. The final folder then has ``_SUCCESS`` but not all its data.
    ``recover`` sees that it lacks files its ``_VERSION`` lists, and restores the previous
    complete version instead of deleting it."""
    import shutil

    paths = storage.RunPaths(str(tmp_path / "r"))
    storage.write_table(_frame(spark, 0, 40, "old", parts=4), paths, "t")
    final = paths.table("t")

    class Crash(RuntimeError):
        pass

    def s3_rename(sp, src, dst):
        if os.path.exists(dst):
            raise OSError(f"could not rename {src} -> {dst}: the destination exists")
        files = sorted(
            os.path.relpath(os.path.join(dp, f), src) for dp, _, fs in os.walk(src) for f in fs
        )
        crash_after = None  # the new version: crash after the markers and one data file
        if src.startswith(paths.root + "/_staging"):
            crash_after = 1 + min(i for i, f in enumerate(files) if f.startswith("part-"))
        for i, rel in enumerate(files):
            if crash_after is not None and i == crash_after:
                raise Crash(f"driver died after copying {i} of {len(files)} objects")
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))
        shutil.rmtree(src)

    monkeypatch.setattr(publishing, "_rename", s3_rename)
    with pytest.raises(Crash):
        storage.write_table(_frame(spark, 100, 180, "new", parts=4), paths, "t")
    monkeypatch.undo()
    # what a crash leaves: the new version half copied, with _SUCCESS, beside the old one
    assert os.path.exists(os.path.join(final, "_SUCCESS"))
    assert [n for n in os.listdir(paths.root) if n.startswith("t.__old-")]
    assert storage.recover(spark, paths, ["t"]) == ["t"]
    assert _rows(spark, paths, "t") == _expected(0, 40, "old")
    assert not [n for n in os.listdir(paths.root) if ".__old-" in n]


# --------------------------------------------------------------------------- stage commits
def _graph_cfg(out, inputs, **extra):
    return config_from_dict({"output": str(out), "input": inputs, **extra})


@pytest.mark.slow
def test_crash_after_nodes_is_published_makes_embed_refuse(spark, tmp_path, monkeypatch):
    """The graph stage publishes nodes, then the driver dies before graph/instance_labels and
    graph/pretrain_edges (the tables of the previous graph run stay). embed must refuse to read
    the mix, naming the stage that did not commit; rerunning graph makes it consistent."""
    cfg = _graph_cfg(tmp_path / "out", _tiny_inputs(tmp_path / "in"))
    pipeline.run_pipeline(spark, cfg, ["graph"])
    paths = storage.RunPaths(cfg.output)
    committed = storage.read_commit(paths, "graph")["tables"]
    assert committed[storage.NODES] == storage.table_version(paths.table(storage.NODES))

    def dies_after_nodes(real):  # Spark's writer, or the driver's for small inputs
        def write(*a, **k):
            if storage.INSTANCE_LABELS in a:
                raise SystemExit("driver killed after nodes was published")
            return real(*a, **k)

        return write

    monkeypatch.setattr(storage, "write_table", dies_after_nodes(storage.write_table))
    monkeypatch.setattr(storage, "write_arrow", dies_after_nodes(storage.write_arrow))
    with pytest.raises(SystemExit):
        pipeline.run_pipeline(spark, cfg, ["graph"], force=True)
    monkeypatch.undo()
    assert (
        storage.table_version(paths.table(storage.NODES)) != committed[storage.NODES]
    )  # new nodes
    assert (
        storage.table_version(paths.table(storage.INSTANCE_LABELS))
        == committed[storage.INSTANCE_LABELS]
    )
    with pytest.raises(
        storage.UncommittedError, match=r"stage embed refuses .*graph: nodes.*Rerun " r"graph"
    ):
        pipeline.run_pipeline(spark, cfg, ["embed"])
    assert Manifest(paths.manifest).stage("embed") is None  # refused before starting
    # a notebook's reader refuses the mix too, unless asked to look at it anyway
    with pytest.raises(storage.UncommittedError, match=r"graph: nodes.*allow_uncommitted"):
        pipeline.open_run(spark, cfg.output)
    assert pipeline.open_run(spark, cfg.output, allow_uncommitted=True).paths.root


# --------------------------------------------------------------------------- models
def _fake_models(d, tag):
    os.makedirs(os.path.join(d, "vectorizer"), exist_ok=True)
    os.makedirs(os.path.join(d, "g", "pina", "full"), exist_ok=True)
    for rel in ("vectorizer/encoder.json", "g/pina/full/param.json", "model_card.json"):
        with open(os.path.join(d, rel), "w") as fh:
            json.dump({"tag": tag, "rel": rel}, fh)
    with open(os.path.join(d, "g", "pina", "full", "weights.bin"), "wb") as fh:
        fh.write(tag.encode() * 1000)
    return d


def _models_tag(models_dir):
    runtime.check_artifacts(models_dir, ["vectorizer/encoder.json", "g/pina/full/param.json"])
    assert runtime.verify_checksums(models_dir, models_dir)
    with open(os.path.join(models_dir, "model_card.json")) as fh:
        return json.load(fh)["tag"]


def test_crash_in_publish_models_leaves_the_old_models_loadable(spark, tmp_path, monkeypatch):
    from pina_spark.models import artifacts

    paths = storage.RunPaths(str(tmp_path / "r"))
    dst = paths.table(storage.MODELS)
    artifacts.publish(spark, _fake_models(str(tmp_path / "m1"), "v1"), dst)
    assert storage.is_complete(spark, dst) and _models_tag(dst) == "v1"
    real_copy = storage.copy_dir

    def copy_then_crash(src, target):
        real_copy(src, target)
        shutil_rm = __import__("shutil").rmtree
        shutil_rm(os.path.join(target, "g"))  # a half copy...
        raise OSError("disk full / driver killed during the copy")

    monkeypatch.setattr(storage, "copy_dir", copy_then_crash)
    with pytest.raises(OSError, match="disk full"):
        artifacts.publish(spark, _fake_models(str(tmp_path / "m2"), "v2"), dst)
    monkeypatch.undo()
    assert storage.is_complete(spark, dst) and _models_tag(dst) == "v1"
    # a crash during the swap itself (after the old version was moved aside)
    real_rename = publishing._rename

    def rename(sp, src, target):
        if target == dst and "_staging" in src:
            raise OSError("driver killed between the two renames")
        return real_rename(sp, src, target)

    monkeypatch.setattr(publishing, "_rename", rename)
    with pytest.raises(OSError, match="between the two renames"):
        artifacts.publish(spark, _fake_models(str(tmp_path / "m3"), "v3"), dst)
    monkeypatch.undo()
    assert storage.is_complete(spark, dst) and _models_tag(dst) == "v1"
    artifacts.publish(spark, _fake_models(str(tmp_path / "m4"), "v4"), dst)
    assert _models_tag(dst) == "v4"
    assert not os.path.exists(os.path.join(paths.root, storage.STAGING)) or not os.listdir(
        os.path.join(paths.root, storage.STAGING)
    )


def test_tampered_model_copy_fails_its_checksums_and_cache_is_private(tmp_path, monkeypatch):
    d = _fake_models(str(tmp_path / "m"), "v1")
    runtime.write_checksums(d)
    assert runtime.verify_checksums(d, "m")
    with open(os.path.join(d, "g", "pina", "full", "weights.bin"), "ab") as fh:
        fh.write(b"planted")
    with pytest.raises(runtime.ModelLoadError, match="weights.bin does not match its checksum"):
        runtime.verify_checksums(d, "m")
    with open(os.path.join(d, "g", "evil.pt"), "wb") as fh:
        fh.write(b"x")
    with pytest.raises(runtime.ModelLoadError, match="evil.pt is not in"):
        runtime.verify_checksums(os.path.join(d, "g"), "m")
    monkeypatch.delenv("PINA_MODEL_CACHE", raising=False)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "local1") + "," + str(tmp_path / "l2"))
    root = runtime.checksums._cache_root()
    assert root.startswith(str(tmp_path / "local1"))
    assert os.stat(root).st_mode & 0o777 == 0o700
    os.chmod(root, 0o755)
    with pytest.raises(runtime.ModelLoadError, match="not private"):
        runtime.checksums._cache_root()


_CALLS = []


def fake_embed(ctx):
    """A stand-in embed stage (pipeline target ``test_concurrency:fake_embed``): records whether
    it ran on the full ``nodes`` (no incremental rows) and publishes one embeddings row per node."""
    from pyspark.sql import functions as F

    _CALLS.append({"incremental_rows": ctx.incremental_rows, "root": ctx.paths.root})
    nodes = storage.read_table(ctx.spark, ctx.paths, storage.NODES)
    emb = nodes.select(
        storage.NODE_INDEX,
        F.array(F.lit(1.0).cast("float")).alias(storage.DENSE),
        F.array().cast("array<int>").alias(storage.SPARSE_INDICES),
        F.array().cast("array<float>").alias(storage.SPARSE_VALUES),
    )
    storage.write_table(emb, ctx.paths, storage.EMBEDDINGS)
    return {"rows": nodes.count()}


@pytest.mark.slow
def test_retrain_between_two_days_forces_a_full_recompute(spark, tmp_path):
    """Day D-1 embedded every node with models version 1. The models run is then retrained.
    The incremental run of day D must not merge D-1's rows (old models) with new ones: it
    recomputes every node and says why."""
    import dataclasses as dc

    from pina_spark.models import artifacts

    models_run = storage.RunPaths(str(tmp_path / "models_run"))
    # embed reads the vectorizer: a retrain republishes it (and g's models after it)
    dst = models_run.table(storage.VECTORIZER)
    artifacts.publish(spark, _fake_models(str(tmp_path / "m1"), "v1"), dst)
    v1 = storage.table_version(dst)
    nodes = spark.createDataFrame(
        [(i, "instance", f"n{i}", f"text {i}", "train") for i in range(6)],
        storage.schema(storage.NODES),
    )
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "out"),
            "run": {"models": models_run.root, "incremental": True, "run_date": "2026-11-22"},
        }
    )
    spec = dc.replace(pipeline.STAGES["embed"], target="test_concurrency:fake_embed")
    inc = pipeline.INCREMENTAL["embed"]
    # day D-1: a full run with models v1, recorded as the pipeline does
    prev = pipeline.make_context(spark, cfg)
    storage.write_table(nodes, prev.paths, storage.NODES)
    fake_embed(prev)
    prev.manifest.record_stage("embed", {}, "fp", 1.0, models_version=v1)
    # the same day again, models unchanged: incremental (nothing changed, nothing recomputed)
    cfg_d = cfg.replace(run=dc.replace(cfg.run, run_date="2026-11-23"))
    ctx = pipeline.make_context(spark, cfg_d)
    storage.write_table(nodes, ctx.paths, storage.NODES)
    _CALLS.clear()
    st = pipeline.run_incremental(ctx, spec, inc)
    assert st["selected"] == 0 and _CALLS == []
    # retrain, then day D: full recompute with the reason
    artifacts.publish(spark, _fake_models(str(tmp_path / "m2"), "v2"), dst)
    assert storage.table_version(dst) != v1
    _CALLS.clear()
    st = pipeline.run_incremental(ctx, spec, inc)
    assert len(_CALLS) == 1 and _CALLS[0]["incremental_rows"] is None
    assert st["incremental"].startswith("full (") and "retrained" in st["incremental"], st
    assert storage.read_table(spark, ctx.paths, storage.EMBEDDINGS).count() == 6
