"""Train stage: downstream XMC models (PECOS XR-Linear, or XR-Transformer with
``train.model: xtransformer``) for every variant, predictions on test.

Variants (``train.variants``), all trained in one run on the TRAIN split and predicted on the
TEST split with the same ``train.xlinear`` parameters and the same label space:

* ``baseline``: tf-idf of the instance text only (a PECOS ``Preprocessor`` fitted on the *train*
  instance texts, with the ``pretrain.tfidf`` kwargs),
* ``vectorizer_only``, ``pina_naive``, ``pina``: the ``features`` table variants (dense block
  first, then the sparse block, as one CSR with sorted indices).

A variant whose features are missing is skipped with a warning and listed under ``skipped`` in
the stage statistics and in ``predictions/_train_stats.json``.

Label space: the label nodes with at least one *train* instance (a label never seen in train
cannot be predicted by any variant). Train instances without labels are left out of training.

Outputs
-------
* ``<root>/downstream_models/<variant>/`` (PECOS ``xlinear/`` or ``xtransformer/``, plus
  ``vectorizer/`` for baseline, ``labels.json`` = column -> label node_id), written into a
  staging folder and published by the rename swap with ``predictions`` (the models folder
  ``models/`` is pretrain's alone),
* ``<root>/predictions`` partitioned by ``variant``: ``instance_id``, ``label_ids``
  (label node_ids, best first), ``scores``; one row per test instance (an empty list when the
  variant has no features for that instance), top ``train.topk``,
* ``<root>/predictions/_train_stats.json``: ``{"variants": {v: {"train_s": .., "predict_s": ..,
  ...}}, "skipped": {v: reason}}`` (read by the evaluate stage).

The variants' models are independent of each other: ``train.train_on`` (``auto``: executors on
a cluster) trains them as Spark tasks, one per variant (:mod:`pina_spark.stages.train.tasks`), or
one after another on the driver; same models, same predictions. On the driver the feature
matrices come through Spark (:func:`pina_spark.stages.aggregate.features_to_csr`: Arrow batches per
partition, no per-row py4j). As tasks, each task reads its variant's rows of ``features`` itself
with pyarrow (:func:`pina_spark.stages.aggregate.read_variant`) where pyarrow reaches the table, so the
driver holds no feature matrix; only the baseline's tf-idf is built on the driver.
"""

import dataclasses as dc
import json
import logging
import os
import tempfile
import time
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from pina_spark import runtime, storage
from pina_spark.config import ConfigError
from pina_spark.config import variants as V
from pina_spark.stages.aggregate import features_to_csr
from pina_spark.stages.aggregate.layout import read_sparse_width, variant_dir

log = logging.getLogger(__name__)

__all__ = [
    "run",
    "label_matrix",
    "train_xlinear",
    "topk_from_csr",
    "TRAIN_STATS_FILE",
]

TRAIN_STATS_FILE = "_train_stats.json"  # same name as evaluate.TRAIN_STATS_FILE


# --------------------------------------------------------------------------- pure helpers
def label_matrix(rows: Sequence[int], cols: Sequence[int], n_rows: int, n_cols: int):
    """Binary float32 CSR label matrix from (row, col) pairs (duplicates collapse to 1).

    Examples
    --------
    >>> label_matrix([0, 0, 1, 0], [1, 2, 0, 1], 2, 3).toarray().tolist()
    [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    """
    import scipy.sparse as sp

    Y = sp.csr_matrix(
        (
            np.ones(len(rows), dtype=np.float32),
            (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)),
        ),
        shape=(n_rows, n_cols),
    )
    Y.sum_duplicates()
    Y.data[:] = 1.0
    Y.sort_indices()
    return Y


def train_xlinear(X, Y, xcfg, threads: int = -1):
    """Train PECOS XR-Linear (PIFA label embedding + hierarchical k-means tree) with the
    parameters of a :class:`~pina_spark.config.XLinearConfig` on ``threads`` threads (-1: every
    core of the machine; a Spark task passes its own)."""
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
    chain = Indexer.gen(
        label_feat,
        indexer_type="hierarchicalkmeans",
        nr_splits=xcfg.nr_splits,
        max_leaf_size=xcfg.max_leaf_size,
        seed=xcfg.seed,
    )
    return XLinearModel.train(
        X,
        Y,
        C=chain,
        nr_splits=xcfg.nr_splits,
        Cp=xcfg.Cp,
        Cn=xcfg.Cn,
        threshold=xcfg.threshold,
        solver_type=xcfg.solver_type,
        beam_size=xcfg.beam_size,
        only_topk=xcfg.topk,
        post_processor=xcfg.post_processor,
        threads=int(threads),
    )


