"""The embed stage: Phi_pre of every node into ``embeddings``, sharded over the executors with
``mapInArrow``. :mod:`.plan` (decided once on the driver), :mod:`.stage` (the executor kernel and
:func:`run`).
"""

from pina_spark.stages.embed.stage import run

__all__ = ["run"]
