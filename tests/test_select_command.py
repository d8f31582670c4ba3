"""``pina-spark select`` on a finished run root: the REAL stages (neighbors, aggregate, train,
evaluate) on the validation split carved from train of a copy of the demo run that spark-submit
produced (``demo_submit_run``; the shared root itself is never written).

* end to end through the command line: a valid ``selection/selection.json`` (the artifact's own
  validation), committed, with ``report.md`` beside it (choice first, the optimism caveat);
* with ``select.cv_folds: 2``: every train row scored once, by downstream models trained
  without its fold (two fits per step);
* the selection never reads a test row (with the carve-out and with cross-validation): on a
  second copy with every test row deleted (``nodes``,
  ``graph/instance_labels`` and ``embeddings`` rows of test instances; ``features``,
  ``neighbors``, ``predictions``, ``eval`` and the downstream models removed), ``selection.json``
  is the same apart from its timing fields.

Two candidates keep it short (and their cost order certain: ``vectorizer_only`` pays no g);
:func:`pina_spark.orchestration.select.work_plan` and the rule are tested without Spark.
"""

import json
import os
import shutil

import pytest
import yaml

from pina_spark import storage
from pina_spark.cli import commands as cli
from pina_spark.orchestration.select import (
    SELECT_WORK,
    candidate_costs,
    expand_candidates,
    work_plan,
)
from pina_spark.selection.artifact import REPORT_FILE, selection_uri, validate_record

from demo_run import require_finished

#: fields of selection.json that are measured seconds (they differ from run to run)
TIMING = ("stage_seconds", "costs", "seconds", "steps_seconds", "pretrain_s")
SELECT = {
    "candidates": ["vectorizer_only", "pina/text"],
    "grid": {"neighbors.k": [5]},
    "cv_folds": 0,  # the carve-out; ``selected_cv`` runs the (default) cross-validation
}


def _config(run, root, path, **select):
    with open(run["config"]) as fh:
        data = yaml.safe_load(fh)
    data["output"] = root
    data["select"] = dict(SELECT, **select)
    data.setdefault("evaluate", {})["report_examples"] = 0
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh)
    return str(path)


def _strip(rec):
    out = {k: v for k, v in rec.items() if k not in TIMING}
    out["validation"] = [{k: v for k, v in r.items() if k not in TIMING} for r in rec["validation"]]
    return out


def _delete_test_rows(spark, root):
    """Every test instance's rows out of the copy ``root``; the tables built from them gone."""
    from pyspark.sql import functions as F

    paths = storage.RunPaths(root)
    nodes = storage.read_table(spark, paths, storage.NODES)
    test = nodes.where(F.col(storage.SPLIT) == storage.SPLIT_TEST).select(storage.NODE_INDEX)
    test_idx = spark.createDataFrame(test.toPandas())  # materialised before the overwrites
    assert test_idx.count() > 0
    for name, col in (
        (storage.NODES, storage.NODE_INDEX),
        (storage.EMBEDDINGS, storage.NODE_INDEX),
        (storage.INSTANCE_LABELS, storage.INSTANCE_INDEX),
    ):
        kept = storage.read_table(spark, paths, name).join(
            test_idx.withColumnRenamed(storage.NODE_INDEX, col), col, "left_anti"
        )
        storage.write_table(kept, paths, name)  # staging, then swap: the scan ends first
    for name in (
        storage.FEATURES,
        storage.NEIGHBORS,
        storage.PREDICTIONS,
        storage.EVAL,
        storage.DOWNSTREAM_MODELS,
    ):
        shutil.rmtree(storage.local_path(paths.table(name)), ignore_errors=True)
    left = storage.read_table(spark, paths, storage.NODES)
    assert left.where(F.col(storage.SPLIT) == storage.SPLIT_TEST).count() == 0


def test_work_plan_shares_neighbours_and_vectorizer_only_pays_no_g():
    from pina_spark.config import SelectConfig

    sel = SelectConfig(candidates=["vectorizer_only", "pina_naive/text", "pina/text"])
    steps = work_plan(expand_candidates(sel))
    # vectorizer_only once; pina_naive and pina trained together at each of the 4 points
    assert [s.variants for s in steps] == [("vectorizer_only",)] + [("pina_naive", "pina")] * 4
    assert [s.needs_neighbors for s in steps] == [False] + [True] * 4
    assert len({s.neighbors_key for s in steps[1:]}) == 2
    assert steps[1].neighbors_key == steps[2].neighbors_key  # consecutive: one neighbours run
    measured = {
        s.id: {"neighbors_s": 2.0, "aggregate_s": 1.0, "train_s": 1.0, "train_s_by_variant": {}}
        for s in steps
    }
    costs = candidate_costs(steps, measured, pretrain_s=50.0)
    assert costs["vectorizer_only"] == {
        "pretrain_s": 0.0,
        "neighbors_s": 0.0,
        "aggregate_s": 1.0,
        "train_s": 1.0,
        "total_s": 2.0,
    }
    name = steps[1].candidates[1]
    assert costs[name]["pretrain_s"] == 50.0 and costs[name]["train_s"] == 0.5


