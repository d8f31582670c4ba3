"""Every ``jobs/<stage>.py`` through the real ``spark-submit --master local[2]`` on the demo data,
in stage order, as EMR steps run them (the run itself is the session fixture
``demo_submit_run``: tests/demo_run.py); and the EMR step lists match the jobs.

Runs in ``make test`` (marked ``submit``; the tests on the demo run are also marked ``demo``, and
``make test-fast`` leaves them out). A stage that fails (its module not importable included) fails
its test with spark-submit's stderr, and every later stage and every test on the run fails too.
"""

import json
import os

import pytest

from pina_spark import storage
from pina_spark.orchestration import pipeline

from demo_run import JOBS, failure, last_json, require_finished

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.submit


#: spark-submit entry points that are not pipeline stages (predict_neighbors.py: the neighbours
#: job's earlier name, kept for step lists written before the rename; test_cli.py runs it)
EXTRA_JOBS = ("gpu_smoke.py", "predict_neighbors.py")


def test_every_job_is_a_stage():
    assert list(JOBS) == list(pipeline.STAGES)
    assert sorted(f for f in os.listdir(os.path.join(ROOT, "jobs")) if f.endswith(".py")) == sorted(
        list(JOBS.values()) + list(EXTRA_JOBS)
    )
    for stage, job in JOBS.items():
        text = open(os.path.join(ROOT, "jobs", job)).read()
        assert f'job_main("{stage}")' in text and "spark-submit" in text


def _conf(args):
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


@pytest.mark.parametrize("name", ["steps.json", "steps-gpu.json"])
def test_emr_steps_cover_the_pipeline_in_order(name):
    """Each step ships its Python environment (--archives ...#env, spark.pyspark.python=
    ./env/bin/python, cluster deploy mode so the driver gets it too), never --py-files."""
    steps = json.load(open(os.path.join(ROOT, "conf", "emr", name)))
    jobs = []
    for s in steps:
        args = s["Args"]
        assert s["Jar"] == "command-runner.jar" and args[0] == "spark-submit"
        assert args[args.index("--master") + 1] == "yarn"
        assert args[args.index("--deploy-mode") + 1] == "cluster"
        assert "--py-files" not in args
        archive = args[args.index("--archives") + 1]
        assert archive.startswith("s3://") and archive.endswith(".tar.gz#env")
        assert _conf(args)["spark.pyspark.python"] == "./env/bin/python"
        script = [a for a in args if a.startswith("s3://") and "/jobs/" in a]
        assert len(script) == 1
        job = script[0].rsplit("/", 1)[1]
        if job in EXTRA_JOBS:
            continue
        conf = args[args.index("--config") + 1]
        assert conf.startswith("s3://") and conf.endswith(("/emr.yaml", "/emr-gpu.yaml"))
        assert args.index(script[0]) < args.index("--config")
        jobs.append(job)
        assert args[args.index("--run-date") + 1] == "RUN_DATE"
    assert jobs == [JOBS[s] for s in pipeline.STAGES]


def test_gpu_steps_request_gpus_only_for_gpu_stages():
    """On the GPU fleet: a smoke step first; embed and neighbours own one GPU per task and ship
    the CUDA archive; every other stage requests no GPU (all vCPUs work) and ships the CPU one."""
    steps = json.load(open(os.path.join(ROOT, "conf", "emr", "steps-gpu.json")))
    assert "gpu_smoke.py" in " ".join(steps[0]["Args"])
    for s in steps[1:]:
        args = s["Args"]
        conf = _conf(args)
        archive = args[args.index("--archives") + 1]
        gpu_stage = any(a.endswith(("/embed.py", "/neighbors.py")) for a in args)
        if gpu_stage:
            assert conf["spark.executor.resource.gpu.amount"] == "1"
            assert conf["spark.task.resource.gpu.amount"] == "1"
            assert "/pina-env-gpu-" in archive
        else:
            assert not [k for k in conf if "resource.gpu" in k], s["Name"]
            assert conf["spark.task.cpus"] == "1" and "/pina-env-gpu-" not in archive


def test_gpu_cluster_uses_emr7_cgroup_settings():
    """EMR 7.x: cgroups at /spark-rapids-cgroup (not 6.x's /sys/fs/cgroup), mounted by the
    bootstrap action (EMR release guide, NVIDIA RAPIDS Accelerator page)."""
    cfg = json.load(open(os.path.join(ROOT, "conf", "emr", "configurations-gpu.json")))
    by = {c["Classification"]: c for c in cfg}
    yarn = by["yarn-site"]["Properties"]
    assert (
        yarn["yarn.nodemanager.linux-container-executor.cgroups.mount-path"]
        == "/spark-rapids-cgroup"
    )
    cg = {c["Classification"]: c["Properties"] for c in by["container-executor"]["Configurations"]}
    assert cg["cgroups"]["root"] == "/spark-rapids-cgroup" and cg["gpu"]["module.enabled"] == "true"
    assert "/sys/fs/cgroup" not in json.dumps(cfg)
    boot = open(os.path.join(ROOT, "conf", "emr", "bootstrap-node.sh")).read()
    assert "mount -t cgroup -o devices cgroupv1-devices /spark-rapids-cgroup/devices" in boot
    for c in json.load(open(os.path.join(ROOT, "conf", "emr", "configurations.json"))) + cfg:
        assert "/opt/pina/venv" not in json.dumps(c)  # archive route: no cluster venv


