"""``--models`` + ``--incremental`` with the REAL embed, neighbors and aggregate stages (MiniLM +
tf-idf vectorizer, PECOS g, the aggregation), on the demo run that spark-submit produced
(``demo_submit_run``): an incremental daily run must publish exactly what a full recompute with
the same models publishes, while recomputing only the new and changed rows.

(tests/test_ops.py covers the selection and merge mechanics with stub stages.)
"""

import json
import logging

import pytest
import yaml

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.orchestration import pipeline, resume
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


@pytest.mark.slow
def test_a_step_refuses_upstream_outputs_of_other_models(spark, tmp_path, demo_submit_run, caplog):
    """The daily steps are separate commands, each resolving ``run.models``: when the models
    change between the embed step and the neighbours step (a promotion landed in between;
    here: the same models under another root), neighbours must not read embeddings of the old
    models. It refuses, naming embed and the stages to rerun; rerunning from embed works."""
    import shutil

    run = require_finished(demo_submit_run)
    day, _ = _day_instances(spark, run, str(tmp_path / "day.parquet"))
    out = str(tmp_path / "daily")
    assert pipeline.run_pipeline(spark, _cfg(run, out, day, False), ["embed"])["embed"] == "ran"
    other = str(tmp_path / "promoted-since")
    shutil.copytree(run["output"], other)
    cfg2 = _cfg({**run, "output": other}, out, day, False)
    with pytest.raises(storage.InputError) as e:
        pipeline.run_pipeline(spark, cfg2, ["neighbors"])
    msg = str(e.value)
    assert "stage neighbors refuses the outputs of" in msg and "embed (recorded" in msg
    assert "--stages embed,neighbors" in msg and other in msg
    m = Manifest(storage.RunPaths(out, DAY).manifest)
    assert m.stage("neighbors") is None and m.stage("nodes")["settings"] != resume.settings_token(
        cfg2, "nodes"
    )  # refused before anything ran, the nodes pre-step included
    assert pipeline.run_pipeline(spark, cfg2, ["embed", "neighbors"]) == {
        "nodes": "ran",
        "embed": "ran",
        "neighbors": "ran",
    }
    # --force of one daily step redoes that step, not the nodes pre-step under its inputs;
    # the plan it logs (and judges with plan_problem) says so too, though cfg2 has no run.force
    assert not cfg2.run.force
    with caplog.at_level(logging.INFO, logger="pina_spark.orchestration.pipeline"):
        assert pipeline.run_pipeline(spark, cfg2, ["neighbors"], force=True) == {
            "nodes": "skipped",
            "neighbors": "ran",
        }
    assert "plan: neighbors run (--force (run.force))" in caplog.text
    assert "plan: nodes skip" in caplog.text  # as the pre-step then does


