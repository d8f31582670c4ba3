"""Command line: flags map onto the config, errors exit 2 with a message naming key and file."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from pina_spark.cli import commands as cli
from pina_spark.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def conf(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("output: %s\ninput: {instances: i.parquet}\n" % (tmp_path / "out"))
    return str(p)


@pytest.fixture
def captured(monkeypatch):
    """Replace the Spark part: record (cfg, stages) instead of running."""
    calls = []

    def fake_run_stages(cfg, stages, sets=()):
        calls.append((cfg, tuple(stages)))
        return {s: "ran" for s in stages}

    monkeypatch.setattr(cli, "run_stages", fake_run_stages)
    return calls


def test_run_flags_map_to_config(conf, captured, capsys):
    rc = cli.main(
        [
            "run",
            "--config",
            conf,
            "--stages",
            "aggregate,embed,neighbors",
            "--run-date",
            "2026-11-21",
            "--models",
            "s3://b/runs/prod/run_date=2026-11-20",
            "--incremental",
            "--force",
            "--set",
            "neighbors.k=9",
            "--set",
            "input.instances=s3://b/new/instances/",
            "--set",
            "spark.conf.spark.executor.memory=4g",
        ]
    )
    assert rc == 0
    ((cfg, stages),) = captured
    assert stages == ("embed", "neighbors", "aggregate")
    assert cfg.run.run_date == "2026-11-21" and cfg.run.incremental and cfg.run.force
    assert cfg.run.models == "s3://b/runs/prod/run_date=2026-11-20"
    assert cfg.neighbors.k == 9 and cfg.input.instances == "s3://b/new/instances/"
    assert cfg.spark.conf["spark.executor.memory"] == "4g"
    out = json.loads(capsys.readouterr().out)
    assert out["stages"] == {"embed": "ran", "neighbors": "ran", "aggregate": "ran"}


def test_job_main_runs_one_stage(conf, captured, capsys):
    assert cli.job_main("neighbors", ["--config", conf, "--run-date", "2026-01-31"]) == 0
    ((cfg, stages),) = captured
    assert stages == ("neighbors",) and cfg.run.run_date == "2026-01-31"


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["--set", "neighbours.k=3"], ["--set", "'neighbours'", "did you mean 'neighbors'?"]),
        (["--set", "neighbors.kk=3"], ["--set", "did you mean 'neighbors.k'?"]),
        (["--set", "neighbors.k=many"], ["neighbors.k", "expected an integer"]),
        (["--set", "side_info=graphy"], ["side_info", "is not one of"]),
        (["--stages", "graph,embedd"], ["--stages", "embedd"]),
        (["--run-date", "2026-02-30"], ["run.run_date", "YYYY-MM-DD"]),
        (["--incremental"], ["run.incremental needs run.models"]),
        (["--set", "oops"], ["expected key.sub=value"]),
        (["--stages", ""], ["--stages '' names no stage"]),
        (["--set", "output="], ["--set 'output=': output: expected the run's output folder"]),
        (["--set", "output=/"], ["output: expected the run's output folder, got '/'"]),
        (["--set", "output=s3://"], ["output: expected the run's output folder, got 's3://'"]),
        (["--set", "evaluate.ks=[1, x]"], ["--set 'evaluate.ks=[1, x]': evaluate.ks[1]"]),
    ],
)
def test_errors_exit_2_with_message(conf, captured, capsys, argv, needles):
    rc = cli.main(["run", "--config", conf] + argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("pina-spark: error: ")
    for n in needles:
        assert n in err
    assert captured == []


def test_unknown_set_key_is_blamed_on_set_not_the_file(conf, captured, capsys):
    assert cli.main(["run", "--config", conf, "--set", "neighbours.k=3"]) == 2
    err = capsys.readouterr().err
    assert "--set 'neighbours.k=3'" in err and "c.yaml" not in err
    bad = os.path.join(os.path.dirname(conf), "typo.yaml")
    with open(bad, "w") as fh:
        fh.write("output: /tmp/x\nneighbours: {k: 3}\n")
    assert cli.main(["run", "--config", bad]) == 2
    assert "typo.yaml" in capsys.readouterr().err  # a typo in the file still names the file


def test_a_bad_flag_value_is_blamed_on_the_flag(conf, captured, capsys):
    """--run-date and the other scheduling flags become run.* overrides; an error about the
    value names the flag the user typed, not a --set they never wrote."""
    assert cli.main(["run", "--config", conf, "--run-date", "2026-02-30"]) == 2
    err = capsys.readouterr().err
    assert "--run-date '2026-02-30': run.run_date: expected a calendar date" in err, err
    assert "--set" not in err and "c.yaml" not in err
    assert captured == []


def test_config_file_errors_exit_2(tmp_path, captured, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("neighbors: {k: 3}\n")
    assert cli.main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "missing required key 'output'" in err
    assert cli.main(["run", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    assert cli.job_main("graph", ["--config", str(bad)]) == 2
    assert "'output'" in capsys.readouterr().err


def test_input_errors_exit_2(conf, monkeypatch, capsys):
    from pina_spark.storage import InputError

    def boom(cfg, stages, sets=()):
        raise InputError("input.instances: i.parquet does not exist")

    monkeypatch.setattr(cli, "run_stages", boom)
    assert cli.main(["run", "--config", conf]) == 2
    assert "i.parquet does not exist" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run"])  # --config is required
    assert e.value.code == 2
    assert "--config" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["frobnicate"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.job_main("graph", [])
    assert e.value.code == 2


def test_skeleton_prints_loadable_yaml(tmp_path, capsys):
    assert cli.main(["skeleton"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    data["output"] = str(tmp_path)
    p = tmp_path / "sk.yaml"
    p.write_text(yaml.safe_dump(data))
    assert load_config(str(p)).output == str(tmp_path)


def test_console_script_exit_code(tmp_path):
    """The installed `pina-spark` entry point: a config error exits 2 before Spark starts."""
    exe = os.path.join(os.path.dirname(sys.executable), "pina-spark")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "pina_spark.cli"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("output: /x\nneighbors: {k: -1}\n")
    r = subprocess.run(
        cmd + ["run", "--config", str(bad)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "pina-spark: error:" in r.stderr and "neighbors.k" in r.stderr and str(bad) in r.stderr


def test_a_config_at_an_s3a_uri_is_read_through_storage(tmp_path, captured, fake_s3):
    """``--config s3a://...`` (a config kept beside an EMR step, spelled as Spark spells the
    bucket) is read by the storage layer, which hands pyarrow ``s3://`` (here a fake
    ``FileSystem.from_uri`` that refuses other schemes as pyarrow does); a missing one is a
    config error, exit 2; the config layer alone refuses a URI with the fix named."""
    from pina_spark import storage
    from pina_spark.config import ConfigError, load_config

    seen = fake_s3
    (tmp_path / "b" / "conf").mkdir(parents=True)
    (tmp_path / "b" / "conf" / "emr.yaml").write_text(
        "output: s3://b/runs\ninput: {instances: s3://b/i}\nneighbors: {k: 7}\n"
    )
    assert cli.main(["run", "--config", "s3a://b/conf/emr.yaml", "--stages", "graph"]) == 0
    ((cfg, _),) = captured
    assert cfg.neighbors.k == 7 and cfg.output == "s3://b/runs"
    assert seen and all(u.startswith("s3://b/conf/emr.yaml") for u in seen)
    assert cli.main(["run", "--config", "s3a://b/conf/missing.yaml", "--stages", "graph"]) == 2
    with pytest.raises(ConfigError, match="read=pina_spark.storage.read_bytes"):
        load_config("s3a://b/conf/emr.yaml")
    (tmp_path / "b" / "conf" / "latin1.yaml").write_bytes(
        "output: /tmp/caf\xe9\n".encode("latin-1")
    )
    with pytest.raises(ConfigError, match="latin1.yaml: not UTF-8 text"):
        load_config(str(tmp_path / "b" / "conf" / "latin1.yaml"))
    with pytest.raises(ConfigError, match="gs://b/c.yaml: cannot read the config"):
        load_config("gs://b/c.yaml", read=storage.read_bytes)


def test_every_stage_has_its_job_and_the_old_neighbors_name_still_runs(tmp_path):
    """`jobs/<stage>.py` for every stage (README, docs/emr.md); step lists written when the
    neighbours job was `jobs/predict_neighbors.py` reach the same entry point, with a warning."""
    from pina_spark.config import STAGE_NAMES

    for stage in STAGE_NAMES:
        assert os.path.exists(os.path.join(ROOT, "jobs", f"{stage}.py")), stage
    bad = tmp_path / "bad.yaml"
    bad.write_text("output: /x\nneighbors: {k: -1}\n")
    # alone in a folder, as spark-submit --deploy-mode cluster ships it (no sibling jobs)
    alone = tmp_path / "ship"
    alone.mkdir()
    shutil.copy(os.path.join(ROOT, "jobs", "predict_neighbors.py"), alone)
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run(
        [sys.executable, str(alone / "predict_neighbors.py"), "--config", str(bad)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "is now jobs/neighbors.py" in r.stderr and "neighbors.k" in r.stderr
