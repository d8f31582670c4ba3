"""``--models`` + ``--incremental`` with the REAL embed, neighbors and aggregate stages (MiniLM +
tf-idf vectorizer, PECOS g, the aggregation), on the demo run that spark-submit produced
(``demo_submit_run``): an incremental daily run must publish exactly what a full recompute with
the same models publishes, while recomputing only the new and changed rows.

(tests/test_ops.py covers the selection and merge mechanics with stub stages.)
"""

import pytest
import yaml

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.orchestration import pipeline
from pina_spark.storage.manifest import Manifest

from demo_run import require_finished

STAGES = ["embed", "neighbors", "aggregate"]
DAY = "2026-11-22"
DAY2 = "2026-11-23"


def _day_instances(spark, run, path):
    """Today's input: 40 demo instances (2 with new text) + 3 products never seen before."""
    from pyspark.sql import functions as F

    with open(run["config"]) as fh:
        base = yaml.safe_load(fh)
    inst = storage.read_input(spark, base["input"]["instances"], "instances").drop(storage.CORRUPT)
    some = inst.orderBy(storage.INSTANCE_ID).limit(40).select(storage.INSTANCE_ID, storage.TEXT)
    ids = [r[0] for r in some.limit(2).collect()]
    suffixed = F.concat(F.col(storage.TEXT), F.lit(" organic value pack"))
    changed = some.withColumn(
        storage.TEXT,
        F.when(F.col(storage.INSTANCE_ID).isin(ids), suffixed).otherwise(F.col(storage.TEXT)),
    )
    new = spark.createDataFrame(
        [
            ("zz-new-1", "crunchy peanut butter cookies"),
            ("zz-new-2", "sparkling lemon water"),
            ("zz-new-3", "whole wheat pasta shells"),
        ],
        "instance_id string, text string",
    )
    changed.unionByName(new).withColumn(storage.SPLIT, F.lit(None).cast("string")).coalesce(
        1
    ).write.mode("overwrite").parquet(path)
    return path, set(ids)


def _cfg(run, output, instances, incremental, variants=None, run_date=DAY):
    with open(run["config"]) as fh:
        d = yaml.safe_load(fh)
    d["output"] = output
    d["input"] = {"instances": instances}
    if variants:  # the g variants trained, with baseline
        d.setdefault("train", {})["variants"] = ["baseline", *variants]
    # the demo run is not promoted: nothing else vouches for its models (tests/test_model_trust.py)
    d["run"] = {
        "run_date": run_date,
        "models": run["output"],
        "incremental": incremental,
        "trust_models": True,
    }
    return config_from_dict(d)


@pytest.mark.slow
def test_incremental_run_equals_full_recompute(spark, tmp_path, demo_submit_run):
    from pyspark.sql import functions as F
    from pyspark.testing import assertDataFrameEqual

    run = require_finished(demo_submit_run)
    new_path, changed_ids = _day_instances(spark, run, str(tmp_path / "day.parquet"))

    full = _cfg(run, str(tmp_path / "full"), new_path, incremental=False)
    inc = _cfg(run, str(tmp_path / "inc"), new_path, incremental=True)
    assert pipeline.run_pipeline(spark, full, STAGES) == {
        "nodes": "ran",
        "embed": "ran",
        "neighbors": "ran",
        "aggregate": "ran",
    }
    assert pipeline.run_pipeline(spark, inc, STAGES)["aggregate"] == "ran"

    p_full, p_inc = storage.RunPaths(full.output, DAY), storage.RunPaths(inc.output, DAY)
    # the same rows, the same numbers: embeddings, neighbours, features
    for rel, tol in (
        (storage.EMBEDDINGS, 1e-5),
        (storage.NEIGHBORS, 1e-6),
        (storage.FEATURES, 1e-5),
    ):
        a = storage.read_table(spark, p_inc, rel)
        b = storage.read_table(spark, p_full, rel)
        assert a.count() == b.count() > 0, rel
        assertDataFrameEqual(a, b.select(*a.columns), rtol=tol, atol=tol)

    # only the new and changed nodes were recomputed by embed and neighbours
    m = Manifest(p_inc.manifest)
    assert m.stage("embed")["stats"]["selected"] == len(changed_ids) + 3
    assert m.stage("embed")["stats"]["incremental_base"] == run["output"]
    assert m.stage("neighbors")["stats"]["selected"] == len(changed_ids) + 3
    # aggregate: those instances plus any whose neighbour list holds a changed node
    assert m.stage("aggregate")["stats"]["selected"] >= len(changed_ids) + 3
    full_emb = Manifest(p_full.manifest).stage("embed")["stats"]["rows"]
    assert m.stage("embed")["stats"]["selected"] < full_emb
    # and the text encoder ran on exactly those rows (the full recompute: on every node)
    assert m.stage("embed")["stats"]["encoded_rows"] == len(changed_ids) + 3
    assert Manifest(p_full.manifest).stage("embed")["stats"]["encoded_rows"] == full_emb

    # the new products got features, split 'new'
    feats = storage.read_table(spark, p_inc, storage.FEATURES)
    got = {
        r[0]
        for r in feats.where(F.col(storage.SPLIT) == "new").select(storage.INSTANCE_ID).collect()
    }
    assert {"zz-new-1", "zz-new-2", "zz-new-3"} <= got

    # a daily run that trains one g variant (it follows a pina selection): its base holds both
    # variants; it recomputes pina's rows alone and keeps none of pina_naive's
    one = _cfg(run, str(tmp_path / "one"), new_path, incremental=True, variants=["pina"])
    assert pipeline.run_pipeline(spark, one, STAGES)["neighbors"] == "ran"
    p_one = storage.RunPaths(one.output, DAY)
    for rel, keep in (
        (storage.NEIGHBORS, ["pina"]),
        (storage.FEATURES, ["pina", "vectorizer_only"]),
    ):
        a = storage.read_table(spark, p_one, rel)
        b = storage.read_table(spark, p_full, rel).where(F.col(storage.VARIANT).isin(keep))
        assert a.count() == b.count() > 0, rel
        assertDataFrameEqual(a, b.select(*a.columns), rtol=1e-5, atol=1e-5)
    assert Manifest(p_one.manifest).stage("neighbors")["stats"]["selected"] == len(changed_ids) + 3

    # the next day trains every variant again: its base (yesterday) has no pina_naive rows, so
    # neighbours and features are recomputed in full instead of merged with missing rows
    every = _cfg(run, str(tmp_path / "one"), new_path, incremental=True, run_date=DAY2)
    assert pipeline.run_pipeline(spark, every, STAGES)["aggregate"] == "ran"
    p_every = storage.RunPaths(every.output, DAY2)
    m = Manifest(p_every.manifest)
    for stage, rel in (("neighbors", storage.NEIGHBORS), ("aggregate", storage.FEATURES)):
        assert m.stage(stage)["stats"]["incremental"].startswith("full (the base run"), stage
        a = storage.read_table(spark, p_every, rel)
        b = storage.read_table(spark, p_full, rel)
        assert a.count() == b.count(), rel
