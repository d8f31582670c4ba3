"""Reliability of pina_spark.storage: staged writes with atomic publish, recovery after a crash,
refusal of incomplete tables, and strict input readers (explicit schemas, clear errors, corrupt
lines kept in ``_corrupt_record``).

The KILL test runs a child Python process with its own small SparkSession (local[1]) and
SIGKILLs its whole process group (driver, JVM, Python workers) in the middle of a write.
"""

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pina_spark import storage
from pina_spark.storage import publishing, tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- helpers
def _paths(tmp_path, name="run"):
    return storage.RunPaths(str(tmp_path / name))


def _frame(spark, lo, hi, tag, parts=2):
    return spark.range(lo, hi, numPartitions=parts).selectExpr(
        "id as x", f"concat('{tag}-', cast(id as string)) as tag"
    )


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def _expected(lo, hi, tag):
    return sorted((i, f"{tag}-{i}") for i in range(lo, hi))


def _leftovers(paths, rel):
    """Staging folders and moved-aside old versions still on disk."""
    root = paths.root
    out = glob.glob(os.path.join(root, "_staging", "*"))
    out += glob.glob(os.path.join(root, rel + ".__old-*"))
    return out


def _failing_frame(spark, fail_at, n=200):
    """A DataFrame whose computation raises in the middle (at row ``fail_at``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def boom(x):
        if x == fail_at:
            raise ValueError(f"boom at {x}")
        return f"v2-{x}"

    udf = F.udf(boom, T.StringType())
    return spark.range(0, n, numPartitions=4).select(F.col("id").alias("x"), udf("id").alias("tag"))


# --------------------------------------------------------------------------- publish
@pytest.mark.slow
def test_write_table_publishes_complete_table_via_staging(spark, tmp_path, monkeypatch):
    paths = _paths(tmp_path)
    seen = []
    real_publish = storage.publish

    def spy(sp, staging, final):
        # at publish time the data is complete in staging and not yet at the final path
        seen.append((staging, final, storage.is_complete(sp, staging), os.path.exists(final)))
        return real_publish(sp, staging, final)

    monkeypatch.setattr(tables, "publish", spy)
    final = storage.write_table(_frame(spark, 0, 50, "v1"), paths, "t")
    assert len(seen) == 1
    staging, fin, complete, existed = seen[0]
    assert staging.startswith(paths.root + "/_staging/t-")
    assert fin == final == paths.table("t")
    assert complete and not existed
    assert storage.is_complete(spark, final)
    assert not os.path.exists(staging)
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 50, "v1")
    # a second publish replaces the first completely, leaving nothing behind
    storage.write_table(_frame(spark, 10, 30, "v2"), paths, "t")
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(10, 30, "v2")
    assert _leftovers(paths, "t") == []


@pytest.mark.slow
def test_failing_write_keeps_previous_table_and_no_half_table(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 100, "v1"), paths, "t")
    with pytest.raises(Exception, match="boom at 150"):
        storage.write_table(_failing_frame(spark, fail_at=150), paths, "t")
    # previous version complete and readable, unchanged
    assert storage.is_complete(spark, paths.table("t"))
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 100, "v1")
    # no half table: the failed write left no staging folder and no moved-aside version
    assert _leftovers(paths, "t") == []


def test_failing_first_write_publishes_nothing(spark, tmp_path):
    paths = _paths(tmp_path)
    with pytest.raises(Exception, match="boom at 3"):
        storage.write_table(_failing_frame(spark, fail_at=3), paths, "t")
    assert not os.path.exists(paths.table("t"))
    with pytest.raises(storage.InputError, match="missing or incomplete"):
        storage.read_table(spark, paths, "t")


def test_recover_restores_table_when_killed_between_the_two_renames(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 40, "v1"), paths, "graph/t")
    final = paths.table("graph/t")
    # the next write got as far as a complete staging folder and the FIRST rename of publish
    staging = paths.staging("graph/t")
    _frame(spark, 0, 70, "v2").write.parquet(staging)
    assert storage.is_complete(spark, staging)
    publishing._rename(spark, final, final + ".__old-deadbeef")
    # ... and the process died here. Readers get a clear error, never a half table:
    with pytest.raises(storage.InputError, match="missing or incomplete"):
        storage.read_table(spark, paths, "graph/t")
    repaired = storage.recover(spark, paths, ["graph/t"])
    assert repaired == ["graph/t"]
    assert _rows(storage.read_table(spark, paths, "graph/t")) == _expected(0, 40, "v1")
    assert _leftovers(paths, "graph/t") == []  # staging leftovers cleaned
    # the next run publishes normally
    storage.write_table(_frame(spark, 0, 70, "v2"), paths, "graph/t")
    assert _rows(storage.read_table(spark, paths, "graph/t")) == _expected(0, 70, "v2")
    assert _leftovers(paths, "graph/t") == []


def test_recover_repairs_tables_it_was_not_told_about(spark, tmp_path):
    """pipeline.run_pipeline passes only the stages' outputs to recover(); a crash while
    publishing ``quarantine/<table>`` must be repaired too."""
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 5, "q1"), paths, "quarantine/events")
    final = paths.table("quarantine/events")
    publishing._rename(spark, final, final + ".__old-0badf00d")
    assert storage.recover(spark, paths, ["nodes", "graph/i2i_edges"]) == ["quarantine/events"]
    assert _rows(storage.read_table(spark, paths, "quarantine/events")) == _expected(0, 5, "q1")


def test_recover_after_second_rename_drops_old_version(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 10, "v1"), paths, "t")
    final = paths.table("t")
    # died after the second rename, before deleting the old version
    old = final + ".__old-12345678"
    _frame(spark, 0, 3, "v0").write.parquet(old)
    os.makedirs(os.path.join(paths.root, "_staging", "t-abandoned"), exist_ok=True)
    assert storage.recover(spark, paths, ["t"]) == []
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 10, "v1")
    assert _leftovers(paths, "t") == []


def test_read_table_refuses_incomplete_table(spark, tmp_path):
    paths = _paths(tmp_path)
    _frame(spark, 0, 10, "x").write.parquet(paths.table("t"))
    os.remove(os.path.join(paths.table("t"), "_SUCCESS"))
    with pytest.raises(storage.InputError, match="missing or incomplete"):
        storage.read_table(spark, paths, "t")
    with pytest.raises(storage.InputError, match="missing or incomplete"):
        storage.read_table(spark, paths, "never_written")


def test_read_table_contract_schema_only_when_the_footer_matches(spark, tmp_path):
    """contract=True reads a published table with its contract schema (no inference job) only
    when a data file's footer has those columns and types; otherwise Spark infers the schema,
    so a table written with other types is read as it is, never silently nulled."""
    from pyspark.sql import types as T

    paths = _paths(tmp_path)
    rows = [(1, "instance", "a", "x", "train"), (2, "label", "b", "y", None)]
    storage.write_table(
        spark.createDataFrame(rows, storage.schema(storage.NODES)), paths, storage.NODES
    )
    assert tables._footer_has_contract(paths.table(storage.NODES), storage.schema(storage.NODES))
    df = storage.read_table(spark, paths, storage.NODES, contract=True)
    assert [(f.name, f.dataType) for f in df.schema.fields] == [
        (f.name, f.dataType) for f in storage.schema(storage.NODES).fields
    ]
    assert sorted(tuple(r) for r in df.collect()) == sorted(rows, key=lambda r: r[0])
    # node_index written as int: the footer does not match, Spark infers (int stays int)
    odd = T.StructType(
        [T.StructField(storage.NODE_INDEX, T.IntegerType())]
        + storage.schema(storage.NODES).fields[1:]
    )
    storage.write_table(spark.createDataFrame(rows, odd), paths, storage.NODES)
    assert not tables._footer_has_contract(
        paths.table(storage.NODES), storage.schema(storage.NODES)
    )
    df = storage.read_table(spark, paths, storage.NODES, contract=True)
    assert df.schema[storage.NODE_INDEX].dataType == T.IntegerType()
    assert sorted(r[storage.NODE_INDEX] for r in df.collect()) == [1, 2]
    # a table pyarrow does not reach here is read as before (schema inference)
    assert not tables._footer_has_contract("hdfs:///nowhere/nodes", storage.schema(storage.NODES))


def test_parquet_files_skips_markers_and_hidden_files(tmp_path):
    d = tmp_path / "t"
    os.makedirs(d / "variant=a")
    for name in (
        "part-0.parquet",
        "_SUCCESS",
        ".part-0.parquet.crc",
        "variant=a/part-1.parquet",
        "variant=a/_committed_1",
        "variant=a_$folder$",  # EMRFS's folder marker on S3
    ):
        open(d / name, "w").close()
    fs, files = storage.parquet_files(str(d))
    assert [os.path.relpath(f.path, str(d)) for f in files] == [
        "part-0.parquet",
        os.path.join("variant=a", "part-1.parquet"),
    ]
    assert storage.parquet_files(str(tmp_path / "absent")) is None


def test_parquet_dataset_reads_past_emrfs_markers_and_takes_one_file(tmp_path):
    """The driver-side readers built on ``parquet_dataset`` (row counts, footer statistics,
    input tables) read a partitioned table beside EMRFS's empty ``<dir>_$folder$`` object,
    where pyarrow's own folder discovery fails on it; one Parquet file is a dataset too."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    d = tmp_path / "t"
    os.makedirs(d / "variant=a")
    pq.write_table(pa.table({"x": [1, 2]}), d / "variant=a" / "part-0.parquet")
    pq.write_table(pa.table({"x": [3]}), d / "part-1.parquet")
    for name in ("_SUCCESS", "variant=a_$folder$"):
        open(d / name, "w").close()
    with pytest.raises(pa.ArrowInvalid, match="folder"):  # what the marker does to pyarrow
        ds.dataset(str(d), format="parquet", partitioning="hive").to_table()
    tbl = storage.parquet_dataset(str(d)).to_table()
    assert sorted(zip(tbl["x"].to_pylist(), tbl["variant"].to_pylist())) == [
        (1, "a"),
        (2, "a"),
        (3, None),
    ]
    assert storage.count_rows_arrow(str(d)) == 3
    assert storage.count_rows_arrow(f"file://{d}") == 3
    one = d / "part-1.parquet"
    assert storage.parquet_dataset(str(one)).to_table()["x"].to_pylist() == [3]
    os.makedirs(tmp_path / "empty")
    assert storage.parquet_dataset(str(tmp_path / "empty")).files == []
    assert storage.parquet_dataset(str(tmp_path / "absent")) is None


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_values_frame_reads_driver_values_from_a_file_not_from_the_tasks(
    spark, tmp_path, monkeypatch
):
    """The driver's values reach Spark as a Parquet scan (nothing in the tasks' closures), are
    read back exactly, and their staging folder is gone after the block, also on an error;
    where pyarrow does not reach the root, ``createDataFrame`` as before."""
    import numpy as np

    paths = _paths(tmp_path)
    values = np.array([7, 2**40, 0, 7], dtype=np.int64)
    with storage.values_frame(spark, paths, "node_index", values, "t") as df:
        assert sorted(r[0] for r in df.collect()) == sorted(values.tolist())
        plan = _plan(df)
        assert "FileScan parquet" in plan and "Scan ExistingRDD" not in plan, plan
        assert df.schema.simpleString() == "struct<node_index:bigint>"
    ids = ["t1", "é 2", "", "t1"]
    with storage.values_frame(spark, paths, "instance_id", ids, "s", kind="string") as df:
        assert sorted(r[0] for r in df.collect()) == sorted(ids)
        assert "FileScan parquet" in _plan(df)
        assert df.schema.simpleString() == "struct<instance_id:string>"
    with pytest.raises(ValueError, match="kind"):
        with storage.values_frame(spark, paths, "x", [1.5], "t", kind="double"):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with storage.values_frame(spark, paths, "node_index", values, "t") as df:
            raise RuntimeError("boom")
    assert os.listdir(os.path.join(paths.root, storage.STAGING)) == []

    far = _paths(tmp_path, "far")
    monkeypatch.setattr(tables, "pyarrow_reaches", lambda uri: False)
    with storage.values_frame(spark, far, "node_index", values, "t") as df:
        assert sorted(r[0] for r in df.collect()) == sorted(values.tolist())
        assert "FileScan" not in _plan(df)
    assert not os.path.exists(os.path.join(far.root, storage.STAGING))


