"""The co-purchase (I2I) graph: the pair plan, decided once on the driver, and :func:`i2i_edges`.

* Baskets are capped (:mod:`.baskets`); every unordered pair of kept items counts once per
  basket: ``count`` = number of baskets in which both items were kept. Event weights are
  validated but not summed (a count of baskets is what min_count thresholds and what the
  measures are defined on).
* Edges with ``count >= graph.min_count`` are kept and scored; ``min_score``, ``top_n`` and
  ``max_degree`` follow (:mod:`.scoring`).
* The output has both directions of every edge and no self loops. It is the raw graph over ALL
  items (train and test): it defines the graph labels of test instances.

Pair counting (``graph.strategy``, decided once on the driver: :func:`pair_plan`): ``broadcast``
(``auto`` up to ``graph.broadcast_max_events`` input events; :mod:`.pairs_broadcast`) or
``shuffle`` (:mod:`.pairs_shuffle`). Both strategies give the same edges (tests/test_graph.py
checks both against brute force).

Examples
--------
>>> from pina_spark.config import GraphConfig
>>> ev = spark.createDataFrame([("o1", "a"), ("o1", "b"), ("o2", "a"), ("o2", "b")],
...                            "basket_id string, item_id string")
>>> i2i_edges(ev, GraphConfig(min_count=2)).orderBy("src_id").show()
+------+------+-----+-----+
|src_id|dst_id|count|score|
+------+------+-----+-----+
|     a|     b|    2|  2.0|
|     b|     a|    2|  2.0|
+------+------+-----+-----+
<BLANKLINE>
"""

import dataclasses as dc
from typing import Optional

from pina_spark import storage
from pina_spark.stages.graph.baskets import basket_matrix
from pina_spark.stages.graph.pairs_broadcast import _broadcast_edges
from pina_spark.stages.graph.pairs_shuffle import _shuffle_pairs
from pina_spark.stages.graph.scoring import _finish_pairs


@dc.dataclass(frozen=True)
class PairPlan:
    """How the pairs of the co-purchase graph are counted, decided once on the driver.

    Attributes:
        strategy: ``broadcast`` | ``shuffle`` (see ``GraphConfig.strategy``).
        tasks: number of pair-counting tasks (``broadcast``: each takes a range of items).
        reason: why (logged and written to the manifest).
    """

    strategy: str
    tasks: int
    reason: str


def pair_plan(spark, graph_cfg, n_events: int | None) -> PairPlan:
    """Resolve ``graph.strategy`` (``auto``: ``broadcast`` up to ``broadcast_max_events``).

    Examples
    --------
    >>> from pina_spark.config import GraphConfig
    >>> pair_plan(spark, GraphConfig(strategy="shuffle"), None).strategy
    'shuffle'
    """
    tasks = max(1, int(spark.sparkContext.defaultParallelism))
    if graph_cfg.strategy != "auto":
        return PairPlan(graph_cfg.strategy, tasks, f"graph.strategy={graph_cfg.strategy}")
    if n_events is not None and n_events <= graph_cfg.broadcast_max_events:
        return PairPlan(
            "broadcast",
            tasks,
            f"{n_events} events <= graph.broadcast_max_events=" f"{graph_cfg.broadcast_max_events}",
        )
    return PairPlan(
        "shuffle",
        tasks,
        f"{n_events} events > graph.broadcast_max_events=" f"{graph_cfg.broadcast_max_events}",
    )


def i2i_edges(events, graph_cfg, fault_plan=None, capped=None, plan: Optional["PairPlan"] = None):
    """The thresholded, scored, symmetric co-purchase graph (see the module docstring).

    Parameters
    ----------
    events : DataFrame
        validated events: ``basket_id, item_id`` (other columns ignored).
    graph_cfg : pina_spark.config.GraphConfig
    fault_plan : tuple, optional
        from ``faults.fault_plan(cfg, "graph")`` (driver side).
    capped : DataFrame, optional
        a (persisted) :func:`capped_baskets` of ``events`` to reuse (implies the ``shuffle``
        strategy).
    plan : PairPlan, optional
        how to count the pairs; by default :func:`pair_plan` of ``graph_cfg`` (``auto`` counts
        the events first).

    Returns
    -------
    DataFrame
        ``src_id, dst_id, count (long), score (double)``, both directions, no self loops. Both
        strategies give the same rows.

    Example::

        from pina_spark.config import GraphConfig
        i2i_edges(events, GraphConfig(min_count=2, measure="jaccard"))
    """
    if capped is not None:
        plan = PairPlan("shuffle", 0, "a capped frame was given")
    elif plan is None:
        plan = pair_plan(
            events.sparkSession, graph_cfg, events.count() if graph_cfg.strategy == "auto" else None
        )
    if plan.strategy == "broadcast":
        tbl = storage.collect_arrow(events.select(storage.BASKET_ID, storage.ITEM_ID))
        m, _ = basket_matrix(tbl, graph_cfg.max_basket_size)
        return _broadcast_edges(events.sparkSession, m, graph_cfg, fault_plan, plan.tasks)[0]
    return _finish_pairs(_shuffle_pairs(events, graph_cfg, fault_plan, capped), graph_cfg)
