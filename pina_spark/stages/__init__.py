"""The stages of a run, declared once: :data:`STAGES` (entry point ``module:function``, the
config it depends on, the outputs it publishes), :class:`StageContext`, what every stage entry
point ``run(ctx)`` receives, and :class:`StageStats`, the base of what it returns (one frozen
dataclass per stage, whose fields are the typed contract and whose :meth:`StageStats.to_dict` is
what the manifest records). The orchestrators (:mod:`pina_spark.orchestration.pipeline`,
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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, NeighborsConfig, PinaConfig, PretrainConfig, TrainConfig
from pina_spark.config import variants as V
from pina_spark.storage.manifest import Manifest

__all__ = [
    "STAGES",
    "StageSpec",
    "StageContext",
    "StageStats",
    "stats_dict",
    "optional",
    "flattened",
    "G_TRAINING_FIELDS",
]

#: the ``neighbors`` settings that decide how g is trained (so pretrain depends on them); the
#: other ``neighbors`` settings (k, weighting, ...) only change prediction
G_TRAINING_FIELDS = tuple(f"neighbors.{k}" for k in NeighborsConfig.G_TRAINING)
#: the ``pretrain`` settings of the vectorizer stage, and those of g (the pretrain stage)
VECTORIZER_FIELDS = tuple(f"pretrain.{k}" for k in PretrainConfig.VECTORIZER)
G_FIELDS = tuple(f"pretrain.{k}" for k in PretrainConfig.G_TRAINING)
TRAIN_FIELDS = tuple(f"train.{k}" for k in TrainConfig.MODEL)


#: ``dc.field`` metadata of a :class:`StageStats` field: leave its key out while it is ``None``
OMIT_IF_NONE = "omit_if_none"
#: ``dc.field`` metadata of a :class:`StageStats` field: write its items at the top level
FLATTEN = "flatten"


def optional() -> Any:
    """A :class:`StageStats` field that only some paths of a stage record: its key is left out
    of :meth:`StageStats.to_dict` while it holds ``None`` (the default)."""
    return dc.field(default=None, metadata={OMIT_IF_NONE: True})


def flattened(key_format: str = "{key}", *, default_none: bool = False) -> Any:
    """A :class:`StageStats` field holding a mapping (one item per variant, say) whose items
    :meth:`StageStats.to_dict` writes at the top level, each under ``key_format``: ``{key}`` is
    the item's key; an item that is itself a :class:`StageStats` gives one key per key of its
    :meth:`~StageStats.to_dict`, ``{name}``. The mapping may be a :class:`StageStats` (a group
    of keys that some paths record together) or ``None`` (no key). Empty by default, ``None``
    with ``default_none``."""
    if default_none:
        return dc.field(default=None, metadata={FLATTEN: key_format})
    return dc.field(default_factory=dict, metadata={FLATTEN: key_format})


def _plain(value: Any) -> Any:
    """``value`` with every :class:`StageStats` inside it (in dicts and lists) made plain."""
    if isinstance(value, StageStats):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class StageStats(Mapping[str, Any]):
    """The statistics a stage's ``run(ctx)`` returns, recorded in the manifest under the stage's
    ``stats``. Each stage subclasses it with typed fields (its ``Attributes:`` say what each
    means): the fields are the typed contract; :meth:`to_dict` is the manifest form, a plain
    JSON dict keyed by field name in field order, where a field made with :func:`optional` is
    left out while ``None`` and one made with :func:`flattened` writes its items at the top level
    (per-variant keys such as ``pina_P@1``). The object also reads as that dict, read only
    (``stats["rows"]``, ``stats.get("k")``, ``"k" in stats``), and compares equal to it.

    Example::

        @dc.dataclass(frozen=True, kw_only=True, eq=False)
        class DemoStats(StageStats):
            rows: int
            reused: Optional[str] = optional()
            p_at_1: Dict[str, float] = flattened("{key}_P@1")

        DemoStats(rows=3, p_at_1={"pina": 0.5}).to_dict()  # {'rows': 3, 'pina_P@1': 0.5}
    """

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: a new plain dict (nested :class:`StageStats` made plain too)."""
        out: dict[str, Any] = {}
        for f in dc.fields(self):
            value = getattr(self, f.name)
            key_format = f.metadata.get(FLATTEN)
            if key_format is not None:
                for key, item in (value or {}).items():
                    if isinstance(item, StageStats):
                        for name, x in item.to_dict().items():
                            out[key_format.format(key=key, name=name)] = x
                    else:
                        out[key_format.format(key=key)] = _plain(item)
            elif value is not None or not f.metadata.get(OMIT_IF_NONE):
                out[f.name] = _plain(value)
        return out

    def optional_rows(self) -> dict[str, int]:
        """``{table: rows}`` of the optional tables this run of the stage published (the
        graph stage's ``graph/i2i_edges``, written when events are given), which the stage's
        fixed ``outputs`` leave out; the manifest's ``rows_out`` counts them too. Stages
        without optional tables return ``{}``."""
        return {}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def stats_dict(stats: Mapping[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """The manifest form of what a step returned, with the orchestrator's own keys ``extra``
    (``incremental``, ``selected``, ...) after the stage's; nothing is mutated. ``stats``: a
    :class:`StageStats` (its :meth:`~StageStats.to_dict`), or a plain mapping (the pipeline's
    own steps, such as the nodes pre-step) or ``None`` (``{}``).

    Examples
    --------
    >>> stats_dict({"rows": 3}, selected=1)
    {'rows': 3, 'selected': 1}
    >>> stats_dict(None)
    {}
    """
    plain = stats.to_dict() if isinstance(stats, StageStats) else dict(stats or {})
    return {**plain, **extra}


def _xtransformer_ranker(cfg: PinaConfig) -> tuple[str, ...]:
    """``encoder: xtransformer`` fine-tunes with an XR-Transformer whose ranker is configured by
    ``pretrain.xlinear``; no other encoder reads it."""
    return ("pretrain.xlinear",) if cfg.pretrain.encoder == "xtransformer" else ()


def _vectorizer_only(cfg: PinaConfig) -> tuple[str, ...]:
    """A run training no variant with neighbours aggregates ``vectorizer_only`` alone, so
    ``train.variants`` decides aggregate's output then (and only then: every other run's
    fingerprint stays as it was)."""
    return () if V.needs_neighbors(cfg.train.variants) else ("train.variants",)


@dc.dataclass(frozen=True)
class StageSpec:
    """A stage: its entry point (``module:function``), the config sections (or dotted fields) its
    output depends on -- every setting the stage reads, its own section and the fields of
    other sections it declares here -- and the run-relative outputs that must be complete for
    it to count as done."""

    name: str
    target: str
    sections: tuple[str, ...]
    outputs: tuple[str, ...]
    #: the model folder (``storage.VECTORIZER`` or ``storage.MODELS``) the outputs are computed
    #: with; its version is recorded with the stage, so an incremental run never merges rows
    #: computed with two versions of it
    model_folder: str | None = None
    #: fields the output depends on for some configurations only (``cfg -> fields``)
    sections_if: Callable[[PinaConfig], tuple[str, ...]] | None = None

    def fingerprint_sections(self, cfg: PinaConfig) -> tuple[str, ...]:
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

    def load(self) -> Callable[["StageContext"], StageStats]:
        mod, fn = self.target.split(":")
        return getattr(importlib.import_module(mod), fn)


STAGES: dict[str, StageSpec] = {
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
            # label_features pifa: out of g's folds (fold_seed: left out at 0, PinaConfig)
            ("aggregate", "neighbors.folds", "neighbors.fold_seed"),
            (storage.FEATURES,),
            storage.MODELS,
            sections_if=_vectorizer_only,
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
    an earlier run). ``incremental_rows``: in an incremental run, the URI of a table with the
    ``node_index`` of the rows being recomputed (``None`` otherwise; stages may ignore it: the
    pipeline already hands them a subset view of their input)."""

    spark: Any
    cfg: PinaConfig
    paths: storage.RunPaths
    manifest: Manifest
    models_root: str
    incremental_rows: str | None = None
