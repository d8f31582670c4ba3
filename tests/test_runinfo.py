"""`pina-spark status RUN` and `pina-spark compare RUN_A RUN_B` on runs made of their files
(manifest, eval/metrics.json, eval/per_instance.parquet): tables, --json, the exit code of a run
with a failed step, a closed pipe; and the CLI's --version, --log-level and --help."""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pina_spark import __version__
from pina_spark.cli import commands as cli
from pina_spark.stages.evaluate.stage import PER_INSTANCE_FILE, paired_ttest, per_instance_parquet


def _run(root, p1_pina, ids, p1_per_instance, quarantined=3):
    os.makedirs(os.path.join(root, "eval"), exist_ok=True)
    manifest = {
        "stages": {
            "graph": {
                "status": "complete",
                "started": "2026-11-23T10:00:00Z",
                "duration_s": 12.5,
                "rows_out": {"nodes": 120},
                "rows_per_s": 9.6,
                "stats": {
                    "inputs": {
                        "instances": {
                            "rows_in": 103,
                            "rows_used": 100,
                            "rows_quarantined": quarantined,
                            "reasons": {"empty_text": quarantined},
                        }
                    }
                },
            },
            "vectorizer": {"status": "complete", "duration_s": 30.0},
            "embed": {"status": "failed", "error": "OSError: disk full"},
            "evaluate": {"status": "complete", "duration_s": 2.0},
        },
        "history": [
            {
                "run_id": "abc",
                "status": "failed",
                "stages": ["graph", "embed"],
                "started": "2026-11-23T10:00:00Z",
            }
        ],
    }
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(manifest, fh)
    metrics = {
        "variants": {
            "baseline": {"P@1": 0.25, "P@3": 0.2, "P@5": 0.1},
            "pina": {"P@1": p1_pina, "P@3": 0.3, "P@5": 0.2},
        },
        "n_test_scored": len(ids),
    }
    with open(os.path.join(root, "eval", "metrics.json"), "w") as fh:
        json.dump(metrics, fh)
    per = {
        v: {k: np.asarray(p1_per_instance[v], dtype=float) for k in (1, 3, 5)}
        for v in p1_per_instance
    }
    with open(os.path.join(root, "eval", PER_INSTANCE_FILE), "wb") as fh:
        fh.write(per_instance_parquet(ids, per))
    return root


def test_status_shows_stages_rows_quarantine_and_failures(tmp_path, capsys):
    root = _run(str(tmp_path / "a"), 0.5, ["i1", "i2"], {"pina": [1, 0]})
    assert cli.main(["status", root]) == 3  # embed failed
    out = capsys.readouterr().out
    assert "| graph " in out and "12.5s" in out and "nodes=120" in out
    assert "stage embed failed: OSError: disk full" in out
    assert "not run: pretrain, neighbors, aggregate, train" in out
    assert "empty_text=3" in out and "| instances " in out
    assert "| pina " in out and "0.5000" in out


def test_status_exit_code_is_3_only_when_a_step_failed(tmp_path, capsys):
    root = _run(str(tmp_path / "a"), 0.5, ["i1"], {"pina": [1]})
    assert cli.main(["status", root]) == 3
    with open(os.path.join(root, "_manifest.json")) as fh:
        m = json.load(fh)
    m["stages"]["embed"] = {"status": "complete", "duration_s": 1.0}
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert cli.main(["status", root]) == 0
    capsys.readouterr()


