"""``pina-spark tune``: grid over the cheap stages on a validation split of TRAIN, never reading the
test rows. The neighbors/aggregate stages are replaced by small stand-ins (this module) that
compute label neighbours from the embeddings and ``[V0, a * V1]`` features, and that fail when
they see a test row; train and evaluate are the real stages."""

import dataclasses as dc
import json
import os

import numpy as np
import pytest

from pina_spark import io
from pina_spark.folds import is_validation

from test_downstream import build_synthetic_run, small_cfg

SEEN = {"neighbors": [], "aggregate": [], "train_splits": []}
POISON_IDS = set()


def _check_no_test_rows(nodes_pdf, emb_pdf):
    assert not set(nodes_pdf[io.NODE_ID]) & POISON_IDS, "a test instance reached a tune stage"
    assert not nodes_pdf[io.TEXT].fillna("").str.contains("POISON").any()
    assert all(np.abs(np.asarray(d)).max() < 1e5 for d in emb_pdf[io.DENSE])


def fake_neighbors_stage(ctx):
    """k nearest label nodes by dense dot product, l1-normalised positive scores."""
    from pyspark.sql import types as T

    spark = ctx.spark
    nodes = io.read_table(spark, ctx.paths, io.NODES).toPandas()
    emb = io.read_table(spark, ctx.paths, io.EMBEDDINGS).toPandas()
    _check_no_test_rows(nodes, emb)
    assert (nodes[io.SPLIT] != io.SPLIT_TEST).all(), "phase 1 must keep validation rows as train"
    SEEN["neighbors"].append(sorted(nodes.loc[nodes[io.KIND] == "instance", io.NODE_ID]))
    dense = {int(i): np.asarray(d) for i, d in zip(emb[io.NODE_INDEX], emb[io.DENSE])}
    labels = nodes.loc[nodes[io.KIND] == "label", io.NODE_INDEX].astype(int).tolist()
    L = np.stack([dense[lab] for lab in labels])
    k = ctx.cfg.neighbors.k
    rows = []
    for i in nodes.loc[nodes[io.KIND] == "instance", io.NODE_INDEX].astype(int):
        s = L @ dense[i]
        order = np.argsort(-s, kind="stable")[:k]
        w = np.maximum(s[order], 1e-6)
        w = w / w.sum()
        for v in ("pina", "pina_naive"):
            rows.append((i, [labels[o] for o in order], [float(x) for x in w], v))
    schema = T.StructType(
        list(io.schema(io.NEIGHBORS).fields) + [T.StructField(io.VARIANT, T.StringType())]
    )
    io.write_table(
        spark.createDataFrame(rows, schema), ctx.paths, io.NEIGHBORS, partition_by=(io.VARIANT,)
    )
    return {"rows": len(rows)}


def fake_aggregate_stage(ctx):
    from pyspark.sql import types as T

    spark = ctx.spark
    nodes = io.read_table(spark, ctx.paths, io.NODES).toPandas()
    emb = io.read_table(spark, ctx.paths, io.EMBEDDINGS).toPandas()
    _check_no_test_rows(nodes, emb)
    SEEN["aggregate"].append(len(nodes))
    nb = io.read_table(spark, ctx.paths, io.NEIGHBORS).toPandas()
    by = {int(r[io.NODE_INDEX]): r for _, r in emb.iterrows()}
    ids = dict(zip(nodes[io.NODE_INDEX].astype(int), nodes[io.NODE_ID]))
    split = dict(zip(nodes[io.NODE_INDEX].astype(int), nodes[io.SPLIT]))
    a = ctx.cfg.aggregate.v1_weight
    rows = []
    for _, r in nb.iterrows():
        i = int(r[io.INSTANCE_INDEX])
        v1 = sum(w * np.asarray(by[int(j)][io.DENSE]) for j, w in zip(r[io.NEIGHBOR], r[io.SCORE]))
        d = np.concatenate([np.asarray(by[i][io.DENSE]), a * v1])
        rows.append(
            (
                ids[i],
                split[i],
                [float(x) for x in d / max(np.linalg.norm(d), 1e-9)],
                [int(x) for x in by[i][io.SPARSE_INDICES]],
                [float(x) for x in by[i][io.SPARSE_VALUES]],
                [ids[int(j)] for j in r[io.NEIGHBOR]],
                [float(w) for w in r[io.SCORE]],
                r[io.VARIANT],
            )
        )
    schema = io.schema(io.FEATURES).add(io.VARIANT, T.StringType())
    io.write_table(
        spark.createDataFrame(rows, schema),
        ctx.paths,
        io.FEATURES,
        partition_by=(io.VARIANT, io.SPLIT),
    )
    return {"rows": len(rows)}


