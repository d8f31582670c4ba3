"""Airflow DAG: daily augmentation. Embed, neighbours and aggregate for the day's instances with
the PROMOTED models (``--models latest``: the run whose evaluate stage last passed the gate, see
pina_monthly.py), incrementally, on a transient EMR 7 cluster. Run date = Airflow's ``{{ ds }}``.

Airflow Variables: ``pina_bucket`` (e.g. ``my-bucket``), ``pina_version`` (the archive,
``dist/pina-env-<version>.tar.gz``), ``pina_subnet`` (optional). Roll back by setting
``pina_version`` to the previous release.
"""

import pina_emr_steps as pes

dag = pes.emr_dag(
    "pina_daily",
    "@daily",
    ("embed", "neighbors", "aggregate"),
    extra_args=[
        "--models",
        "latest",
        "--incremental",
        "--set",
        f"input.instances={pes.PREFIX}/input/daily/{pes.DS}/instances/",
    ],
    core_nodes=4,
    timeout_h=6,
    retries=1,
)