def test_status_marks_an_evaluate_older_than_the_predictions_it_reports(tmp_path, capsys):
    """``--stages neighbors,aggregate,train`` after a full run replaces the predictions that
    evaluate scored: status showed evaluate complete with the old P@1. It now marks evaluate
    (and any step older than an earlier one) OUTDATED, naming the newer steps."""
    root = _run(str(tmp_path / "a"), 0.5, ["i1", "i2"], {"pina": [1, 0]})
    with open(os.path.join(root, "_manifest.json")) as fh:
        m = json.load(fh)
    m["stages"]["embed"] = {"status": "complete", "finished": "2026-11-23T10:02:00Z"}
    m["stages"]["train"] = {"status": "complete", "finished": "2026-11-23T11:00:00Z"}
    m["stages"]["evaluate"]["finished"] = "2026-11-23T10:30:00Z"
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert cli.main(["status", root]) == 0
    out = capsys.readouterr().out
    assert "step evaluate is OUTDATED: train republished after it" in out
    assert "scored test instances (OUTDATED: see above):" in out
    assert cli.main(["status", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outdated"] == {"evaluate": ["train"]}
    m["stages"]["evaluate"]["finished"] = "2026-11-23T11:05:00Z"  # evaluated again
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert cli.main(["status", root]) == 0
    assert "OUTDATED" not in capsys.readouterr().out
    # a root whose runs follow a vectorizer_only selection: its old neighbours entry stays as
    # it was, and no rerun of that config would refresh it, so it is not flagged
    m["stages"]["neighbors"] = {"status": "complete", "finished": "2026-11-23T10:01:00Z"}
    m["config"] = {"train": {"variants": ["baseline", "vectorizer_only"]}}
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert cli.main(["status", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outdated"] == {}
    m["config"] = {"train": {"variants": ["baseline", "pina"]}}
    with open(os.path.join(root, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert cli.main(["status", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outdated"] == {"neighbors": ["embed"]}


def test_status_json(tmp_path, capsys):
    root = _run(str(tmp_path / "a"), 0.5, ["i1", "i2"], {"pina": [1, 0]})
    assert cli.main(["status", root, "--json"]) == 3
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "pina-spark-status/1" and d["root"] == root
    assert [e["stage"] for e in d["stages"]] == ["graph", "vectorizer", "embed", "evaluate"]
    graph = d["stages"][0]
    assert graph["rows_out"] == {"nodes": 120} and graph["duration_s"] == 12.5
    assert d["failed"] == ["embed"] and d["stages"][2]["error"] == "OSError: disk full"
    assert d["not_run"] == ["pretrain", "neighbors", "aggregate", "train"]
    assert d["quarantine"]["instances"]["reasons"] == {"empty_text": 3}
    assert d["metrics"]["variants"]["pina"]["P@1"] == 0.5
    assert d["history"][0]["run_id"] == "abc"


def test_compare_json(tmp_path, capsys):
    a = _run(str(tmp_path / "a"), 0.4, ["i1", "i2"], {"pina": [1, 0]})
    b = _run(str(tmp_path / "b"), 0.8, ["i1", "i2"], {"pina": [1, 1]})
    assert cli.main(["compare", a, b, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "pina-spark-compare/1" and (d["a"], d["b"]) == (a, b)
    row = [m for m in d["metrics"] if m["variant"] == "pina" and m["metric"] == "P@1"][0]
    assert row["a"] == 0.4 and row["b"] == 0.8 and abs(row["diff"] - 0.4) < 1e-12
    assert d["paired"]["pina"]["n_paired"] == 2 and "p" in d["paired"]["pina"]["P@1"]
    assert {x["stage"] for x in d["durations"]} == {"graph", "vectorizer", "embed", "evaluate"}


def test_compare_names_a_folder_that_is_no_run_root(tmp_path, capsys):
    a = _run(str(tmp_path / "a"), 0.4, ["i1"], {"pina": [1]})
    assert cli.main(["compare", a, str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no run manifest (is " in err and "evaluate stage" not in err, err


def test_a_closed_pipe_prints_no_traceback(tmp_path):
    """`pina-spark status RUN | head -1`: the reader goes away before the output is written."""
    root = _run(str(tmp_path / "a"), 0.5, ["i1"], {"pina": [1]})
    exe = os.path.join(os.path.dirname(sys.executable), "pina-spark")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "pina_spark.cli"]
    for args in (["status", root], ["status", root, "--json"], ["skeleton"]):
        p = subprocess.Popen(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.close()  # head -1 has read its line and exited
        err = p.stderr.read().decode()
        rc = p.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert rc == (3 if args[0] == "status" else 0)
    r = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {' '.join(cmd)} status {root} | head -1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout == f"run {root}\n" and "Traceback" not in r.stderr


def _parsers():
    """The top-level parser and every subcommand's, as `pina-spark` builds them."""
    made = []
    orig = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        made.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            cli.main(["--version"])
    finally:
        argparse.ArgumentParser.parse_args = orig
    top = made[0]
    subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)][0]
    return top, subs.choices


def test_help_shows_examples_and_every_option_has_help(capsys):
    top, subs = _parsers()
    assert set(subs) >= {"run", "check", "demo", "status", "compare", "tune", "prepare-data"}
    for name, p in list(subs.items()) + [("pina-spark", top)]:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            assert a.help, f"{name}: {a.option_strings or a.dest} has no help text"
        text = p.format_help()
        assert "examples:\n  pina-spark " in text, name
    with pytest.raises(SystemExit) as e:
        cli.main(["status", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "exit: 0 no step failed, 3 a step failed" in out and "--json" in out


def test_compare_pairs_shared_test_ids(tmp_path, capsys):
    ids_a = ["i1", "i2", "i3", "i4", "i5"]
    a = _run(str(tmp_path / "a"), 0.4, ids_a, {"pina": [1, 0, 0, 1, 0], "baseline": [0] * 5})
    # B scored i2..i6: the t-test pairs the 4 shared ids only
    ids_b = ["i2", "i3", "i4", "i5", "i6"]
    b = _run(str(tmp_path / "b"), 0.8, ids_b, {"pina": [1, 1, 1, 1, 0], "baseline": [0] * 5})
    assert cli.main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "| pina     | P@1    | 0.4000 | 0.8000 | +0.4000 |" in out
    expected_p = paired_ttest([1, 1, 1, 1], [0, 0, 1, 0])["p"]  # B against A on i2..i5
    row = [
        ln
        for ln in out.splitlines()
        if ln.startswith("| pina ") and "| 4 " in ln and "| P@1 " in ln
    ]
    assert row and f"{expected_p:.4f}" in row[0], out


def test_status_of_a_folder_without_manifest_exits_2(tmp_path, capsys):
    assert cli.main(["status", str(tmp_path)]) == 2
    assert "no run manifest" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"pina-spark {__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--config", "c.yaml", "--log-level", "LOUD"],
        ["status", "x", "--log-level", "verbose"],
    ],
)
def test_log_level_is_validated(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "--log-level" in capsys.readouterr().err


def test_log_level_any_case(tmp_path, capsys):
    root = _run(str(tmp_path / "a"), 0.5, ["i1"], {"pina": [1]})
    assert cli.main(["status", root, "--log-level", "debug"]) == 3  # parsed; embed failed