def test_collect_table_reads_the_same_rows_with_and_without_spark(spark, tmp_path, monkeypatch):
    """``collect_table`` on a table partitioned by ``variant``, with list columns: where pyarrow
    reaches the table it reads the files itself (no Spark collect) and returns the same rows,
    values and partition column as Spark's collect, whole or with ``keep``; an incomplete
    table is refused on both paths."""
    import numpy as np

    paths = _paths(tmp_path)
    rows = [(i, f"v{i % 3}", [float(i), -1.0], f"t{i}" if i % 4 else None) for i in range(40)]
    df = spark.createDataFrame(
        rows, "node_index long, variant string, dense array<float>, text string"
    )
    storage.write_table(df, paths, "t", partition_by=["variant"])
    cols = ["node_index", "dense", "text", "variant"]
    keep = ("node_index", np.array([39, 3, 4, 1000, 3], dtype=np.int64))

    def as_rows(tbl):
        return sorted(zip(*(tbl.column(c).to_pylist() for c in cols)))

    def spark_collect_called(df):
        raise AssertionError("pyarrow reaches the table: no Spark collect")

    marker = os.path.join(paths.table("t"), "variant=v0_$folder$")  # EMRFS's, on S3
    open(marker, "w").close()
    with monkeypatch.context() as m:
        m.setattr(tables, "collect_arrow", spark_collect_called)
        direct = (
            storage.collect_table(spark, paths, "t", cols),
            storage.collect_table(spark, paths, "t", cols, keep=keep, what="k"),
        )
    os.remove(marker)
    monkeypatch.setattr(tables, "pyarrow_reaches", lambda uri: False)
    via_spark = (
        storage.collect_table(spark, paths, "t", cols),
        storage.collect_table(spark, paths, "t", cols, keep=keep, what="k"),
    )
    assert (
        as_rows(direct[0])
        == as_rows(via_spark[0])
        == sorted((i, [float(i), -1.0], t, v) for i, v, _, t in rows)
    )
    assert as_rows(direct[1]) == as_rows(via_spark[1])
    for a, b in zip(direct, via_spark):
        assert [f.type for f in a.schema] == [f.type for f in b.schema], (a.schema, b.schema)
    assert [r[0] for r in as_rows(direct[1])] == [3, 4, 39]
    assert os.listdir(os.path.join(paths.root, storage.STAGING)) == []
    os.remove(os.path.join(paths.table("t"), "_SUCCESS"))
    for reaches in (True, False):
        monkeypatch.setattr(tables, "pyarrow_reaches", lambda uri, r=reaches: r)
        with pytest.raises(storage.InputError, match="incomplete"):
            storage.collect_table(spark, paths, "t", cols)


