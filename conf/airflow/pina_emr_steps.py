"""EMR steps, cluster specs and the DAG factory of the pina-spark Airflow DAGs (pina_daily.py,
pina_monthly.py, pina_gpu.py).

One ``spark-submit`` step per pipeline stage, exactly as ``conf/emr/steps.json`` (CPU fleet) and
``conf/emr/steps-gpu.json`` (GPU fleet) list them (``tests/test_airflow_dags.py`` checks they
agree): cluster deploy mode, the job's environment shipped with ``--archives
<pina-env>.tar.gz#env`` and ``spark.pyspark.python=./env/bin/python``, and every key that has to
be set at submit time: executor sizing (EMR's spark-defaults set executor cores and memory per
instance type, and they win over a YAML's ``spark.conf``) and ``spark.yarn.maxAppAttempts=1``
(read by the YARN client when it submits: from the YAML it does nothing in cluster mode).

A DAG creates a transient cluster, runs one task per stage that adds the stage's step and
watches it (a retry of that task adds the step again; a failure names the stage), and terminates
the cluster as a teardown task, with an idle timeout on the cluster as a backstop. Settings come
from Airflow Variables (``pina_bucket``, ``pina_version``, ``pina_subnet``) with the defaults
below. This module imports without Airflow (the main test suite compares its steps with the JSON
files); :func:`emr_dag` needs Airflow 2.9+ or 3.x and the Amazon provider.
"""

import copy
from collections.abc import Sequence

#: stage -> (job script, driver memory), in pipeline order
STAGES = {
    "graph": ("graph.py", "8g"),
    "vectorizer": ("vectorizer.py", "24g"),
    "embed": ("embed.py", "8g"),
    "pretrain": ("pretrain.py", "24g"),
    "neighbors": ("neighbors.py", "8g"),
    "aggregate": ("aggregate.py", "8g"),
    "train": ("train.py", "24g"),
    "evaluate": ("evaluate.py", "8g"),
}

#: stages that own a GPU per task on the GPU fleet (conf/emr-gpu.yaml)
GPU_STAGES = ("embed", "neighbors")

#: the GPU fleet's first step: one task that must see a GPU from Spark and CUDA from torch
SMOKE = ("gpu_smoke.py", "2g")

#: conf of every step: the archive's Python, no model downloads, and one YARN attempt per step
#: (a second attempt would meet the first one's live run-root lease; the DAG retries the step)
COMMON_CONF = [
    "spark.pyspark.python=./env/bin/python",
    "spark.yarn.appMasterEnv.HF_HUB_OFFLINE=1",
    "spark.yarn.appMasterEnv.TRANSFORMERS_OFFLINE=1",
    "spark.executorEnv.HF_HUB_OFFLINE=1",
    "spark.executorEnv.TRANSFORMERS_OFFLINE=1",
    "spark.yarn.maxAppAttempts=1",
]

#: executor sizing of a CPU step (conf/emr.yaml's spark.conf says the same): 5-core executors
#: with one-core tasks, 12g heap and 6g off-heap for torch and PECOS in the Python workers,
#: 3 per 16-vCPU 64-GiB node
CPU_SIZING = [
    "spark.executor.cores=5",
    "spark.task.cpus=1",
    "spark.executor.memory=12g",
    "spark.executor.memoryOverhead=6g",
]

#: the CPU fleet's cap on executors (conf/emr.yaml)
CPU_FLEET_SIZING = CPU_SIZING + ["spark.dynamicAllocation.maxExecutors=60"]

#: the GPU discovery script that conf/emr/bootstrap-node.sh --gpu writes on every node (Spark's
#: own examples/src/main/scripts/getGpusResources.sh: EMR documents its copy under
#: /usr/lib/spark/scripts/gpu only with the RAPIDS plugin, which we do not enable)
GPU_DISCOVERY_SCRIPT = "/opt/pina/getGpusResources.sh"
#: sizing of a GPU step: one GPU per executor and per task, 8 cores per task (tokenisation and
#: PECOS' beam search on g), the discovery script
GPU_SIZING = [
    "spark.executor.resource.gpu.amount=1",
    "spark.task.resource.gpu.amount=1",
    f"spark.executor.resource.gpu.discoveryScript={GPU_DISCOVERY_SCRIPT}",
    "spark.executor.cores=8",
    "spark.task.cpus=8",
    "spark.executor.memory=24g",
    "spark.executor.memoryOverhead=16g",
]

