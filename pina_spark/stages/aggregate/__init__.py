"""Stage 2b: weighted neighbourhood aggregation (Algorithm 1 of PINA) -> the ``features`` table.

For every instance ``i`` with predicted neighbours ``h_j`` and normalised weights ``P_ij``::

    V0 = Phi_pre(x_i) / ||.||
    V1 = sum_j P_ij Phi_pre(h_j) / ||.||
    V  = [V0, a * V1] / ||.||            a = aggregate.v1_weight

``Phi_pre`` is the ``embeddings`` row ``[dense ; sparse]`` (dense D dims, sparse tf-idf S dims,
S from ``<models>/vectorizer/encoder.json``). Both parts aggregate; every norm is over the
whole vector; a zero vector stays zero.

Output: ``<run>/features`` (partitioned by ``variant``, ``split``)

==================== ============= =======================================================
column               type          meaning
==================== ============= =======================================================
``instance_id``      string        the instance's ``node_id``
``split``            string        ``train`` / ``test`` / ... (partition column)
``variant``          string        ``pina``, ``pina_naive`` (one per ``neighbors`` variant) and
                                   ``vectorizer_only`` (partition column)
``dense``            array<float>  dense part of V: ``[V0_dense, a * V1_dense]`` scaled by
                                   ``1/||V||`` (2*D values; D for ``vectorizer_only``)
``sparse_indices``   array<int>    sparse part of V, ascending: V0's tf-idf indices as is,
                                   V1's offset by S (so < 2*S; < S for ``vectorizer_only``)
``sparse_values``    array<float>  the matching values (scaled by ``1/||V||``)
``neighbor_ids``     array<string> ``node_id`` of the neighbours, stored order (empty for
                                   ``vectorizer_only`` and instances without neighbours)
``neighbor_weights`` array<float>  ``P_ij`` as stored in ``neighbors``
==================== ============= =======================================================

``<run>/features/_pina_features.json`` records the widths per variant.

Modules: :mod:`.plan` (the driver's decisions: strategy, transport, writer, widths), :mod:`.kernels`
(the executor numpy reduction), :mod:`.broadcast` and :mod:`.shuffle` (the two strategies),
:mod:`.sink` (the two writers), :mod:`.labelfeatures` (the PIFA label features) and :mod:`.stage`
(the pipeline entry point). The table's folders and widths file (:mod:`pina_spark.storage.features`)
and reading it back as CSR (:mod:`pina_spark.storage.features_csr`) sit in the storage layer, where
the train stage reads it too.

Example::

    stats = run(ctx)
    stats["strategy"], stats["rows"]["pina"]["test"]  # ('broadcast', 5195)
"""

from pina_spark.stages.aggregate.plan import (
    AggregateInputs,
    AggregatePlan,
    choose_broadcast_via,
    choose_strategy,
    choose_writer,
    plan_aggregate,
    resolve_sparse_dim,
)
from pina_spark.stages.aggregate.stage import build_features, run
from pina_spark.stages.aggregate.stats import AggregateStats, LabelFeaturesStats

__all__ = [
    "run",
    "AggregateStats",
    "LabelFeaturesStats",
    "build_features",
    "plan_aggregate",
    "AggregateInputs",
    "AggregatePlan",
    "choose_strategy",
    "choose_broadcast_via",
    "choose_writer",
    "resolve_sparse_dim",
]
