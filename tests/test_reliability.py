"""Reliability guarantees of the pipeline, stage by stage (graph, pretrain, embed, neighbors,
aggregate) on a reduced demo data set (~30% of the products, chosen by an id hash):

* deterministic output: two runs with the same config and input give identical tables (sorted
  rows, exact values) whatever the partitioning (shuffle partitions 2 vs 5, different
  ``inference.rows_per_task``);
* fault injection: ``faults.fail_first_attempt=[graph, embed, neighbors, aggregate]`` with
  ``spark.task.maxFailures=4`` (a second SparkSession configuration, hence a subprocess running
  the CLI) gives exactly the clean run's tables; with ``maxFailures=1`` (this process's session)
  the injected fault fails the stage, and the previously published tables stay intact;
* resource faults: a corrupt or missing model artifact fails embed / neighbors with an error
  naming the artifact (a watchdog cancels the jobs if a stage hangs); ``aggregate.strategy:
  broadcast`` over ``aggregate.broadcast_max_mb`` is refused before running, with advice.
"""

import os
import shutil
import subprocess
import sys
import threading

import pytest

from pina_spark import storage
from pina_spark.config import dump_config, load_config
from pina_spark.orchestration import pipeline
from pina_spark.storage import folds
from pina_spark.storage.manifest import Manifest

from demo_run import child_env

# every test stands on run_a, six stages run on the reduced demo data (minutes)
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_YAML = os.path.join(ROOT, "pina_spark", "conf", "demo.yaml")
SAMPLE_FRACTION = 0.3
STAGES = ("graph", "vectorizer", "embed", "pretrain", "neighbors", "aggregate")
FAULT_STAGES = ("graph", "embed", "neighbors", "aggregate")
#: published tables of each stage compared row by row
TABLES = {
    "graph": (storage.NODES, storage.I2I_EDGES, storage.INSTANCE_LABELS, storage.PRETRAIN_EDGES),
    "embed": (storage.EMBEDDINGS,),
    "neighbors": (storage.NEIGHBORS,),
    "aggregate": (storage.FEATURES,),
}
HANG_GUARD_S = 900  # not a timing assertion: only cancels a stage that would never end


def _plain(v):
    if isinstance(v, list | tuple):
        return tuple(_plain(x) for x in v)
    if hasattr(v, "asDict"):
        return tuple(sorted((k, _plain(x)) for k, x in v.asDict().items()))
    return v


def _table(spark, root, rel):
    df = storage.read_table(spark, storage.RunPaths(root), rel)
    cols = sorted(df.columns)
    return cols, sorted((tuple(_plain(r[c]) for c in cols) for r in df.collect()), key=repr)


def _assert_same_tables(spark, root_a, root_b, stages):
    for st in stages:
        for rel in TABLES.get(st, ()):
            if rel == storage.I2I_EDGES and not storage.is_complete(
                spark, storage.RunPaths(root_a).table(rel)
            ):
                continue
            ca, ra = _table(spark, root_a, rel)
            cb, rb = _table(spark, root_b, rel)
            assert ca == cb, f"{rel}: columns differ {ca} vs {cb}"
            assert len(ra) == len(rb), f"{rel}: {len(ra)} vs {len(rb)} rows"
            diff = [(x, y) for x, y in zip(ra, rb) if x != y]
            assert not diff, f"{rel}: {len(diff)} rows differ, e.g. {diff[:2]}"
            assert ra, f"{rel}: empty table (nothing compared)"


# --------------------------------------------------------------------------- data + runs
@pytest.fixture(scope="module")
def sample_inputs(tmp_path_factory):
    import pyarrow.parquet as pq

    from pina_spark.datasets import write_demo_data

    tmp = tmp_path_factory.mktemp("demo")
    full = write_demo_data(str(tmp / "full"))
    out = tmp / "sample"
    out.mkdir()
    inst = pq.read_table(full["instances"]).to_pandas()
    keep = {
        i
        for i in inst[storage.INSTANCE_ID]
        if folds.in_sample_fraction(i, SAMPLE_FRACTION, "pina-reliability")
    }
    paths = {}
    for name, uri in full.items():
        df = pq.read_table(uri).to_pandas()
        col = {
            "instances": storage.INSTANCE_ID,
            "instance_labels": storage.INSTANCE_ID,
            "events": storage.ITEM_ID,
        }.get(name)
        if col:
            df = df[df[col].isin(keep)]
        paths[name] = str(out / f"{name}.parquet")
        df.to_parquet(paths[name], index=False)
    return paths