#: EMR configuration classifications (conf/emr/configurations.json, -gpu.json say the same)
OFFLINE_DEFAULTS = {
    "spark.executorEnv.HF_HUB_OFFLINE": "1",
    "spark.executorEnv.TRANSFORMERS_OFFLINE": "1",
    "spark.yarn.appMasterEnv.HF_HUB_OFFLINE": "1",
    "spark.yarn.appMasterEnv.TRANSFORMERS_OFFLINE": "1",
}
CONFIGURATIONS = [{"Classification": "spark-defaults", "Properties": dict(OFFLINE_DEFAULTS)}]
CONFIGURATIONS_GPU = [
    {
        "Classification": "spark-defaults",
        "Properties": dict(
            OFFLINE_DEFAULTS,
            **{"spark.executor.resource.gpu.discoveryScript": GPU_DISCOVERY_SCRIPT},
        ),
    },
    {
        "Classification": "yarn-site",
        "Properties": {
            "yarn.nodemanager.resource-plugins": "yarn.io/gpu",
            "yarn.resource-types": "yarn.io/gpu",
            "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices": "auto",
            "yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables": "/usr/bin",
            "yarn.nodemanager.linux-container-executor.cgroups.mount": "true",
            "yarn.nodemanager.linux-container-executor.cgroups.mount-path": "/spark-rapids-cgroup",
            "yarn.nodemanager.linux-container-executor.cgroups.hierarchy": "yarn",
            "yarn.nodemanager.container-executor.class": (
                "org.apache.hadoop.yarn.server.nodemanager.LinuxContainerExecutor"
            ),
        },
    },
    {
        "Classification": "container-executor",
        "Properties": {},
        "Configurations": [
            {"Classification": "gpu", "Properties": {"module.enabled": "true"}},
            {
                "Classification": "cgroups",
                "Properties": {"root": "/spark-rapids-cgroup", "yarn-hierarchy": "yarn"},
            },
        ],
    },
    {
        "Classification": "capacity-scheduler",
        "Properties": {
            "yarn.scheduler.capacity.resource-calculator": (
                "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
            )
        },
    },
]

#: seconds a cluster may sit without a step or YARN application before EMR terminates it: the
#: backstop for a DAG run that dies before its teardown task (longer than RETRY_DELAY_S)
IDLE_TIMEOUT_S = 3600

#: wait before a failed stage's step is added again: longer than the run-root lease's stale
#: time (600 s, pina_spark.storage.lease), so the retry can take over the lease of a driver that
#: was killed before it released it
RETRY_DELAY_S = 900

#: seconds between two looks at a running step
POLL_S = 60

#: default of :func:`emr_dag`'s ``stage_timeout_h``: hours a stage task (its step, from being
#: added, queued behind the cluster's start, to its end) may take before Airflow fails it and
#: cancels the step (``execution_timeout``); pina-spark sets no stage timeout of its own
STAGE_TIMEOUT_H = 6

#: hours the cluster tasks (create, terminate: API calls that do not wait) may take; also the
#: ``execution_timeout`` of any task that names none (the DAGs' ``default_args``)
CLUSTER_TASK_TIMEOUT_H = 1


def _submit(driver_memory: str, archive: str, conf: Sequence[str], script: str) -> list[str]:
    args = [
        "spark-submit",
        "--master",
        "yarn",
        "--deploy-mode",
        "cluster",
        "--driver-memory",
        driver_memory,
        "--archives",
        f"{archive}#env",
    ]
    for c in list(COMMON_CONF) + list(conf):
        args += ["--conf", c]
    return args + [script]


def _step(name: str, args: list[str]) -> dict:
    return {
        "Name": name,
        "ActionOnFailure": "CANCEL_AND_WAIT",
        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": args},
    }


def stage_step(
    stage: str,
    prefix: str,
    version: str,
    run_date: str,
    extra_args: Sequence[str] = (),
    gpu_fleet: bool = False,
) -> dict:
    """The EMR step of one stage (``prefix``: ``s3://BUCKET/pina``) on the CPU fleet
    (conf/emr.yaml) or the GPU fleet (conf/emr-gpu.yaml: GPU stages ship the CUDA archive and own
    a GPU per task, the others run on 5-core executors)."""
    script, driver_memory = STAGES[stage]
    gpu = gpu_fleet and stage in GPU_STAGES
    archive = f"{prefix}/dist/pina-env-{'gpu-' if gpu else ''}{version}.tar.gz"
    sizing = GPU_SIZING if gpu else (CPU_SIZING if gpu_fleet else CPU_FLEET_SIZING)
    config = "emr-gpu.yaml" if gpu_fleet else "emr.yaml"
    args = _submit(driver_memory, archive, sizing, f"{prefix}/code/jobs/{script}")
    args += ["--config", f"{prefix}/conf/{config}", "--run-date", run_date] + list(extra_args)
    return _step(f"pina-spark {stage} {run_date}", args)


