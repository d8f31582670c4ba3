"""Stage 2a: sharded Phi_pre embeddings and top-K neighbour prediction (``mapInArrow``).

Two stages (docs/design.md), one module each:

* :mod:`~pina_spark.inference.embed` writes ``embeddings``: Phi_pre of every node;
* :mod:`~pina_spark.inference.neighbors` writes ``neighbors``: for every instance node, the
  top-K output nodes of g with normalised weights, per variant.

On the driver, :mod:`~pina_spark.inference.plan` decides once what a stage does (from config,
the models folder and measured facts, :mod:`~pina_spark.inference.nodes`) into a frozen plan,
which the stage logs and writes to its statistics. The executor functions close over one frozen
task dataclass built from the plan, import numpy / pyarrow / PECOS inside, load models through
the per-worker cache (:mod:`pina_spark.runtime`; the models folder: :mod:`pina_spark.artifacts`)
and work on Arrow batches with vectorised numpy (:mod:`~pina_spark.inference.arrow`,
:mod:`~pina_spark.inference.topk`; the ``embeddings_via: files`` path:
:mod:`~pina_spark.inference.files`).
"""

from .arrow import features_from_arrow
from .embed import EmbedTask, embed_frame, run_embed_stage
from .files import task_order, task_rows
from .neighbors import NeighborTask, fold_route_expr, neighbors_frame, run_neighbors_stage
from .plan import (
    VARIANTS,
    EmbedPlan,
    GModel,
    NeighborPlan,
    Sink,
    choose_embeddings_via,
    plan_embed,
    plan_neighbors,
)
from .topk import normalize_scores, topk_neighbors

__all__ = [
    "run_embed_stage",
    "run_neighbors_stage",
    "embed_frame",
    "neighbors_frame",
    "fold_route_expr",
    "VARIANTS",
    "EmbedPlan",
    "EmbedTask",
    "NeighborPlan",
    "NeighborTask",
    "GModel",
    "Sink",
    "plan_embed",
    "plan_neighbors",
    "choose_embeddings_via",
    "topk_neighbors",
    "normalize_scores",
    "features_from_arrow",
    "task_order",
    "task_rows",
]
