"""`pina-spark check`: the pre-flight of a run, with pyarrow only. It exits 0 on the demo config,
2 on a missing input or a column of the wrong type (fast, no Spark, nothing written under the
run root); `pina-spark run` refuses the same inputs before it takes the lease. The plan it
prints is the decision the run takes (orchestration.resume), and its input checks and input
fingerprint agree with the Spark readers' (the tests with the `spark` fixture)."""

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pina_spark import storage
from pina_spark.cli import commands as cli
from pina_spark.config import config_from_dict
from pina_spark.datasets import write_demo_data
from pina_spark.orchestration import resume
from pina_spark.storage.manifest import Manifest
from pina_spark.storage.preflight import input_fingerprint_local, inspect_input

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CONF = os.path.join(ROOT, "conf", "demo.yaml")


@pytest.fixture(scope="module")
def demo_inputs(tmp_path_factory):
    return write_demo_data(str(tmp_path_factory.mktemp("demo_in")))


def _sets(inputs, output):
    return ["--set", f"output={output}"] + [
        a for t, uri in inputs.items() for a in ("--set", f"input.{t}={uri}")
    ]


def _snapshot(root):
    """Every file under ``root`` with its size and modification time."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(d, n))
            out[os.path.join(d, n)] = (st.st_size, st.st_mtime_ns)
    return out


def _console(args, cwd, timeout=60):
    """The installed entry point, with Spark made impossible to start (a bogus SPARK_HOME and
    JAVA_HOME): a command that tried would fail with exit 1, not 0 or 2."""
    exe = os.path.join(os.path.dirname(sys.executable), "pina-spark")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "pina_spark.cli"]
    env = dict(os.environ, SPARK_HOME="/nonexistent/spark", JAVA_HOME="/nonexistent/java")
    t0 = time.time()
    r = subprocess.run(
        cmd + args, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )
    return r, time.time() - t0


def test_check_on_the_demo_config_exits_0_and_plans_every_stage(demo_inputs, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["check", "--config", DEMO_CONF] + _sets(demo_inputs, out)) == 0
    text = capsys.readouterr().out
    assert "result: the run can start" in text
    assert "| instances       | ok     | parquet | 1     | 2,500  |" in text
    assert "| graph      | run    | never ran on this root" in text
    assert not out.exists()  # nothing written under the root
    assert cli.main(["check", "--config", DEMO_CONF, "--json"] + _sets(demo_inputs, out)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pina-spark-check/1" and doc["can_start"] and not doc["problems"]
    assert [s["step"] for s in doc["plan"]] == list(resume.STAGE_NAMES)
    assert {s["action"] for s in doc["plan"]} == {"run"}
    assert {i["table"]: i["rows"] for i in doc["inputs"]}["labels"] == 149
    assert doc["input_fingerprint"] == input_fingerprint_local(demo_inputs.values())


@pytest.mark.parametrize("fault", ["missing", "wrong_type"])
def test_check_exits_2_fast_without_spark_and_writes_nothing(demo_inputs, tmp_path, fault):
    inputs = dict(demo_inputs)
    if fault == "missing":
        inputs["events"] = str(tmp_path / "no-such" / "events.parquet")
        needle = f"input.events: {inputs['events']} does not exist"
    else:
        inputs["labels"] = str(tmp_path / "labels.parquet")
        pq.write_table(pa.table({"label_id": [1, 2], "text": ["a", "b"]}), inputs["labels"])
        needle = (
            "column 'label_id' of labels has type bigint, expected string (ids are text: "
            "write them as strings, e.g. with Spark .withColumn('label_id', "
            "F.col('label_id').cast('string')))"
        )
    root = tmp_path / "out" / "run"
    root.mkdir(parents=True)
    Manifest(str(root / "_manifest.json")).record_stage("graph", {}, "f0", 1.0)  # an older run
    before = _snapshot(str(tmp_path / "out"))
    r, secs = _console(["check", "--config", DEMO_CONF] + _sets(inputs, root), cwd=str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stdout and "result: the run cannot start" in r.stdout
    assert secs < 3.0, f"check took {secs:.1f}s"
    assert _snapshot(str(tmp_path / "out")) == before


def test_run_refuses_a_missing_input_before_the_lease(demo_inputs, tmp_path):
    """Exit 2 naming the input, with no Spark (it could not start here), no lease, no manifest
    entry: the root is not even created."""
    inputs = dict(demo_inputs, instances=str(tmp_path / "gone.csv"))
    root = tmp_path / "out"
    r, _ = _console(["run", "--config", DEMO_CONF] + _sets(inputs, root), cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert f"pina-spark: error: input.instances: {inputs['instances']} does not exist" in r.stderr
    assert not root.exists()


def _models_root_with_g(root, variants):
    """A run root whose models folder has a card listing the g of ``variants`` alone."""
    from pina_spark.models.card import ModelCard, write_model_card

    models = root / "models"
    models.mkdir(parents=True)
    card = ModelCard("", {}, {}, "", "", variants={v: {} for v in variants})
    write_model_card(card, str(models))
    return root


def test_a_models_root_without_the_g_a_variant_needs_stops_the_run(demo_inputs, tmp_path):
    """``run.models`` fitted pina's g alone: a run training pina_naive exits 2 before the
    lease, naming the variant and the root; one training pina (or no g variant) passes."""
    from pina_spark.cli.check import models_g_problem

    old = _models_root_with_g(tmp_path / "old", ["pina"])
    base = {"output": str(tmp_path / "new"), "run": {"models": str(old)}}
    cfg = lambda variants: config_from_dict({**base, "train": {"variants": variants}})  # noqa
    problem = models_g_problem(cfg(["pina_naive", "baseline"]), resume.STAGE_NAMES)
    assert problem and "needs the g of pina_naive" in problem and str(old) in problem
    assert models_g_problem(cfg(["pina", "baseline"]), resume.STAGE_NAMES) is None
    assert models_g_problem(cfg(["vectorizer_only"]), resume.STAGE_NAMES) is None
    assert models_g_problem(cfg(["pina_naive"]), ("train", "evaluate")) is None  # no neighbours

    root = tmp_path / "out"
    args = ["run", "--config", DEMO_CONF] + _sets(demo_inputs, root)
    args += ["--set", f"run.models={old}", "--set", "run.trust_models=true"]
    args += ["--set", "select.follow=off", "--set", "train.variants=[pina_naive,baseline]"]
    r, _ = _console(args, cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "train.variants needs the g of pina_naive" in r.stderr
    assert not root.exists()


def test_a_models_run_without_a_trusted_vectorizer_stops_before_the_lease(demo_inputs, tmp_path):
    """``--models`` naming a daily root (no ``vectorizer/``), or a run whose vectorizer nothing
    vouches for: ``check`` said the run could start, and the run stopped at embed after taking
    the lease and publishing ``nodes``. Both now exit 2 before the lease."""
    from pina_spark.cli.check import models_folder_problem

    daily = tmp_path / "prod" / "run_date=2026-11-02"
    daily.mkdir(parents=True)
    (daily / "_manifest.json").write_text("{}")
    base = {"output": str(tmp_path / "prod"), "run": {"models": str(daily)}}
    day = {**base, "run": {**base["run"], "run_date": "2026-11-03"}}
    stages = ("embed", "neighbors", "aggregate")
    problem = models_folder_problem(config_from_dict(day), stages)
    assert problem and "vectorizer is missing or incomplete" in problem and str(daily) in problem
    assert models_folder_problem(config_from_dict(day), ("train",)) is None  # embed not run

    monthly = tmp_path / "prod" / "run_date=2026-11-01"
    (monthly / "vectorizer").mkdir(parents=True)
    (monthly / "vectorizer" / "_SUCCESS").write_text("")
    unvouched = {**day, "run": {**day["run"], "models": str(monthly)}}
    problem = models_folder_problem(config_from_dict(unvouched), stages)
    assert problem and "vectorizer" in problem and "promotion record" in problem
    trusted = {**unvouched, "run": {**unvouched["run"], "trust_models": True}}
    assert models_folder_problem(config_from_dict(trusted), stages) is None

    root = tmp_path / "out"
    args = ["run", "--config", DEMO_CONF, "--stages", ",".join(stages)] + _sets(demo_inputs, root)
    args += ["--set", f"run.models={daily}", "--set", "select.follow=off"]
    r, _ = _console(args, cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "vectorizer is missing or incomplete" in r.stderr
    assert not root.exists()


def test_a_run_following_a_selection_into_a_new_output_checks_the_models_first(
    demo_inputs, tmp_path
):
    """The documented follow run: ``--models ROOT`` into another output with every stage (the
    graph stage included, so no ``nodes`` pre-step). ``check`` said the run could start when
    nothing vouched for ROOT's models, and the run stopped at embed with exit 2 after the
    graph and vectorizer stages had published. Now both refuse it before the lease, and a
    ``--models`` naming the run's own root (which would rerun the graph and refit the
    vectorizer it means to reuse) is refused by both."""
    from pina_spark.cli.check import models_folder_problem
    from pina_spark.orchestration.promotion import resolve_models

    models = tmp_path / "selected"
    (models / "vectorizer").mkdir(parents=True)
    (models / "vectorizer" / "_SUCCESS").write_text("")
    follow = {"output": str(tmp_path / "follow"), "run": {"models": str(models)}}
    problem = models_folder_problem(config_from_dict(follow), resume.STAGE_NAMES)
    assert problem and "promotion record" in problem and "trust_models" in problem
    trusted = {**follow, "run": {**follow["run"], "trust_models": True}}
    assert models_folder_problem(config_from_dict(trusted), resume.STAGE_NAMES) is None
    own = {"output": str(models), "run": {"models": str(models), "trust_models": True}}
    with pytest.raises(storage.InputError, match="this run's own root"):
        resolve_models(config_from_dict(own), resume.STAGE_NAMES)
    assert resolve_models(config_from_dict(own)).run.models == str(models)  # no stages
    # another spelling of the same root is the same root
    for spelt in ("file://" + str(models), str(models) + "//", str(models) + "/."):
        other = {"output": spelt, "run": {"models": str(models), "trust_models": True}}
        with pytest.raises(storage.InputError, match="this run's own root"):
            resolve_models(config_from_dict(other), resume.STAGE_NAMES)

    for extra, what in (([], "promotion record"), (["--set", "run.trust_models=true"], "own root")):
        out = models if what == "own root" else tmp_path / "out"
        args = ["check", "--config", DEMO_CONF] + _sets(demo_inputs, out)
        args += ["--set", f"run.models={models}", "--set", "select.follow=off", *extra]
        r, _ = _console(args, cwd=str(tmp_path))
        assert r.returncode == 2 and what in r.stderr + r.stdout, (r.stdout, r.stderr)
        r, _ = _console(["run", *args[1:]], cwd=str(tmp_path))
        assert r.returncode == 2 and what in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_an_input_the_stages_do_not_read_does_not_block(demo_inputs, tmp_path, capsys):
    inputs = dict(demo_inputs, events=str(tmp_path / "gone.parquet"))
    nodes = tmp_path / "run" / storage.NODES  # a root where the stages before train ran
    nodes.mkdir(parents=True)
    (nodes / "_SUCCESS").write_text("")
    argv = ["check", "--config", DEMO_CONF, "--stages", "train,evaluate"]
    assert cli.main(argv + _sets(inputs, tmp_path / "run")) == 0
    assert "(not read by these stages) input.events" in capsys.readouterr().out
    assert cli.main(argv[:3] + _sets(inputs, tmp_path / "run")) == 2


@pytest.mark.parametrize(
    "name,body,needle",
    [
        ("ev.csv", "basket_id,product\nb1,i1\n", "missing required column(s) ['item_id']"),
        ("ev.csv", "", "input is empty (no header / no rows)"),
        ("ev.jsonl", '{"basket_id": "b1"}\n', "missing required column(s) ['item_id']"),
        ("ev.jsonl", "[1, 2]\n", "none of the first 1 lines is a JSON object"),
    ],
)
def test_text_inputs(tmp_path, name, body, needle):
    p = tmp_path / name
    p.write_text(body)
    r = inspect_input(str(p), "events")
    assert r.status == "bad" and needle in r.problem


def test_a_csv_folder_not_named_csv_gets_the_hint(tmp_path):
    d = tmp_path / "instances"
    d.mkdir()
    (d / "part-0.csv").write_text("instance_id,text\ni1,a\n")
    r = inspect_input(str(d), "instances")
    assert r.status == "bad" and f"must be named by its format (e.g. {d}.csv)" in r.problem
    os.rename(d, str(d) + ".csv")
    r = inspect_input(str(d) + ".csv", "instances")
    assert (r.status, r.format, r.rows) == ("ok", "csv", 1)
    # a file of another extension is read as Parquet: the error says which extensions count
    tsv = tmp_path / "labels.tsv"
    tsv.write_text("label_id\ttext\nL1\tshoes\n")
    r = inspect_input(str(tsv), "labels")
    assert r.status == "bad" and "the format comes from the path's extension" in r.problem
    # a column in another case than the contract's optional one is refused, not ignored
    p = tmp_path / "inst.csv"
    p.write_text("instance_id,text,Split\ni1,a,test\n")
    r = inspect_input(str(p), "instances")
    assert r.status == "bad" and "differs from the optional column 'split' only in case" in (
        r.problem
    )


def test_csv_rows_keep_quoted_newlines_and_files_must_agree(tmp_path):
    d = tmp_path / "labels.csv"
    d.mkdir()
    (d / "a.csv").write_text('label_id,text\nl1,"two\nlines"\nl2,x\n')
    (d / "_SUCCESS").write_text("")
    assert inspect_input(str(d), "labels").rows == 2
    (d / "b.csv").write_text("text,label_id\nx,l3\n")
    r = inspect_input(str(d), "labels")
    assert r.status == "bad" and "different headers" in r.problem


# --------------------------------------------------------------------------- the plan
def _manifest_after_a_full_run(cfg, fp_inputs):
    """A manifest as a complete run over every stage leaves it, and the outputs' _SUCCESS."""
    paths = storage.RunPaths(cfg.output)
    m = Manifest(paths.manifest)
    base = resume.base_token(cfg, fp_inputs)
    for name in resume.STAGE_NAMES:
        m.record_stage(name, {}, resume.stage_fingerprint(cfg, m, base, name), 1.0)
        for o in resume.step_outputs(name, cfg):
            os.makedirs(paths.table(o), exist_ok=True)
            open(paths.table(o) + "/_SUCCESS", "w").close()
    return m


