"""EMR steps and cluster spec for the pina-spark Airflow DAGs (pina_daily.py, pina_monthly.py).

One ``spark-submit`` step per pipeline stage, exactly as ``conf/emr/steps.json`` (the test
``tests/test_airflow_dags.py`` checks they agree): cluster deploy mode, the job's environment
shipped with ``--archives <pina-env>.tar.gz#env`` and ``spark.pyspark.python=./env/bin/python``.
Settings come from Airflow Variables (``pina_bucket``, ``pina_version``, ``pina_subnet``) with
the defaults below; nothing here talks to AWS at import time.
"""

from typing import Dict, List, Sequence

#: stage -> (job script, driver memory), in pipeline order
STAGES = {
    "graph": ("graph.py", "8g"),
    "vectorizer": ("vectorizer.py", "24g"),
    "embed": ("embed.py", "8g"),
    "pretrain": ("pretrain.py", "24g"),
    "neighbors": ("predict_neighbors.py", "8g"),
    "aggregate": ("aggregate.py", "8g"),
    "train": ("train.py", "24g"),
    "evaluate": ("evaluate.py", "8g"),
}

COMMON_CONF = [
    "spark.pyspark.python=./env/bin/python",
    "spark.yarn.appMasterEnv.HF_HUB_OFFLINE=1",
    "spark.yarn.appMasterEnv.TRANSFORMERS_OFFLINE=1",
    "spark.executorEnv.HF_HUB_OFFLINE=1",
    "spark.executorEnv.TRANSFORMERS_OFFLINE=1",
]


def stage_step(
    stage: str,
    prefix: str,
    version: str,
    run_date: str,
    config: str = "emr.yaml",
    extra_args: Sequence[str] = (),
) -> Dict:
    """The EMR step of one stage (``prefix``: ``s3://BUCKET/pina``)."""
    script, driver_memory = STAGES[stage]
    args = [
        "spark-submit",
        "--master",
        "yarn",
        "--deploy-mode",
        "cluster",
        "--driver-memory",
        driver_memory,
        "--archives",
        f"{prefix}/dist/pina-env-{version}.tar.gz#env",
    ]
    for c in COMMON_CONF:
        args += ["--conf", c]
    args += [
        f"{prefix}/code/jobs/{script}",
        "--config",
        f"{prefix}/conf/{config}",
        "--run-date",
        run_date,
    ] + list(extra_args)
    return {
        "Name": f"pina-spark {stage} {run_date}",
        "ActionOnFailure": "CANCEL_AND_WAIT",
        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": args},
    }


def steps(
    stages: Sequence[str], prefix: str, version: str, run_date: str, extra_args: Sequence[str] = ()
) -> List[Dict]:
    return [stage_step(s, prefix, version, run_date, extra_args=extra_args) for s in stages]


def cluster(name: str, prefix: str, core_nodes: int = 4, subnet: str = "") -> Dict:
    """``RunJobFlow`` arguments of a CPU cluster kept alive until the DAG terminates it."""
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
                    "InstanceType": "m5.4xlarge",
                    "InstanceCount": core_nodes,
                },
            ],
            "KeepJobFlowAliveWhenNoSteps": True,
            "TerminationProtected": False,
        },
        "BootstrapActions": [
            {
                "Name": "pina-node",
                "ScriptBootstrapAction": {"Path": f"{prefix}/dist/bootstrap-node.sh", "Args": []},
            }
        ],
        "Configurations": [
            {
                "Classification": "spark-defaults",
                "Properties": {
                    "spark.executorEnv.HF_HUB_OFFLINE": "1",
                    "spark.executorEnv.TRANSFORMERS_OFFLINE": "1",
                    "spark.yarn.appMasterEnv.HF_HUB_OFFLINE": "1",
                    "spark.yarn.appMasterEnv.TRANSFORMERS_OFFLINE": "1",
                },
            }
        ],
        "JobFlowRole": "EMR_EC2_DefaultRole",
        "ServiceRole": "EMR_DefaultRole",
        "VisibleToAllUsers": True,
    }
    if subnet:
        spec["Instances"]["Ec2SubnetId"] = subnet
    return spec


#: Airflow template values (Variables with defaults; ``{{ ds }}`` is the run date)
BUCKET = "{{ var.value.get('pina_bucket', 'YOUR-BUCKET') }}"
VERSION = "{{ var.value.get('pina_version', '0.1.0') }}"
SUBNET = "{{ var.value.get('pina_subnet', '') }}"
PREFIX = f"s3://{BUCKET}/pina"
DS = "{{ ds }}"


def emr_dag(
    dag_id: str,
    schedule: str,
    stages: Sequence[str],
    extra_args: Sequence[str],
    core_nodes: int,
    timeout_h: int,
    retries: int,
):
    """An Airflow DAG: create a transient EMR 7 cluster, add one step per stage, wait for the
    last step (``EmrStepSensor``; ``CANCEL_AND_WAIT`` cancels the rest after a failure), and
    terminate the cluster whatever happened."""
    import datetime

    from airflow.providers.amazon.aws.operators.emr import (
        EmrAddStepsOperator,
        EmrCreateJobFlowOperator,
        EmrTerminateJobFlowOperator,
    )
    from airflow.providers.amazon.aws.sensors.emr import EmrStepSensor
    from airflow.sdk import DAG

    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=datetime.datetime(2026, 11, 1),
        catchup=False,
        max_active_runs=1,
        tags=["pina-spark"],
        default_args={"retries": retries, "retry_delay": datetime.timedelta(minutes=10)},
    ) as dag:
        create = EmrCreateJobFlowOperator(
            task_id="create_cluster",
            job_flow_overrides=cluster(f"{dag_id}-{DS}", PREFIX, core_nodes, SUBNET),
        )
        add = EmrAddStepsOperator(
            task_id="add_steps",
            job_flow_id=create.output,
            steps=steps(stages, PREFIX, VERSION, DS, extra_args),
        )
        wait = EmrStepSensor(
            task_id=f"wait_for_{stages[-1]}",
            job_flow_id=create.output,
            step_id="{{ task_instance.xcom_pull(task_ids='add_steps')[-1] }}",
            poke_interval=60,
            timeout=timeout_h * 3600,
            mode="reschedule",
        )
        terminate = EmrTerminateJobFlowOperator(
            task_id="terminate_cluster", job_flow_id=create.output, trigger_rule="all_done"
        )
        create >> add >> wait >> terminate
    return dag
