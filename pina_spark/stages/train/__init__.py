"""The train stage: downstream XMC models (PECOS XR-Linear, or XR-Transformer) per variant, and
their predictions on test. :mod:`.stage` (:func:`run`), :mod:`.tasks` (the variants as Spark
tasks).
"""

from pina_spark.stages.train.stage import run

__all__ = ["run"]