def test_publish_refuses_staging_without_success_marker(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 10, "v1"), paths, "t")
    staging = paths.staging("t")
    _frame(spark, 0, 99, "half").write.parquet(staging)
    os.remove(os.path.join(staging, "_SUCCESS"))
    with pytest.raises(IOError, match="incomplete write"):
        storage.publish(spark, staging, paths.table("t"))
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 10, "v1")


def test_replace_partitions_keeps_other_partitions(spark, tmp_path):
    paths = _paths(tmp_path)
    a = spark.createDataFrame([(1, "a"), (2, "a"), (3, "b")], "x long, variant string")
    storage.write_table(a, paths, "p", partition_by=["variant"])
    b = spark.createDataFrame([(9, "b")], "x long, variant string")
    storage.write_table(b, paths, "p", partition_by=["variant"], mode_replace_partitions=True)
    got = sorted((r["x"], r["variant"]) for r in storage.read_table(spark, paths, "p").collect())
    assert got == [(1, "a"), (2, "a"), (9, "b")]
    assert _leftovers(paths, "p") == []


# --------------------------------------------------------------------------- KILL test
_CHILD = textwrap.dedent("""
    import os, sys
    root, mode = sys.argv[1], sys.argv[2]
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").appName("pina-kill-test")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from pina_spark import storage
    from pina_spark.storage import publishing
    paths = storage.RunPaths(root)

    def slow(batches):
        import time
        for pdf in batches:
            time.sleep(0.7)
            yield pdf

    if mode == "between":
        # die (whole process group, SIGKILL) right after the first rename of publish
        real = publishing._rename
        def rename_then_die(sp, src, dst):
            real(sp, src, dst)
            if ".__old-" in dst:
                os.killpg(os.getpgid(0), 9)
        publishing._rename = rename_then_die
    df = (spark.range(0, 400000, numPartitions=12)
          .selectExpr("id as x", "concat('v2-', cast(id as string)) as tag")
          .mapInPandas(slow if mode == "during" else (lambda b: b), "x long, tag string"))
    print("WRITING", flush=True)
    storage.write_table(df, paths, "t")
    print("DONE", flush=True)
""")


