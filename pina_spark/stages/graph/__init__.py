"""The graph stage: node indices, the co-purchase (I2I) graph, the downstream targets and B_pre.

``run(ctx)`` validates the inputs (:mod:`pina_spark.validate`), publishes
``quarantine/<table>`` for every configured input (always, even when empty), then ``nodes``,
``graph/i2i_edges`` (when events are given), ``graph/instance_labels`` and
``graph/pretrain_edges`` (partitioned by ``variant``) exactly as ``docs/design.md`` describes.
The transforms are pure DataFrame -> DataFrame functions that tests and notebooks call directly;
the public ones are re-exported here.

Modules
-------
* :mod:`.nodes`: node indices, the ``nodes`` table (:func:`assign_node_indices`).
* :mod:`.baskets`: distinct (basket, item) rows and the deterministic basket cap, by Spark
  (:func:`capped_baskets`, :func:`basket_stats`) and on the driver (:func:`basket_matrix`).
* :mod:`.scoring`: the measures (count, jaccard, pmi, llr) as Spark expressions and in numpy,
  and min_score / top_n / max_degree on scored pairs.
* :mod:`.pairs_shuffle` and :mod:`.pairs_broadcast`: the two pair-counting strategies
  (:func:`co_counts`; the broadcast basket x item matrix and its range tasks).
* :mod:`.i2i`: the pair plan, decided once on the driver (:func:`pair_plan`), and
  :func:`i2i_edges`.
* :mod:`.labels`: graph labels (:func:`graph_labels`) and :func:`index_instance_labels`.
* :mod:`.bpre`: B_pre (:func:`pretrain_edges`).
* :mod:`.driver`: ``nodes``, ``graph/instance_labels`` and B_pre built with pyarrow on the
  driver from small validated inputs.
* :mod:`.publish`: the driver path or the Spark path of those three tables, chosen once.
* :mod:`.stage`: :func:`run`.
* :mod:`.stats`: what :func:`run` returns (:class:`GraphStats`).

Leak policy (``task.labels: graph`` and the ``A`` block)
--------------------------------------------------------
Anything that trains a model is built from a second graph over TRAIN items only (events whose item
is a train instance; capping, counts, N and n_a computed on those events alone):

* the ``A`` block of B_pre (train instance -> train instance),
* the graph labels of TRAIN instances (their neighbours in the train-only graph).

The graph labels of TEST instances are their neighbours in the all-items graph that are TRAIN
items. Test items are never labels. Label nodes are the train items that are a label of at least
one instance. B_pre only uses train instances and the labels carried by train instances
(``I_label``/``BT`` exist only for labels in ``B``), so removing every test row from the inputs
leaves ``graph/pretrain_edges`` unchanged as (node_id, node_id) pairs (tests/test_graph.py proves
it).

Examples
--------
>>> from pina_spark.stages import graph
>>> graph.basket_hash("o1", "a")
'4ab133fe21657ecf9d16e820d757edfd57b2f0e0'

Example::

    graph.run(make_context(spark, cfg))["nodes"]  # {'instances': 120, 'labels': 40}
"""

from pina_spark.stages.graph.baskets import basket_hash, basket_matrix, basket_stats, capped_baskets
from pina_spark.stages.graph.bpre import pretrain_edges
from pina_spark.stages.graph.i2i import PairPlan, i2i_edges, pair_plan
from pina_spark.stages.graph.labels import graph_labels, index_instance_labels
from pina_spark.stages.graph.nodes import assign_node_indices
from pina_spark.stages.graph.pairs_shuffle import co_counts
from pina_spark.stages.graph.stage import run
from pina_spark.stages.graph.stats import GraphStats

__all__ = [
    "run",
    "GraphStats",
    "assign_node_indices",
    "capped_baskets",
    "basket_stats",
    "co_counts",
    "i2i_edges",
    "pair_plan",
    "PairPlan",
    "basket_matrix",
    "graph_labels",
    "index_instance_labels",
    "pretrain_edges",
    "basket_hash",
]
