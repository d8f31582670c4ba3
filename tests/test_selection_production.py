"""A production run that follows a ``vectorizer_only`` selection, with the REAL stages on the
demo run that spark-submit produced (``demo_submit_run``) as ``run.models``: no g fit (no
pretrain stage), no neighbours stage, features of ``vectorizer_only`` alone with the documented
empty neighbour columns, and the promotion gate on the chosen variant.

The selection's settings are applied with :func:`followed_settings` (what ``pina-spark run``
applies through :func:`pina_spark.selection.follow.follow_selection`), so nothing is written
into the shared demo run root.
"""

import pyarrow.dataset as ds
import pytest
import yaml

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.config.load import set_dotted
from pina_spark.orchestration import pipeline
from pina_spark.selection.follow import followed_settings
from pina_spark.stages import STAGES
from pina_spark.storage.manifest import Manifest

from demo_run import require_finished


def test_aggregate_fingerprint_reads_train_variants_only_without_neighbours():
    default = config_from_dict({"output": "/r"})
    assert STAGES["aggregate"].fingerprint_sections(default) == (
        "aggregate",
        "neighbors.folds",
        "neighbors.fold_seed",  # left out of the fingerprint at 0 (PinaConfig.fingerprint)
    )
    vo = config_from_dict({"output": "/r", "train": {"variants": ["vectorizer_only"]}})
    assert "train.variants" in STAGES["aggregate"].fingerprint_sections(vo)


def _following(run, out, variant, promote):
    """The demo run's config for a production run into ``out`` on the demo run's models,
    with a selection of ``variant`` applied."""
    with open(run["config"]) as fh:
        data = yaml.safe_load(fh)
    data["output"] = str(out)
    # the demo run is not promoted: nothing else vouches for its models
    data["run"] = {"models": run["output"], "trust_models": True}
    data.setdefault("evaluate", {}).update({"promote": promote, "report_examples": 0})
    data = config_from_dict(data).to_dict()
    for key, value in followed_settings({"variant": variant, "settings": {}}).items():
        set_dotted(data, key, value, "selection setting")
    return config_from_dict(data)


@pytest.mark.slow
def test_production_run_following_vectorizer_only(spark, tmp_path, demo_submit_run):
    run = require_finished(demo_submit_run)
    cfg = _following(run, tmp_path / "prod", "vectorizer_only", promote=True)

    result = pipeline.run_pipeline(spark, cfg)
    assert "pretrain" not in result and "neighbors" not in result, result
    assert result["aggregate"] == "ran" and result["evaluate"] == "ran"
    paths = storage.RunPaths(cfg.output)
    assert not storage.path_exists(spark, paths.table(storage.NEIGHBORS))

    t = ds.dataset(paths.table(storage.FEATURES), format="parquet", partitioning="hive").to_table()
    assert set(t.column(storage.VARIANT).to_pylist()) == {"vectorizer_only"}
    for col in (storage.NEIGHBOR_IDS, storage.NEIGHBOR_WEIGHTS):
        assert all(not x for x in t.column(col).to_pylist()), col

    ev = Manifest(paths.manifest).stage("evaluate")
    promotion = ev["stats"]["promotion"]
    assert promotion["variant"] == "vectorizer_only" and promotion["promoted"], promotion


def test_g_output_that_lacks_a_needed_variant_reruns_and_a_superset_serves():
    from pina_spark.orchestration.resume import decide, g_lacking

    every = config_from_dict({"output": "/r"})
    pina = config_from_dict({"output": "/r", "train": {"variants": ["pina", "baseline"]}})
    done = lambda variants: {"status": "complete", "fingerprint": "f", "stats": variants}  # noqa
    one, both = done({"variants": "pina"}), done({"variants": "pina,pina_naive"})
    d = decide("pretrain", "f", both, [], False, (), g_lacking(pina, "pretrain", both))
    assert d.action == "skip", d
    assert g_lacking(pina, "pretrain", both) == [] and g_lacking(every, "pretrain", one) == [
        "pina_naive"
    ]
    d = decide("pretrain", "f", one, [], False, (), g_lacking(every, "pretrain", one))
    assert d.action == "run" and "has no pina_naive" in d.reason, d
    nb = done({"variants": {"pina": {}}})
    assert g_lacking(every, "neighbors", nb) == ["pina_naive"]
    assert g_lacking(every, "aggregate", nb) == []  # it follows neighbours' run


