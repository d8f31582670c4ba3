"""README "Your own data", run exactly as written: the YAML block saved as my.yaml and the bash
block run line by line with bash, in a folder holding a tiny CSV set in the layout the text
block shows (600 demo products). Then `pina-spark check` on the finished run plans every stage
as skipped: its plan and the run's resume decide alike."""

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from pina_spark.datasets.demo import demo_catalogue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_PRODUCTS = 600


def _section():
    with open(os.path.join(ROOT, "README.md")) as fh:
        text = fh.read()
    start = text.index("\n## Your own data\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _blocks(section, lang):
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_the_section_is_what_the_issue_asks_for():
    s = _section()
    assert len(_blocks(s, "yaml")) == 1 and len(_blocks(s, "bash")) == 1
    assert "Save this as `my.yaml`" in s and "`*.csv`" in s
    for v in ("`label_text`", "`i2i`", "`both`", "`naive`", "`given`", "`graph`"):
        assert f"| {v} |" in s, v
    with open(os.path.join(ROOT, "README.md")) as fh:
        assert len(fh.read().splitlines()) < 300


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _tiny_csv_set(folder):
    """The files the section's text block shows: 600 demo products, their labels."""
    products, labels, pairs = demo_catalogue()
    keep = products[:N_PRODUCTS]
    ids = {p["instance_id"] for p in keep}
    pairs = [(i, lab) for i, lab in pairs if i in ids]
    used = {lab for _, lab in pairs}
    os.makedirs(folder)
    _write_csv(
        os.path.join(folder, "instances.csv"),
        ["instance_id", "text", "split"],
        [(p["instance_id"], p["text"], p["split"]) for p in keep],
    )
    _write_csv(
        os.path.join(folder, "labels.csv"),
        ["label_id", "text"],
        [(x["label_id"], x["text"]) for x in labels if x["label_id"] in used],
    )
    _write_csv(os.path.join(folder, "instance_labels.csv"), ["instance_id", "label_id"], pairs)


@pytest.mark.slow
def test_own_data_walkthrough_runs_as_written(tmp_path):
    section = _section()
    (yaml_block,) = _blocks(section, "yaml")
    (bash_block,) = _blocks(section, "bash")
    assert "mydata/instances.csv" in section
    _tiny_csv_set(str(tmp_path / "mydata"))
    (tmp_path / "my.yaml").write_text(yaml_block)
    env = dict(
        os.environ,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        SPARK_LOCAL_IP="127.0.0.1",
    )
    outputs = []
    for line in [ln for ln in bash_block.splitlines() if ln.strip()]:
        r = subprocess.run(
            ["bash", "-c", line], cwd=str(tmp_path), env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, f"{line}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        outputs.append(r.stdout)
    check, _, status, report = outputs
    assert "result: the run can start" in check and "| graph      | run " in check
    assert "| evaluate   | complete |" in status
    assert "| pina" in report and "P@1" in report
    # the plan of check agrees with the run's resume: everything is complete now
    r = subprocess.run(
        ["pina-spark", "check", "--config", "my.yaml", "--json"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert [(s["step"], s["action"]) for s in plan] == [(s["step"], "skip") for s in plan], plan