def test_select_on_a_root_that_reused_models_exits_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"output": str(tmp_path / "r")}))
    rc = cli.main(["select", "--config", str(cfg), "--models", str(tmp_path / "other")])
    assert rc == 2
    assert "chooses for the models of the root it runs on" in capsys.readouterr().err
    rc = cli.main(["select", "--config", str(cfg)])  # no run there: said so
    assert rc == 2 and "no run there" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "r" / "selection")
    # a root whose run reused another's models (a follow run): refused before any work (it
    # used to score the vectorizer_only step, then stop at the g candidates' models folder)
    from pina_spark.storage.manifest import Manifest

    Manifest(str(tmp_path / "r" / "_manifest.json")).set_run_info(
        {"output": str(tmp_path / "r"), "run": {"models": str(tmp_path / "selected")}}
    )
    rc = cli.main(["select", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 2 and "was run with the models of" in err and "selected" in err
    assert not os.path.exists(tmp_path / "r" / "select_work")


@pytest.fixture(scope="module")
def selected(spark, tmp_path_factory, demo_submit_run):
    """The demo run copied, and ``pina-spark select`` run on the copy."""
    run = require_finished(demo_submit_run)
    tmp = tmp_path_factory.mktemp("select")
    root = str(tmp / "run")
    shutil.copytree(run["output"], root)
    cfg = _config(run, root, tmp / "select.yaml")
    rc = cli.main(["select", "--config", cfg])
    assert rc == 0
    raw = storage.read_bytes(selection_uri(root))
    assert raw is not None
    return {"run": run, "root": root, "tmp": tmp, "record": json.loads(raw)}


@pytest.mark.slow
def test_select_end_to_end_on_the_demo_root(spark, selected):
    root, rec = selected["root"], selected["record"]
    validate_record(rec, "selection.json")
    assert rec["variant"] in ("vectorizer_only", "pina")
    names = [r["candidate"] for r in rec["validation"]]
    assert names == ["vectorizer_only", "pina/text neighbors.k=5"], names
    cheap, dear = rec["validation"]
    assert cheap["stage_seconds"] < dear["stage_seconds"]
    assert rec["costs"][cheap["candidate"]]["pretrain_s"] == 0.0
    assert rec["costs"][dear["candidate"]]["pretrain_s"] > 0.0
    assert 0.0 <= dear["metric"] <= 1.0 and dear["p_vs_cheapest"] is not None
    assert rec["n_valid_scored"] > 0 and rec["correction"] == "holm-bonferroni"
    assert [s["tier"] for s in rec["steps"]] == ["no_g", "g"]
    assert rec["steps"][1]["against"] == "vectorizer_only"
    assert rec["halves"]["n_selection"] + rec["halves"]["n_confirmation"] == rec["n_valid_scored"]
    assert rec["settings"] == ({} if rec["variant"] == "vectorizer_only" else dear["settings"])
    assert os.path.exists(os.path.join(root, "_commits", "select.json"))
    report = storage.read_bytes(storage.RunPaths(root).table("selection") + "/" + REPORT_FILE)
    text = report.decode()
    assert text.startswith("# Selection: ")
    assert "seen the validation rows' texts and edges" in text and "optimistic" in text
    # the work folder holds validation rows only: its test rows are the validation rows
    work = storage.RunPaths(storage.RunPaths(root).table(SELECT_WORK))
    nodes = storage.read_table(spark, work, storage.NODES).toPandas()
    valid = set(nodes.loc[nodes[storage.SPLIT] == storage.SPLIT_TEST, storage.NODE_ID])
    pred = storage.read_table(spark, work, storage.PREDICTIONS).toPandas()
    assert valid and set(pred[storage.INSTANCE_ID]) <= valid
    # a second selection on the same root reuses every kept step, and decides the same
    assert rec["resumed_steps"] == [] and rec["steps_seconds"] > 0
    cfg = _config(selected["run"], root, selected["tmp"] / "select_again.yaml")
    assert cli.main(["select", "--config", cfg]) == 0
    again = json.loads(storage.read_bytes(selection_uri(root)))
    assert len(again["resumed_steps"]) == 2
    assert _strip(again) == _strip(rec) | {"resumed_steps": again["resumed_steps"]}
    # --force recomputes every step (it used to be accepted and ignored)
    assert cli.main(["select", "--config", cfg, "--force"]) == 0
    forced = json.loads(storage.read_bytes(selection_uri(root)))
    assert forced["resumed_steps"] == [] and forced["variant"] == rec["variant"]


@pytest.fixture(scope="module")
def selected_cv(spark, selected):
    """``pina-spark select`` with ``select.cv_folds: 2`` on another copy of the demo run."""
    root = str(selected["tmp"] / "run_cv")
    shutil.copytree(selected["run"]["output"], root)
    cfg = _config(selected["run"], root, selected["tmp"] / "select_cv.yaml", cv_folds=2)
    assert cli.main(["select", "--config", cfg]) == 0
    return {**selected, "root": root, "record": json.loads(storage.read_bytes(selection_uri(root)))}


@pytest.mark.slow
def test_cross_validated_selection_scores_every_train_row(spark, selected, selected_cv):
    from pina_spark.orchestration.select import STEPS_DIR
    from pina_spark.storage.folds import validation_fold

    rec, root = selected_cv["record"], selected_cv["root"]
    validate_record(rec, "selection.json")
    assert rec["cv_folds"] == 2 and rec["validation_fraction"] is None
    assert rec["note"].startswith("2-fold cross-validation")
    nodes = storage.read_table(spark, storage.RunPaths(root), storage.NODES).toPandas()
    train = nodes.loc[
        (nodes[storage.KIND] == storage.KIND_INSTANCE)
        & (nodes[storage.SPLIT] == storage.SPLIT_TRAIN),
        storage.NODE_ID,
    ]
    assert rec["n_valid"] == len(train)  # every train row is a validation row once
    carved = selected["record"]
    assert carved["cv_folds"] == 0 and carved["n_valid"] < rec["n_valid"]
    assert rec["n_valid_scored"] > carved["n_valid_scored"]
    assert rec["halves"]["n_selection"] + rec["halves"]["n_confirmation"] == rec["n_valid_scored"]
    # each step trained the downstream models twice, and kept what one fit costs
    work = storage.RunPaths(storage.RunPaths(root).table(SELECT_WORK))
    for row in rec["validation"]:
        assert row["stage_seconds"] > 0
    steps = os.listdir(storage.local_path(work.table(STEPS_DIR)))
    assert len(steps) == 2
    for sid in steps:
        meta = json.loads(storage.read_bytes(work.table(STEPS_DIR) + f"/{sid}/step.json"))
        m = meta["measured"]
        assert m["train_fits"] == 2 and m["train_fits_s"] >= m["train_s"] > 0
    # the last fit held out fold 1 alone, and scored those rows only
    nodes_w = storage.read_table(spark, work, storage.NODES).toPandas()
    held = set(nodes_w.loc[nodes_w[storage.SPLIT] == storage.SPLIT_TEST, storage.NODE_ID])
    assert held == {i for i in train if validation_fold(str(i), 2) == 1}
    pred = storage.read_table(spark, work, storage.PREDICTIONS).toPandas()
    assert set(pred[storage.INSTANCE_ID]) <= held
    text = storage.read_bytes(storage.RunPaths(root).table("selection") + "/" + REPORT_FILE)
    assert "in 2-fold cross-validation" in text.decode()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["selected", "selected_cv"])
def test_selection_never_reads_a_test_row(spark, request, which):
    """With the carve-out and with cross-validation."""
    sel = request.getfixturevalue(which)
    cv = sel["record"]["cv_folds"]
    root_b = str(sel["tmp"] / f"run_no_test_{which}")
    shutil.copytree(sel["run"]["output"], root_b)
    _delete_test_rows(spark, root_b)
    cfg_b = _config(sel["run"], root_b, sel["tmp"] / f"select_b_{which}.yaml", cv_folds=cv)
    assert cli.main(["select", "--config", cfg_b]) == 0
    rec_b = json.loads(storage.read_bytes(selection_uri(root_b)))
    assert _strip(rec_b) == _strip(sel["record"])


def test_report_of_a_run_following_a_selection_shows_it_first(tmp_path):
    from pina_spark.config import config_from_dict
    from pina_spark.selection.artifact import FORMAT
    from pina_spark.stages.evaluate.stage import _report_markdown, _selection_section

    root = str(tmp_path / "models_run")
    rec = {
        "format": FORMAT,
        "variant": "vectorizer_only",
        "candidate": "vectorizer_only",
        "settings": {},
        "validation": [],
        "rule": "r",
        "models": {"models": None, "vectorizer": None},
    }
    storage.write_bytes(selection_uri(root), json.dumps(rec).encode())
    cfg = config_from_dict({"output": str(tmp_path / "prod"), "run": {"models": root}})
    section = _selection_section(cfg)
    assert section.startswith("## Selection") and "`vectorizer_only`" in section
    assert "optimistic" in section
    off = config_from_dict(
        {"output": str(tmp_path / "prod"), "run": {"models": root}, "select": {"follow": "off"}}
    )
    assert _selection_section(off) == ""
    assert _selection_section(config_from_dict({"output": str(tmp_path / "p")})) == ""
    metrics = {
        "side_info": "both",
        "n_train": 1,
        "n_test": 1,
        "n_test_scored": 1,
        "n_test_no_labels": 0,
        "n_labels": 1,
        "variants": {},
    }
    lines = _report_markdown(metrics, [1], "", section).splitlines()
    assert lines[0] == "# PINA downstream evaluation" and lines[2] == "## Selection"
