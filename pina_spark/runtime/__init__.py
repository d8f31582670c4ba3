"""Executor-side runtime: what runs inside Spark tasks (models, devices, memory-mapped tables).

- :mod:`pina_spark.runtime.cache`: the per-worker model cache (:func:`get_model`, each Python
  worker loads each model at most once) and its load counts;
- :mod:`pina_spark.runtime.device`: the executor guard, the task's device and threads, the task
  slots and fit placement;
- :mod:`pina_spark.runtime.checksums`: model folders as checked local copies
  (``_CHECKSUMS.json``, the private cache of remote folders, artifact checks);
- :mod:`pina_spark.runtime.embstore`, :mod:`pina_spark.runtime.arrow`,
  :mod:`pina_spark.runtime.arrowkit`, :mod:`pina_spark.runtime.faults`,
  :mod:`pina_spark.runtime.progress`: the embeddings store, Arrow batches of the inference
  stages, fault injection and progress reports.

Examples
--------
>>> cache = ModelCache(capacity=2)
>>> cache.get_or_load("a", lambda: "model-a"), cache.get_or_load("a", lambda: "other")
('model-a', 'model-a')
>>> choose_device({"gpu": ["1"]}, {"CUDA_VISIBLE_DEVICES": "1"}, "auto")
'cuda:0'
"""

from pina_spark.runtime.cache import (
    MODEL_CACHE,
    LoadStatsParam,
    ModelCache,
    get_model,
    summarize_loads,
)
from pina_spark.runtime.checksums import (
    CHECKSUMS,
    ModelLoadError,
    check_artifacts,
    local_model_dir,
    verify_checksums,
    write_checksums,
)
from pina_spark.runtime.device import (
    choose_device,
    fits_where,
    one_task_each,
    process_device,
    require_executor,
    resolve_device,
    task_slots,
    task_threads,
)

__all__ = [
    "ModelCache",
    "ModelLoadError",
    "LoadStatsParam",
    "choose_device",
    "resolve_device",
    "process_device",
    "task_threads",
    "task_slots",
    "one_task_each",
    "fits_where",
    "get_model",
    "local_model_dir",
    "check_artifacts",
    "require_executor",
    "summarize_loads",
    "MODEL_CACHE",
    "CHECKSUMS",
    "write_checksums",
    "verify_checksums",
]
