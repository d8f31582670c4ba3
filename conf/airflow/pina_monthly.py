"""Airflow DAG: monthly retraining. Every stage (graph ... evaluate) on a transient EMR 7 CPU
cluster, with the promotion gate on, writing under conf/emr.yaml's ``output`` (``runs/prod``;
the daily runs write under ``runs/prod-daily``): the evaluate stage writes
``<output>/_PROMOTED`` (which pina_daily.py follows through ``--models latest``) only if pina's
P@1 is not below the promoted run's by more than ``evaluate.gate_tolerance``. A failed gate is
not a failed run: the outputs stay for inspection (``pina-spark status`` / ``pina-spark
compare``) and the daily runs keep the old models. A failed stage is not retried: its task names
it; clear the task to add its step again (finished stages are skipped). Each stage task may run
``stage_timeout_h`` (24) hours, its ``execution_timeout``: past that Airflow fails it and
cancels its step.

Airflow Variables: ``pina_bucket``, ``pina_version``, ``pina_subnet`` (see pina_daily.py),
``pina_gate_tolerance`` (default 0.005). On a GPU fleet use pina_monthly_gpu (pina_gpu.py).
"""

import pina_emr_steps as pes

dag = pes.emr_dag(
    "pina_monthly",
    "@monthly",
    tuple(pes.STAGES),
    extra_args=pes.MONTHLY_ARGS,
    core_nodes=8,
    retries=0,
    stage_timeout_h=24,
)
