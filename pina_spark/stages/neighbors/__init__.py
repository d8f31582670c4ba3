"""The neighbors stage: for every instance, the top-K output nodes of g with normalised weights,
into ``neighbors``. :mod:`.plan` (decided once on the driver) with :mod:`.nodes` (facts about
``nodes``), :mod:`.topk` (the executor top-K), :mod:`.files` (the ``embeddings_via: files``
path), :mod:`.stage` (the executor kernel and :func:`run`) and :mod:`.stats` (what :func:`run`
returns).
"""

from pina_spark.stages.neighbors.stage import run
from pina_spark.stages.neighbors.stats import NeighborsStats, NeighborsVariantStats

__all__ = ["run", "NeighborsStats", "NeighborsVariantStats"]