def _cfg(output, inputs, sets=()):
    base = {"output": str(output), "input": dict(inputs)}
    return load_config(DEMO_YAML, ["spark.conf.spark.ui.enabled=false", *sets], base=base)


def _run(spark, cfg, stages, force=True):
    """run_pipeline with a hang guard: a stage that never ends is cancelled (and fails)."""
    hung = threading.Event()
    done = threading.Event()

    def guard():
        if not done.wait(HANG_GUARD_S):
            hung.set()
            spark.sparkContext.cancelAllJobs()

    t = threading.Thread(target=guard, daemon=True)
    t.start()
    try:
        return pipeline.run_pipeline(spark, cfg, list(stages), force=force)
    finally:
        done.set()
        assert not hung.is_set(), f"stages {stages} hung and were cancelled"


@pytest.fixture(scope="module")
def run_a(spark, sample_inputs, tmp_path_factory):
    """The clean reference run (shuffle partitions 2, rows_per_task 1000)."""
    out = tmp_path_factory.mktemp("run_a") / "out"
    cfg = _cfg(out, sample_inputs, ["inference.rows_per_task=1000"])
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    _run(spark, cfg, STAGES)
    return cfg


def _copy_run(cfg_a, dst, sets=()):
    shutil.copytree(cfg_a.output, str(dst))
    return _cfg(dst, cfg_a.input.to_dict(), sets)


# --------------------------------------------------------------------------- determinism
def test_deterministic_whatever_the_partitioning(spark, run_a, sample_inputs, tmp_path):
    cfg_b = _cfg(
        tmp_path / "run_b",
        sample_inputs,
        ["inference.rows_per_task=97", "spark.conf.spark.sql.shuffle.partitions=5"],
    )
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    try:
        _run(spark, cfg_b, STAGES)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    _assert_same_tables(
        spark, run_a.output, cfg_b.output, ("graph", "embed", "neighbors", "aggregate")
    )


def test_rerun_of_a_complete_run_is_skipped_and_unchanged(spark, run_a, tmp_path):
    """Resume: rerunning a complete run (same config and inputs) does no work and leaves every
    published table as it was."""
    cfg = _copy_run(run_a, tmp_path / "rerun", ["inference.rows_per_task=1000"])
    before = {
        rel: _table(spark, cfg.output, rel)
        for st in FAULT_STAGES
        for rel in TABLES[st]
        if storage.is_complete(spark, storage.RunPaths(cfg.output).table(rel))
    }
    result = _run(spark, cfg, STAGES, force=False)
    assert {s: result[s] for s in STAGES} == {s: "skipped" for s in STAGES}
    for rel, tab in before.items():
        assert _table(spark, cfg.output, rel) == tab, rel


# --------------------------------------------------------------------------- fault injection
@pytest.mark.parametrize("stage", FAULT_STAGES)
def test_injected_fault_fails_the_stage_with_max_failures_1(spark, run_a, tmp_path, stage):
    """This process's session has spark.task.maxFailures=1: the injected first-attempt fault is
    real (it fails the stage) and the previously published tables stay complete and intact."""
    assert spark.sparkContext.getConf().get("spark.task.maxFailures") == "1"
    cfg = _copy_run(
        run_a,
        tmp_path / "c",
        [f"faults.fail_first_attempt=[{stage}]", "inference.rows_per_task=1000"],
    )
    before = {
        rel: _table(spark, cfg.output, rel)
        for rel in TABLES[stage]
        if storage.is_complete(spark, storage.RunPaths(cfg.output).table(rel))
    }
    with pytest.raises(Exception, match="injected fault") as e:
        _run(spark, cfg, [stage])
    assert f"stage {stage}" in str(e.value)
    for rel, tab in before.items():
        assert _table(spark, cfg.output, rel) == tab, f"{rel} changed by a failed run"
    entry = Manifest(storage.RunPaths(cfg.output).manifest).stage(stage)
    assert entry["status"] == "failed" and "injected fault" in entry["error"]
    assert (
        not os.listdir(os.path.join(cfg.output, "_staging"))
        if os.path.isdir(os.path.join(cfg.output, "_staging"))
        else True
    )