def _start_child(tmp_path, root, mode):
    script = tmp_path / "child_write.py"
    script.write_text(_CHILD)
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    log = open(tmp_path / f"child-{mode}.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(script), root, mode],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, tmp_path / f"child-{mode}.log"


def _wait_group_gone(pgid, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError(f"process group {pgid} still alive after SIGKILL")


@pytest.mark.slow
def test_kill_during_write_keeps_previous_version_and_next_run_recovers(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 1000, "v1"), paths, "t")
    proc, logf = _start_child(tmp_path, paths.output, "during")
    staging_glob = os.path.join(paths.root, "_staging", "t-*")
    killed = False
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            # kill once the write has produced its first part file in staging
            parts = [
                p
                for d in glob.glob(staging_glob)
                for p in glob.glob(os.path.join(d, "**", "part-*"), recursive=True)
            ]
            if parts:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        _wait_group_gone(proc.pid)
    out = logf.read_text()
    assert killed, f"the child finished or timed out before the kill:\n{out[-3000:]}"
    assert "DONE" not in out
    # the kill really happened mid-write: a staging folder without _SUCCESS is left behind
    leftovers = glob.glob(staging_glob)
    assert leftovers and not any(os.path.exists(os.path.join(d, "_SUCCESS")) for d in leftovers)
    # the previously published version is complete and readable, same rows as before
    assert storage.is_complete(spark, paths.table("t"))
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 1000, "v1")
    # the next run recovers (cleans staging) and publishes
    storage.recover(spark, paths, ["t"])
    assert _leftovers(paths, "t") == []
    storage.write_table(_frame(spark, 0, 2000, "v2"), paths, "t")
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 2000, "v2")


