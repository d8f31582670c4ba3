"""conf/airflow: the DAGs' EMR steps are the ones of conf/emr/steps.json and steps-gpu.json and
pass every sizing key of conf/emr.yaml at submit time (these run in the main suite, without
Airflow); and the DAGs load with Airflow's DagBag and run with ``dag.test()`` against a fake EMR
(run in Airflow's own venv by `make test-airflow`; skipped where Airflow is not installed).

The fake EMR is a real botocore EMR client whose requests are validated against the EMR API
model and answered by a ``before-call`` handler instead of AWS, so the provider's operators,
hook and step waiter run as they do in production.
"""

import datetime
import importlib.util
import json
import os
import re
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAGS = os.path.join(ROOT, "conf", "airflow")
EMR = os.path.join(ROOT, "conf", "emr")

if importlib.util.find_spec("airflow") is not None:  # make test-airflow: before airflow loads
    os.environ.setdefault("AIRFLOW_HOME", os.path.join(sys.prefix, "home"))
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", DAGS)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    # a loaded 2-core machine needs more than the default 30 s to import boto3 + the provider
    os.environ.setdefault("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "600")


def _steps_module():
    sys.path.insert(0, DAGS)
    try:
        import pina_emr_steps

        return pina_emr_steps
    finally:
        sys.path.remove(DAGS)


def _conf(args):
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


def _yaml_conf(name):
    with open(os.path.join(ROOT, "conf", name)) as fh:
        return {k: str(v) for k, v in yaml.safe_load(fh)["spark"]["conf"].items()}


#: keys that size containers or their number: EMR's spark-defaults set some of them per
#: instance type, and spark-defaults win over a YAML's spark.conf, so a step must pass them
SIZING = re.compile(
    r"spark\.(executor\.(cores|memory|memoryOverhead|instances|resource\..*)|task\.cpus"
    r"|task\.resource\..*|driver\.(cores|memory|memoryOverhead)"
    r"|dynamicAllocation\.(min|max|initial)Executors)$"
)
#: keys spark-submit reads when it submits the application (pina_spark.orchestration.session)
SUBMIT_TIME = re.compile(r"spark\.(yarn\.|submit\.|driver\.memory$)")


@pytest.mark.parametrize("name, gpu_fleet", [("steps.json", False), ("steps-gpu.json", True)])
def test_dag_steps_match_the_emr_step_list(name, gpu_fleet):
    pes = _steps_module()
    with open(os.path.join(EMR, name)) as fh:
        ref = json.load(fh)
    got = pes.steps(
        list(pes.STAGES), "s3://YOUR-BUCKET/pina", "0.1.0", "RUN_DATE", gpu_fleet=gpu_fleet
    )
    assert [s["HadoopJarStep"]["Args"] for s in got] == [s["Args"] for s in ref]
    assert [s["Name"] for s in got] == [s["Name"] for s in ref]
    assert [s["ActionOnFailure"] for s in got] == [s["ActionOnFailure"] for s in ref]


@pytest.mark.parametrize("yaml_name, gpu_fleet", [("emr.yaml", False), ("emr-gpu.yaml", True)])
def test_daily_runs_write_apart_and_follow_the_retraining_outputs_promotion(yaml_name, gpu_fleet):
    """The monthly DAG writes under its config's output; the daily DAG under an output of its
    own, following the monthly output's promotion record (run.promoted_from), so the two never
    share a run root (both run on the 1st). The daily arguments load as a config."""
    from pina_spark.config import load_config

    pes = _steps_module()
    with open(os.path.join(ROOT, "conf", yaml_name)) as fh:
        output = yaml.safe_load(fh)["output"]
    prefix = "s3://YOUR-BUCKET/pina"
    assert output == f"{prefix}/{pes.RETRAIN_OUTPUT[gpu_fleet]}"
    args = pes.daily_args(gpu_fleet, prefix)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    cfg = load_config(os.path.join(ROOT, "conf", yaml_name), sets)
    assert cfg.run.promoted_from == output
    assert cfg.output == output + "-daily" and not cfg.output.startswith(output + "/")
    assert args[args.index("--models") + 1] == "latest"


def test_dag_cluster_configurations_match_the_json_files():
    pes = _steps_module()
    for name, gpu_fleet in (("configurations.json", False), ("configurations-gpu.json", True)):
        with open(os.path.join(EMR, name)) as fh:
            ref = json.load(fh)
        assert pes.cluster("n", "s3://b/pina", gpu_fleet=gpu_fleet)["Configurations"] == ref


@pytest.mark.parametrize(
    "yaml_name, steps_name, gpu_fleet",
    [("emr.yaml", "steps.json", False), ("emr-gpu.yaml", "steps-gpu.json", True)],
)
def test_every_sizing_key_of_the_emr_yaml_is_passed_at_submit_time(
    yaml_name, steps_name, gpu_fleet
):
    """Every sizing key of the YAML's spark.conf reaches every step that reads the YAML, in
    conf/emr/*.json and in the DAGs, with the YAML's value (a GPU step sizes itself for its GPU
    instead); the YAML sets no key that only spark-submit reads, and the steps pass
    spark.yarn.maxAppAttempts=1 (one YARN attempt; the DAG retries the step)."""
    pes = _steps_module()
    yaml_conf = _yaml_conf(yaml_name)
    sizing = {k: v for k, v in yaml_conf.items() if SIZING.match(k)}
    if not gpu_fleet:
        assert set(sizing) >= {
            "spark.executor.cores",
            "spark.executor.memory",
            "spark.executor.memoryOverhead",
        }
    assert not [k for k in yaml_conf if SUBMIT_TIME.match(k)], yaml_name
    with open(os.path.join(EMR, steps_name)) as fh:
        json_steps = [s["Args"] for s in json.load(fh)]
    dag_steps = [
        s["HadoopJarStep"]["Args"]
        for s in pes.steps(list(pes.STAGES), "s3://b/pina", "1", "D", gpu_fleet=gpu_fleet)
    ]
    for args in json_steps + dag_steps:
        conf = _conf(args)
        assert conf["spark.yarn.maxAppAttempts"] == "1"
        assert args[args.index("--driver-memory") + 1].endswith("g")
        if "--config" not in args or "spark.executor.resource.gpu.amount" in conf:
            continue  # the GPU smoke step and the GPU stages size themselves
        assert args[args.index("--config") + 1].endswith("/" + yaml_name)
        assert {k: conf.get(k) for k in sizing} == sizing, args
        if gpu_fleet:  # CPU stages of the GPU fleet: the CPU fleet's executor shape
            cpu = _yaml_conf("emr.yaml")
            shared = set(cpu) & set(conf)
            assert "spark.executor.memory" in shared
            assert {k: conf[k] for k in shared} == {k: cpu[k] for k in shared}


# ------------------------------------------------------------------ Airflow (make test-airflow)


def _airflow():
    return pytest.importorskip(
        "airflow", reason="Airflow is tested in its own venv: make test-airflow"
    )


def _airflow3():
    import airflow

    return int(airflow.__version__.split(".")[0]) >= 3


@pytest.fixture(scope="module")
def dagbag():
    _airflow()
    pytest.importorskip("airflow.providers.amazon")
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3
    except ImportError:
        from airflow.models import DagBag
    if DAGS not in sys.path:
        sys.path.insert(0, DAGS)
    return DagBag(dag_folder=DAGS)  # no examples: AIRFLOW__CORE__LOAD_EXAMPLES


@pytest.fixture(scope="module")
def airflow_db(dagbag):
    """A fresh metadata DB in $AIRFLOW_HOME (dag.test() records its runs there)."""
    from airflow.utils import db

    db.resetdb()


def test_dagbag_loads_every_dag(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {
        "pina_daily",
        "pina_monthly",
        "pina_daily_gpu",
        "pina_monthly_gpu",
    }
    pes = _steps_module()
    for dag_id, dag in dagbag.dags.items():
        order = (
            [t.task_id for t in dag.topological_sort()]
            if hasattr(dag, "topological_sort")
            else None
        )
        stages = [t.task_id for t in dag.tasks if t.task_id.startswith("stage_")]
        if order is not None:
            assert order == ["create_cluster"] + stages + ["terminate_cluster"], dag_id
        if dag_id.endswith("_gpu"):
            assert stages[0] == "stage_gpu_smoke"
        types = {t.task_id: type(t).__name__ for t in dag.tasks}
        assert types["create_cluster"] == "EmrClusterOperator"
        assert types["terminate_cluster"] == "EmrTerminateJobFlowOperator"
        assert {types[s] for s in stages} == {"EmrStageOperator"}
        assert not [t for t in dag.tasks if "Sensor" in type(t).__name__]
        terminate = dag.get_task("terminate_cluster")
        assert terminate.is_teardown and terminate.upstream_task_ids >= {stages[-1]}
        assert "run_date" in dag.params
        assert dag.max_active_runs == 1
        want_retries = 1 if dag_id.startswith("pina_daily") else 0
        for s in stages:
            task = dag.get_task(s)
            assert task.retries == want_retries and len(task.steps) == 1
        assert dag.get_task("create_cluster").retries == 0
        spec = dag.get_task("create_cluster").job_flow_overrides
        assert spec["AutoTerminationPolicy"]["IdleTimeout"] == pes.IDLE_TIMEOUT_S
        assert spec["Instances"]["KeepJobFlowAliveWhenNoSteps"] is True
    daily_args = dagbag.dags["pina_daily"].get_task("stage_embed").steps[0]["HadoopJarStep"]["Args"]
    assert daily_args[daily_args.index("--models") + 1] == "latest"
    for dag_id, gpu_fleet in (("pina_daily", False), ("pina_daily_gpu", True)):
        args = dagbag.dags[dag_id].get_task("stage_embed").steps[0]["HadoopJarStep"]["Args"]
        want = [a for a in pes.daily_args(gpu_fleet) if a.startswith(("output=", "run.prom"))]
        assert len(want) == 2 and set(want) <= set(args), dag_id  # output, run.promoted_from
    monthly = dagbag.dags["pina_monthly"].get_task("stage_evaluate").steps[0]
    assert "evaluate.promote=true" in monthly["HadoopJarStep"]["Args"]


def _core_timetable(tt):
    """The scheduler's form of a DAG's timetable (Airflow 3 authors with ``airflow.sdk``'s)."""
    try:
        from airflow.serialization.decoders import decode_timetable
        from airflow.serialization.encoders import encode_timetable
    except ImportError:  # Airflow 2: the DAG holds the scheduler's timetable
        return tt
    return decode_timetable(encode_timetable(tt))


@pytest.mark.parametrize(
    "dag_id, last, want",
    [
        ("pina_daily", ("2026-11-29", "2026-11-30"), ("2026-11-30", "2026-12-01")),
        ("pina_daily_gpu", ("2026-11-29", "2026-11-30"), ("2026-11-30", "2026-12-01")),
        ("pina_monthly", ("2026-10-01", "2026-11-01"), ("2026-11-01", "2026-12-01")),
    ],
)
def test_a_scheduled_run_takes_the_period_that_ended_on_airflow_2_and_3(dagbag, dag_id, last, want):
    """The same schedule on Airflow 2 and 3 (3's default timetable for a cron string would give
    the run that starts on 2026-12-01 that day as its logical date, so the daily run would read
    the folder of a day just begun): the run for a day starts once the day has ended, and its
    logical date, the run date (``ds``), is that day. A monthly run's is its month's first."""
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    day = lambda d: pendulum.parse(d, tz="UTC")  # noqa: E731
    tt = _core_timetable(dagbag.dags[dag_id].timetable)
    info = tt.next_dagrun_info(
        last_automated_data_interval=DataInterval(day(last[0]), day(last[1])),
        restriction=TimeRestriction(earliest=day("2026-11-01"), latest=None, catchup=True),
    )
    assert (info.logical_date, info.run_after) == (day(want[0]), day(want[1]))


#: each DAG's stage_timeout_h (conf/airflow/pina_daily.py, pina_monthly.py, pina_gpu.py)
STAGE_TIMEOUT_H = {"pina_daily": 6, "pina_daily_gpu": 6, "pina_monthly": 24, "pina_monthly_gpu": 24}


def test_every_task_has_an_execution_timeout(dagbag):
    """pina-spark sets no stage timeout of its own; the DAGs do (docs/reliability.md): every
    task of every DAG has an ``execution_timeout``. A stage task's is its DAG's
    ``stage_timeout_h`` and it watches its step at least that long; the cluster tasks' (and
    any task's that names none) is ``CLUSTER_TASK_TIMEOUT_H``."""
    pes = _steps_module()
    assert set(dagbag.dag_ids) == set(STAGE_TIMEOUT_H)
    for dag_id, dag in dagbag.dags.items():
        assert dag.default_args["execution_timeout"] == datetime.timedelta(
            hours=pes.CLUSTER_TASK_TIMEOUT_H
        )
        for task in dag.tasks:
            limit = task.execution_timeout
            assert isinstance(limit, datetime.timedelta), (dag_id, task.task_id)
            if task.task_id.startswith("stage_"):
                assert limit == datetime.timedelta(hours=STAGE_TIMEOUT_H[dag_id]), dag_id
                assert task.waiter_max_attempts * pes.POLL_S >= limit.total_seconds()
            else:
                assert limit == datetime.timedelta(hours=pes.CLUSTER_TASK_TIMEOUT_H), task.task_id


class FakeEmr:
    """EMR for the provider's operators: a real botocore client (requests validated against the
    API model) answered by a ``before-call`` handler. ``fail``: stage -> how many of its first
    attempts fail; ``hang``: stages whose steps run until cancelled; ``interrupt``: stages whose
    steps end INTERRUPTED."""

    def __init__(self, fail=None, hang=(), interrupt=()):
        import botocore.session

        self.fail = dict(fail or {})
        self.hang = set(hang)
        self.interrupt = set(interrupt)
        self.cancelled = set()
        self.requests = []  # (operation, request body)
        self.steps = {}  # step id -> (stage, attempt, name)
        self.client = botocore.session.get_session().create_client(
            "emr", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.client.meta.events.register("before-call.emr", self._answer)

    def bodies(self, operation):
        return [b for op, b in self.requests if op == operation]

    def added(self):
        """The stages of the steps added, in order."""
        return [s["Name"].split()[1] for b in self.bodies("AddJobFlowSteps") for s in b["Steps"]]

    def _answer(self, model, params, **_):
        from botocore.awsrequest import AWSResponse

        op = model.name
        body = json.loads(params["body"] or b"{}")
        self.requests.append((op, body))
        if op == "RunJobFlow":
            out = {"JobFlowId": "j-FAKE"}
        elif op == "DescribeCluster":
            out = {"Cluster": {"Id": "j-FAKE", "LogUri": "s3n://b/pina/logs/"}}
        elif op == "AddJobFlowSteps":
            ids = []
            for step in body["Steps"]:
                stage = step["Name"].split()[1]
                attempt = 1 + sum(1 for s, _, _ in self.steps.values() if s == stage)
                ids.append(f"s-{len(self.steps) + 1}")
                self.steps[ids[-1]] = (stage, attempt, step["Name"])
            out = {"StepIds": ids}
        elif op == "DescribeStep":
            stage, attempt, name = self.steps[body["StepId"]]
            status = {"State": "COMPLETED"}
            if stage in self.interrupt:
                status = {"State": "INTERRUPTED"}
            elif stage in self.hang:
                cancelled = body["StepId"] in self.cancelled
                status = {"State": "CANCELLED" if cancelled else "RUNNING"}
            elif attempt <= self.fail.get(stage, 0):
                status = {
                    "State": "FAILED",
                    "FailureDetails": {
                        "Reason": "Unknown Error.",
                        "Message": f"pina-spark {stage}: exit code 1",
                        "LogFile": f"s3://b/pina/logs/j-FAKE/steps/{body['StepId']}/",
                    },
                }
            out = {"Step": {"Id": body["StepId"], "Name": name, "Status": status}}
        elif op == "CancelSteps":
            self.cancelled.update(body["StepIds"])
            out = {
                "CancelStepsInfoList": [
                    {"StepId": i, "Status": "SUBMITTED"} for i in body["StepIds"]
                ]
            }
        elif op == "TerminateJobFlows":
            out = {}
        else:
            raise AssertionError(f"unexpected EMR call {op} {body}")
        out["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": "fake"}
        return AWSResponse("https://emr.fake", 200, {}, None), out


@pytest.fixture
def fake_emr(monkeypatch, airflow_db):
    """Install a FakeEmr (``fake_emr(fail={...})``) and record what the stage tasks raise."""
    import pina_emr_operators
    from airflow.providers.amazon.aws.hooks.emr import EmrHook

    raised = []
    execute = pina_emr_operators.EmrStageOperator.execute

    def spy(self, context):
        try:
            return execute(self, context)
        except Exception as exc:
            raised.append((self.task_id, str(exc)))
            raise

    monkeypatch.setattr(pina_emr_operators.EmrStageOperator, "execute", spy)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({"conn_type": "aws"}))
    for var in ("PINA_SUBNET", "PINA_BUCKET", "PINA_VERSION"):
        monkeypatch.delenv(f"AIRFLOW_VAR_{var}", raising=False)

    def make(fail=None, hang=(), interrupt=()):
        fake = FakeEmr(fail, hang, interrupt)
        fake.raised = raised
        monkeypatch.setattr(EmrHook, "conn", property(lambda self: fake.client))
        return fake

    return make


def _run(dag, run_conf=None, logical_date=None, waiter_delay=0):
    """``dag.test()`` with no wait before a retry and ``waiter_delay`` seconds between looks at
    a step."""
    for task in dag.tasks:
        task.retry_delay = datetime.timedelta(0)
        if hasattr(task, "waiter_delay"):
            task.waiter_delay = waiter_delay
    if _airflow3():
        return dag.test(logical_date=logical_date, run_conf=run_conf)
    when = logical_date or datetime.datetime.now(datetime.timezone.utc)
    return dag.test(execution_date=when, run_conf=run_conf)


def _states(dr):
    return {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}


def test_daily_run_without_subnet_or_logical_date(dagbag, fake_emr):
    """The pina_subnet Variable unset: no Ec2SubnetId is sent. A manual run without a logical
    date (Airflow 3) takes the day it runs as its run date; each stage's step is added by its
    own task and passes the CPU sizing; the cluster is terminated."""
    fake = fake_emr()
    dag = dagbag.dags["pina_daily"]
    dr = _run(dag)
    assert _states(dr) == {
        "create_cluster": "success",
        "stage_embed": "success",
        "stage_neighbors": "success",
        "stage_aggregate": "success",
        "terminate_cluster": "success",
    }
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    (spec,) = fake.bodies("RunJobFlow")
    assert "Ec2SubnetId" not in spec["Instances"]
    assert spec["AutoTerminationPolicy"] == {"IdleTimeout": 3600}
    assert spec["Instances"]["KeepJobFlowAliveWhenNoSteps"] is True
    assert fake.added() == ["embed", "neighbors", "aggregate"]
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for body in fake.bodies("AddJobFlowSteps"):
        args = body["Steps"][0]["HadoopJarStep"]["Args"]
        assert args[args.index("--run-date") + 1] == today
        conf = _conf(args)
        assert conf["spark.executor.cores"] == "5" and conf["spark.executor.memory"] == "12g"
        assert conf["spark.yarn.maxAppAttempts"] == "1"
        assert f"s3://YOUR-BUCKET/pina/input/daily/{today}/instances/" in " ".join(args)
        assert "output=s3://YOUR-BUCKET/pina/runs/prod-daily" in args
        assert "run.promoted_from=s3://YOUR-BUCKET/pina/runs/prod" in args
    assert fake.bodies("TerminateJobFlows") == [{"JobFlowIds": ["j-FAKE"]}]


def test_monthly_failed_stage_is_named_subnet_and_run_date_applied(dagbag, fake_emr, monkeypatch):
    """pina_subnet set: it is sent. The run_date Param sets the run date. The pretrain step
    fails: its own task fails naming the stage, the step and EMR's reason (monthly: no retry),
    no later step is added, the cluster is still terminated and the run is failed."""
    monkeypatch.setenv("AIRFLOW_VAR_PINA_SUBNET", "subnet-0abc")
    fake = fake_emr(fail={"pretrain": 1})
    dag = dagbag.dags["pina_monthly"]
    dr = _run(dag, run_conf={"run_date": "2026-11-05"})
    states = _states(dr)
    assert states["stage_pretrain"] == "failed"
    assert {states[f"stage_{s}"] for s in ("graph", "vectorizer", "embed")} == {"success"}
    assert {states[f"stage_{s}"] for s in ("neighbors", "aggregate", "train", "evaluate")} == {
        "upstream_failed"
    }
    assert states["terminate_cluster"] == "success"
    assert str(getattr(dr.state, "value", dr.state)) == "failed"
    (spec,) = fake.bodies("RunJobFlow")
    assert spec["Instances"]["Ec2SubnetId"] == "subnet-0abc"
    assert spec["Name"] == "pina_monthly-2026-11-05"
    assert fake.added() == ["graph", "vectorizer", "embed", "pretrain"]
    for body in fake.bodies("AddJobFlowSteps"):
        args = body["Steps"][0]["HadoopJarStep"]["Args"]
        assert args[args.index("--run-date") + 1] == "2026-11-05"
    ((task_id, message),) = fake.raised
    assert task_id == "stage_pretrain"
    assert message.startswith("pina-spark stage pretrain failed: EMR step s-4")
    assert "(pina-spark pretrain 2026-11-05) is FAILED" in message
    assert "exit code 1" in message and "logfile: s3://b/pina/logs/j-FAKE/steps/s-4/" in message
    assert fake.bodies("TerminateJobFlows") == [{"JobFlowIds": ["j-FAKE"]}]


def test_a_failed_step_is_added_again_on_retry(dagbag, fake_emr):
    """Daily (retries=1): the embed step fails once; the retry of its task adds a new embed step
    (not a second look at the failed one) and the run goes on to succeed."""
    fake = fake_emr(fail={"embed": 1})
    dr = _run(dagbag.dags["pina_daily"], run_conf={"run_date": "2026-11-06"})
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    assert fake.added() == ["embed", "embed", "neighbors", "aggregate"]
    looked_at = [b["StepId"] for b in fake.bodies("DescribeStep")]
    assert list(dict.fromkeys(looked_at)) == ["s-1", "s-2", "s-3", "s-4"]
    assert "s-1" not in looked_at[looked_at.index("s-2") :]  # the failed step is left alone
    assert [t for t, _ in fake.raised] == ["stage_embed"]


def test_gpu_dag_runs_the_smoke_step_first_on_gpu_nodes(dagbag, fake_emr):
    fake = fake_emr()
    dr = _run(dagbag.dags["pina_daily_gpu"], run_conf={"run_date": "2026-11-07"})
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    assert fake.added() == ["gpu-smoke", "embed", "neighbors", "aggregate"]
    (spec,) = fake.bodies("RunJobFlow")
    assert spec["Instances"]["InstanceGroups"][1]["InstanceType"].startswith("g5.")
    assert spec["BootstrapActions"][0]["ScriptBootstrapAction"]["Args"] == ["--gpu"]
    steps = {
        b["Steps"][0]["Name"].split()[1]: b["Steps"][0] for b in fake.bodies("AddJobFlowSteps")
    }
    for stage, step in steps.items():
        conf = _conf(step["HadoopJarStep"]["Args"])
        gpu = stage in ("gpu-smoke", "embed", "neighbors")
        assert (conf.get("spark.executor.resource.gpu.amount") == "1") == gpu, stage


def test_a_stage_past_its_execution_timeout_fails_and_its_step_is_cancelled(dagbag, fake_emr):
    """A step that never ends: its stage task fails when its ``execution_timeout`` (here 3 s)
    passes, and cancels the step on the way out (``on_kill``: CancelSteps with
    TERMINATE_PROCESS); no later stage is added, the cluster is still terminated and the run is
    failed. (Airflow 2's ``dag.test()`` lets the timeout, a BaseException, out of the run: there
    the test stops at the cancelled step.)"""
    fake = fake_emr(hang={"graph"})
    dag = dagbag.dags["pina_monthly_gpu"]  # no retry
    task = dag.get_task("stage_graph")
    limit = task.execution_timeout
    task.execution_timeout = datetime.timedelta(seconds=3)
    try:
        if _airflow3():
            dr = _run(dag, run_conf={"run_date": "2026-11-08"}, waiter_delay=1)
        else:
            from airflow.exceptions import AirflowTaskTimeout

            with pytest.raises(AirflowTaskTimeout):
                _run(dag, run_conf={"run_date": "2026-11-08"}, waiter_delay=1)
    finally:
        task.execution_timeout = limit
    assert fake.added() == ["gpu-smoke", "graph"]
    assert fake.bodies("CancelSteps") == [
        {"ClusterId": "j-FAKE", "StepIds": ["s-2"], "StepCancellationOption": "TERMINATE_PROCESS"}
    ]
    if not _airflow3():
        return
    states = _states(dr)
    assert states["stage_gpu_smoke"] == "success"
    assert states["stage_graph"] == "failed"
    assert {states[f"stage_{s}"] for s in ("vectorizer", "embed", "evaluate")} == {
        "upstream_failed"
    }
    assert states["terminate_cluster"] == "success"
    assert str(getattr(dr.state, "value", dr.state)) == "failed"
    assert fake.bodies("TerminateJobFlows") == [{"JobFlowIds": ["j-FAKE"]}]


def test_an_interrupted_step_fails_its_stage_at_once(dagbag, fake_emr):
    """EMR's INTERRUPTED is a terminal step state: the stage task fails at its first look,
    naming the stage and the state (botocore's step_complete waiter would poll it until the
    stage timeout), and no later stage is added. (Monthly: no retry; Airflow 2's
    ``dag.test()`` retries a task that keeps failing without end.)"""
    fake = fake_emr(interrupt={"vectorizer"})
    dr = _run(dagbag.dags["pina_monthly"], run_conf={"run_date": "2026-11-09"})
    assert str(getattr(dr.state, "value", dr.state)) == "failed"
    assert fake.added() == ["graph", "vectorizer"]
    looks = [b["StepId"] for b in fake.bodies("DescribeStep")]
    assert looks.count("s-2") == 2, looks  # the waiter's one look, then the failure's describe
    ((task_id, message),) = fake.raised
    assert task_id == "stage_vectorizer" and " is INTERRUPTED" in message, message


def test_stage_tasks_are_never_deferred(dagbag):
    """A deployment's ``[operators] default_deferrable = True`` (the provider's default for
    ``deferrable``) makes the provider's operators defer right after adding their steps; a
    stage task must not: it watches its step, names a failure and cancels on timeout."""
    import pina_emr_operators
    from airflow.providers.amazon.aws.operators.emr import EmrAddStepsOperator

    kw = {"job_flow_id": "j-1", "steps": [], "deferrable": True}
    assert EmrAddStepsOperator(task_id="plain", **kw).deferrable is True
    op = pina_emr_operators.EmrStageOperator(task_id="stage_embed", stage="embed", **kw)
    assert op.deferrable is False
    for dag in dagbag.dags.values():
        assert not [t.task_id for t in dag.tasks if getattr(t, "deferrable", False)]