@pytest.fixture
def fake_stages(monkeypatch):
    from pina_spark import pipeline

    for name, fn in (("neighbors", "fake_neighbors_stage"), ("aggregate", "fake_aggregate_stage")):
        monkeypatch.setitem(
            pipeline.STAGES, name, dc.replace(pipeline.STAGES[name], target=f"{__name__}:{fn}")
        )
    for v in SEEN.values():
        v.clear()
    yield


def _copy_without_test_rows(spark, src_root, dst_root):
    from pyspark.sql import functions as F

    src, dst = io.RunPaths(src_root), io.RunPaths(dst_root)
    nodes = io.read_table(spark, src, io.NODES).where(
        F.col(io.SPLIT).isNull() | (F.col(io.SPLIT) != "test")
    )
    keep = nodes.select(io.NODE_INDEX)
    io.write_table(nodes, dst, io.NODES)
    io.write_table(
        io.read_table(spark, src, io.EMBEDDINGS).join(keep, io.NODE_INDEX, "left_semi"),
        dst,
        io.EMBEDDINGS,
    )
    io.write_table(
        io.read_table(spark, src, io.INSTANCE_LABELS).join(
            keep.withColumnRenamed(io.NODE_INDEX, io.INSTANCE_INDEX), io.INSTANCE_INDEX, "left_semi"
        ),
        dst,
        io.INSTANCE_LABELS,
    )


def test_tune_never_reads_test_rows(spark, tmp_path, fake_stages):
    from pina_spark.tune import run_tune

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

    res = json.loads(io.read_bytes(paths.table("tune/results.json")))
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
    assert os.path.exists(io.local_path(paths.table("tune/results.md")))
    # the stand-in stages saw train rows only (validation rows as 'train' in phase 1)
    assert SEEN["neighbors"] == [sorted(train_ids)] * 2
    # derived tables: no test instance; validation rows are the 'test' of the tuning run
    work = io.RunPaths(paths.table("tune/work"))
    nodes = io.read_table(spark, work, io.NODES).toPandas()
    assert not set(nodes[io.NODE_ID]) & POISON_IDS
    assert sorted(nodes.loc[nodes[io.SPLIT] == "test", io.NODE_ID]) == sorted(valid)
    pred = io.read_table(spark, work, io.PREDICTIONS).toPandas()
    assert set(pred[io.INSTANCE_ID]) == set(valid)

    # the same point on a copy of the run with the test rows deleted: identical results
    root_b = str(tmp_path / "run_no_test")
    _copy_without_test_rows(spark, root, root_b)
    cfg_b = small_cfg(
        root_b, train={"variants": ["baseline", "pina"]}, task={"validation_fraction": 0.25}
    )
    run_tune(cfg_b, ["neighbors.k=3"], spark=spark)
    res_b = json.loads(io.read_bytes(io.RunPaths(root_b).table("tune/results.json")))
    assert _same(res_b["points"][0]["valid"], res["points"][1]["valid"])


def _same(a, b):
    assert set(a) == set(b)
    for v in a:
        for k in a[v]:
            assert a[v][k] == pytest.approx(b[v][k]), (v, k)
    return True


def test_tune_grid_errors_name_the_key(spark, tmp_path):
    from pina_spark.config import ConfigError
    from pina_spark.tune import point_config

    cfg = small_cfg(str(tmp_path / "run"))
    with pytest.raises(ConfigError, match="neighbors.kk"):
        point_config(cfg, {"neighbors.kk": 3}, str(tmp_path / "w"))
    with pytest.raises(ConfigError, match="neighbors.weighting"):
        point_config(cfg, {"neighbors.weighting": "bogus"}, str(tmp_path / "w"))
    with pytest.raises(ConfigError, match="only stage parameters"):
        point_config(cfg, {"input.instances": "x"}, str(tmp_path / "w"))
    p = point_config(cfg, {"neighbors.k": 7, "aggregate.v1_weight": 0.5}, str(tmp_path / "w"))
    assert (p.neighbors.k, p.aggregate.v1_weight, p.output) == (7, 0.5, str(tmp_path / "w"))
    assert p.run.models is None and p.train.variants == ["baseline", "pina_naive", "pina"]
