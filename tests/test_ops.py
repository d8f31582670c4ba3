"""Production operation: run dates, resume after a failure, --force, reuse of an earlier run's
models (nodes pre-step), incremental selection, progress statistics in the manifest.

The pipeline mechanics are tested with tiny real stages defined here (they read and write
published tables through pina_spark.storage) registered by monkeypatching
``pipeline.STAGES``, so these tests do not depend on the other stage modules. Like the real
stages, they return a :class:`pina_spark.stages.StageStats` (:class:`StubStats`); the
manifest records its plain form.
"""

import dataclasses as dc
import json
import os

import pytest

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.models import artifacts
from pina_spark.orchestration import daily, pipeline, resume, runs
from pina_spark.stages import StageStats, flattened, optional
from pina_spark.storage.manifest import Manifest

CALLS = []  # (stage, root) of every stub call
FAIL = set()  # stages that raise
SEEN = {}  # stage -> node indices it saw (incremental runs)


# --------------------------------------------------------------------------- stub stages
@dc.dataclass(frozen=True, kw_only=True, eq=False)
class StubStats(StageStats):
    """What a stub stage returns.

    Attributes:
        instances, labels: the nodes of the graph stub.
        rows: the rows a stub stage saw.
        folders: ``{stage: "stub"}`` of a model folder stub, written at the top level.
    """

    instances: int | None = optional()
    labels: int | None = optional()
    rows: int | None = optional()
    folders: dict[str, str] = flattened()


def stub_graph(ctx):
    from pyspark.sql import functions as F

    CALLS.append(("graph", ctx.paths.root))
    spark = ctx.spark
    inst = storage.read_input(spark, ctx.cfg.input.instances, "instances").drop(storage.CORRUPT)
    rows = sorted(inst.collect(), key=lambda r: r[storage.INSTANCE_ID])
    nodes = [
        (
            i,
            storage.KIND_INSTANCE,
            r[storage.INSTANCE_ID],
            r[storage.TEXT],
            r[storage.SPLIT] or "train",
        )
        for i, r in enumerate(rows)
    ]
    n = len(nodes)
    nodes += [
        (n, storage.KIND_LABEL, "L0", "label zero", None),
        (n + 1, storage.KIND_LABEL, "L1", "label one", None),
    ]
    df = spark.createDataFrame(nodes, storage.schema(storage.NODES))
    storage.write_table(df, ctx.paths, storage.NODES)
    pe = df.where(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
        F.col(storage.NODE_INDEX).alias(storage.SRC_INDEX),
        F.lit(n).cast("long").alias(storage.DST_INDEX),
        F.lit("pina").alias(storage.VARIANT),
    )
    storage.write_table(pe, ctx.paths, storage.PRETRAIN_EDGES, partition_by=[storage.VARIANT])
    il = pe.select(
        F.col(storage.SRC_INDEX).alias(storage.INSTANCE_INDEX),
        F.col(storage.DST_INDEX).alias(storage.LABEL_INDEX),
    )
    storage.write_table(il, ctx.paths, storage.INSTANCE_LABELS)
    return StubStats(instances=n, labels=2)


def _stub_model_folder(stage, uri, doc):
    CALLS.append((stage, os.path.dirname(storage.local_path(uri))))
    if stage in FAIL:
        raise RuntimeError(f"{stage} failed on purpose")
    d = storage.local_path(uri)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "stub.json"), "w") as fh:
        json.dump(doc, fh)
    open(os.path.join(d, "_SUCCESS"), "w").close()
    return StubStats(folders={stage: "stub"})


def stub_vectorizer(ctx):
    return _stub_model_folder("vectorizer", artifacts.vectorizer_dir(ctx.models_root), {})


def stub_pretrain(ctx):
    # g is trained from the embeddings, so they exist by now
    assert os.path.exists(
        os.path.join(storage.local_path(ctx.paths.table(storage.EMBEDDINGS)), "_SUCCESS")
    )
    return _stub_model_folder("pretrain", ctx.models_root, {"k": ctx.cfg.neighbors.k})


def stub_embed(ctx):
    from pyspark.sql import functions as F

    CALLS.append(("embed", ctx.paths.root))
    vec = artifacts.vectorizer_dir(ctx.models_root)
    assert os.path.exists(os.path.join(storage.local_path(vec), "_SUCCESS"))
    if "embed" in FAIL:
        raise RuntimeError("embed failed on purpose")
    nodes = storage.read_table(ctx.spark, ctx.paths, storage.NODES)
    SEEN["embed"] = sorted(r[0] for r in nodes.select(storage.NODE_INDEX).collect())
    emb = nodes.select(
        storage.NODE_INDEX,
        F.array(F.length(storage.TEXT).cast("float")).alias(storage.DENSE),
        F.array(F.lit(0)).alias(storage.SPARSE_INDICES),
        F.array(F.lit(1.0).cast("float")).alias(storage.SPARSE_VALUES),
    )
    storage.write_table(emb, ctx.paths, storage.EMBEDDINGS)
    return StubStats(rows=len(SEEN["embed"]))