@pytest.mark.slow
def test_kill_between_the_two_renames_is_repaired_by_recover(spark, tmp_path):
    paths = _paths(tmp_path)
    storage.write_table(_frame(spark, 0, 1000, "v1"), paths, "t")
    proc, logf = _start_child(tmp_path, paths.output, "between")
    try:
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        _wait_group_gone(proc.pid)
    out = logf.read_text()
    assert proc.returncode == -signal.SIGKILL, out[-3000:]
    assert not os.path.exists(paths.table("t"))
    assert glob.glob(paths.table("t") + ".__old-*")
    with pytest.raises(storage.InputError):
        storage.read_table(spark, paths, "t")
    assert storage.recover(spark, paths, ["t"]) == ["t"]
    assert _rows(storage.read_table(spark, paths, "t")) == _expected(0, 1000, "v1")
    assert _leftovers(paths, "t") == []


# --------------------------------------------------------------------------- read_input
def _write(tmp_path, name, data):
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return str(p)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_read_input_uses_explicit_schema(spark, tmp_path, fmt):
    # ids that look numeric stay strings ("007" not 7); weight is double even when written as int
    rows = [("b1", "007", "2026-01-01", 1), ("b1", "010", None, 2)]
    if fmt == "parquet":
        uri = str(tmp_path / "events.parquet")
        spark.createDataFrame(
            rows, "basket_id string, item_id string, event_time string, " "weight int"
        ).write.parquet(uri)
    elif fmt == "csv":
        uri = _write(
            tmp_path,
            "events.csv",
            "basket_id,item_id,event_time,weight\n" "b1,007,2026-01-01,1\nb1,010,,2\n",
        )
    else:
        uri = _write(
            tmp_path,
            "events.jsonl",
            '{"basket_id":"b1","item_id":"007","event_time":"2026-01-01","weight":1}\n'
            '{"basket_id":"b1","item_id":"010","weight":2}\n',
        )
    df = storage.read_input(spark, uri, "events")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("basket_id", "string"),
        ("item_id", "string"),
        ("event_time", "string"),
        ("weight", "double"),
        ("_corrupt_record", "string"),
    ]
    got = sorted((r.item_id, r.weight, r._corrupt_record) for r in df.collect())
    assert got == [("007", 1.0, None), ("010", 2.0, None)]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_read_input_missing_column_names_column_and_file(spark, tmp_path, fmt):
    if fmt == "parquet":
        uri = str(tmp_path / "inst.parquet")
        spark.createDataFrame([("i1",)], "instance_id string").write.parquet(uri)
    elif fmt == "csv":
        uri = _write(tmp_path, "inst.csv", "instance_id,split\ni1,train\n")
    else:
        uri = _write(tmp_path, "inst.jsonl", '{"instance_id":"i1"}\n{"instance_id":"i2"}\n')
    with pytest.raises(storage.InputError) as e:
        storage.read_input(spark, uri, "instances")
    assert "'text'" in str(e.value) and uri in str(e.value)


