"""``pina-spark tune``: grid over the cheap stages on a validation split of TRAIN, never reading the
test rows. The neighbors/aggregate stages are replaced by small stand-ins (this module) that
compute label neighbours from the embeddings and ``[V0, a * V1]`` features, and that fail when
they see a test row; train and evaluate are the real stages."""

import dataclasses as dc
import json
import os

import numpy as np
import pytest

from pina_spark import storage
from pina_spark.storage.folds import is_validation

from test_downstream import build_synthetic_run, small_cfg

SEEN = {"neighbors": [], "aggregate": [], "train_splits": []}
POISON_IDS = set()


def _check_no_test_rows(nodes_pdf, emb_pdf):
    assert not set(nodes_pdf[storage.NODE_ID]) & POISON_IDS, "a test instance reached a tune stage"
    assert not nodes_pdf[storage.TEXT].fillna("").str.contains("POISON").any()
    assert all(np.abs(np.asarray(d)).max() < 1e5 for d in emb_pdf[storage.DENSE])


def fake_neighbors_stage(ctx):
    """k nearest label nodes by dense dot product, l1-normalised positive scores."""
    from pyspark.sql import types as T

    spark = ctx.spark
    nodes = storage.read_table(spark, ctx.paths, storage.NODES).toPandas()
    emb = storage.read_table(spark, ctx.paths, storage.EMBEDDINGS).toPandas()
    _check_no_test_rows(nodes, emb)
    assert (
        nodes[storage.SPLIT] != storage.SPLIT_TEST
    ).all(), "phase 1 must keep validation rows as train"
    SEEN["neighbors"].append(sorted(nodes.loc[nodes[storage.KIND] == "instance", storage.NODE_ID]))
    dense = {int(i): np.asarray(d) for i, d in zip(emb[storage.NODE_INDEX], emb[storage.DENSE])}
    labels = nodes.loc[nodes[storage.KIND] == "label", storage.NODE_INDEX].astype(int).tolist()
    L = np.stack([dense[lab] for lab in labels])
    k = ctx.cfg.neighbors.k
    rows = []
    for i in nodes.loc[nodes[storage.KIND] == "instance", storage.NODE_INDEX].astype(int):
        s = L @ dense[i]
        order = np.argsort(-s, kind="stable")[:k]
        w = np.maximum(s[order], 1e-6)
        w = w / w.sum()
        for v in ("pina", "pina_naive"):
            rows.append((i, [labels[o] for o in order], [float(x) for x in w], v))
    schema = T.StructType(
        list(storage.schema(storage.NEIGHBORS).fields)
        + [T.StructField(storage.VARIANT, T.StringType())]
    )
    storage.write_table(
        spark.createDataFrame(rows, schema),
        ctx.paths,
        storage.NEIGHBORS,
        partition_by=(storage.VARIANT,),
    )
    return {"rows": len(rows)}


def fake_aggregate_stage(ctx):
    from pyspark.sql import types as T

    spark = ctx.spark
    nodes = storage.read_table(spark, ctx.paths, storage.NODES).toPandas()
    emb = storage.read_table(spark, ctx.paths, storage.EMBEDDINGS).toPandas()
    _check_no_test_rows(nodes, emb)
    SEEN["aggregate"].append(len(nodes))
    nb = storage.read_table(spark, ctx.paths, storage.NEIGHBORS).toPandas()
    by = {int(r[storage.NODE_INDEX]): r for _, r in emb.iterrows()}
    ids = dict(zip(nodes[storage.NODE_INDEX].astype(int), nodes[storage.NODE_ID]))
    split = dict(zip(nodes[storage.NODE_INDEX].astype(int), nodes[storage.SPLIT]))
    a = ctx.cfg.aggregate.v1_weight
    rows = []
    for _, r in nb.iterrows():
        i = int(r[storage.INSTANCE_INDEX])
        v1 = sum(
            w * np.asarray(by[int(j)][storage.DENSE])
            for j, w in zip(r[storage.NEIGHBOR], r[storage.SCORE])
        )
        d = np.concatenate([np.asarray(by[i][storage.DENSE]), a * v1])
        rows.append(
            (
                ids[i],
                split[i],
                [float(x) for x in d / max(np.linalg.norm(d), 1e-9)],
                [int(x) for x in by[i][storage.SPARSE_INDICES]],
                [float(x) for x in by[i][storage.SPARSE_VALUES]],
                [ids[int(j)] for j in r[storage.NEIGHBOR]],
                [float(w) for w in r[storage.SCORE]],
                r[storage.VARIANT],
            )
        )
    schema = storage.schema(storage.FEATURES).add(storage.VARIANT, T.StringType())
    storage.write_table(
        spark.createDataFrame(rows, schema),
        ctx.paths,
        storage.FEATURES,
        partition_by=(storage.VARIANT, storage.SPLIT),
    )
    return {"rows": len(rows)}


@pytest.fixture
def fake_stages(monkeypatch):
    from pina_spark.orchestration import pipeline

    for name, fn in (("neighbors", "fake_neighbors_stage"), ("aggregate", "fake_aggregate_stage")):
        monkeypatch.setitem(
            pipeline.STAGES, name, dc.replace(pipeline.STAGES[name], target=f"{__name__}:{fn}")
        )
    for v in SEEN.values():
        v.clear()
    yield


