"""The stages of a run, declared once: :data:`STAGES` (entry point ``module:function``, the
config it depends on, the outputs it publishes) and :class:`StageContext`, what every stage
entry point ``run(ctx) -> dict`` receives. The orchestrators (:mod:`pina_spark.orchestration.pipeline`,
:mod:`pina_spark.orchestration.tune`) run stages from here; stage modules never import them.

Examples
--------
>>> list(STAGES)
['graph', 'vectorizer', 'embed', 'pretrain', 'neighbors', 'aggregate', 'train', 'evaluate']
>>> STAGES["aggregate"].target
'pina_spark.stages.aggregate:run'
"""

import dataclasses as dc
import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, NeighborsConfig, PinaConfig, PretrainConfig, TrainConfig
from pina_spark.storage.manifest import Manifest

__all__ = ["STAGES", "StageSpec", "StageContext", "G_TRAINING_FIELDS"]

#: the ``neighbors`` settings that decide how g is trained (so pretrain depends on them); the
#: other ``neighbors`` settings (k, weighting, ...) only change prediction
G_TRAINING_FIELDS = tuple(f"neighbors.{k}" for k in NeighborsConfig.G_TRAINING)
#: the ``pretrain`` settings of the vectorizer stage, and those of g (the pretrain stage)
VECTORIZER_FIELDS = tuple(f"pretrain.{k}" for k in PretrainConfig.VECTORIZER)
G_FIELDS = tuple(f"pretrain.{k}" for k in PretrainConfig.G_TRAINING)
TRAIN_FIELDS = tuple(f"train.{k}" for k in TrainConfig.MODEL)


def _xtransformer_ranker(cfg: PinaConfig) -> Tuple[str, ...]:
    """``encoder: xtransformer`` fine-tunes with an XR-Transformer whose ranker is configured by
    ``pretrain.xlinear``; no other encoder reads it."""
    return ("pretrain.xlinear",) if cfg.pretrain.encoder == "xtransformer" else ()


@dc.dataclass(frozen=True)
class StageSpec:
    """A stage: its entry point (``module:function``), the config sections (or dotted fields) its
    output depends on -- every setting the stage reads, its own section and the fields of
    other sections it declares here -- and the run-relative outputs that must be complete for
    it to count as done."""

    name: str
    target: str
    sections: Tuple[str, ...]
    outputs: Tuple[str, ...]
    #: the model folder (``storage.VECTORIZER`` or ``storage.MODELS``) the outputs are computed with; its
    #: version is recorded with the stage, so an incremental run never merges rows computed
    #: with two versions of it
    model_folder: Optional[str] = None
    #: fields the output depends on for some configurations only (``cfg -> fields``)
    sections_if: Optional[Callable[[PinaConfig], Tuple[str, ...]]] = None

    def fingerprint_sections(self, cfg: PinaConfig) -> Tuple[str, ...]:
        """The sections and fields whose values make this stage's fingerprint under ``cfg``.

        Examples
        --------
        >>> from pina_spark.config import config_from_dict
        >>> xt = config_from_dict({"output": "/r", "pretrain": {"encoder": "xtransformer"}})
        >>> "pretrain.xlinear" in STAGES["vectorizer"].fingerprint_sections(xt)
        True
        >>> "pretrain.xlinear" in STAGES["vectorizer"].fingerprint_sections(
        ...     config_from_dict({"output": "/r"}))
        False
        """
        return self.sections + (self.sections_if(cfg) if self.sections_if else ())

    def load(self) -> Callable[["StageContext"], Dict[str, Any]]:
        mod, fn = self.target.split(":")
        return getattr(importlib.import_module(mod), fn)


STAGES: Dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "graph",
            "pina_spark.stages.graph:run",
            ("input", "side_info", "task", "graph", "quality"),
            (storage.NODES, storage.PRETRAIN_EDGES, storage.INSTANCE_LABELS),
        ),
        # B_pre's rows decide the tf-idf and the fine-tuning pairs (leave_self_out, twins); g's
        # settings (xlinear but for xtransformer, folds, train_on) do not reach it or embed
        StageSpec(
            "vectorizer",
            "pina_spark.stages.vectorizer:run",
            VECTORIZER_FIELDS + ("task.labels", "neighbors.leave_self_out"),
            (storage.VECTORIZER,),
            sections_if=_xtransformer_ranker,
        ),
        StageSpec(
            "embed",
            "pina_spark.stages.embed:run",
            ("inference",),
            (storage.EMBEDDINGS,),
            storage.VECTORIZER,
        ),
        StageSpec(
            "pretrain",
            "pina_spark.stages.pretrain:run",
            G_FIELDS + ("task.labels",) + G_TRAINING_FIELDS,
            (storage.MODELS,),
        ),
        StageSpec(
            "neighbors",
            "pina_spark.stages.neighbors:run",
            ("neighbors", "inference", "task.labels"),
            (storage.NEIGHBORS,),
            storage.MODELS,
        ),
        StageSpec(
            "aggregate",
            "pina_spark.stages.aggregate:run",
            ("aggregate", "neighbors.folds"),  # label_features pifa: out of g's folds
            (storage.FEATURES,),
            storage.MODELS,
        ),
        StageSpec(
            "train",
            "pina_spark.stages.train:run",
            # the baseline's tf-idf and the xtransformer model's encoder follow pretrain's
            TRAIN_FIELDS
            + ("pretrain.tfidf", "pretrain.encoder_path", "pretrain.max_length")
            + ("pretrain.xtransformer",),
            (storage.PREDICTIONS, storage.DOWNSTREAM_MODELS),
        ),
        StageSpec(
            "evaluate",
            "pina_spark.stages.evaluate:run",
            ("evaluate", "input.filter_pairs", "side_info", "task.labels", "pretrain.encoder"),
            (storage.EVAL,),
        ),
    ]
}
assert tuple(STAGES) == STAGE_NAMES


@dc.dataclass
class StageContext:
    """What a stage gets: the session, the config, the run's paths and the manifest.

    ``models`` is where models are read from (this run's ``models/`` unless ``run.models`` names
    an earlier run). ``selection``: in an incremental run, the URI of a table with the
    ``node_index`` of the rows being recomputed (``None`` otherwise; stages may ignore it: the
    pipeline already hands them a subset view of their input)."""

    spark: Any
    cfg: PinaConfig
    paths: storage.RunPaths
    manifest: Manifest
    models_root: str
    selection: Optional[str] = None