def test_read_input_wrong_type_names_column_and_file(spark, tmp_path):
    uri = str(tmp_path / "inst.parquet")
    spark.createDataFrame([(1, "t")], "instance_id long, text string").write.parquet(uri)
    with pytest.raises(storage.InputError) as e:
        storage.read_input(spark, uri, "instances")
    assert "'instance_id'" in str(e.value) and uri in str(e.value)
    assert "bigint" in str(e.value) and "string" in str(e.value)
    uri2 = str(tmp_path / "ev.parquet")
    spark.createDataFrame(
        [("b", "i", "heavy")], "basket_id string, item_id string, " "weight string"
    ).write.parquet(uri2)
    with pytest.raises(storage.InputError) as e:
        storage.read_input(spark, uri2, "events")
    assert "'weight'" in str(e.value) and uri2 in str(e.value)


def test_read_input_missing_path_is_clear(spark, tmp_path):
    uri = str(tmp_path / "nope.parquet")
    with pytest.raises(storage.InputError, match="does not exist") as e:
        storage.read_input(spark, uri, "instances")
    assert uri in str(e.value) and "input.instances" in str(e.value)
    with pytest.raises(storage.InputError, match="no path given"):
        storage.read_input(spark, None, "labels")


@pytest.mark.parametrize("name", ["empty.csv", "empty.jsonl", "empty.parquet"])
def test_read_input_empty_file_is_clear(spark, tmp_path, name):
    uri = _write(tmp_path, name, b"")
    with pytest.raises(storage.InputError, match="empty") as e:
        storage.read_input(spark, uri, "instances")
    assert uri in str(e.value)


def test_read_input_empty_parquet_folder_is_clear(spark, tmp_path):
    d = tmp_path / "emptydir"
    d.mkdir()
    with pytest.raises(storage.InputError, match="empty"):
        storage.read_input(spark, str(d), "instances")


@pytest.mark.parametrize("stray", ["README.txt", "zz_notes.txt"])
def test_read_input_parquet_folder_with_a_stray_file_names_it(spark, tmp_path, stray):
    # the stray file sorts before the data file (README.txt) or after it (zz_notes.txt): Spark
    # reads whichever footer it picks; the error names the file that is not Parquet either way
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "instances.parquet"
    d.mkdir()
    pq.write_table(pa.table({"instance_id": ["i1"], "text": ["t"]}), str(d / "part-0.parquet"))
    (d / stray).write_text("these are my instances\n")
    with pytest.raises(storage.InputError, match="is not a Parquet file") as e:
        storage.read_input(spark, str(d), "instances")
    assert stray in str(e.value) and "part-0" not in str(e.value)


def test_read_input_unparseable_csv_lines_land_in_corrupt_record(spark, tmp_path):
    uri = _write(
        tmp_path,
        "ev.csv",
        "basket_id,item_id,weight\n"
        "b1,i1,1.5\n"
        "b1,i2,heavy\n"  # wrong type in a field
        "b2,i3,1.0,extra\n"  # too many fields
        "b2\n",
    )  # too few fields
    rows = storage.read_input(spark, uri, "events").collect()
    assert len(rows) == 4  # every line accounted for
    corrupt = sorted(r._corrupt_record for r in rows if r._corrupt_record is not None)
    assert corrupt == ["b1,i2,heavy", "b2", "b2,i3,1.0,extra"]
    good = [r for r in rows if r._corrupt_record is None]
    assert [(r.basket_id, r.item_id, r.weight) for r in good] == [("b1", "i1", 1.5)]