def _copy_without_test_rows(spark, src_root, dst_root):
    from pyspark.sql import functions as F

    src, dst = storage.RunPaths(src_root), storage.RunPaths(dst_root)
    nodes = storage.read_table(spark, src, storage.NODES).where(
        F.col(storage.SPLIT).isNull() | (F.col(storage.SPLIT) != "test")
    )
    keep = nodes.select(storage.NODE_INDEX)
    storage.write_table(nodes, dst, storage.NODES)
    storage.write_table(
        storage.read_table(spark, src, storage.EMBEDDINGS).join(
            keep, storage.NODE_INDEX, "left_semi"
        ),
        dst,
        storage.EMBEDDINGS,
    )
    storage.write_table(
        storage.read_table(spark, src, storage.INSTANCE_LABELS).join(
            keep.withColumnRenamed(storage.NODE_INDEX, storage.INSTANCE_INDEX),
            storage.INSTANCE_INDEX,
            "left_semi",
        ),
        dst,
        storage.INSTANCE_LABELS,
    )


@pytest.mark.slow
def test_tune_never_reads_test_rows(spark, tmp_path, fake_stages):
    from pina_spark.orchestration.tune import run_tune

    root = str(tmp_path / "run")
    paths, inst_ids, splits, truth = build_synthetic_run(
        spark, root, n_inst=200, with_features=False, sentinel_test=True
    )
    POISON_IDS.clear()
    POISON_IDS.update(i for i, s in zip(inst_ids, splits) if s == "test")
    cfg = small_cfg(
        root, train={"variants": ["baseline", "pina"]}, task={"validation_fraction": 0.25}
    )
    table = run_tune(cfg, ["neighbors.k=1,3"], spark=spark)

    res = json.loads(storage.read_bytes(paths.table("tune/results.json")))
    assert len(res["points"]) == 2 and [p["params"]["neighbors.k"] for p in res["points"]] == [1, 3]
    train_ids = [i for i, s in zip(inst_ids, splits) if s == "train"]
    valid = [i for i in train_ids if is_validation(i, 0.25)]
    assert res["n_valid"] == len(valid) and res["n_train"] == len(train_ids) - len(valid)
    for p in res["points"]:
        assert 0.0 <= p["valid"]["pina"]["P@1"] <= 1.0
        assert p["n_valid_scored"] == len(valid)
    assert res["best"] in {p["id"] for p in res["points"]}
    assert "pretrained on all train rows" in res["note"]
    assert table.startswith("# pina-spark tune") and "| neighbors.k |" in table
    assert os.path.exists(storage.local_path(paths.table("tune/results.md")))
    # the stand-in stages saw train rows only (validation rows as 'train' in phase 1)
    assert SEEN["neighbors"] == [sorted(train_ids)] * 2
    # derived tables: no test instance; validation rows are the 'test' of the tuning run
    work = storage.RunPaths(paths.table("tune/work"))
    nodes = storage.read_table(spark, work, storage.NODES).toPandas()
    assert not set(nodes[storage.NODE_ID]) & POISON_IDS
    assert sorted(nodes.loc[nodes[storage.SPLIT] == "test", storage.NODE_ID]) == sorted(valid)
    pred = storage.read_table(spark, work, storage.PREDICTIONS).toPandas()
    assert set(pred[storage.INSTANCE_ID]) == set(valid)

    # the same point on a copy of the run with the test rows deleted: identical results
    root_b = str(tmp_path / "run_no_test")
    _copy_without_test_rows(spark, root, root_b)
    cfg_b = small_cfg(
        root_b, train={"variants": ["baseline", "pina"]}, task={"validation_fraction": 0.25}
    )
    run_tune(cfg_b, ["neighbors.k=3"], spark=spark)
    res_b = json.loads(storage.read_bytes(storage.RunPaths(root_b).table("tune/results.json")))
    assert _same(res_b["points"][0]["valid"], res["points"][1]["valid"])


def _same(a, b):
    assert set(a) == set(b)
    for v in a:
        for k in a[v]:
            assert a[v][k] == pytest.approx(b[v][k]), (v, k)
    return True


def test_tune_grid_errors_name_the_key(spark, tmp_path):
    from pina_spark.config import ConfigError
    from pina_spark.orchestration.tune import point_config

    cfg = small_cfg(str(tmp_path / "run"))
    with pytest.raises(ConfigError, match="neighbors.kk"):
        point_config(cfg, {"neighbors.kk": 3}, str(tmp_path / "w"))
    with pytest.raises(ConfigError, match="neighbors.weighting"):
        point_config(cfg, {"neighbors.weighting": "bogus"}, str(tmp_path / "w"))
    with pytest.raises(ConfigError, match="only stage parameters"):
        point_config(cfg, {"input.instances": "x"}, str(tmp_path / "w"))
    # read by stages whose outputs tune reuses: a value there would change nothing it reports
    for key, stage in (
        ("pretrain.dense_weight", "vectorizer"),
        ("pretrain.encoder", "vectorizer"),
        ("neighbors.folds", "pretrain"),
        ("graph.min_count", "graph"),
    ):
        with pytest.raises(ConfigError, match=f"'{key}': read by the {stage} stage"):
            point_config(cfg, {key: 0.5}, str(tmp_path / "w"))
    p = point_config(cfg, {"neighbors.k": 7, "aggregate.v1_weight": 0.5}, str(tmp_path / "w"))
    assert (p.neighbors.k, p.aggregate.v1_weight, p.output) == (7, 0.5, str(tmp_path / "w"))
    assert p.run.models is None and p.train.variants == ["baseline", "pina_naive", "pina"]