def stub_neighbors(ctx):
    from pyspark.sql import functions as F

    CALLS.append(("neighbors", ctx.paths.root))
    emb = storage.read_table(ctx.spark, ctx.paths, storage.EMBEDDINGS)
    nodes = storage.read_table(ctx.spark, ctx.paths, storage.NODES)
    inst = emb.join(nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE), storage.NODE_INDEX)
    SEEN["neighbors"] = sorted(r[0] for r in inst.select(storage.NODE_INDEX).collect())
    labels = [
        r[0]
        for r in nodes.where(F.col(storage.KIND) == storage.KIND_LABEL)
        .select(storage.NODE_INDEX)
        .collect()
    ]
    nb = inst.select(
        F.col(storage.NODE_INDEX).alias(storage.INSTANCE_INDEX),
        F.array(*[F.lit(x).cast("long") for x in sorted(labels)]).alias(storage.NEIGHBOR),
        F.array(F.lit(0.5).cast("float"), F.lit(0.5).cast("float")).alias(storage.SCORE),
        F.lit("pina").alias(storage.VARIANT),
    )
    storage.write_table(nb, ctx.paths, storage.NEIGHBORS, partition_by=[storage.VARIANT])
    return StubStats(rows=len(SEEN["neighbors"]))


def stub_aggregate(ctx):
    from pyspark.sql import functions as F

    CALLS.append(("aggregate", ctx.paths.root))
    nb = storage.read_table(ctx.spark, ctx.paths, storage.NEIGHBORS)
    nodes = storage.read_table(ctx.spark, ctx.paths, storage.NODES)
    emb = storage.read_table(ctx.spark, ctx.paths, storage.EMBEDDINGS)
    SEEN["aggregate"] = sorted(r[0] for r in nb.select(storage.INSTANCE_INDEX).collect())
    f = (
        nb.join(nodes, nb[storage.INSTANCE_INDEX] == nodes[storage.NODE_INDEX])
        .join(emb, storage.NODE_INDEX)
        .select(
            F.col(storage.NODE_ID).alias(storage.INSTANCE_ID),
            F.col(storage.SPLIT),
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
            F.col(storage.VARIANT),
        )
    )
    storage.write_table(
        f, ctx.paths, storage.FEATURES, partition_by=[storage.VARIANT, storage.SPLIT]
    )
    return StubStats(rows=len(SEEN["aggregate"]))


def stub_train(ctx):
    CALLS.append(("train", ctx.paths.root))
    f = storage.read_table(ctx.spark, ctx.paths, storage.FEATURES)
    storage.write_table(
        f.select(storage.INSTANCE_ID, storage.VARIANT),
        ctx.paths,
        storage.PREDICTIONS,
        partition_by=[storage.VARIANT],
    )
    return StubStats()


def stub_evaluate(ctx):
    CALLS.append(("evaluate", ctx.paths.root))
    d = storage.local_path(ctx.paths.table(storage.EVAL))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.json"), "w") as fh:
        json.dump({"ok": True}, fh)
    open(os.path.join(d, "_SUCCESS"), "w").close()
    return StubStats()


@pytest.fixture
def stubs(monkeypatch):
    specs = {}
    for name, spec in pipeline.STAGES.items():
        specs[name] = dc.replace(spec, target=f"{__name__}:stub_{name}")
    monkeypatch.setattr(pipeline, "STAGES", specs)
    CALLS.clear()
    FAIL.clear()
    SEEN.clear()
    yield CALLS


def write_instances(spark, path, rows):
    spark.createDataFrame(rows, "instance_id string, text string, split string").coalesce(
        1
    ).write.mode("overwrite").parquet(path)
    return path


def make_cfg(tmp_path, instances, **run):
    return config_from_dict(
        {"output": str(tmp_path / "out"), "input": {"instances": instances}, "run": run}
    )


def count(spark, uri):
    return spark.read.parquet(uri).count()


TO_FEATURES = ["graph", "vectorizer", "embed", "pretrain", "neighbors", "aggregate"]
INST_A = [
    ("a", "red apple", "train"),
    ("b", "green pear", "train"),
    ("c", "blue plum", "test"),
    ("d", "ripe kiwi", "train"),
    ("e", "sour lime", "test"),
]
INST_B = [
    ("a", "red apple", "train"),
    ("x", "yellow banana", "train"),
    ("y", "black grape", "test"),
]