def _p1_by_instance(root, variant):
    from pina_spark.stages.evaluate.stage import read_per_instance

    per = read_per_instance(root)
    sub = per[per["variant"] == variant]
    assert len(sub), f"{root}: {variant} not scored"
    return sub.set_index("instance_id")["P@1"].sort_index()


def _variants_of(uri):
    t = ds.dataset(uri, format="parquet", partitioning="hive").to_table(columns=[storage.VARIANT])
    return set(t.column(storage.VARIANT).to_pylist())


@pytest.mark.slow
def test_production_run_following_pina_predicts_pina_alone(spark, tmp_path, demo_submit_run):
    run = require_finished(demo_submit_run)
    cfg = _following(run, tmp_path / "prod", "pina", promote=False)
    assert sorted(cfg.train.variants) == ["baseline", "pina"]

    result = pipeline.run_pipeline(spark, cfg)
    assert result["neighbors"] == "ran" and result["aggregate"] == "ran", result
    paths = storage.RunPaths(cfg.output)
    assert _variants_of(paths.table(storage.NEIGHBORS)) == {"pina"}  # no pina_naive predicted
    assert _variants_of(paths.table(storage.FEATURES)) == {"pina", "vectorizer_only"}
    nb = Manifest(paths.manifest).stage("neighbors")["stats"]
    assert sorted(nb["variants"]) == ["pina"], nb
    # the same g, neighbours and downstream model as the full run: the same test metrics
    full, prod = _p1_by_instance(run["output"], "pina"), _p1_by_instance(cfg.output, "pina")
    assert full.index.equals(prod.index) and (full == prod).all()


@pytest.mark.slow
def test_a_run_training_one_g_variant_fits_its_g_alone(spark, tmp_path, demo_submit_run):
    """On a copy of the full demo root: training fewer g variants refits nothing (the root's g
    and neighbours hold them); a forced retraining of ``pina_naive`` alone fits its g alone and
    scores what the full run did; training every variant again refits the g it lacks."""
    import shutil

    from pina_spark.models.card import read_model_card

    run = require_finished(demo_submit_run)
    root = str(tmp_path / "naive")
    shutil.copytree(run["output"], root)
    with open(run["config"]) as fh:
        data = yaml.safe_load(fh)
    data["output"] = root
    data.setdefault("evaluate", {}).update({"report_examples": 0, "promote": False})
    every = config_from_dict(data)
    data.setdefault("train", {})["variants"] = ["pina_naive", "baseline"]
    naive = config_from_dict(data)
    paths = storage.RunPaths(root)
    g_stages = ["pretrain", "neighbors", "aggregate", "train", "evaluate"]

    fewer = pipeline.run_pipeline(spark, naive, g_stages)
    assert fewer["pretrain"] == fewer["neighbors"] == "skipped", fewer  # a superset serves

    result = pipeline.run_pipeline(spark, naive, g_stages, force=True)
    assert result["pretrain"] == "ran" and result["neighbors"] == "ran", result
    card = read_model_card(paths.table(storage.MODELS))
    assert sorted(card.variants) == ["pina_naive"]
    assert not storage.path_exists(spark, f"{paths.table(storage.MODELS)}/g/pina")
    assert _variants_of(paths.table(storage.NEIGHBORS)) == {"pina_naive"}
    # pina_naive's g refitted alone is the one the full run fitted beside pina's
    full, alone = _p1_by_instance(run["output"], "pina_naive"), _p1_by_instance(root, "pina_naive")
    assert full.index.equals(alone.index) and (full == alone).all()

    again = pipeline.run_pipeline(spark, every, g_stages)
    assert again["pretrain"] == "ran" and again["neighbors"] == "ran", again
    assert sorted(read_model_card(paths.table(storage.MODELS)).variants) == ["pina", "pina_naive"]
    assert _variants_of(paths.table(storage.NEIGHBORS)) == {"pina", "pina_naive"}