def test_read_input_unparseable_json_lines_land_in_corrupt_record(spark, tmp_path):
    uri = _write(
        tmp_path,
        "inst.jsonl",
        '{"instance_id":"i1","text":"a"}\n' "this is not json\n" '{"instance_id":"i3","text":"c"\n',
    )
    rows = storage.read_input(spark, uri, "instances").collect()
    assert len(rows) == 3
    corrupt = sorted(r._corrupt_record for r in rows if r._corrupt_record is not None)
    assert corrupt == sorted(['{"instance_id":"i3","text":"c"', "this is not json"])


def test_read_input_csv_columns_in_any_order_and_extra_columns(spark, tmp_path):
    uri = _write(tmp_path, "inst.csv", "text,extra,instance_id\nhello,x,i1\n")
    rows = storage.read_input(spark, uri, "instances").collect()
    assert [(r.instance_id, r.text, r.split, r._corrupt_record) for r in rows] == [
        ("i1", "hello", None, None)
    ]


def test_read_input_jsonl_keys_missing_on_first_lines_are_not_lost(spark, tmp_path):
    # Spark's own JSON writer omits null fields: the first line may lack a key
    uri = _write(
        tmp_path,
        "ev.jsonl",
        '{"basket_id":"b","item_id":"i"}\n' '{"basket_id":"b","item_id":"j","weight":2.5}\n',
    )
    rows = sorted(storage.read_input(spark, uri, "events").collect(), key=lambda r: r.item_id)
    assert [r.weight for r in rows] == [None, 2.5]
    uri2 = _write(
        tmp_path, "inst.jsonl", '{"instance_id":"i1"}\n' '{"instance_id":"i2","text":"t"}\n'
    )
    rows = sorted(
        storage.read_input(spark, uri2, "instances").collect(), key=lambda r: r.instance_id
    )
    assert [(r.instance_id, r.text) for r in rows] == [("i1", None), ("i2", "t")]


def test_read_input_quoted_csv_newline_is_one_row(spark, tmp_path):
    """A quoted field holding a newline (or CRLF) is one record, not two halves."""
    p = tmp_path / "inst.csv"
    p.write_bytes(
        b"instance_id,text,split\n"
        b'i1,"first line\nsecond line",train\n'
        b'i2,"a\r\nb",test\n'
        b"i3,plain,train\n"
    )
    rows = {r["instance_id"]: r for r in storage.read_input(spark, str(p), "instances").collect()}
    assert sorted(rows) == ["i1", "i2", "i3"]
    assert rows["i1"]["text"] == "first line\nsecond line"
    assert rows["i2"]["split"] == "test"
    assert all(r[storage.CORRUPT] is None for r in rows.values())


def test_read_input_parquet_files_disagreeing_on_a_type_name_the_column(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "events.parquet"
    d.mkdir()
    pq.write_table(pa.table({"basket_id": ["b1"], "item_id": ["i1"]}), str(d / "part-0.parquet"))
    pq.write_table(
        pa.table({"basket_id": ["b2"], "item_id": pa.array([7], pa.int64())}),
        str(d / "part-1.parquet"),
    )
    with pytest.raises(
        storage.InputError,
        match=r"disagree on the type of column 'item_id': " r"bigint .*part-1.parquet.*string",
    ):
        storage.read_input(spark, str(d), "events")


def test_recover_removes_the_scratch_a_killed_incremental_stage_left(spark, tmp_path, caplog):
    """An incremental stage writes its selected rows and output under ``_incremental/`` and
    deletes them in a ``finally``, which a killed driver never reaches: the next run's
    ``recover`` (under the root's lease, before any stage) removes them, with a warning. The
    empty parent a finished stage leaves is removed without one."""
    import logging

    paths = storage.RunPaths(str(tmp_path / "root"))
    scratch = tmp_path / "root" / storage.INCREMENTAL_SCRATCH
    scratch.mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        storage.recover(spark, paths, [])
    assert not scratch.exists() and "did not finish" not in caplog.text
    left = scratch / "aggregate-1a2b3c4d" / "output"
    left.mkdir(parents=True)
    (left / "part-0.parquet").write_bytes(b"x" * 10)
    with caplog.at_level(logging.WARNING):
        storage.recover(spark, paths, [])
    assert not scratch.exists()
    assert "aggregate-1a2b3c4d), left by a run that did not finish" in caplog.text