# --------------------------------------------------------------------------- run dates
@pytest.mark.slow
def test_run_date_rerun_replaces_and_new_date_adds(spark, tmp_path, stubs):
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    b = write_instances(spark, str(tmp_path / "b.parquet"), INST_B)
    d1 = make_cfg(tmp_path, a, run_date="2026-11-20")
    assert set(pipeline.run_pipeline(spark, d1, TO_FEATURES).values()) == {"ran"}
    p1 = storage.RunPaths(d1.output, "2026-11-20")
    assert p1.root.endswith("/out/run_date=2026-11-20")
    assert count(spark, p1.table(storage.FEATURES)) == 5

    # same date, same inputs: nothing to redo
    assert set(pipeline.run_pipeline(spark, d1, TO_FEATURES).values()) == {"skipped"}
    # same date, --force (aggregate only): republished, not appended
    assert pipeline.run_pipeline(spark, d1, ["aggregate"], force=True) == {"aggregate": "ran"}
    f1 = spark.read.parquet(p1.table(storage.FEATURES))
    assert f1.count() == 5 and f1.select(storage.INSTANCE_ID).distinct().count() == 5

    # same date, new input: replaced (3 rows, not 5 + 3)
    d1b = make_cfg(tmp_path, b, run_date="2026-11-20")
    assert set(pipeline.run_pipeline(spark, d1b, TO_FEATURES).values()) == {"ran"}
    f1 = spark.read.parquet(p1.table(storage.FEATURES))
    assert sorted(r[0] for r in f1.select(storage.INSTANCE_ID).collect()) == ["a", "x", "y"]
    assert count(spark, p1.table(storage.NODES)) == 3 + 2

    # a new date adds a folder and leaves the other date untouched
    before = Manifest(p1.manifest).data["stages"]
    d2 = make_cfg(tmp_path, a, run_date="2026-11-21")
    pipeline.run_pipeline(spark, d2, TO_FEATURES)
    p2 = storage.RunPaths(d2.output, "2026-11-21")
    assert count(spark, p2.table(storage.FEATURES)) == 5
    assert count(spark, p1.table(storage.FEATURES)) == 3
    assert Manifest(p1.manifest).data["stages"] == before
    assert runs.list_run_dates(spark, d1.output) == ["2026-11-20", "2026-11-21"]
    assert sorted(os.listdir(tmp_path / "out")) == ["run_date=2026-11-20", "run_date=2026-11-21"]


# --------------------------------------------------------------------------- resume / force
@pytest.mark.slow
def test_resume_after_failure_skips_finished_stages(spark, tmp_path, stubs):
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    FAIL.add("embed")
    with pytest.raises(RuntimeError, match="embed failed on purpose"):
        pipeline.run_pipeline(spark, cfg)
    paths = storage.RunPaths(cfg.output)
    m = Manifest(paths.manifest)
    assert m.stage("graph")["status"] == "complete"
    assert m.stage("vectorizer")["status"] == "complete"
    assert m.stage("embed")["status"] == "failed"
    assert "embed failed on purpose" in m.stage("embed")["error"]
    assert m.data["history"][-1]["status"] == "failed"
    graph_version = m.stage("graph")["version"]
    vectorizer_finished = m.stage("vectorizer")["finished"]

    FAIL.clear()
    CALLS.clear()
    result = pipeline.run_pipeline(spark, cfg)
    assert result["graph"] == "skipped" and result["vectorizer"] == "skipped"
    assert [c[0] for c in CALLS] == list(pipeline.STAGES)[2:]  # from embed on
    m = Manifest(paths.manifest)
    assert m.stage("graph")["version"] == graph_version
    assert m.stage("vectorizer")["finished"] == vectorizer_finished
    assert m.stage("graph")["runs"] == 1
    assert all(m.stage(s)["status"] == "complete" for s in pipeline.STAGES)
    assert m.data["history"][-1]["status"] == "complete"

    # --force redoes everything
    CALLS.clear()
    assert set(
        pipeline.run_pipeline(spark, cfg.replace(run=cfg.run.__class__(force=True))).values()
    ) == {"ran"}
    assert len(CALLS) == 8


@pytest.mark.slow
def test_changed_config_redoes_that_stage_and_later_ones(spark, tmp_path, stubs):
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    pipeline.run_pipeline(spark, cfg)
    CALLS.clear()
    cfg2 = config_from_dict({**cfg.to_dict(), "aggregate": {"v1_weight": 0.5}})
    result = pipeline.run_pipeline(spark, cfg2)
    assert [k for k, v in result.items() if v == "ran"] == ["aggregate", "train", "evaluate"]
    assert [c[0] for c in CALLS] == ["aggregate", "train", "evaluate"]
    # running one stage alone (as a jobs/<stage>.py step does) agrees with the full run
    assert pipeline.run_pipeline(spark, cfg2, ["embed"]) == {"embed": "skipped"}


