"""Airflow DAGs for a GPU fleet (conf/emr-gpu.yaml, docs/emr.md "GPU cluster"): the same daily
augmentation and monthly retraining as pina_daily.py and pina_monthly.py, on transient EMR 7
clusters of g5.4xlarge core nodes. Each run starts with the GPU smoke step (one task that must
own a GPU and see CUDA), then one step per stage: embed and neighbours own a GPU per task and
ship the CUDA archive (``dist/pina-env-gpu-<version>.tar.gz``), every other stage runs on
5-core CPU executors. Retraining runs and promotions live under conf/emr-gpu.yaml's ``output``
(``runs/prod-gpu``), daily runs under ``runs/prod-gpu-daily``, apart from the CPU DAGs'. Unpause
either this pair or the CPU pair. Stage
timeouts (``stage_timeout_h``, each task's ``execution_timeout``) as the CPU DAGs': 6 h daily,
24 h monthly.

Airflow Variables: as pina_daily.py and pina_monthly.py.
"""

import pina_emr_steps as pes

daily = pes.emr_dag(
    "pina_daily_gpu",
    "@daily",
    pes.DAILY_STAGES,
    extra_args=pes.daily_args(gpu_fleet=True),
    core_nodes=2,
    retries=1,
    gpu_fleet=True,
    stage_timeout_h=6,
)

monthly = pes.emr_dag(
    "pina_monthly_gpu",
    "@monthly",
    tuple(pes.STAGES),
    extra_args=pes.MONTHLY_ARGS,
    core_nodes=4,
    retries=0,
    gpu_fleet=True,
    stage_timeout_h=24,
)
