"""What the graph stage returns: :class:`GraphStats`, recorded in the manifest."""

import dataclasses as dc
from typing import Any

from pina_spark import storage
from pina_spark.stages import StageStats, optional

__all__ = ["GraphStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class GraphStats(StageStats):
    """Statistics of the graph stage (its manifest form: :meth:`StageStats.to_dict`). The fields
    of the co-purchase graph are recorded only when events are given.

    Attributes:
        pair_plan: events only, how the pairs are counted
            (:class:`~pina_spark.stages.graph.i2i.PairPlan` as a dict).
        validated_on_driver: the input tables validated on the driver.
        inputs: per input table, rows in / used / quarantined and the reasons.
        baskets: events only, the basket counts of the all-items graph.
        i2i_edges: events only, the directed rows of ``graph/i2i_edges``.
        degree: events only, the degree quantiles of ``graph/i2i_edges``.
        baskets_train: the basket counts of the train-items graph (when ``side_info`` uses the
            i2i graph or ``task.labels: graph``).
        i2i_edges_train: the directed rows of the train-items graph, when it differs from the
            all-items one.
        pair_tasks_s: ``broadcast`` only, executor seconds of the pair tasks (``all``,
            ``train``).
        built_on_driver: ``nodes``, ``graph/instance_labels`` (and B_pre without the i2i graph)
            were built on the driver, else by Spark.
        nodes: the ``instances`` and ``labels`` of ``nodes``.
        instance_labels: the rows of ``graph/instance_labels``.
        pretrain_edges: the rows of ``graph/pretrain_edges`` per variant and block.
        steps_s: wall seconds per step, in run order (the manifest stores its keys sorted).
        time_s: wall seconds of the stage.
    """

    pair_plan: dict[str, Any] | None = optional()
    validated_on_driver: list[str]
    inputs: dict[str, dict[str, Any]]
    baskets: dict[str, int] | None = optional()
    i2i_edges: int | None = optional()
    degree: dict[str, float] | None = optional()
    baskets_train: dict[str, int] | None = optional()
    i2i_edges_train: int | None = optional()
    pair_tasks_s: dict[str, float] | None = optional()
    built_on_driver: bool
    nodes: dict[str, int]
    instance_labels: int
    pretrain_edges: dict[str, dict[str, int]]
    steps_s: dict[str, float]
    time_s: float

    def optional_rows(self) -> dict[str, int]:
        """``graph/i2i_edges``' rows where this run published it (events given).

        >>> GraphStats(validated_on_driver=[], inputs={}, i2i_edges=4, built_on_driver=True,
        ...     nodes={}, instance_labels=0, pretrain_edges={}, steps_s={}, time_s=0.0
        ...     ).optional_rows()
        {'graph/i2i_edges': 4}
        """
        return {} if self.i2i_edges is None else {storage.I2I_EDGES: int(self.i2i_edges)}