@pytest.mark.slow
def test_g_settings_do_not_rerun_the_vectorizer_or_embed(spark, tmp_path, stubs):
    """Stage 1 is split so that a change to g (its tree, folds, where its fits run) keeps the
    vectorizer and the embeddings, the expensive part; a vectorizer setting reruns both, and so
    does g's tree for the one encoder whose fine-tuning uses it (xtransformer)."""
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    pipeline.run_pipeline(spark, cfg, TO_FEATURES)

    def rerun(**sections):
        d = cfg.to_dict()
        for sec, val in sections.items():
            d[sec] = {**d[sec], **val}
        c = config_from_dict(d)
        CALLS.clear()
        result = pipeline.run_pipeline(spark, c, TO_FEATURES)
        pipeline.run_pipeline(spark, cfg, TO_FEATURES)  # back to the reference run
        return [k for k, v in result.items() if v == "ran"]

    after_g = ["pretrain", "neighbors", "aggregate"]
    assert rerun(pretrain={"xlinear": {**cfg.pretrain.xlinear.to_dict(), "nr_splits": 4}}) == (
        after_g
    )
    # pina_naive's own leaf: any value but the reference run's
    other_leaf = (cfg.pretrain.naive_max_leaf_size or cfg.pretrain.xlinear.max_leaf_size) + 7
    assert rerun(pretrain={"naive_max_leaf_size": other_leaf}) == after_g
    other_folds = cfg.neighbors.folds + 1  # any count but the reference run's own
    assert rerun(neighbors={"folds": other_folds}) == after_g
    assert rerun(pretrain={"train_on": "executors"}) == []  # the same models either way
    assert rerun(pretrain={"tfidf": {"min_df_cnt": 1}}) == TO_FEATURES[1:]
    xt = config_from_dict({**cfg.to_dict(), "pretrain": {"encoder": "xtransformer"}})
    pipeline.run_pipeline(spark, xt, TO_FEATURES)
    d = xt.to_dict()
    d["pretrain"]["xlinear"]["nr_splits"] = 4
    CALLS.clear()
    result = pipeline.run_pipeline(spark, config_from_dict(d), TO_FEATURES)
    assert [k for k, v in result.items() if v == "ran"] == TO_FEATURES[1:]


def test_missing_output_is_redone_even_if_manifest_says_complete(spark, tmp_path, stubs):
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    pipeline.run_pipeline(spark, cfg, ["graph", "vectorizer", "embed"])
    storage.delete_path(spark, storage.RunPaths(cfg.output).table(storage.EMBEDDINGS))
    result = pipeline.run_pipeline(spark, cfg, ["graph", "vectorizer", "embed"])
    assert result == {"graph": "skipped", "vectorizer": "skipped", "embed": "ran"}


def test_manifest_records_progress_versions_and_config(spark, tmp_path, stubs):
    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    pipeline.run_pipeline(spark, cfg, ["graph", "vectorizer", "embed"])
    data = json.loads(open(storage.RunPaths(cfg.output).manifest).read())
    g = data["stages"]["graph"]
    assert g["rows_out"] == {
        storage.NODES: 7,
        storage.PRETRAIN_EDGES: 5,
        storage.INSTANCE_LABELS: 5,
    }
    assert g["rows_per_s"] > 0 and g["duration_s"] >= 0
    assert g["stats"] == {"instances": 5, "labels": 2}
    assert "started" in g and "finished" in g and len(g["fingerprint"]) == 16
    assert data["stages"]["vectorizer"]["rows_out"] == {}  # a model folder, not a table
    assert data["stages"]["embed"]["rows_out"] == {storage.EMBEDDINGS: 7}
    assert data["libraries"]["pyspark"] and data["libraries"]["python"]
    assert data["config"]["input"]["instances"] == a
    h = data["history"][-1]
    assert h["stages"] == ["graph", "vectorizer", "embed"] and h["status"] == "complete"
    assert h["result"] == {"graph": "ran", "vectorizer": "ran", "embed": "ran"}


def test_progress_is_logged(spark, tmp_path, stubs, caplog):
    import logging

    a = write_instances(spark, str(tmp_path / "a.parquet"), INST_A)
    cfg = make_cfg(tmp_path, a)
    with caplog.at_level(logging.INFO, logger="pina_spark.orchestration.pipeline"):
        pipeline.run_pipeline(spark, cfg, ["graph"])
    text = caplog.text
    assert "stage graph: start" in text
    assert "stage graph: done in" in text and "rows/s" in text and "instances=5" in text


