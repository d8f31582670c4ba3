"""The pretrain stage: g, the neighbour predictor, per variant (out-of-fold models and the full
model) from the ``embeddings`` table and B_pre. :mod:`.fits` (the independent XR-Linear fits and
where they run), :mod:`.stage` (:func:`run`), :mod:`.stats` (what :func:`run` returns).
"""

from pina_spark.stages.pretrain.stage import run
from pina_spark.stages.pretrain.stats import PretrainStats, PretrainVariantStats

__all__ = ["run", "PretrainStats", "PretrainVariantStats"]