def test_gpu_discovery_script_is_written_where_the_configs_point(tmp_path):
    """bootstrap-node.sh --gpu writes the discovery script that configurations-gpu.json and the
    GPU steps name, and that script prints the node's GPUs as Spark reads them (here with a
    stand-in nvidia-smi listing two GPUs)."""
    import re
    import subprocess

    boot = open(os.path.join(ROOT, "conf", "emr", "bootstrap-node.sh")).read()
    target, body = re.search(
        r"sudo tee (\S+) >/dev/null <<'SCRIPT'\n(.*?)\nSCRIPT\n", boot, re.S
    ).groups()
    cfg = json.load(open(os.path.join(ROOT, "conf", "emr", "configurations-gpu.json")))
    named = {c["Properties"].get("spark.executor.resource.gpu.discoveryScript") for c in cfg} - {
        None
    }
    steps = json.load(open(os.path.join(ROOT, "conf", "emr", "steps-gpu.json")))
    named |= {a.split("=", 1)[1] for s in steps for a in s["Args"] if "gpu.discoveryScript=" in a}
    assert named == {target}
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/usr/bin/env bash\nprintf '0\\n1\\n'\n")
    (fake / "nvidia-smi").chmod(0o755)
    (tmp_path / "discover.sh").write_text(body + "\n")
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    out = subprocess.run(
        ["bash", str(tmp_path / "discover.sh")], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == {"name": "gpu", "addresses": ["0", "1"]}


@pytest.mark.parametrize("script", ["bootstrap.sh", "bootstrap-node.sh"])
def test_bootstrap_script_is_valid_bash(script):
    import subprocess

    r = subprocess.run(
        ["bash", "-n", os.path.join(ROOT, "conf", "emr", script)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("stage", list(JOBS))
def test_spark_submit_stage(stage, demo_submit_run):
    run = demo_submit_run
    res = run["results"].get(stage)
    assert res is not None and "not_run" not in res, f"stage {stage} not run\n{failure(run)}"
    assert res["rc"] == 0, f"spark-submit jobs/{JOBS[stage]} failed:\n{res['stderr'][-6000:]}"
    assert last_json(res["stdout"])["stages"] == {stage: "ran"}
    # progress lines of the pipeline in the driver log (spark-submit's PythonRunner merges the
    # Python driver's stderr into its stdout)
    log_text = res["stdout"] + res["stderr"]
    assert f"stage {stage}: start" in log_text and f"stage {stage}: done in" in log_text
    paths = storage.RunPaths(run["output"])
    for rel in pipeline.STAGES[stage].outputs:
        assert os.path.exists(os.path.join(paths.table(rel), "_SUCCESS")), rel
    with open(paths.manifest) as fh:
        data = json.load(fh)
    entry = data["stages"][stage]
    assert entry["status"] == "complete" and entry["duration_s"] >= 0
    assert data["libraries"]["pyspark"]


def test_demo_encoder_parity(demo_submit_run):
    """The evaluate stage measures the vectorizer's train/test parity on the demo run
    (eval/encoder_parity.json, also in metrics.json and report.md)."""
    require_finished(demo_submit_run)
    ev = storage.RunPaths(demo_submit_run["output"]).table(storage.EVAL)
    parity = json.load(open(os.path.join(ev, "encoder_parity.json")))
    metrics = json.load(open(os.path.join(ev, "metrics.json")))
    assert metrics["encoder_parity"] == parity and parity["encoder"] == "minilm"
    assert parity["train"]["rows"] > 100 and parity["test"]["rows"] > 50
    assert parity["candidate_labels"] == metrics["n_labels"]
    for m in ("cos_true", "cos_margin", "P@1", "R@5"):
        assert parity["gap"][m] == pytest.approx(parity["train"][m] - parity["test"][m], abs=1e-5)
        assert 0.0 <= parity["train"]["P@1"] <= 1.0
    # MiniLM places an instance nearer its own labels than labels at large, in both splits
    assert parity["train"]["cos_margin"] > 0 and parity["test"]["cos_margin"] > 0
    assert "## Vectorizer train/test parity" in open(os.path.join(ev, "report.md")).read()


def test_eval_is_published_whole_by_evaluate_alone(demo_submit_run):
    """eval/ is written by the evaluate stage only, through a staging folder and the rename
    swap (a version token inside, listed by evaluate's commit); g's held-out report in it is
    the one of the models' card."""
    require_finished(demo_submit_run)
    paths = storage.RunPaths(demo_submit_run["output"])
    ev = paths.table(storage.EVAL)
    card = json.load(open(os.path.join(paths.table(storage.MODELS), "model_card.json")))
    assert json.load(open(os.path.join(ev, "pretrain.json"))) == card["pretrain_report"]
    assert set(card["pretrain_report"]["variants"]) == {"pina", "pina_naive"}
    version = storage.table_version(ev)
    assert version and storage.read_commit(paths, "evaluate")["tables"][storage.EVAL] == version
    assert storage.read_commit(paths, "pretrain")["tables"].keys() == {storage.MODELS}
    assert storage.read_commit(paths, "vectorizer")["tables"].keys() == {storage.VECTORIZER}


@pytest.mark.slow
def test_encoder_parity_of_another_encoder_on_the_same_sample(demo_submit_run, spark):
    """``parity.measure_run(encoder=...)`` re-encodes the run's own sample: with the demo's own
    frozen MiniLM it reproduces the parity that evaluate measured from the embeddings (the
    frozen-encoder reference that benchmarks/encoder_parity.py puts beside a fine-tuned run)."""
    from pina_spark.models.artifacts import ENCODER_JSON
    from pina_spark.models.encoders import load_encoder
    from pina_spark.models.parity import measure_run

    require_finished(demo_submit_run)
    out = demo_submit_run["output"]
    ran = json.load(
        open(os.path.join(storage.RunPaths(out).table(storage.EVAL), "encoder_parity.json"))
    )
    spec = json.load(
        open(os.path.join(storage.RunPaths(out).table(storage.VECTORIZER), ENCODER_JSON))
    )
    enc = load_encoder({"kind": "minilm", "path": None, "max_length": spec["max_length"]})
    again = measure_run(spark, storage.RunPaths(out), ran["sample"]["max_per_split"], encoder=enc)
    assert (
        again["vectors"] == "encoder given" and again["candidate_labels"] == ran["candidate_labels"]
    )
    for sp in ("train", "test"):
        assert again[sp]["rows"] == ran[sp]["rows"]
        for m, tol in (("cos_true", 1e-4), ("cos_margin", 1e-4), ("P@1", 0.01), ("R@5", 0.01)):
            # the cosines to float noise; P@1 / R@5 allow a near-tie flipped by batch padding
            assert again[sp][m] == pytest.approx(ran[sp][m], abs=tol), (sp, m)


def test_demo_outputs_match_the_golden_digest(demo_submit_run):
    """Every published table of the demo and its metrics are those of the committed digest
    (tests/golden/demo_digest.json): a restructuring must not change any output. Regenerate the
    digest only for a change meant to change outputs (tests/golden.py says how)."""
    from golden import compare_digests, run_digest

    require_finished(demo_submit_run)
    with open(os.path.join(ROOT, "tests", "golden", "demo_digest.json")) as fh:
        expected = json.load(fh)
    diffs = compare_digests(expected, run_digest(demo_submit_run["output"]))
    assert not diffs, "\n".join(diffs)


@pytest.mark.slow
def test_neighbors_only_change_skips_pretrain(demo_submit_run, tmp_path):
    """On a copy of the finished demo run, ``--set neighbors.k=3`` reruns neighbors, aggregate,
    train and evaluate, and skips graph, pretrain and embed (their manifest ``runs`` counts
    unchanged). A copy: the shared demo run stays as the other tests expect it."""
    import shutil
    import subprocess
    import sys

    require_finished(demo_submit_run)
    copy = str(tmp_path / "demo-copy")
    shutil.copytree(demo_submit_run["output"], copy, symlinks=True)  # copy2 keeps the mtimes
    paths = storage.RunPaths(copy)
    before = json.load(open(paths.manifest))["stages"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pina_spark.cli",
            "run",
            "--config",
            demo_submit_run["config"],
            "--set",
            "neighbors.k=3",
            "--set",
            f"output={copy}",
            "--set",
            "spark.master=local[2]",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(r.stdout[r.stdout.index("{") :])
    assert report["stages"] == {
        "graph": "skipped",
        "vectorizer": "skipped",
        "embed": "skipped",
        "pretrain": "skipped",
        "neighbors": "ran",
        "aggregate": "ran",
        "train": "ran",
        "evaluate": "ran",
    }
    after = json.load(open(paths.manifest))["stages"]
    for stage in ("graph", "vectorizer", "embed", "pretrain"):
        assert after[stage]["runs"] == before[stage]["runs"], stage
    for stage in ("neighbors", "aggregate", "train", "evaluate"):
        assert after[stage]["runs"] == before[stage]["runs"] + 1, stage