# ------------------------------------------------------------------------- models of an earlier run
def test_extend_nodes_keeps_indices_and_appends_new_sorted(spark):
    prev = spark.createDataFrame(
        [
            (0, "instance", "b", "old b", "train"),
            (1, "instance", "d", "old d", "test"),
            (2, "label", "L0", "label 0", None),
            (3, "label", "b", "b as a label", None),
        ],
        storage.schema(storage.NODES),
    )
    inst = spark.createDataFrame(
        [
            ("z", "zeta", None),
            ("b", "new b", None),
            ("c", "gamma", "test"),
            ("", "blank", None),
            ("z", "zeta dup", None),
        ],
        "instance_id string, text string, split string",
    )
    out = {r[storage.NODE_INDEX]: tuple(r) for r in daily.extend_nodes(prev, inst).collect()}
    assert out == {
        0: (0, "instance", "b", "new b", "train"),  # kept index and split, new text
        1: (1, "instance", "d", "old d", "test"),  # not in today's input: kept
        2: (2, "label", "L0", "label 0", None),
        3: (3, "label", "b", "b as a label", None),  # a label with an instance's id
        4: (4, "instance", "c", "gamma", "test"),  # new, sorted by id, split as given
        5: (5, "instance", "z", "zeta", "new"),  # new, no split: 'new'; dedup by min
    }


def _full_run(spark, tmp_path, rows=INST_A):
    a = write_instances(spark, str(tmp_path / "a.parquet"), rows)
    cfg = config_from_dict({"output": str(tmp_path / "models_run"), "input": {"instances": a}})
    pipeline.run_pipeline(spark, cfg, TO_FEATURES)
    return cfg.output


@pytest.mark.slow
def test_models_run_augments_new_instances_without_retraining(spark, tmp_path, stubs):
    models_root = _full_run(spark, tmp_path)
    new = write_instances(
        spark,
        str(tmp_path / "new.parquet"),
        [("f", "fresh fig", None), ("a", "red apple", None), ("g", "green grape", None)],
    )
    CALLS.clear()
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "daily"),
            "input": {"instances": new},
            "run": {"run_date": "2026-11-22", "models": models_root},
        }
    )
    result = pipeline.run_pipeline(spark, cfg, ["embed", "neighbors", "aggregate"])
    assert result == {"nodes": "ran", "embed": "ran", "neighbors": "ran", "aggregate": "ran"}
    assert [c[0] for c in CALLS] == ["embed", "neighbors", "aggregate"]  # nothing trained
    paths = storage.RunPaths(cfg.output, "2026-11-22")
    assert not os.path.exists(paths.table(storage.MODELS))
    nodes = {
        r[storage.NODE_ID] + "/" + r[storage.KIND]: (r[storage.NODE_INDEX], r[storage.SPLIT])
        for r in storage.read_table(spark, paths, storage.NODES).collect()
    }
    prev = {
        r[storage.NODE_ID] + "/" + r[storage.KIND]: (r[storage.NODE_INDEX], r[storage.SPLIT])
        for r in storage.read_table(spark, storage.RunPaths(models_root), storage.NODES).collect()
    }
    assert {k: v for k, v in nodes.items() if k in prev} == prev
    assert nodes["f/instance"] == (7, "new") and nodes["g/instance"] == (8, "new")
    feats = storage.read_table(spark, paths, storage.FEATURES)
    assert feats.count() == 7 and feats.where("split = 'new'").count() == 2
    # rerun: nodes pre-step and stages are complete
    assert set(pipeline.run_pipeline(spark, cfg, ["embed", "neighbors", "aggregate"]).values()) == {
        "skipped"
    }


STAGES3 = ["embed", "neighbors", "aggregate"]


