"""selection.json (pina_spark/selection/artifact.py) and production runs that follow it
(pina_spark/selection/follow.py): settings applied, ``--set`` wins, and a missing (where
required), corrupt or stale selection stops ``pina-spark run`` with exit 2 before Spark starts.
Only the publish test starts Spark."""

import json
import logging
import os

import pytest

from pina_spark import cli, storage
from pina_spark.config import config_from_dict
from pina_spark.selection import artifact
from pina_spark.selection.follow import follow_selection

RULE = "the rule"


def _models_root(tmp_path, name="models_run", models="m1", vectorizer="v1"):
    """A run root holding version tokens for its models and vectorizer folders."""
    root = str(tmp_path / name)
    for folder, version in ((storage.MODELS, models), (storage.VECTORIZER, vectorizer)):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        with open(os.path.join(root, folder, storage.VERSION_FILE), "w") as fh:
            json.dump({"version": version, "files": None}, fh)
    return root


def _write_selection(root, variant="pina", settings=None, models=None, raw=None):
    uri = artifact.selection_uri(root)
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    rec = {
        "format": artifact.FORMAT,
        "variant": variant,
        "settings": settings if settings is not None else {},
        "validation": [],
        "rule": RULE,
        "models": models or artifact.models_versions(root),
    }
    with open(uri, "w") as fh:
        fh.write(raw if raw is not None else json.dumps(rec))
    return uri


def _cfg(tmp_path, models, **select):
    return config_from_dict(
        {"output": str(tmp_path / "prod"), "run": {"models": models}, "select": select}
    )


def test_a_run_follows_the_selection_and_an_explicit_set_wins(tmp_path, caplog):
    root = _models_root(tmp_path)
    _write_selection(root, "pina", {"neighbors.k": 10, "aggregate.label_features": "pifa"})
    cfg = config_from_dict(
        {"output": str(tmp_path / "prod"), "run": {"models": root}, "neighbors": {"k": 7}}
    )
    with caplog.at_level(logging.INFO, logger="pina_spark.selection.follow"):
        out, rec = follow_selection(cfg, {"neighbors.k"})
    assert rec["variant"] == "pina"
    assert out.neighbors.k == 7  # --set neighbors.k wins
    assert out.aggregate.label_features == "pifa"
    assert out.train.variants == ["baseline", "pina"]
    assert out.evaluate.gate_variant == "pina"
    assert "--set wins over the selection for neighbors.k" in caplog.text


def test_vectorizer_only_chosen_trains_it_and_baseline_and_gates_on_it(tmp_path):
    root = _models_root(tmp_path)
    _write_selection(root, "vectorizer_only")
    out, _ = follow_selection(_cfg(tmp_path, root), ())
    assert out.train.variants == ["baseline", "vectorizer_only"]
    assert out.evaluate.gate_variant == "vectorizer_only"


def test_no_selection_changes_nothing_unless_required(tmp_path):
    root = _models_root(tmp_path)
    cfg = _cfg(tmp_path, root)
    assert follow_selection(cfg, ()) == (cfg, None)
    with pytest.raises(artifact.SelectionError, match="no selection"):
        follow_selection(_cfg(tmp_path, root, follow="required"), ())
    _write_selection(root, raw="{not json")
    off = _cfg(tmp_path, root, follow="off")
    assert follow_selection(off, ()) == (off, None)


def test_a_stale_selection_is_refused(tmp_path):
    root = _models_root(tmp_path)
    _write_selection(root, models={"models": "m0", "vectorizer": "v1"})
    with pytest.raises(artifact.SelectionError, match="stale selection"):
        follow_selection(_cfg(tmp_path, root), ())


def _run_cli(tmp_path, argv):
    conf = tmp_path / "c.yaml"
    conf.write_text(f"output: {tmp_path / 'prod'}\n")
    return cli.main(["run", "--config", str(conf)] + argv)


@pytest.mark.parametrize(
    "case, message",
    [
        ("corrupt", "unreadable selection: not JSON"),
        ("bad_variant", "unreadable selection: variant 'xmc'"),
        ("missing", "no selection (select.follow: required)"),
        ("stale", "stale selection"),
    ],
)
def test_run_exits_2_on_a_bad_selection(tmp_path, capsys, case, message):
    root = _models_root(tmp_path)
    argv = ["--models", root]
    if case == "corrupt":
        _write_selection(root, raw='{"variant": "pina", "settings": {')
    elif case == "bad_variant":
        _write_selection(root, variant="xmc")
    elif case == "missing":
        argv += ["--set", "select.follow=required"]
    else:
        _write_selection(root, models={"models": "m1", "vectorizer": "retrained"})
    assert _run_cli(tmp_path, argv) == 2
    err = capsys.readouterr().err
    assert message in err and artifact.selection_uri(root) in err


def test_check_follows_the_selection_as_the_run_does(tmp_path, capsys):
    root = _models_root(tmp_path)
    _write_selection(root, "vectorizer_only")
    conf = tmp_path / "c.yaml"
    conf.write_text(f"output: {tmp_path / 'prod'}\n")
    argv = ["check", "--config", str(conf), "--models", root, "--json"]
    cli.main(argv + ["--set", "evaluate.gate_variant=baseline"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["selection"] == {
        "root": storage.norm(root),
        "variant": "vectorizer_only",
        "settings": {"train.variants": ["baseline", "vectorizer_only"]},
    }
    assert not any("selection" in p for p in doc["problems"])
    # a stale selection fails the run: check says so and exits 2
    _write_selection(root, models={"models": "m1", "vectorizer": "retrained"})
    assert cli.main(argv) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["selection"] is None and not doc["can_start"]
    assert any("stale selection" in p for p in doc["problems"])


def test_models_latest_follows_the_promoted_runs_selection(tmp_path):
    root = _models_root(tmp_path)
    _write_selection(root, raw="[]")
    out = tmp_path / "prod"
    out.mkdir()
    (out / "_PROMOTED").write_text(json.dumps({"run": root}))
    assert _run_cli(tmp_path, ["--models", "latest"]) == 2  # it read the promoted root's


def test_publish_needs_the_lease_then_writes_and_commits(spark, tmp_path):
    root = _models_root(tmp_path)
    rec = {"variant": "vectorizer_only", "settings": {}, "validation": [], "rule": RULE}
    with pytest.raises(storage.LeaseError, match="lease"):
        artifact.publish_selection(spark, root, rec, "r1")
    with storage.acquire_lease(root, "r1"):
        uri = artifact.publish_selection(spark, root, rec, "r1")
    got = artifact.read_selection(root)
    assert uri == artifact.selection_uri(root)
    assert got["variant"] == "vectorizer_only"
    assert got["models"] == {"models": "m1", "vectorizer": "v1"}
    commit = storage.read_commit(storage.RunPaths(root), artifact.SELECT_STAGE)
    assert commit["run_id"] == "r1" and commit["tables"][artifact.SELECTION_DIR]
    artifact.check_fresh(got, root)