def _actions(plan):
    return {s.step: s.action for s in plan}


def test_plan_skips_complete_steps_and_reruns_what_follows_a_change(tmp_path):
    from pina_spark.storage.preflight import is_complete_arrow

    cfg = config_from_dict({"output": str(tmp_path / "run")})
    m = _manifest_after_a_full_run(cfg, "fp-in")
    plan = resume.plan_steps(cfg, resume.STAGE_NAMES, m, "fp-in", is_complete_arrow)
    assert set(_actions(plan).values()) == {"skip"}
    # neighbors.k changed: g (pretrain) is kept, neighbors and every later stage rerun
    k9 = config_from_dict({"output": str(tmp_path / "run"), "neighbors": {"k": 9}})
    acts = _actions(resume.plan_steps(k9, resume.STAGE_NAMES, m, "fp-in", is_complete_arrow))
    assert [s for s, a in acts.items() if a == "run"] == [
        "neighbors",
        "aggregate",
        "train",
        "evaluate",
    ]
    # a lost _SUCCESS, then a failed embed
    os.remove(storage.RunPaths(cfg.output).table(storage.FEATURES) + "/_SUCCESS")
    plan = resume.plan_steps(cfg, ("aggregate",), m, "fp-in", is_complete_arrow)
    assert plan[0].reason == "outputs incomplete: features"
    m.mark_failed("embed", "OSError: disk full")
    plan = resume.plan_steps(cfg, ("graph", "embed", "aggregate"), m, "fp-in", is_complete_arrow)
    reasons = {s.step: s.reason for s in plan}
    assert _actions(plan) == {"graph": "skip", "embed": "run", "aggregate": "run"}
    assert reasons["embed"] == "last attempt failed: OSError: disk full"
    assert reasons["aggregate"] == "embed runs before it"
    # new inputs: every step; no fingerprint (s3 inputs): the manifest's state only
    assert set(
        _actions(resume.plan_steps(cfg, ("graph",), m, "x", is_complete_arrow)).values()
    ) == {"run"}
    assert resume.plan_steps(cfg, ("graph",), m, None, is_complete_arrow)[0].action == "unknown"