@pytest.mark.slow
def test_daily_runs_carry_forward_the_products_earlier_days_appended(spark, tmp_path, stubs):
    """A daily input is a delta. A product one day appended stays in the next days' nodes and
    features at the same index (it used to drop out the next day, while the models run's
    products stayed); a later input updates its text and split. After a retraining the new
    models run's nodes are the catalogue: what it lacks is counted, not carried."""
    models_root = _full_run(spark, tmp_path)
    RESULT: dict = {}

    def day(run_date, rows, models=models_root, incremental=False, stages=STAGES3):
        cfg = config_from_dict(
            {
                "output": str(tmp_path / "daily"),
                "input": {"instances": write_instances(spark, str(tmp_path / run_date), rows)},
                "run": {"run_date": run_date, "models": models, "incremental": incremental},
                "train": {"variants": ["baseline", "vectorizer_only", "pina"]},
            }
        )
        SEEN.clear()
        RESULT[run_date] = pipeline.run_pipeline(spark, cfg, stages)
        paths = storage.RunPaths(cfg.output, run_date)
        nodes = {
            r[storage.NODE_ID]: (r[storage.NODE_INDEX], r[storage.TEXT], r[storage.SPLIT])
            for r in storage.read_table(spark, paths, storage.NODES).collect()
            if r[storage.KIND] == storage.KIND_INSTANCE
        }
        feats = {
            r[0]
            for r in storage.read_table(spark, paths, storage.FEATURES)
            .select(storage.INSTANCE_ID)
            .collect()
        }
        return paths, nodes, feats, Manifest(paths.manifest).stage("nodes")["stats"]

    d1, n1, f1, s1 = day("2026-11-22", [("f", "fresh fig", None), ("g", "green grape", None)])
    assert (n1["f"], n1["g"]) == ((7, "fresh fig", "new"), (8, "green grape", "new"))
    assert s1["instances_carried"] == 0 and s1["carried_from"] is None
    # day 2, incremental: 'a' (the models run's) changes text, 'g' gets a split, 'h' is new
    d2, n2, f2, s2 = day(
        "2026-11-23",
        [("a", "red apple, crisp", None), ("g", "green grape", "test"), ("h", "honeydew", None)],
        incremental=True,
    )
    assert n2["f"] == n1["f"]  # carried: same index, text and split
    assert n2["g"] == (8, "green grape", "test") and n2["h"] == (9, "honeydew", "new")
    assert n2["a"] == (0, "red apple, crisp", "train")  # a models-run row keeps its split
    assert f2 == set(n2) and {"f", "g", "h"} <= f2
    assert (s2["instances_carried"], s2["instances_appended"]) == (2, 1)
    assert s2["carried_from"] == d1.root and s2["instances_not_carried"] == 0
    assert SEEN["embed"] == [0, 8, 9]  # f is copied from day 1, not recomputed
    # day 3 with a bad row (and 'a' as it was), then rerun with nothing new: day 2's text of
    # 'a' stays (the delta carries it), and the rerun's empty quarantine replaces the first's
    p3, _, _, s3 = day(
        "2026-11-24", [("bad\nid", "a title", None), ("a", "red apple, crisp", None)]
    )
    quarantined = storage.read_table(spark, p3, f"{storage.QUARANTINE}/instances")
    assert quarantined.count() == 1 and s3["inputs"]["instances"]["rows_quarantined"] == 1
    from pina_spark.cli.status import status_data  # status shows a daily root's quarantine

    assert status_data(p3.root)["quarantine"]["instances"]["rows_quarantined"] == 1
    _, n3, f3, s3 = day("2026-11-24", [])
    assert n3 == n2 and f3 == f2 and s3["instances_carried"] == 3
    assert RESULT["2026-11-24"]["nodes"] == "ran"
    assert storage.read_table(spark, p3, f"{storage.QUARANTINE}/instances").count() == 0
    # day 1 republished (a backfill): it names the later days; day 2, run again with the
    # same input, reruns its nodes step (its base changed) and carries day 1's new product
    _, _, _, s1b = day("2026-11-22", [("f", "fresh fig", None), ("k", "kiwi berry", None)])
    assert s1b["later_daily_runs"] == ["2026-11-23", "2026-11-24"]
    # a later day's aggregate step alone is refused: its nodes rerun (their base changed) and
    # embeddings and neighbours would be left keyed by the old node indices; nothing runs
    before = Manifest(storage.RunPaths(str(tmp_path / "daily"), "2026-11-23").manifest).stage(
        "nodes"
    )
    with pytest.raises(storage.InputError) as e:
        day("2026-11-23", [("h", "honeydew", None)], stages=["aggregate"])
    assert "step nodes runs in this command" in str(e.value)
    assert str(e.value).endswith("--stages embed,neighbors,aggregate")
    after = Manifest(storage.RunPaths(str(tmp_path / "daily"), "2026-11-23").manifest)
    assert after.stage("nodes") == before
    _, n2b, f2b, s2b = day(
        "2026-11-23",
        [("a", "red apple, crisp", None), ("g", "green grape", "test"), ("h", "honeydew", None)],
        incremental=True,
    )
    assert RESULT["2026-11-23"]["nodes"] == "ran" and "k" in n2b and "k" in f2b
    assert s2b["later_daily_runs"] == ["2026-11-24"]
    # a model-run product given another split by a daily input keeps g's split, counted
    _, n3b, _, s3b = day("2026-11-24", [("c", "blue plum", "train")])
    assert n3b["c"][2] == "test" and s3b["splits_not_taken"] == 1
    n2, f2 = n2b, f2b
    # a retraining since (other models, another index space): day 4 starts from its nodes;
    # f and g are counted as not carried, h is named again by the day's input
    a = write_instances(spark, str(tmp_path / "b.parquet"), INST_B)
    retrain = config_from_dict({"output": str(tmp_path / "retrain"), "input": {"instances": a}})
    pipeline.run_pipeline(spark, retrain, TO_FEATURES)
    _, n4, f4, s4 = day("2026-11-25", [("h", "honeydew", None)], models=retrain.output)
    assert set(n4) == {"a", "x", "y", "h"} and f4 == set(n4)
    assert s4["instances_not_carried"] == 7 and s4["carried_from"] is None
    # a new daily root whose command leaves out embed: refused before anything is published
    with pytest.raises(storage.InputError) as e:
        day("2026-11-26", [("m", "mango", None)], stages=["neighbors", "aggregate"])
    assert str(e.value).endswith("--stages embed,neighbors,aggregate")
    assert not os.path.exists(
        storage.RunPaths(str(tmp_path / "daily"), "2026-11-26").table("nodes")
    )