def smoke_step(prefix: str, version: str, run_date: str) -> dict:
    """The GPU fleet's first step (jobs/gpu_smoke.py): fails the chain early, naming what is
    missing, when YARN hands out no GPU or torch sees no CUDA."""
    script, driver_memory = SMOKE
    archive = f"{prefix}/dist/pina-env-gpu-{version}.tar.gz"
    args = _submit(driver_memory, archive, GPU_SIZING, f"{prefix}/code/jobs/{script}")
    return _step(f"pina-spark gpu-smoke {run_date}", args + ["--tasks", "1"])


def steps(
    stages: Sequence[str],
    prefix: str,
    version: str,
    run_date: str,
    extra_args: Sequence[str] = (),
    gpu_fleet: bool = False,
) -> list[dict]:
    """The steps of ``stages`` in order; on the GPU fleet the smoke step comes first."""
    out = [smoke_step(prefix, version, run_date)] if gpu_fleet else []
    return out + [stage_step(s, prefix, version, run_date, extra_args, gpu_fleet) for s in stages]


def cluster(
    name: str, prefix: str, core_nodes: int = 4, subnet: str = "", gpu_fleet: bool = False
) -> dict:
    """``RunJobFlow`` arguments of a cluster kept alive between the steps the DAG adds, until
    the DAG terminates it or it has been idle for :data:`IDLE_TIMEOUT_S`. ``subnet`` may be a
    template that renders empty: :func:`without_empty_subnet` then drops it before the call."""
    spec = {
        "Name": name,
        "ReleaseLabel": "emr-7.5.0",
        "Applications": [{"Name": "Spark"}],
        "LogUri": f"{prefix}/logs/",
        "Instances": {
            "InstanceGroups": [
                {
                    "Name": "primary",
                    "InstanceRole": "MASTER",
                    "InstanceType": "m5.xlarge",
                    "InstanceCount": 1,
                },
                {
                    "Name": "core",
                    "InstanceRole": "CORE",
                    "InstanceType": "g5.4xlarge" if gpu_fleet else "m5.4xlarge",
                    "InstanceCount": core_nodes,
                },
            ],
            "KeepJobFlowAliveWhenNoSteps": True,
            "TerminationProtected": False,
        },
        "AutoTerminationPolicy": {"IdleTimeout": IDLE_TIMEOUT_S},
        "BootstrapActions": [
            {
                "Name": "pina-node",
                "ScriptBootstrapAction": {
                    "Path": f"{prefix}/dist/bootstrap-node.sh",
                    "Args": ["--gpu"] if gpu_fleet else [],
                },
            }
        ],
        "Configurations": copy.deepcopy(CONFIGURATIONS_GPU if gpu_fleet else CONFIGURATIONS),
        "JobFlowRole": "EMR_EC2_DefaultRole",
        "ServiceRole": "EMR_DefaultRole",
        "VisibleToAllUsers": True,
    }
    if subnet:
        spec["Instances"]["Ec2SubnetId"] = subnet
    return spec


def without_empty_subnet(spec: dict) -> dict:
    """``spec`` without ``Instances.Ec2SubnetId`` when it is empty (the ``pina_subnet`` Variable
    unset): EMR then picks a subnet of the account's default VPC instead of refusing ``""``.

    >>> without_empty_subnet({"Instances": {"Ec2SubnetId": " ", "KeepJobFlowAliveWhenNoSteps": 1}})
    {'Instances': {'KeepJobFlowAliveWhenNoSteps': 1}}
    >>> without_empty_subnet({"Instances": {"Ec2SubnetId": "subnet-1"}})
    {'Instances': {'Ec2SubnetId': 'subnet-1'}}
    """
    out = copy.deepcopy(spec)
    instances = out.get("Instances", {})
    if not str(instances.get("Ec2SubnetId", "")).strip():
        instances.pop("Ec2SubnetId", None)
    return out


#: Airflow template values (Variables with defaults)
BUCKET = "{{ var.value.get('pina_bucket', 'YOUR-BUCKET') }}"
VERSION = "{{ var.value.get('pina_version', '0.1.0') }}"
SUBNET = "{{ var.value.get('pina_subnet', '') }}"
PREFIX = f"s3://{BUCKET}/pina"
#: the run date: the ``run_date`` Param of a manual run, else the logical date (``ds``), else
#: (an Airflow 3 manual run without a logical date) the date the run was queued for
RUN_DATE = "{{ params.run_date or (ds if ds is defined else dag_run.run_after | ds) }}"

#: each fleet's retraining output, under PREFIX: the ``output`` of its config (conf/emr.yaml,
#: conf/emr-gpu.yaml; tests/test_airflow_dags.py checks they agree), where the monthly DAG's run
#: roots and its promotion record (``_PROMOTED``) live. Change both together.
RETRAIN_OUTPUT = {False: "runs/prod", True: "runs/prod-gpu"}
#: the daily augmentation (CPU and GPU DAGs): the day's instances, with the promoted models
DAILY_STAGES = ("embed", "neighbors", "aggregate")


