"""Phi_pre = [Phi_dnn ; Phi_stat]: the shared text vectorizer of pretraining and inference.

``Phi_pre(x) = [w * dnn(x)/||dnn(x)|| ; (1 - w) * tfidf(x)/||tfidf(x)||] / ||.||`` with
``w = dense_weight`` (docs/design.md). Phi_stat is a PECOS tf-idf ``Preprocessor`` fitted on the
texts of every pretraining input row (train instance text and label text); Phi_dnn is an
:mod:`pina_spark.models.encoders` encoder. An all-empty text gives an all-zero row (never NaN).

Dense and sparse parts of one call always describe the same texts in the same order (both are
computed from the one ``texts`` list given).

Folder layout written by :meth:`PhiPre.save` (local path or ``s3://``)::

    tfidf/          PECOS Preprocessor.save
    encoder.json    kind, path, max_length, dense_dim, dense_weight, sparse_dim
    encoder/        kinds hf, contrastive and xtransformer: the encoder's model folder
                    (encoder.json path "encoder", relative); minilm is loaded from the
                    installed wheel

Example::

    phi = PhiPre.fit(["tag one", "an article about tags"], cfg.pretrain)
    dense, sparse = phi.transform(["an article"])
    X = phi.features(["an article"])  # [dense, sparse]: the input of g
"""

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark import storage

log = logging.getLogger(__name__)

__all__ = [
    "PhiPre",
    "combine",
    "stack_features",
    "tfidf_texts",
    "ENCODER_JSON",
    "TFIDF_DIR",
    "ENCODER_DIR",
]

ENCODER_JSON = "encoder.json"
TFIDF_DIR = "tfidf"
ENCODER_DIR = "encoder"
#: encoder kinds whose model folder is copied into ``<vectorizer>/encoder`` (minilm comes from the
#: installed wheel on every machine)
SHIPPED_KINDS = ("hf", "contrastive", "xtransformer")


def _clean(texts: Sequence[str | None]):
    return ["" if t is None else str(t) for t in texts]


#: every whitespace character but the ASCII space (tab, newline, CR, NBSP, U+2028, ...)
_OTHER_WHITESPACE = re.compile(r"[^\S ]")


def tfidf_texts(texts: Sequence[str | None]) -> list[str]:
    r"""Texts as PECOS' tf-idf tokenizer must get them, at fit and transform time alike: it
    splits on the ASCII space alone, so any other whitespace (a tab, a line break, the no-break
    space of real product titles) would glue two words into one token, and a token with a line
    break does not survive the vocabulary file. Each such character becomes a space; texts
    without one are unchanged.

    Examples
    --------
    >>> tfidf_texts(["Butter Pecan\xa0Gelato", "caf\u00e9\nsecond\tline", None, "a  b"])
    ['Butter Pecan Gelato', 'café second line', '', 'a  b']
    """
    return [_OTHER_WHITESPACE.sub(" ", t) for t in _clean(texts)]


def combine(dnn: np.ndarray, tfidf, dense_weight: float):
    """Weight and jointly normalise the two parts of Phi_pre.

    Parameters
    ----------
    dnn : np.ndarray
        ``(n, D)`` dense encoder rows (any norm; re-normalised here).
    tfidf : scipy.sparse matrix
        ``(n, S)`` tf-idf rows (any norm; re-normalised here).
    dense_weight : float
        ``w`` in ``[0, 1]``.

    Returns
    -------
    (np.ndarray float32 (n, D), scipy.sparse.csr_matrix float32 (n, S), sorted indices)

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> d, s = combine(np.array([[3.0, 4.0], [0, 0]]), sp.csr_matrix([[1.0], [0.0]]), 0.5)
    >>> np.round(d.astype(float), 4).tolist(), np.round(s.toarray().astype(float), 4).tolist()
    ([[0.4243, 0.5657], [0.0, 0.0]], [[0.7071], [0.0]])
    """
    import scipy.sparse as sp

    w = float(dense_weight)
    dnn = np.asarray(dnn, dtype=np.float64)
    dn = np.linalg.norm(dnn, axis=1)
    dense = np.divide(w * dnn, dn[:, None], out=np.zeros_like(dnn), where=dn[:, None] > 0)
    sparse = sp.csr_matrix(tfidf, dtype=np.float64, copy=True)
    sn = np.sqrt(np.asarray(sparse.multiply(sparse).sum(axis=1)).ravel())
    scale = np.divide(1.0 - w, sn, out=np.zeros_like(sn), where=sn > 0)
    sparse = sp.diags(scale).dot(sparse).tocsr()
    total = np.sqrt(
        (dense**2).sum(axis=1) + np.asarray(sparse.multiply(sparse).sum(axis=1)).ravel()
    )
    inv = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
    dense = (dense * inv[:, None]).astype(np.float32)
    sparse = sp.diags(inv).dot(sparse).tocsr().astype(np.float32)
    sparse.eliminate_zeros()
    sparse.sort_indices()
    return dense, sparse