@pytest.mark.slow
def test_a_daily_step_is_not_redone_when_an_input_it_never_reads_changes(spark, tmp_path, stubs):
    """The nodes pre-step's fingerprint covers what it reads (the day's instances, run.models,
    the earlier daily root it continues), not the events or monthly labels a config also
    names: a refresh of those between a day's steps reran it, and the next step was refused
    (its embeddings keyed by the replaced nodes)."""
    models_root = _full_run(spark, tmp_path)
    events = tmp_path / "events.csv"
    events.write_text("basket_id,item_id\nb1,a\n")
    day = write_instances(spark, str(tmp_path / "day.parquet"), [("f", "fresh fig", None)])
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "daily"),
            "input": {"instances": day, "events": str(events)},
            "run": {"run_date": "2026-11-22", "models": models_root},
            "train": {"variants": ["baseline", "vectorizer_only", "pina"]},
        }
    )
    assert pipeline.run_pipeline(spark, cfg, ["embed"])["nodes"] == "ran"
    events.write_text("basket_id,item_id\nb1,a\nb2,c\n")  # refreshed between two steps
    assert pipeline.run_pipeline(spark, cfg, ["neighbors"]) == {
        "nodes": "skipped",
        "neighbors": "ran",
    }
    # the day's own input rewritten: the nodes step would redo, so the next step is refused
    write_instances(spark, day, [("f", "fresh fig", None), ("g", "green grape", None)])
    with pytest.raises(storage.InputError) as e:
        pipeline.run_pipeline(spark, cfg, ["aggregate"])
    assert str(e.value).endswith("--stages embed,neighbors,aggregate")


def test_carry_of_walks_back_to_the_last_complete_daily_root(tmp_path):
    """The nodes pre-step's base: the latest earlier root whose manifest holds a complete
    nodes step, passing over roots that are not daily (a retraining sharing the output) and
    daily roots whose nodes step failed (named); a later daily root is named too; the models
    are the same when the base's nodes step recorded this run's settings."""
    out = str(tmp_path / "out")
    models = str(tmp_path / "models")
    cfg = config_from_dict({"output": out, "run": {"run_date": "2026-11-05", "models": models}})
    settings = resume.settings_token(cfg, resume.NODES_STEP)

    def root(d, entries):
        m = Manifest(storage.RunPaths(out, d).manifest)
        for name, status in entries.items():
            m.mark_started(name, "fp")
            if status == "complete":
                m.record_stage(name, {}, "fp", 1.0, settings=settings)
            elif status == "other-models":
                m.record_stage(name, {}, "fp", 1.0, settings="else")
            else:
                m.mark_failed(name, "boom")

    root("2026-11-01", {"nodes": "complete"})
    root("2026-11-02", {"nodes": "other-models"})
    root("2026-11-03", {"graph": "complete"})  # a retraining under the same output
    root("2026-11-04", {"nodes": "failed"})
    root("2026-11-06", {"nodes": "complete"})
    dates = runs.list_run_dates_arrow(out)
    assert dates == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-06"]
    c = daily.carry_of(cfg, dates)
    assert c.base.root == storage.RunPaths(out, "2026-11-02").root and not c.same_index_space
    assert c.skipped == ("2026-11-04",) and c.later == ("2026-11-06",)
    assert c.token.startswith("carry:" + c.base.root)
    c1 = daily.carry_of(dc.replace(cfg, run=dc.replace(cfg.run, run_date="2026-11-02")), dates)
    assert c1.base.root.endswith("run_date=2026-11-01") and c1.same_index_space
    assert daily.carry_of(cfg, []) == daily.Carry(index_space=resume.index_space_token(cfg))
    # the index space is the models run's nodes: a refit of its g (other settings) keeps it,
    # a republished graph (a retraining on the same root) does not
    mm = Manifest(storage.RunPaths(models).manifest)
    mm.mark_started("graph", "fp")
    mm.record_stage("graph", {}, "fp", 1.0)
    space = resume.index_space_token(cfg)
    m2 = Manifest(storage.RunPaths(out, "2026-11-02").manifest)
    m2.record_stage("nodes", {"index_space": space}, "fp", 1.0, settings="else")
    assert daily.carry_of(cfg, dates).same_index_space
    m2.record_stage("nodes", {"index_space": space}, "fp", 1.0, settings=settings)
    mm.record_stage("graph", {}, "fp", 1.0)
    assert resume.index_space_token(cfg) != space
    assert not daily.carry_of(cfg, dates).same_index_space