def daily_args(gpu_fleet: bool = False, prefix: str = PREFIX) -> list[str]:
    """The daily DAG's extra arguments: the day's instances, with the models promoted under the
    fleet's retraining output (``run.promoted_from``), written under an output of their own
    (``<retraining output>-daily``), so a daily run and the monthly retraining never share a
    run root, even on the 1st (pina-spark refuses a ``--models`` run on a root where a graph
    stage ran), and a daily run's incremental base is the latest earlier daily run.

    >>> [a for a in daily_args(prefix="s3://b/pina") if a.startswith(("output", "run.promoted"))]
    ['output=s3://b/pina/runs/prod-daily', 'run.promoted_from=s3://b/pina/runs/prod']
    """
    retrain = f"{prefix}/{RETRAIN_OUTPUT[gpu_fleet]}"
    return [
        "--models",
        "latest",
        "--incremental",
        "--set",
        f"output={retrain}-daily",
        "--set",
        f"run.promoted_from={retrain}",
        "--set",
        f"input.instances={prefix}/input/daily/{RUN_DATE}/instances/",
    ]


#: the monthly retraining (CPU and GPU DAGs): every stage, promoting a run that passes the gate
MONTHLY_ARGS = [
    "--set",
    "evaluate.promote=true",
    "--set",
    "evaluate.gate_tolerance={{ var.value.get('pina_gate_tolerance', '0.005') }}",
]


def emr_dag(
    dag_id: str,
    schedule: str,
    stages: Sequence[str],
    extra_args: Sequence[str],
    core_nodes: int,
    retries: int,
    gpu_fleet: bool = False,
    stage_timeout_h: int = STAGE_TIMEOUT_H,
):
    """An Airflow DAG: create a transient EMR 7 cluster, then one task per stage (the GPU smoke
    step first on the GPU fleet) that adds the stage's step and waits for it, retried
    ``retries`` times (each retry adds the step again), then terminate the cluster whatever
    happened (a teardown task: the run's state is the stages').

    Every task has an ``execution_timeout``: ``stage_timeout_h`` hours for each stage task
    (per attempt; a task past it fails and cancels its step), :data:`CLUSTER_TASK_TIMEOUT_H`
    for the cluster tasks."""
    import datetime

    from pina_emr_operators import (
        DAG,
        CronDataIntervalTimetable,
        EmrClusterOperator,
        EmrStageOperator,
        EmrTerminateJobFlowOperator,
        Param,
    )

    timeout = datetime.timedelta(hours=stage_timeout_h)
    with DAG(
        dag_id=dag_id,
        # one timetable on Airflow 2 and 3 (3's default for a cron string is the trigger
        # timetable, whose logical date is the day the run starts): the run for day D starts
        # when D has ended, its logical date (``ds``, the run date) is D
        schedule=CronDataIntervalTimetable(schedule, timezone="UTC"),
        start_date=datetime.datetime(2026, 11, 1),
        catchup=False,
        max_active_runs=1,
        tags=["pina-spark"] + (["gpu"] if gpu_fleet else []),
        params={
            "run_date": Param(
                None,
                type=["null", "string"],
                format="date",
                description="YYYY-MM-DD; empty: the run's logical date (or the day it runs)",
            )
        },
        default_args={
            "retries": 0,
            "execution_timeout": datetime.timedelta(hours=CLUSTER_TASK_TIMEOUT_H),
        },
    ) as dag:
        create = EmrClusterOperator(
            task_id="create_cluster",
            job_flow_overrides=cluster(
                f"{dag_id}-{RUN_DATE}", PREFIX, core_nodes, SUBNET, gpu_fleet
            ),
        )
        tasks = []
        labels = (["gpu-smoke"] if gpu_fleet else []) + list(stages)
        for stage, step in zip(
            labels, steps(stages, PREFIX, VERSION, RUN_DATE, extra_args, gpu_fleet)
        ):
            tasks.append(
                EmrStageOperator(
                    task_id=f"stage_{stage.replace('-', '_')}",
                    stage=stage,
                    job_flow_id=create.output,
                    steps=[step],
                    waiter_delay=POLL_S,
                    waiter_max_attempts=max(1, stage_timeout_h * 3600 // POLL_S),
                    execution_timeout=timeout,
                    retries=retries,
                    retry_delay=datetime.timedelta(seconds=RETRY_DELAY_S),
                )
            )
        terminate = EmrTerminateJobFlowOperator(
            task_id="terminate_cluster", job_flow_id=create.output, retries=3
        )
        chain = [create] + tasks
        for upstream, downstream in zip(chain, chain[1:]):
            upstream >> downstream
        tasks[-1] >> terminate.as_teardown(setups=create)
    return dag
