"""Airflow DAG: daily augmentation. Embed, neighbours and aggregate for the day's instances with
the PROMOTED models (``--models latest``: the run whose evaluate stage last passed the gate under
the retraining output ``runs/prod``, see pina_monthly.py), incrementally, on a transient EMR 7
CPU cluster. Its run roots live under an output of their own, ``runs/prod-daily``
(``run.promoted_from`` names ``runs/prod``: pina_emr_steps.daily_args), so the two DAGs never
share a run root, the 1st of a month included. Run date: the ``run_date``
Param of a manual run, else the logical date (pina_emr_steps.RUN_DATE): the run for day D starts
at 00:00 UTC on D+1 and reads ``input/daily/D/`` (the same on Airflow 2 and 3: a data-interval
timetable, pina_emr_steps.emr_dag). A failed stage's step is
added again once, 15 minutes later; finished stages are skipped by the pipeline's resume. Each
stage task may run ``stage_timeout_h`` (6) hours per attempt, its ``execution_timeout``: past
that Airflow fails it and cancels its step (pina-spark sets no stage timeout of its own).

Airflow Variables: ``pina_bucket`` (e.g. ``my-bucket``), ``pina_version`` (the archive,
``dist/pina-env-<version>.tar.gz``), ``pina_subnet`` (optional: unset, EMR picks a subnet of the
default VPC). Roll back by setting ``pina_version`` to the previous release. On a GPU fleet use
pina_daily_gpu (pina_gpu.py) instead.
"""

import pina_emr_steps as pes

dag = pes.emr_dag(
    "pina_daily",
    "@daily",
    pes.DAILY_STAGES,
    extra_args=pes.daily_args(),
    core_nodes=4,
    retries=1,
    stage_timeout_h=6,
)