@pytest.mark.slow
def test_incremental_days_after_a_vectorizer_only_selection(spark, tmp_path, demo_submit_run):
    """A selection chose ``vectorizer_only``: the daily runs write no neighbours, so the
    incremental aggregate has no neighbours table to take its changed rows from. It used to
    stop every day ("neighbors is missing or incomplete"); it now aggregates in full (a
    per-row map of the embeddings), the same rows a non-incremental run writes."""
    from pyspark.testing import assertDataFrameEqual

    run = require_finished(demo_submit_run)
    day, _ = _day_instances(spark, run, str(tmp_path / "day.parquet"))
    out = str(tmp_path / "vo")
    only = ["vectorizer_only"]
    first = _cfg(run, out, day, True, variants=only)
    assert pipeline.run_pipeline(spark, first, STAGES) == {
        "nodes": "ran",
        "embed": "ran",
        "aggregate": "ran",
    }
    second = _cfg(run, out, day, True, variants=only, run_date=DAY2)
    assert pipeline.run_pipeline(spark, second, STAGES)["aggregate"] == "ran"
    p1, p2 = storage.RunPaths(out, DAY), storage.RunPaths(out, DAY2)
    entry = Manifest(p2.manifest).stage("aggregate")
    assert entry["stats"]["incremental"] == "full (no variant reads neighbours)"
    a = storage.read_table(spark, p2, storage.FEATURES)
    b = storage.read_table(spark, p1, storage.FEATURES)
    assert a.count() == b.count() > 0
    assertDataFrameEqual(a, b.select(*a.columns), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_an_incremental_day_with_other_settings_recomputes_in_full(
    spark, tmp_path, demo_submit_run
):
    """Yesterday's rows were made with five neighbours; today's run asks for ten (a selection
    since, or ``--set``). Merging would publish a table of mixed lists and features aggregated
    both ways; the neighbours and aggregate stages recompute in full instead, saying why."""
    from pyspark.sql import functions as F

    run = require_finished(demo_submit_run)
    day, _ = _day_instances(spark, run, str(tmp_path / "day.parquet"))
    out = str(tmp_path / "k")
    assert pipeline.run_pipeline(spark, _cfg(run, out, day, True), STAGES)["aggregate"] == "ran"
    k10 = _cfg(run, out, day, True, run_date=DAY2)
    k10 = config_from_dict({**k10.to_dict(), "neighbors": {**k10.to_dict()["neighbors"], "k": 10}})
    assert pipeline.run_pipeline(spark, k10, STAGES)["aggregate"] == "ran"
    m = Manifest(storage.RunPaths(out, DAY2).manifest)
    for stage in ("neighbors", "aggregate"):
        why = m.stage(stage)["stats"]["incremental"]
        assert why.startswith("full (") and "with other settings" in why, (stage, why)
    assert m.stage("embed")["stats"].get("incremental_base")  # embed's settings are the same
    nb = storage.read_table(spark, storage.RunPaths(out, DAY2), storage.NEIGHBORS)
    sizes = {r[0] for r in nb.select(F.size(storage.NEIGHBOR)).distinct().collect()}
    assert max(sizes) == 10 and min(sizes) > 5, sizes  # no list of yesterday's five


@pytest.mark.slow
def test_an_incremental_day_with_pifa_label_features_aggregates_in_full(
    spark, tmp_path, demo_submit_run
):
    """With ``aggregate.label_features: pifa`` a label neighbour adds the centroid of its train
    members' rows, which moves when any member's text changes: the instances it reaches are not
    the changed ones, so a merge kept stale features. The aggregate stage of such a day runs
    in full, saying why; embed and neighbours stay incremental. (Such a daily run used to stop
    at aggregate: it read instance labels from its own root, which has none.)"""
    from pyspark.testing import assertDataFrameEqual

    run = require_finished(demo_submit_run)
    day, _ = _day_instances(spark, run, str(tmp_path / "day.parquet"))
    out = str(tmp_path / "pifa")

    def pifa(cfg):
        d = cfg.to_dict()
        return config_from_dict({**d, "aggregate": {**d["aggregate"], "label_features": "pifa"}})

    assert (
        pipeline.run_pipeline(spark, pifa(_cfg(run, out, day, True)), STAGES)["aggregate"] == "ran"
    )
    day2 = pifa(_cfg(run, out, day, True, run_date=DAY2))
    assert pipeline.run_pipeline(spark, day2, STAGES)["aggregate"] == "ran"
    m = Manifest(storage.RunPaths(out, DAY2).manifest)
    assert m.stage("aggregate")["stats"]["incremental"] == "full (aggregate.label_features: pifa)"
    assert m.stage("neighbors")["stats"]["incremental_base"]  # merged with day 1's rows
    # the same features as a day computed in full (the labels' train members are the models
    # run's: a daily root has no instance labels of its own)
    full = pifa(_cfg(run, str(tmp_path / "pifa-full"), day, False, run_date=DAY2))
    assert pipeline.run_pipeline(spark, full, STAGES)["aggregate"] == "ran"
    a = storage.read_table(spark, storage.RunPaths(out, DAY2), storage.FEATURES)
    b = storage.read_table(spark, storage.RunPaths(full.output, DAY2), storage.FEATURES)
    assert a.count() == b.count() > 0
    assertDataFrameEqual(a, b.select(*a.columns), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_nodes_pre_step_quarantines_a_daily_inputs_bad_rows(spark, tmp_path, demo_submit_run):
    """A daily input with an id holding a newline, a blank and a missing text and a split that
    is neither train nor test: those rows used to land in ``nodes`` and ``features`` (a
    ``split=bogus`` partition). They are quarantined with the graph stage's reasons and
    counted in the manifest; good new products still get the split ``new``."""
    from pyspark.sql import functions as F

    run = require_finished(demo_submit_run)
    path = str(tmp_path / "bad_day.parquet")
    rows = [
        ("zz-good-1", "oat milk barista edition", None),
        ("zz-good-2", "rye crispbread", ""),
        *[(f"zz-more-{n:02d}", f"product number {n}", None) for n in range(14)],
        ("bad\nid", "a title", None),
        ("zz-blank", "   ", None),
        ("zz-null", None, None),
        ("zz-bogus", "sea salt crackers", "bogus"),
    ]
    spark.createDataFrame(rows, "instance_id string, text string, split string").coalesce(
        1
    ).write.parquet(path)
    cfg = _cfg(run, str(tmp_path / "bad"), path, False)
    assert pipeline.run_pipeline(spark, cfg, ["embed"])["nodes"] == "ran"
    paths = storage.RunPaths(cfg.output, DAY)
    q = storage.read_table(spark, paths, f"{storage.QUARANTINE}/instances")
    got = {r[0]: r[1] for r in q.select(storage.INSTANCE_ID, storage.REASON).collect()}
    assert got == {
        "bad\nid": "invalid_id",
        "zz-blank": "missing_text",
        "zz-null": "missing_text",
        "zz-bogus": "invalid_split",
    }
    counts = Manifest(paths.manifest).stage("nodes")["stats"]["inputs"]["instances"]
    assert (counts["rows_in"], counts["rows_used"], counts["rows_quarantined"]) == (20, 16, 4)
    nodes = storage.read_table(spark, paths, storage.NODES)
    ids = {r[0]: r[1] for r in nodes.select(storage.NODE_ID, storage.SPLIT).collect()}
    assert ids["zz-good-1"] == ids["zz-good-2"] == "new"
    assert not set(got) & set(ids)
    assert nodes.where(F.col(storage.SPLIT) == "bogus").count() == 0


def test_a_models_run_refuses_a_root_where_a_full_run_ran(spark, tmp_path):
    """The daily DAG (``--models latest``) and the monthly one share the output and the run
    date on the 1st: the daily's nodes pre-step replaced the retraining run's ``nodes`` under
    its later stages, which then trained on the day's products alone. A run with
    ``run.models`` now refuses a root whose manifest holds a graph stage, writing nothing."""
    out = tmp_path / "prod"
    root = storage.RunPaths(str(out), DAY)
    m = Manifest(root.manifest)
    m.record_stage("graph", {}, "f-monthly", 1.0)
    cfg = config_from_dict(
        {
            "output": str(out),
            "input": {"instances": str(tmp_path / "day.parquet")},
            "run": {"run_date": DAY, "models": str(tmp_path / "monthly"), "trust_models": True},
        }
    )
    with pytest.raises(storage.InputError) as e:
        pipeline.run_pipeline(spark, cfg, STAGES)
    assert "holds a full run" in str(e.value) and "another --run-date" in str(e.value)
    # check says the same, first (not a plan message about the root's upstream outputs)
    from pina_spark.cli.check import check_run

    for stages in (STAGES, ("embed", "neighbors", "aggregate")):
        problems = check_run(cfg, stages).problems
        assert any("holds a full run" in p for p in problems), problems
        assert not any("--stages" in p for p in problems), problems
    after = Manifest(root.manifest)
    assert after.stage("nodes") is None and "config" not in after.data  # nothing written
    assert not storage.is_complete(spark, root.table(storage.NODES))


def test_latest_naming_the_commands_own_root_is_refused(tmp_path):
    """The retraining run promoted itself on the run date the daily run uses: ``--models
    latest`` names the daily's own root, where it would rerun its steps on the retraining
    run's nodes without the day's products (exit 0). Refused, and so is a run that builds the
    graph: on its own root every step's settings change with ``run.models``, so it would rerun
    the graph and refit the vectorizer it means to reuse. Without stages (a caller resolving
    the name alone) it resolves."""
    from pina_spark.orchestration.promotion import resolve_models

    out = tmp_path / "prod"
    out.mkdir()
    own = storage.RunPaths(str(out), DAY).root
    (out / "_PROMOTED").write_text(json.dumps({"run": own}))
    cfg = config_from_dict({"output": str(out), "run": {"run_date": DAY, "models": "latest"}})
    with pytest.raises(storage.InputError) as e:
        resolve_models(cfg, STAGES)
    assert "which is this run's own root" in str(e.value)
    with pytest.raises(storage.InputError, match="which is this run's own root"):
        resolve_models(cfg, ["graph", *STAGES])
    assert resolve_models(cfg).run.models == own


def test_stale_upstream_counts_only_the_steps_the_config_considers(tmp_path):
    """A root where a full run fitted g and predicted neighbours, then run with
    ``train.variants: [vectorizer_only]`` (a selection) after a new promotion: its old
    pretrain and neighbours entries are never rerun by such a run, so they cannot be stale
    for it (they blocked its aggregate for good)."""
    from pina_spark.orchestration import resume

    m = Manifest(str(tmp_path / "_manifest.json"))
    every = config_from_dict({"output": str(tmp_path)})
    for st in ("graph", "vectorizer", "embed", "pretrain", "neighbors"):
        m.record_stage(st, {}, "f", 1.0, settings="made-by-another-run")
    only = config_from_dict({"output": str(tmp_path), "train": {"variants": ["vectorizer_only"]}})
    stale = [s for s, _, _ in resume.stale_upstream(only, m, "aggregate", ["aggregate"])]
    assert stale == ["graph", "vectorizer", "embed"]
    stale = [s for s, _, _ in resume.stale_upstream(every, m, "aggregate", ["aggregate"])]
    assert stale == ["graph", "vectorizer", "embed", "pretrain", "neighbors"]


@pytest.mark.slow
def test_a_day_without_new_products(spark, tmp_path, demo_submit_run):
    """An instances table with a header and no rows (what Spark writes for an empty day) in a
    run of another run's models: the nodes are the models run's, and check lets it start
    (the graph stage, which builds from the inputs, still refuses an empty table)."""
    from pina_spark.cli.check import require_inputs

    run = require_finished(demo_submit_run)
    path = str(tmp_path / "empty_day.parquet")
    spark.createDataFrame([], "instance_id string, text string, split string").coalesce(
        1
    ).write.parquet(path)
    cfg = _cfg(run, str(tmp_path / "empty"), path, True)
    require_inputs(cfg, STAGES)  # no error
    with open(run["config"]) as fh:
        given = yaml.safe_load(fh)["input"]
    full = config_from_dict({**cfg.to_dict(), "input": {**given, "instances": path}})
    with pytest.raises(storage.InputError) as e:
        require_inputs(full, ["graph"])
    assert f"input.instances: {path} has no rows" in str(e.value)
    assert pipeline.run_pipeline(spark, cfg, ["embed"])["nodes"] == "ran"
    paths = storage.RunPaths(cfg.output, DAY)
    stats = Manifest(paths.manifest).stage("nodes")["stats"]
    assert stats["instances_appended"] == 0 and stats["inputs"]["instances"]["rows_in"] == 0
    models_nodes = storage.read_table(spark, storage.RunPaths(run["output"]), storage.NODES)
    assert storage.read_table(spark, paths, storage.NODES).count() == models_nodes.count()
