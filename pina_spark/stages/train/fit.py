"""Fitting and predicting one downstream model: XR-Linear (PECOS) or XR-Transformer, and the
top-k of a score matrix. Used by the driver path (:mod:`.stage`) and the task path
(:mod:`.tasks`) alike, so both fit the same model.
"""

import os
import time
from collections.abc import Sequence

import numpy as np


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


def topk_from_csr(P, k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
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
