"""What a variant is trained on: the label problem (Y over train instances, the test ids) and the
variant's feature matrices, aligned to the problem's rows (the driver path and the task path
align the same way).
"""

import dataclasses as dc
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.models.vectorizer import PhiPre, tfidf_texts
from pina_spark.stages.train.fit import label_matrix
from pina_spark.storage.features import read_sparse_width
from pina_spark.storage.features_csr import features_to_csr, read_variant, variant_listing

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- feature loading
def _load_features(spark, feat_uri: str, variant: str):
    """``(instance_ids, csr)`` of every row of one ``features`` variant: with pyarrow where it
    reaches and lists the variant's folder
    (:func:`pina_spark.storage.features_csr.variant_listing`;
    :func:`~pina_spark.storage.features_csr.read_variant`, as a train task reads it), else each
    split through Spark (:func:`pina_spark.storage.features_csr.features_to_csr`), stacked. The
    matrix rows are the same either way; only their order differs, and :func:`align_features`
    orders them.

    Splits are read as stored: which rows are train and which are test is decided by ``nodes``
    (so a tuning run can re-split without rewriting features).
    """
    # no copy through the driver's JVM (Spark's reader holds a whole partition there); an
    # s3:// table the driver's pyarrow cannot list (its credentials are the JVM's) goes to Spark
    listing = variant_listing(feat_uri, variant)
    if listing is not None:
        m = read_variant(feat_uri, variant, read_sparse_width(feat_uri, variant), listing=listing)
        return m.ids, m.X
    return _features_through_spark(spark, feat_uri, variant)


def _features_through_spark(spark, feat_uri: str, variant: str):
    """:func:`_load_features` where pyarrow does not reach the table: each split through
    :func:`pina_spark.storage.features_csr.features_to_csr`, stacked."""
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
    ids: list[str] = []
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


def _align(ids: list[str], X, wanted: list[str]):
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
    train_ids: list[str]
    test_ids: list[str]
    train_text: list[str]
    test_text: list[str]


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
    no_feat_rows: tuple[int, ...]
    prep_s: float
    n_features: int

    def without_matrices(self) -> "VariantInputs":
        """The same facts without ``X_tr`` / ``X_te`` (once they are written for a task)."""
        return dc.replace(self, X_tr=None, X_te=None)


def variant_inputs(spark, cfg, prob: LabelProblem, variant: str, feat_uri: str) -> VariantInputs:
    """The :class:`VariantInputs` of one variant (tf-idf for the baseline, else the
    ``features`` table)."""
    t0 = time.time()
    no_feat_rows: list[int] = []
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
    ids: list[str], X, train_ids: list[str], test_ids: list[str], variant: str = "?"
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


def _baseline_matrices(cfg, train, test, has_lab):
    """tf-idf fitted on train instance text: Phi_stat's fit (:meth:`PhiPre.fit_tfidf`,
    ``pretrain.tfidf`` kwargs), and its text rule for the rows it then predicts."""
    # the same text rule as Phi_stat's tf-idf (pina_spark.models.vectorizer.tfidf_texts)
    tr_text = tfidf_texts([t if isinstance(t, str) else "" for t in train[storage.TEXT].tolist()])
    te_text = tfidf_texts([t if isinstance(t, str) else "" for t in test[storage.TEXT].tolist()])
    vec = PhiPre.fit_tfidf(tr_text, cfg.pretrain)
    X_tr = vec.predict([t for t, h in zip(tr_text, has_lab) if h]).tocsr().astype(np.float32)
    X_te = vec.predict(te_text).tocsr().astype(np.float32)
    X_tr.sort_indices()
    X_te.sort_indices()
    return X_tr, X_te, vec