def test_a_rerun_of_a_models_run_skips_every_complete_step(tmp_path):
    """A run with run.models over every stage reuses that run's vectorizer and g, publishing
    neither in its own root; a rerun (a retried or resumed run) skips every step instead of
    finding them missing here and redoing vectorizer and all after it."""
    from pina_spark.storage.preflight import is_complete_arrow

    cfg = config_from_dict(
        {"output": str(tmp_path / "new"), "run": {"models": str(tmp_path / "old")}}
    )
    m = _manifest_after_a_full_run(cfg, "fp-in")
    paths = storage.RunPaths(cfg.output)
    assert not os.path.exists(paths.table(storage.VECTORIZER))
    assert not os.path.exists(paths.table(storage.MODELS))
    plan = resume.plan_steps(cfg, resume.STAGE_NAMES, m, "fp-in", is_complete_arrow)
    assert set(_actions(plan).values()) == {"skip"}, [(s.step, s.reason) for s in plan]


def test_the_plan_refuses_what_run_would_refuse_after_starting(demo_inputs, tmp_path, capsys):
    """check says the run cannot start (exit 2) where the run would stop at a stage: it reads an
    upstream step's outputs that the root lacks (a stage named alone on a new root), or that
    were made with other settings (stale_upstream). The run refuses both before it records
    anything (plan_problem)."""
    from pina_spark.storage.preflight import is_complete_arrow

    out = tmp_path / "run"
    args = ["check", "--config", DEMO_CONF, "--stages", "train"] + _sets(demo_inputs, out)
    assert cli.main(args) == 2
    text = capsys.readouterr().out
    assert "stage train reads the run root's nodes, which this root lacks" in text, text
    assert "--stages graph,vectorizer,embed,pretrain,neighbors,aggregate,train" in text
    cfg = config_from_dict({"output": str(tmp_path / "r2")})
    m = _manifest_after_a_full_run(cfg, "fp-in")
    for name in resume.STAGE_NAMES:  # as recorded by a run with these settings
        e = m.stage(name)
        m.record_stage(name, {}, e["fingerprint"], 1.0, settings=resume.settings_token(cfg, name))
    other = config_from_dict({"output": str(tmp_path / "r2"), "inference": {"batch_size": 7}})
    plan = resume.plan_steps(other, ("neighbors",), m, "fp-in", is_complete_arrow)
    problem = resume.plan_problem(other, ("neighbors",), m, plan, is_complete_arrow)
    assert problem.startswith("stage neighbors refuses the outputs of embed"), problem
    assert problem.endswith("Rerun from the first of them: --stages embed,pretrain,neighbors")
    # the suggestion keeps the command's later stages: evaluate would otherwise keep reporting
    # the predictions the rerun replaces
    plan = resume.plan_steps(other, ("neighbors", "evaluate"), m, "fp-in", is_complete_arrow)
    problem = resume.plan_problem(other, ("neighbors", "evaluate"), m, plan, is_complete_arrow)
    assert problem.endswith("--stages embed,pretrain,neighbors,aggregate,train,evaluate"), problem
    # the same command over embed too reruns it: nothing stale is read, with or without the
    # inputs' fingerprint (inputs on S3: the plan's actions are unknown)
    for fp in ("fp-in", None):
        plan = resume.plan_steps(other, ("embed", "neighbors"), m, fp, is_complete_arrow)
        assert (
            resume.plan_problem(other, ("embed", "neighbors"), m, plan, is_complete_arrow) is None
        )