def fit_predict_xlinear(X_tr, Y, X_te, tcfg, threads: int = -1):
    """Train XR-Linear on (X_tr, Y) and predict X_te: ``(model, cols_k, scores_k, train_s,
    predict_s)`` (top ``tcfg.topk`` per test row). The driver and the executor path both call
    it, so both give the same model."""
    t0 = time.time()
    model = train_xlinear(X_tr, Y, tcfg.xlinear, threads=threads)
    t1 = time.time()
    P = model.predict(
        X_te, only_topk=max(tcfg.topk, 1), beam_size=max(tcfg.xlinear.beam_size, 1), threads=threads
    )
    cols_k, scores_k = topk_from_csr(P, tcfg.topk)
    return model, cols_k, scores_k, t1 - t0, time.time() - t1


def train_xtransformer(texts: Sequence[str], X_feat, Y, cfg):
    """Train a PECOS XR-Transformer as the downstream model (GPU clusters).

    The transformer is fine-tuned on ``texts`` and its ranker is XR-Linear on
    ``[X_feat, transformer embedding]`` (PECOS' concatenation), so each variant's features enter
    as ``X_feat`` (tf-idf for ``baseline``, V for the PINA variants). Encoder initialisation,
    ``max_length`` and the extra matcher parameters are those of the pretrain section
    (``pretrain.encoder_path`` or the shipped MiniLM, ``pretrain.max_length``,
    ``pretrain.xtransformer``, e.g. ``num_train_epochs``, ``max_steps``, ``batch_size``); the
    label tree and the ranker use ``train.xlinear``.
    """
    import torch
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xtransformer.model import XTransformer
    from pecos.xmc.xtransformer.module import MLProblemWithText

    from pina_spark.models.encoders import minilm_path, resolve_local

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    xcfg = cfg.train.xlinear
    init = resolve_local(cfg.pretrain.encoder_path) if cfg.pretrain.encoder_path else minilm_path()
    matcher = {
        "model_shortcut": init,
        "num_train_epochs": 1,
        "batch_size": 32,
        "batch_gen_workers": 1,
        "max_active_matching_labels": 1000,
        "logging_steps": 50,
        "save_steps": 10**9,
        "threshold": xcfg.threshold,
        "use_gpu": torch.cuda.is_available(),
        "truncate_length": int(cfg.pretrain.max_length),
    }
    matcher.update(cfg.pretrain.xtransformer)
    indexer = {"nr_splits": xcfg.nr_splits, "max_leaf_size": xcfg.max_leaf_size, "seed": xcfg.seed}
    train_params = XTransformer.TrainParams.from_dict(
        {
            "preliminary_indexer_params": indexer,
            "refined_indexer_params": indexer,
            "matcher_params_chain": matcher,
            "do_fine_tune": True,
            "only_encoder": False,
            "fix_clustering": True,
            "ranker_params": {
                "hlm_args": {
                    "model_chain": {
                        "threshold": xcfg.threshold,
                        "Cp": xcfg.Cp,
                        "Cn": xcfg.Cn,
                        "solver_type": xcfg.solver_type,
                    }
                }
            },
        },
        recursive=True,
    )
    pred_params = XTransformer.PredParams.from_dict(
        {"matcher_params_chain": {"truncate_length": int(cfg.pretrain.max_length)}}, recursive=True
    )
    chain = Indexer.gen(
        LabelEmbeddingFactory.create(Y, X_feat, method="pifa"),
        indexer_type="hierarchicalkmeans",
        nr_splits=xcfg.nr_splits,
        max_leaf_size=xcfg.max_leaf_size,
        seed=xcfg.seed,
    )
    prob = MLProblemWithText([str(t or "") for t in texts], Y, X_feat=X_feat)
    return XTransformer.train(
        prob,
        clustering=chain,
        train_params=train_params,
        pred_params=pred_params,
        beam_size=xcfg.beam_size,
        only_topk=xcfg.topk,
    )


