"""The train stage: downstream XMC models (PECOS XR-Linear, or XR-Transformer) per variant, and
their predictions on test. :mod:`.stage` (:func:`run`), :mod:`.stats` (what :func:`run`
returns), :mod:`.tasks` (the variants as Spark tasks).
"""

from pina_spark.stages.train.stage import run
from pina_spark.stages.train.stats import TrainStats

__all__ = ["run", "TrainStats"]
