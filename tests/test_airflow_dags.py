"""conf/airflow: the DAGs load with DagBag without import errors (run in the separate Airflow
venv by `make test-airflow`; skipped where Airflow is not installed), and their EMR steps are
the ones of conf/emr/steps.json."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAGS = os.path.join(ROOT, "conf", "airflow")


def _steps_module():
    sys.path.insert(0, DAGS)
    try:
        import pina_emr_steps

        return pina_emr_steps
    finally:
        sys.path.remove(DAGS)


def test_dag_steps_match_the_emr_step_list():
    pes = _steps_module()
    ref = json.load(open(os.path.join(ROOT, "conf", "emr", "steps.json")))
    got = pes.steps(list(pes.STAGES), "s3://YOUR-BUCKET/pina", "0.1.0", "RUN_DATE")
    assert [s["HadoopJarStep"]["Args"] for s in got] == [s["Args"] for s in ref]
    assert [s["Name"] for s in got] == [s["Name"] for s in ref]


def test_dagbag_loads_both_dags(tmp_path, monkeypatch):
    pytest.importorskip("airflow", reason="Airflow is tested in its own venv: make test-airflow")
    pytest.importorskip("airflow.providers.amazon")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", DAGS)
    # a loaded 2-core machine needs more than the default 30 s to import boto3 + the provider
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "600")
    import airflow.providers.amazon.aws.operators.emr  # noqa: F401  (warm the import)

    monkeypatch.syspath_prepend(DAGS)
    from airflow.models import DagBag

    bag = DagBag(dag_folder=DAGS)  # examples off: AIRFLOW__CORE__LOAD_EXAMPLES
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"pina_daily", "pina_monthly"}
    daily, monthly = bag.dags["pina_daily"], bag.dags["pina_monthly"]  # no metadata DB needed
    for dag in (daily, monthly):
        assert [t.task_id for t in dag.topological_sort()] == [
            "create_cluster",
            "add_steps",
            dag.tasks[2].task_id,
            "terminate_cluster",
        ]
        types = {type(t).__name__ for t in dag.tasks}
        assert {
            "EmrCreateJobFlowOperator",
            "EmrAddStepsOperator",
            "EmrStepSensor",
            "EmrTerminateJobFlowOperator",
        } <= types
    daily_args = [a for s in daily.get_task("add_steps").steps for a in s["HadoopJarStep"]["Args"]]
    assert daily_args[daily_args.index("--models") + 1] == "latest"
    monthly_args = [
        a for s in monthly.get_task("add_steps").steps for a in s["HadoopJarStep"]["Args"]
    ]
    assert "evaluate.promote=true" in monthly_args