def topk_from_csr(P, k: int) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Per row of a score CSR: column indices and scores of the top ``k`` (score desc, column
    asc on ties).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> cols, scores = topk_from_csr(sp.csr_matrix(np.array([[0.25, 0.5, 0.5], [0, 0, 0]])), 2)
    >>> [c.tolist() for c in cols], [s.tolist() for s in scores]
    ([[1, 2], []], [[0.5, 0.5], []])
    """
    P = P.tocsr()
    cols, scores = [], []
    for i in range(P.shape[0]):
        s, e = P.indptr[i], P.indptr[i + 1]
        c, v = P.indices[s:e], P.data[s:e]
        order = np.lexsort((c, -v))[:k]
        cols.append(c[order].astype(np.int64))
        scores.append(v[order].astype(np.float32))
    return cols, scores


# --------------------------------------------------------------------------- feature loading
def _load_features(spark, feat_uri: str, variant: str):
    """``(instance_ids, csr)`` of every row of one ``features`` variant: each split through
    :func:`pina_spark.stages.aggregate.features_to_csr`, stacked.

    Splits are read as stored: which rows are train and which are test is decided by ``nodes``
    (so a tuning run can re-split without rewriting features).
    """
    import scipy.sparse as sp
    from pyspark.sql import functions as F

    splits = sorted(
        r[0]
        for r in spark.read.parquet(feat_uri)
        .where(F.col(storage.VARIANT) == variant)
        .select(storage.SPLIT)
        .distinct()
        .collect()
        if r[0] is not None
    )
    ids: List[str] = []
    mats = []
    dense_w = set()
    for split in splits:
        m = features_to_csr(spark, feat_uri, variant, split)
        if m.X.shape[0] == 0:
            continue
        mats.append(m.X)
        dense_w.add(m.dense_width)
        ids.extend(m.ids)
    if not mats:
        return [], sp.csr_matrix((0, 0), dtype=np.float32)
    if len(dense_w) > 1:
        raise ValueError(f"features {variant}: splits have different dense widths {dense_w}")
    # without the features metadata each split's sparse width is its own max index + 1: the
    # sparse block is last, so padding columns on the right aligns them
    width = max(m.shape[1] for m in mats)
    for m in mats:
        if m.shape[1] != width:
            m.resize((m.shape[0], width))
    X = sp.vstack(mats, format="csr").astype(np.float32)
    X.sort_indices()
    return ids, X


def _align(ids: List[str], X, wanted: List[str]):
    """Rows of ``X`` (indexed by ``ids``) in the order of ``wanted``; missing ids -> zero rows.
    Returns (matrix, number missing)."""
    import scipy.sparse as sp

    pos = {i: p for p, i in enumerate(ids)}
    take = np.array([pos.get(w, -1) for w in wanted], dtype=np.int64)
    missing = int((take < 0).sum())
    if missing == 0:
        return X[take], 0
    Z = sp.vstack([X, sp.csr_matrix((1, X.shape[1]), dtype=np.float32)], format="csr")
    take[take < 0] = X.shape[0]
    M = Z[take]
    M.sort_indices()
    return M, missing


# --------------------------------------------------------------------------- stage
@dc.dataclass(frozen=True, eq=False)
class LabelProblem:
    """The downstream problem, decided once on the driver from ``nodes`` and
    ``graph/instance_labels``.

    Attributes:
        train, test: the instance rows (pandas, sorted by ``node_id``).
        has_lab: per ``train`` row, whether it has a label (rows without are left out).
        Y: the label matrix of the kept train rows (CSR, train rows x labels).
        label_ids: the label space: label nodes with a train positive, by ``node_index``.
        train_ids, test_ids, train_text, test_text: ids and texts in matrix order.
    """

    train: Any
    test: Any
    has_lab: Any
    Y: Any
    label_ids: Any
    train_ids: List[str]
    test_ids: List[str]
    train_text: List[str]
    test_text: List[str]


def run(ctx) -> Dict[str, Any]:
    """Train every configured variant on train, predict test, publish ``predictions``.

    Examples
    --------
    >>> run(ctx)   # doctest: +SKIP
    {'variants': ['baseline', 'pina'], 'skipped': {}, 'baseline_train_s': 3.2, ...}
    """
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    tcfg = cfg.train
    if tcfg.model not in ("xlinear", "xtransformer"):
        raise ConfigError(f"train.model: {tcfg.model!r} is not one of ['xlinear', 'xtransformer']")
    prob = label_problem(spark, paths)
    feat_uri = paths.table(storage.FEATURES)
    feat_ok = storage.is_complete(spark, feat_uri)
    models_dir = paths.staging(storage.DOWNSTREAM_MODELS)
    stats: Dict[str, Any] = {
        "n_train": len(prob.train_ids),
        "n_test": len(prob.test_ids),
        "n_labels_trained": len(prob.label_ids),
        "variants": [],
        "skipped": {},
    }
    per_variant: Dict[str, Dict[str, Any]] = {}
    pred_frames = []
    where = "driver" if tcfg.model == "xtransformer" else runtime.fits_where(spark, tcfg.train_on)
    stats["train_on"] = where

    def each_variant(make=lambda v: variant_inputs(spark, cfg, prob, v, feat_uri)):
        """``(variant, make(variant))``, built one at a time as they are consumed."""
        for variant in tcfg.variants:
            if variant != V.BASELINE and (
                not feat_ok or not storage.path_exists(spark, variant_dir(feat_uri, variant))
            ):
                reason = f"no features for variant {variant} in {feat_uri}"
                log.warning("train: skipping variant %s: %s", variant, reason)
                stats["skipped"][variant] = reason
                continue
            stats["variants"].append(variant)
            yield variant, make(variant)

    if where == "driver":
        for variant, inp in each_variant():  # one variant's matrices held at a time
            frame, per_variant[variant] = _train_variant(
                spark, cfg, prob, variant, inp, f"{models_dir}/{variant}"
            )
            del inp
            pred_frames.append(frame)
    else:
        from pina_spark.stages.train import tasks as downstream_tasks

        # decided once: the tasks read their own features where pyarrow reaches the table
        reads = storage.pyarrow_reaches(feat_uri)
        stats["features_read_by"] = "tasks" if reads else "driver"

        def make(v: str):
            if v == V.BASELINE or not reads:
                return variant_inputs(spark, cfg, prob, v, feat_uri)
            return downstream_tasks.FeaturesRead(feat_uri, read_sparse_width(feat_uri, v))

        log.info(
            "train: the variants as Spark tasks (train.train_on %s), features read by the %s",
            tcfg.train_on,
            stats["features_read_by"],
        )
        for variant, (frame, st) in downstream_tasks.fit_on_executors(
            spark, cfg, prob, each_variant(make), models_dir, paths.staging("train-fits")
        ).items():
            pred_frames.append(frame)
            per_variant[variant] = st
    for variant in stats["variants"]:
        stats[f"{variant}_train_s"] = per_variant[variant]["train_s"]
    if not pred_frames:
        storage.discard_staging(spark, models_dir)
        raise storage.InputError(
            f"train: no variant could be trained (skipped: {stats['skipped']})"
        )
    storage.write_bytes(storage.join(models_dir, "_SUCCESS"), b"")
    storage.publish(spark, models_dir, paths.table(storage.DOWNSTREAM_MODELS))
    _publish_predictions(spark, paths, pred_frames)
    storage.write_bytes(
        paths.table(storage.PREDICTIONS) + "/" + TRAIN_STATS_FILE,
        json.dumps(
            {"variants": per_variant, "skipped": stats["skipped"], "model": tcfg.model}, indent=2
        ).encode(),
    )
    return stats


def label_problem(spark, paths) -> LabelProblem:
    """The train/test rows, the label space and Y (:class:`LabelProblem`); an
    :class:`storage.InputError` when no instance is ``test`` or no train instance has a label."""
    import pandas as pd

    nodes = (
        storage.read_table(spark, paths, storage.NODES)
        .select(storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.SPLIT, storage.TEXT)
        .toPandas()
    )
    inst = nodes[nodes[storage.KIND] == storage.KIND_INSTANCE].sort_values(
        storage.NODE_ID, kind="mergesort"
    )
    train = inst[inst[storage.SPLIT] == storage.SPLIT_TRAIN]
    test = inst[inst[storage.SPLIT] == storage.SPLIT_TEST]
    if len(test) == 0:
        raise storage.InputError(f"{paths.table(storage.NODES)}: no instance with split='test'")
    il = (
        storage.read_table(spark, paths, storage.INSTANCE_LABELS)
        .select(storage.INSTANCE_INDEX, storage.LABEL_INDEX)
        .toPandas()
    )
    # label space: label nodes with >= 1 train positive, ordered by node_index
    train_idx = train[storage.NODE_INDEX].astype("int64").to_numpy()
    il_tr = il[il[storage.INSTANCE_INDEX].astype("int64").isin(train_idx)]
    lab_nodes = nodes[nodes[storage.KIND] == storage.KIND_LABEL].sort_values(storage.NODE_INDEX)
    lab_nodes = lab_nodes[
        lab_nodes[storage.NODE_INDEX]
        .astype("int64")
        .isin(il_tr[storage.LABEL_INDEX].astype("int64").unique())
    ]
    if len(lab_nodes) == 0:
        raise storage.InputError(
            f"{paths.table(storage.INSTANCE_LABELS)}: no train instance has a label"
        )
    row_of = pd.Series(np.arange(len(train_idx)), index=train_idx)
    col_of = pd.Series(
        np.arange(len(lab_nodes)), index=lab_nodes[storage.NODE_INDEX].astype("int64").to_numpy()
    )
    il_tr = il_tr[il_tr[storage.LABEL_INDEX].astype("int64").isin(col_of.index)]
    rows = row_of.loc[il_tr[storage.INSTANCE_INDEX].astype("int64").to_numpy()].to_numpy()
    cols = col_of.loc[il_tr[storage.LABEL_INDEX].astype("int64").to_numpy()].to_numpy()
    Y_all = label_matrix(rows, cols, len(train), len(lab_nodes))
    has_lab = np.asarray(Y_all.sum(axis=1)).ravel() > 0
    train_ids = [i for i, h in zip(train[storage.NODE_ID].tolist(), has_lab) if h]
    test_ids = test[storage.NODE_ID].tolist()
    log.info(
        "train: %d train instances with labels (%d without, left out), %d test, %d labels",
        len(train_ids),
        int((~has_lab).sum()),
        len(test_ids),
        len(lab_nodes),
    )
    text_of = dict(zip(inst[storage.NODE_ID], inst[storage.TEXT]))
    return LabelProblem(
        train=train,
        test=test,
        has_lab=has_lab,
        Y=Y_all[has_lab],
        label_ids=np.array(lab_nodes[storage.NODE_ID].tolist(), dtype=object),
        train_ids=train_ids,
        test_ids=test_ids,
        train_text=[text_of.get(i) or "" for i in train_ids],
        test_text=[text_of.get(i) or "" for i in test_ids],
    )


@dc.dataclass(frozen=True)
class VariantInputs:
    """One variant's matrices, decided on the driver.

    Attributes:
        X_tr, X_te: features of the train rows with labels and of the test rows (CSR).
        vec: the baseline's fitted tf-idf (``None`` for the other variants).
        no_feat_rows: test rows without features (no prediction for them).
        prep_s: seconds spent building them.
        n_features: columns of ``X_tr`` (kept by :meth:`without_matrices`).
    """

    X_tr: Any
    X_te: Any
    vec: Any
    no_feat_rows: Tuple[int, ...]
    prep_s: float
    n_features: int

    def without_matrices(self) -> "VariantInputs":
        """The same facts without ``X_tr`` / ``X_te`` (once they are written for a task)."""
        return dc.replace(self, X_tr=None, X_te=None)


def variant_inputs(spark, cfg, prob: LabelProblem, variant: str, feat_uri: str) -> VariantInputs:
    """The :class:`VariantInputs` of one variant (tf-idf for the baseline, else the
    ``features`` table)."""
    t0 = time.time()
    no_feat_rows: List[int] = []
    vec = None
    if variant == V.BASELINE:
        X_tr, X_te, vec = _baseline_matrices(cfg, prob.train, prob.test, prob.has_lab)
    else:
        f_ids, f_X = _load_features(spark, feat_uri, variant)
        X_tr, X_te, no_feat_rows, missing = align_features(
            f_ids, f_X, prob.train_ids, prob.test_ids, variant
        )
        warn_missing(variant, missing)
    return VariantInputs(X_tr, X_te, vec, tuple(no_feat_rows), time.time() - t0, int(X_tr.shape[1]))


def align_features(
    ids: List[str], X, train_ids: List[str], test_ids: List[str], variant: str = "?"
):
    """A variant's ``features`` rows (``ids``, ``X``) as the problem's matrices: ``(X_tr, X_te,
    no_feat_rows, (train rows missing, test rows missing))``; a missing row is a zero row, and
    a test row without features gets no prediction (``no_feat_rows``). The driver's path and
    the tasks' (:mod:`pina_spark.stages.train.tasks`) both call it; a variant without a single
    row of features is an :class:`storage.InputError` on both.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> X = sp.csr_matrix(np.array([[1.0], [2.0]], np.float32))
    >>> X_tr, X_te, no_feat, missing = align_features(["b", "a"], X, ["a"], ["b", "c"])
    >>> X_tr.toarray().tolist(), X_te.toarray().tolist(), no_feat, missing
    ([[2.0]], [[1.0], [0.0]], (1,), (0, 1))
    """
    if len(ids) == 0:
        raise storage.InputError(
            f"features: variant {variant} has no row in a train or test split (rerun the "
            "aggregate stage)"
        )
    X_tr, miss_tr = _align(ids, X, train_ids)
    X_te, miss_te = _align(ids, X, test_ids)
    have = set(ids)
    no_feat_rows = tuple(r for r, i in enumerate(test_ids) if i not in have)
    return X_tr, X_te, no_feat_rows, (int(miss_tr), int(miss_te))


def warn_missing(variant: str, missing: Sequence[int]) -> None:
    """Log the train / test instances that have no features (zero rows), if any."""
    if missing[0] or missing[1]:
        log.warning(
            "variant %s: %d train / %d test instances have no features (zero rows)",
            variant,
            missing[0],
            missing[1],
        )


def _train_variant(spark, cfg, prob: LabelProblem, variant: str, inp: VariantInputs, model_uri):
    """Fit one variant on the driver, predict the test rows, save the model: ``(the
    predictions frame, the variant's statistics)``."""
    tcfg = cfg.train
    if tcfg.model == "xtransformer":
        t1 = time.time()
        model = train_xtransformer(prob.train_text, inp.X_tr, prob.Y, cfg)
        train_s = time.time() - t1
        t2 = time.time()
        topk, beam = max(tcfg.topk, 1), max(tcfg.xlinear.beam_size, 1)
        P = model.predict(prob.test_text, X_feat=inp.X_te, only_topk=topk, beam_size=beam)
        cols_k, scores_k = topk_from_csr(P, tcfg.topk)
        predict_s = time.time() - t2
    else:
        model, cols_k, scores_k, train_s, predict_s = fit_predict_xlinear(
            inp.X_tr, prob.Y, inp.X_te, tcfg
        )
    save_model(model, inp.vec, prob.label_ids, model_uri)
    return variant_result(prob, variant, inp, cols_k, scores_k, train_s, predict_s)


def variant_result(
    prob: LabelProblem, variant: str, inp: VariantInputs, cols_k, scores_k, train_s, predict_s
):
    """``(the predictions frame, the variant's statistics)`` of a fitted variant (the driver
    and the executor path alike)."""
    for r in inp.no_feat_rows:  # no features for this test instance: no prediction
        cols_k[r] = cols_k[r][:0]
        scores_k[r] = scores_k[r][:0]
    frame = _predictions_frame(variant, prob.test_ids, cols_k, scores_k, prob.label_ids)
    log.info(
        "train: variant %s: %d features, train %.1fs, predict %.1fs",
        variant,
        inp.n_features,
        train_s,
        predict_s,
    )
    return frame, {
        "train_s": round(train_s, 3),
        "predict_s": round(predict_s, 3),
        "features_s": round(inp.prep_s, 3),
        "n_features": inp.n_features,
        "n_labels_trained": len(prob.label_ids),
    }


def _publish_predictions(spark, paths, pred_frames) -> None:
    """Write and publish ``predictions`` (partitioned by ``variant``) from the driver's frames:
    by pyarrow where it reaches the run root (:func:`pina_spark.storage.write_arrow`), so the rows
    never travel inside Spark's tasks (they did through ``createDataFrame``: 12 MB tasks at 100k
    products, 12 times Spark's recommended size), else through Spark."""
    import pandas as pd
    import pyarrow as pa

    pdf = pd.concat(pred_frames, ignore_index=True)
    schema = pa.schema(
        [
            (storage.INSTANCE_ID, pa.string()),
            (storage.LABEL_IDS, pa.list_(pa.string())),
            (storage.SCORES, pa.list_(pa.float32())),
            (storage.VARIANT, pa.string()),
        ]
    )
    tbl = pa.Table.from_pandas(pdf[schema.names], schema=schema, preserve_index=False)
    storage.write_arrow(spark, tbl, paths, storage.PREDICTIONS, partition_by=storage.VARIANT)


def _baseline_matrices(cfg, train, test, has_lab):
    """tf-idf (PECOS Preprocessor, ``pretrain.tfidf`` kwargs) fitted on train instance text."""
    from pecos.utils.featurization.text.preprocess import Preprocessor

    kwargs = dict(cfg.pretrain.tfidf)
    if isinstance(kwargs.get("ngram_range"), list):
        kwargs["ngram_range"] = tuple(kwargs["ngram_range"])
    tr_text = [t if isinstance(t, str) else "" for t in train[storage.TEXT].tolist()]
    te_text = [t if isinstance(t, str) else "" for t in test[storage.TEXT].tolist()]
    vec = Preprocessor.train(tr_text, {"type": "tfidf", "kwargs": kwargs})
    X_tr = vec.predict([t for t, h in zip(tr_text, has_lab) if h]).tocsr().astype(np.float32)
    X_te = vec.predict(te_text).tocsr().astype(np.float32)
    X_tr.sort_indices()
    X_te.sort_indices()
    return X_tr, X_te, vec


def save_model(model, vec, label_ids, uri: str) -> None:
    """PECOS model (+ baseline vectorizer, label map) to ``uri`` (a variant's folder inside the
    staging folder of ``downstream_models``); ``_SUCCESS`` written last."""
    start_model_dir(vec, label_ids, uri)
    save_pecos(model, uri)


def start_model_dir(vec, label_ids, uri: str) -> None:
    """A fresh variant folder at ``uri`` with the label map (+ the baseline's vectorizer):
    everything of the folder but the PECOS model (:func:`save_pecos`)."""
    remote = storage.is_remote(uri)
    local = tempfile.mkdtemp(prefix="pina-downstream-") if remote else storage.local_path(uri)
    if not remote and os.path.exists(local):
        import shutil

        shutil.rmtree(local)
    os.makedirs(local, exist_ok=True)
    if vec is not None:
        vec.save(os.path.join(local, "vectorizer"))
    with open(os.path.join(local, "labels.json"), "w") as fh:
        json.dump([str(x) for x in label_ids], fh)
    if remote:
        storage.copy_dir(local, uri)


def save_pecos(model, uri: str) -> None:
    """The PECOS model into the variant folder ``uri`` (``xlinear/`` or ``xtransformer/``), then
    ``_SUCCESS``; driver or executor side."""
    name = type(model).__name__.lower().replace("model", "")
    if storage.is_remote(uri):
        with tempfile.TemporaryDirectory(prefix="pina-downstream-") as local:
            model.save(os.path.join(local, name))
            storage.copy_dir(os.path.join(local, name), storage.join(uri, name))
    else:
        model.save(os.path.join(storage.local_path(uri), name))
    storage.write_bytes(storage.join(uri, "_SUCCESS"), b"")


def read_model_dir(uri: str, is_predict_only: bool = True):
    """``(label_ids, model)`` of a local variant folder of ``downstream_models`` (what
    :func:`start_model_dir` and :func:`save_pecos` wrote): the label map and its XR-Linear model,
    memory-mapped for inference unless ``is_predict_only`` is false (e.g. to read its tree)."""
    from pecos.xmc.xlinear.model import XLinearModel

    local = storage.local_path(uri)
    with open(os.path.join(local, "labels.json")) as fh:
        label_ids = json.load(fh)
    return label_ids, XLinearModel.load(os.path.join(local, "xlinear"), is_predict_only)


def _predictions_frame(variant, test_ids, cols_k, scores_k, label_ids):
    import pandas as pd

    return pd.DataFrame(
        {
            storage.INSTANCE_ID: test_ids,
            storage.LABEL_IDS: [label_ids[c].tolist() for c in cols_k],
            storage.SCORES: [s.astype(np.float32) for s in scores_k],
            storage.VARIANT: variant,
        }
    )
