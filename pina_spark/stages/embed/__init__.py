"""The embed stage: Phi_pre of every node into ``embeddings``, sharded over the executors with
``mapInArrow``. :mod:`.plan` (decided once on the driver), :mod:`.stage` (the executor kernel and
:func:`run`), :mod:`.stats` (what :func:`run` returns).
"""

from pina_spark.stages.embed.stage import run
from pina_spark.stages.embed.stats import EmbedStats

__all__ = ["run", "EmbedStats"]