def test_the_nodes_pre_step_of_a_models_run(tmp_path):
    cfg = config_from_dict(
        {"output": str(tmp_path / "new"), "run": {"models": str(tmp_path / "old")}}
    )
    m = Manifest(str(tmp_path / "new" / "_manifest.json"))
    plan = resume.plan_steps(cfg, ("embed",), m, "fp", lambda uri: False)
    assert [s.step for s in plan] == ["nodes", "embed"]
    assert resume.inputs_read(cfg, ("embed",)) == {}


# --------------------------------------------------------------------------- agreement with Spark
def test_pyarrow_fingerprint_equals_the_jvm_one(spark, tmp_path):
    d = tmp_path / "events.parquet"
    (d / "sub dir").mkdir(parents=True)
    for rel in ("part-0", "sub dir/part-1", "_SUCCESS", ".hidden", ".part-0.crc", "x.crc"):
        (d / rel).write_text(rel)
    single = tmp_path / "labels.csv"
    single.write_text("label_id,text\n")
    (tmp_path / ".labels.csv.crc").write_text("c")
    for uris in (
        [str(d), str(single)],
        [str(single), None, str(tmp_path / "missing.parquet")],
        ["file://" + str(d)],
    ):
        assert input_fingerprint_local(uris) == storage.input_fingerprint(spark, uris), uris


@pytest.mark.parametrize("case", ["missing_column", "wrong_type", "missing_path", "empty_csv"])
def test_pyarrow_check_refuses_what_the_spark_reader_refuses(spark, tmp_path, case):
    if case == "missing_column":
        uri = str(tmp_path / "ev.csv")
        open(uri, "w").write("basket_id,product\nb1,i1\n")
        table = "events"
    elif case == "wrong_type":
        uri = str(tmp_path / "labels.parquet")
        pq.write_table(pa.table({"label_id": pa.array([1], pa.int32()), "text": ["a"]}), uri)
        table = "labels"
    elif case == "missing_path":
        uri, table = str(tmp_path / "nope.parquet"), "instances"
    else:
        uri, table = str(tmp_path / "empty.csv"), "labels"
        open(uri, "w").close()
    with pytest.raises(storage.InputError) as e:
        storage.read_input(spark, uri, table)
    r = inspect_input(uri, table)
    assert r.blocks_run and r.problem == str(e.value)