class PhiPre:
    """The fitted vectorizer Phi_pre = [Phi_dnn ; Phi_stat].

    Attributes
    ----------
    preprocessor : pecos Preprocessor
        The tf-idf part.
    encoder : pina_spark.models.encoders.Encoder
        The dense part.
    dense_weight : float
        ``w``.
    dense_dim, sparse_dim : int
        ``D`` and ``S``.

    Example::

        phi = PhiPre.fit(texts, cfg.pretrain)
        phi.save("s3://bucket/run/models/vectorizer")
        phi = PhiPre.load("s3://bucket/run/models/vectorizer", device="cuda")
    """

    def __init__(
        self,
        preprocessor,
        encoder,
        dense_weight: float = 0.5,
        encoder_dir: str | None = None,
        tfidf_config: dict | None = None,
    ):
        self.preprocessor = preprocessor
        self.encoder = encoder
        self.dense_weight = float(dense_weight)
        self.encoder_dir = encoder_dir  # local folder of a fine-tuned encoder to ship with save()
        self.tfidf_config = dict(tfidf_config or {})
        self.tfidf_threads = -1
        self.dense_dim = int(encoder.dim)
        self.sparse_dim = int(self._tfidf_dim())

    # ------------------------------------------------------------------ construction
    @staticmethod
    def fit_tfidf(texts: Sequence[str | None], pretrain_cfg):
        """Fit only Phi_stat: the PECOS tf-idf ``Preprocessor`` (settings ``pretrain_cfg.tfidf``).

        Example::

            pre = PhiPre.fit_tfidf(["a b", "b c"], PretrainConfig(tfidf={}))
        """
        from pecos.utils.featurization.text.preprocess import Preprocessor

        texts = tfidf_texts(texts)
        if not texts:
            raise ValueError("PhiPre.fit: no texts given")
        t0 = time.time()
        pre = Preprocessor.train(texts, {"type": "tfidf", "kwargs": _tfidf_kwargs(pretrain_cfg)})
        log.info("tf-idf fitted on %d texts in %.1fs", len(texts), time.time() - t0)
        return pre

    @classmethod
    def fit(
        cls,
        texts: Sequence[str | None],
        pretrain_cfg,
        encoder=None,
        encoder_dir: str | None = None,
        device: str = "cpu",
        preprocessor=None,
    ) -> "PhiPre":
        """Fit the tf-idf on ``texts`` (every pretraining input row) and attach the encoder.

        Parameters
        ----------
        texts : sequence of str
            Texts of ALL pretraining input rows (instances and labels, union of variants).
        pretrain_cfg : config.PretrainConfig
            ``tfidf``, ``encoder``, ``encoder_path``, ``max_length``, ``dense_weight``.
        encoder : encoders.Encoder, optional
            A ready encoder (the pretrain stage passes the fine-tuned XR-Transformer encoder);
            default: built from ``pretrain_cfg.encoder`` (``minilm`` or ``hf``).
        encoder_dir : str, optional
            Local folder of ``encoder`` to copy into the saved vectorizer (kind xtransformer).
        device : str
            Device of the default encoder.
        preprocessor : pecos Preprocessor, optional
            An already fitted tf-idf (from :meth:`fit_tfidf` on the same texts).

        Example::

            phi = PhiPre.fit(["a b", "b c"], PretrainConfig())
        """
        from pina_spark.models.encoders import load_encoder

        pre = preprocessor if preprocessor is not None else cls.fit_tfidf(texts, pretrain_cfg)
        if encoder is None:
            if pretrain_cfg.encoder in ("xtransformer", "contrastive"):
                raise ValueError(
                    f"PhiPre.fit: encoder {pretrain_cfg.encoder!r} must be "
                    f"fine-tuned first (pretrain.run does it) and passed as "
                    f"encoder="
                )
            path = pretrain_cfg.encoder_path if pretrain_cfg.encoder == "hf" else None
            encoder = load_encoder(
                {"kind": pretrain_cfg.encoder, "path": path, "max_length": pretrain_cfg.max_length},
                device=device,
            )
        return cls(
            pre,
            encoder,
            pretrain_cfg.dense_weight,
            encoder_dir=encoder_dir,
            tfidf_config=_tfidf_kwargs(pretrain_cfg),
        )

    def _tfidf_dim(self) -> int:
        return int(self.preprocessor.predict([""]).shape[1])

    def spec(self) -> dict[str, Any]:
        """The ``encoder.json`` contents."""
        enc = dict(self.encoder.spec())
        if enc["kind"] in SHIPPED_KINDS:
            enc["path"] = ENCODER_DIR  # relative to the vectorizer folder (copied by save)
        enc.update(
            {
                "dense_dim": self.dense_dim,
                "dense_weight": self.dense_weight,
                "sparse_dim": self.sparse_dim,
                "tfidf": _jsonable(self.tfidf_config),
            }
        )
        return enc

    def save(self, dir_uri: str) -> None:
        """Write the vectorizer to ``dir_uri`` (local or ``s3://``), built in a local temp dir.

        Example::

            phi.save("/tmp/run/models/vectorizer")
        """
        tmp = tempfile.mkdtemp(prefix="pina-vectorizer-")
        try:
            self.preprocessor.save(os.path.join(tmp, TFIDF_DIR))
            if self.encoder.kind in SHIPPED_KINDS:
                src = self.encoder_dir or getattr(self.encoder, "local_dir", None)
                if not src or not os.path.isdir(src):
                    raise FileNotFoundError(
                        f"PhiPre.save: local folder of the {self.encoder.kind}"
                        f" encoder not found ({src!r})"
                    )
                shutil.copytree(
                    src,
                    os.path.join(tmp, ENCODER_DIR),
                    ignore=shutil.ignore_patterns(".pina_complete"),
                )
            with open(os.path.join(tmp, ENCODER_JSON), "w") as fh:
                json.dump(self.spec(), fh, indent=1, sort_keys=True)
            storage.copy_dir(tmp, dir_uri)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info(
            "vectorizer saved to %s (D=%d, S=%d, encoder %s)",
            dir_uri,
            self.dense_dim,
            self.sparse_dim,
            self.encoder.kind,
        )

    @classmethod
    def load(cls, dir_uri: str, device: str = "cpu") -> "PhiPre":
        """Load a saved vectorizer (remote folders are cached locally once per machine).

        Only what :meth:`save` writes is loaded, by loaders that let no file choose code
        (:mod:`pina_spark.models.safe_load`): a tf-idf of another PECOS type, or an encoder
        ``path`` other than the folder's own ``encoder/``, is refused
        (:class:`~pina_spark.runtime.ModelLoadError` naming the file).

        Example::

            phi = PhiPre.load("/tmp/run/models/vectorizer")
            phi.dense_dim  # 384
        """
        from pina_spark.models.encoders import load_encoder, resolve_local
        from pina_spark.models.safe_load import load_tfidf

        local = resolve_local(dir_uri)
        spec_path = os.path.join(local, ENCODER_JSON)
        if not os.path.exists(spec_path):
            raise FileNotFoundError(f"{dir_uri}: no {ENCODER_JSON} (not a saved PhiPre folder)")
        with open(spec_path) as fh:
            spec = json.load(fh)
        _check_encoder_path(spec, spec_path)
        pre = load_tfidf(os.path.join(local, TFIDF_DIR))
        enc = load_encoder(spec, device=device, base_dir=local)
        phi = cls(
            pre,
            enc,
            spec.get("dense_weight", 0.5),
            encoder_dir=os.path.join(local, ENCODER_DIR) if spec["kind"] in SHIPPED_KINDS else None,
            tfidf_config=spec.get("tfidf"),
        )
        if "sparse_dim" in spec and int(spec["sparse_dim"]) != phi.sparse_dim:
            raise ValueError(
                f"{dir_uri}: sparse_dim {spec['sparse_dim']} in {ENCODER_JSON} but "
                f"the tf-idf gives {phi.sparse_dim}"
            )
        return phi

    # ------------------------------------------------------------------ transform
    def tfidf(self, texts: Sequence[str | None]):
        """Raw Phi_stat rows (PECOS tf-idf, before weighting), csr float32, sorted indices."""
        import scipy.sparse as sp

        texts = tfidf_texts(texts)
        if not texts:
            return sp.csr_matrix((0, self.sparse_dim), dtype=np.float32)
        m = self.preprocessor.predict(texts, threads=self.tfidf_threads).tocsr().astype(np.float32)
        m.sort_indices()
        return m

    def transform(
        self, texts: Sequence[str | None], batch_size: int = 128
    ) -> tuple[np.ndarray, Any]:
        """Phi_pre of ``texts`` as (dense ``(n, D)`` float32, sparse csr ``(n, S)`` float32).

        Concatenating both parts gives unit-norm rows (or zero rows for empty text).

        Example::

            dense, sparse = phi.transform(["a title", ""])
            float((dense[0] ** 2).sum() + sparse[0].multiply(sparse[0]).sum())  # 1.0
        """
        import scipy.sparse as sp

        texts = _clean(texts)
        # a part with weight 0 contributes exactly zeros: skip computing it (w = 0 is the cheap
        # tf-idf-only Phi_pre, w = 1 the dense-only one); the result is the same either way
        if self.dense_weight > 0:
            dnn = self.encoder.encode(texts, batch_size=batch_size)
        else:
            dnn = np.zeros((len(texts), self.dense_dim), dtype=np.float32)
        if self.dense_weight < 1:
            tf = self.tfidf(texts)
        else:
            tf = sp.csr_matrix((len(texts), self.sparse_dim), dtype=np.float32)
        return combine(dnn, tf, self.dense_weight)

    def features(self, texts: Sequence[str | None], batch_size: int = 128):
        """``hstack([dense, sparse])``: X for g (csr float32, dense block first, sorted indices).

        Example::

            phi.features(["a title"]).shape == (1, phi.dense_dim + phi.sparse_dim)  # True
        """
        dense, sparse = self.transform(texts, batch_size=batch_size)
        return stack_features(dense, sparse)