def test_fault_injection_with_retries_gives_identical_output(spark, run_a, tmp_path):
    """A second SparkSession configuration (maxFailures=4) in a subprocess running the CLI:
    every task of graph, embed, neighbors and aggregate fails its first attempt, Spark retries
    it, and the published tables are exactly those of the clean run. The models of the clean run
    are reused (pretrain has no executor tasks to inject into)."""
    out = tmp_path / "faulty"
    cfg = _cfg(out, run_a.input.to_dict(), ["inference.rows_per_task=1000"])
    cfg_file = tmp_path / "faulty.yaml"
    cfg_file.write_text(dump_config(cfg))
    env = child_env()
    cmd = [
        sys.executable,
        "-m",
        "pina_spark.cli",
        "run",
        "--config",
        str(cfg_file),
        "--stages",
        ",".join(FAULT_STAGES),
        "--models",
        run_a.output,
        "--set",
        "run.trust_models=true",  # run_a is not promoted: nothing else vouches for its models
        # local mode ignores spark.task.maxFailures: retries need master local[N,F]
        "--set",
        "spark.master=local[2,4]",
        "--set",
        "spark.conf.spark.task.maxFailures=4",
        "--set",
        "spark.conf.spark.sql.shuffle.partitions=3",
        "--set",
        "faults.fail_first_attempt=[graph,embed,neighbors,aggregate]",
    ]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-6000:]
    # the faults really fired (Spark logs each lost task) and were retried
    for st in FAULT_STAGES:
        assert f"injected fault: stage {st}" in log, f"no injected fault seen for {st}"
    _assert_same_tables(spark, run_a.output, str(out), FAULT_STAGES)


# --------------------------------------------------------------------------- resource faults
def _model_files(root, sub):
    d = os.path.join(root, sub)
    out = []
    for dp, _, fs in os.walk(d):
        out += [os.path.join(dp, f) for f in fs if not f.startswith(".") and f != "_SUCCESS"]
    return sorted(out)


def test_corrupt_g_model_fails_neighbors_naming_the_artifact(spark, run_a, tmp_path):
    cfg = _copy_run(run_a, tmp_path / "corrupt_g", ["inference.rows_per_task=1000"])
    files = [
        f
        for f in _model_files(cfg.output, storage.MODELS + "/g/pina/fold=0")
        if not f.endswith("output_nodes.npy")
    ]
    assert files, "no g model files found"
    for f in files:
        with open(f, "wb") as fh:
            fh.write(b"\x00garbage")
    with pytest.raises(Exception) as e:
        _run(spark, cfg, ["neighbors"])
    assert "g/pina/fold=0" in str(e.value), str(e.value)[-2000:]


def test_missing_vectorizer_fails_embed_naming_the_artifact(spark, run_a, tmp_path):
    cfg = _copy_run(run_a, tmp_path / "missing_vec", ["inference.rows_per_task=1000"])
    vec = os.path.join(cfg.output, storage.VECTORIZER)
    assert os.path.isdir(vec)
    shutil.rmtree(vec)
    with pytest.raises(Exception) as e:
        _run(spark, cfg, ["embed"])
    assert "vectorizer" in str(e.value), str(e.value)[-2000:]


def test_corrupt_vectorizer_fails_embed_naming_the_artifact(spark, run_a, tmp_path):
    cfg = _copy_run(run_a, tmp_path / "corrupt_vec", ["inference.rows_per_task=1000"])
    files = [f for f in _model_files(cfg.output, storage.VECTORIZER) if not f.endswith(".json")]
    assert files, "no vectorizer files found"
    for f in files:
        with open(f, "wb") as fh:
            fh.write(b"\x00garbage")
    with pytest.raises(Exception) as e:
        _run(spark, cfg, ["embed"])
    assert "vectorizer" in str(e.value), str(e.value)[-2000:]


def test_broadcast_over_limit_is_refused_before_running(spark, run_a, tmp_path):
    cfg = _copy_run(
        run_a,
        tmp_path / "bc",
        [
            "aggregate.strategy=broadcast",
            "aggregate.broadcast_via=spark",
            "aggregate.broadcast_max_mb=0",
        ],
    )
    before = _table(spark, cfg.output, storage.FEATURES)
    with pytest.raises(Exception) as e:
        _run(spark, cfg, ["aggregate"])
    msg = str(e.value)
    assert "broadcast_max_mb" in msg and "shuffle" in msg, msg
    assert _table(spark, cfg.output, storage.FEATURES) == before
