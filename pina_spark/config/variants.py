"""The variant names of a run, defined once.

A *variant* is one way of building an instance's features: the graph and neighbours stages
train ``g`` for :data:`GRAPH` (PINA's edges and the naive block); the aggregate stage writes
one ``features`` partition per graph variant plus :data:`VECTORIZER_ONLY`; the train and
evaluate stages add :data:`BASELINE` (tf-idf of the instance text).

Examples
--------
>>> ALL
('baseline', 'vectorizer_only', 'pina_naive', 'pina')
>>> [v for v in ALL if v not in FEATURES]
['baseline']
>>> from typing import get_args
>>> get_args(Name) == ALL
True
>>> needs_neighbors(["baseline", "vectorizer_only"]), needs_neighbors(ALL)
(False, True)
>>> g_variants(["pina", "baseline"]), g_variants(ALL)
(('pina',), ('pina', 'pina_naive'))
"""

from collections.abc import Iterable
from typing import Final, Literal

__all__ = [
    "BASELINE",
    "VECTORIZER_ONLY",
    "PINA_NAIVE",
    "PINA",
    "GRAPH",
    "FEATURES",
    "ALL",
    "Name",
    "needs_neighbors",
    "g_variants",
]

#: tf-idf of the instance text alone (no ``features`` row; the train stage builds it)
BASELINE: Final = "baseline"
#: ``V0``: the instance's own Phi_pre, no neighbours
VECTORIZER_ONLY: Final = "vectorizer_only"
#: neighbours from ``g`` trained on the naive block of the graph
PINA_NAIVE: Final = "pina_naive"
#: neighbours from ``g`` trained on PINA's edges
PINA: Final = "pina"

#: variants with a trained ``g`` (the ``variant`` values of ``pretrain_edges`` and ``neighbors``)
GRAPH = (PINA, PINA_NAIVE)
#: the ``variant`` values of the ``features`` table, in report order
FEATURES = (VECTORIZER_ONLY, PINA_NAIVE, PINA)
#: every variant the train stage can train, in report order
ALL = (BASELINE,) + FEATURES

#: the type of a variant name in config dataclasses (the names of :data:`ALL`)
Name = Literal["baseline", "vectorizer_only", "pina_naive", "pina"]


def needs_neighbors(trained: Iterable[str]) -> bool:
    """Whether a run training the variants ``trained`` (``train.variants``) needs g and the
    neighbours: only the :data:`GRAPH` variants read them. A run without one (a production run
    that follows a ``vectorizer_only`` selection) fits no g, runs no neighbours stage and
    aggregates ``vectorizer_only`` alone."""
    return any(v in GRAPH for v in trained)


def g_variants(trained: Iterable[str]) -> tuple[str, ...]:
    """The :data:`GRAPH` variants a run training ``trained`` (``train.variants``) needs a g and
    neighbours for, in :data:`GRAPH` order: the pretrain stage fits only their g and the
    neighbours stage predicts only theirs (a run that follows a ``pina`` selection pays no
    ``pina_naive`` g). Every variant has its B_pre in the graph stage either way, so the
    vectorizer (fitted on the union of B_pre's rows) is the same whatever is trained."""
    wanted = set(trained)
    return tuple(v for v in GRAPH if v in wanted)