def stack_features(dense: np.ndarray, sparse):
    """``hstack([dense, sparse])`` as csr float32 with sorted indices.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> stack_features(np.ones((1, 2), np.float32), sp.csr_matrix(np.ones((1, 1)))).toarray()
    array([[1., 1., 1.]], dtype=float32)
    """
    import scipy.sparse as sp

    X = sp.hstack(
        [sp.csr_matrix(np.asarray(dense, dtype=np.float32)), sparse], format="csr"
    ).astype(np.float32)
    X.sort_indices()
    return X


def _check_encoder_path(spec: Any, spec_path: str) -> None:
    """The encoder of a saved vectorizer is inside it (``encoder/``, :meth:`PhiPre.save`) or
    the installed MiniLM (``path: null``); any other ``path`` would load a folder that nothing
    checked."""
    from pina_spark.runtime import ModelLoadError

    if not isinstance(spec, dict):
        raise ModelLoadError(f"model artifact {spec_path}: not an encoder spec")
    kind = spec.get("kind")
    want = ENCODER_DIR if kind in SHIPPED_KINDS else None
    if spec.get("path") != want:
        raise ModelLoadError(
            f"model artifact {spec_path}: encoder kind {kind!r} with path "
            f"{spec.get('path')!r}; a saved vectorizer's encoder is {want!r} (inside the "
            f"folder, checked with it)"
        )


def _tfidf_kwargs(pretrain_cfg) -> dict[str, Any]:
    kw = dict(pretrain_cfg.tfidf)
    if "ngram_range" in kw:
        kw["ngram_range"] = tuple(kw["ngram_range"])
    return kw


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