def test_select_changed(spark):
    prev = spark.createDataFrame(
        [
            (0, "instance", "a", "x", "train"),
            (1, "instance", "b", "y", "train"),
            (2, "label", "L", "l", None),
        ],
        storage.schema(storage.NODES),
    )
    cur = spark.createDataFrame(
        [
            (0, "instance", "a", "x", "train"),
            (1, "instance", "b", "y changed", "train"),
            (2, "label", "L", "l", None),
            (3, "instance", "c", "z", "new"),
        ],
        storage.schema(storage.NODES),
    )
    got = {r[storage.NODE_INDEX]: r["reason"] for r in pipeline.select_changed(cur, prev).collect()}
    assert got == {1: "changed", 3: "new"}
    assert pipeline.select_changed(prev, prev).count() == 0
    # a product appended as 'new' that today's input gives a split: its neighbours' route
    # (one fold model or all) and its features' partition change with the same text
    later = spark.createDataFrame(
        [(0, "instance", "a", "x", "train"), (3, "instance", "c", "z", "test")],
        storage.schema(storage.NODES),
    )
    got = {
        r[storage.NODE_INDEX]: r["reason"] for r in pipeline.select_changed(later, cur).collect()
    }
    assert got == {3: "changed"}


@pytest.mark.slow
def test_incremental_recomputes_only_new_or_changed(spark, tmp_path, stubs):
    models_root = _full_run(spark, tmp_path)
    # today: 'b' changed text, 'f' new, the rest unchanged
    new = write_instances(
        spark,
        str(tmp_path / "new.parquet"),
        [("a", "red apple", None), ("b", "green pear, ripe", None), ("f", "fresh fig", None)],
    )
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "daily"),
            "input": {"instances": new},
            "run": {"run_date": "2026-11-22", "models": models_root, "incremental": True},
            # the stub neighbours stage predicts pina alone, as a run that trains pina does
            "train": {"variants": ["baseline", "vectorizer_only", "pina"]},
        }
    )
    result = pipeline.run_pipeline(spark, cfg, ["embed", "neighbors", "aggregate"])
    assert result["embed"] == "ran"
    assert SEEN["embed"] == [1, 7]  # b (index 1) changed, f appended as 7
    assert SEEN["neighbors"] == [1, 7]
    assert SEEN["aggregate"] == [1, 7]
    paths = storage.RunPaths(cfg.output, "2026-11-22")
    emb = {
        r[storage.NODE_INDEX]: r[storage.DENSE][0]
        for r in storage.read_table(spark, paths, storage.EMBEDDINGS).collect()
    }
    assert sorted(emb) == list(range(8))  # every node, no duplicates
    assert emb[1] == float(len("green pear, ripe")) and emb[0] == float(len("red apple"))
    feats = storage.read_table(spark, paths, storage.FEATURES)
    assert feats.count() == 6 and feats.select(storage.INSTANCE_ID).distinct().count() == 6
    nb = storage.read_table(spark, paths, storage.NEIGHBORS)
    assert nb.count() == 6
    m = Manifest(paths.manifest)
    assert m.stage("embed")["stats"]["selected"] == 2
    assert m.stage("embed")["stats"]["incremental_base"] == models_root

    # the next date is incremental against this one: only its own changes are recomputed
    nxt = write_instances(
        spark, str(tmp_path / "next.parquet"), [("a", "red apple", None), ("h", "honeydew", None)]
    )
    cfg2 = config_from_dict(
        {
            **cfg.to_dict(),
            "input": {"instances": nxt},
            "run": {**cfg.to_dict()["run"], "run_date": "2026-11-23"},
        }
    )
    pipeline.run_pipeline(spark, cfg2, ["embed", "neighbors", "aggregate"])
    # a daily input is a delta: yesterday's nodes carry forward ('b' keeps yesterday's text,
    # 'f' its index 7), so only 'h', appended as 8, is new; 'a' is unchanged
    assert SEEN["embed"] == [8]
    p2 = storage.RunPaths(cfg.output, "2026-11-23")
    emb2 = {
        r[storage.NODE_INDEX]: r[storage.DENSE][0]
        for r in storage.read_table(spark, p2, storage.EMBEDDINGS).collect()
    }
    assert emb2[8] == float(len("honeydew")) and emb2[1] == float(len("green pear, ripe"))
    assert sorted(emb2) == list(range(9))
