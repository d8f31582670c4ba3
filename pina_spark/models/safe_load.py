"""Loading the model files this project writes without letting a file choose code to run.

A model folder comes from a run root, which whoever can write that root can change. The
libraries' own loaders trust the folder: PECOS' ``Preprocessor.load`` picks a vectorizer class
from ``config.json`` (two of them unpickle ``vectorizer.pkl``), and PECOS'
``TransformerMatcher.load`` reads the label head ``text_model`` with
``torch.load(weights_only=False)``. The loaders here read only what the project writes:

- :func:`load_tfidf`: the PECOS tf-idf (``type: tfidf``, a C++ text format, no pickle); its
  ``config.json`` is read here and any other type is refused before PECOS sees the folder;
- :func:`load_torch_module`: a whole pickled torch module (PECOS' label head) read with
  ``weights_only=True``, only the module classes named allowed;
- :func:`load_xtransformer`: an XR-Transformer text encoder assembled from those parts
  (Hugging Face weights with ``weights_only=True``, no remote code);
- :data:`HF_LOAD`: the keyword arguments of every Hugging Face ``from_pretrained`` call on a
  model folder (no remote code, torch weights with ``weights_only``; safetensors when present).

A refused file raises :class:`~pina_spark.runtime.checksums.ModelLoadError` naming it. Heavy
libraries are imported inside the functions.

Example::

    pre = load_tfidf("/run/vectorizer/tfidf")
    pre.predict(["a title"]).shape
"""

import json
import os
from collections.abc import Sequence
from typing import Any

from pina_spark.runtime.checksums import ModelLoadError

__all__ = ["HF_LOAD", "TFIDF_TYPE", "load_tfidf", "load_torch_module", "load_xtransformer"]

#: the one PECOS vectorizer type the project writes (``PhiPre.fit_tfidf``, the baseline)
TFIDF_TYPE = "tfidf"
#: keyword arguments of ``from_pretrained`` on a model folder: no code from the folder, torch
#: weights through torch's restricted unpickler (the default of transformers 4.49, said here)
HF_LOAD: dict[str, Any] = {"trust_remote_code": False, "weights_only": True}


def load_tfidf(folder: str):
    """A PECOS ``Preprocessor`` of type ``tfidf`` saved in ``folder``; any other type (PECOS'
    ``sklearntfidf`` and ``sklearnhashing`` unpickle ``vectorizer.pkl``) or a folder without a
    readable ``config.json`` is refused before any other file is opened.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "config.json"), "w").write('{"type": "sklearntfidf"}')
    >>> load_tfidf(d)                                       # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.runtime.checksums.ModelLoadError: model artifact .../config.json: vectorizer ...
    """
    cfg_path = os.path.join(folder, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model artifact {cfg_path}: unreadable ({type(e).__name__}: {e})"
        ) from e
    kind = config.get("type") if isinstance(config, dict) else None
    if kind != TFIDF_TYPE:
        raise ModelLoadError(
            f"model artifact {cfg_path}: vectorizer type {kind!r} is not {TFIDF_TYPE!r}, the only "
            f"one this project writes (other PECOS types unpickle files); refusing to load it"
        )
    from pecos.utils.featurization.text.preprocess import Preprocessor
    from pecos.utils.featurization.text.vectorizers import Tfidf, Vectorizer

    # Tfidf.load, not Vectorizer.load: the class is chosen here, not by the folder
    return Preprocessor(Vectorizer(config, Tfidf.load(folder)))


def load_torch_module(path: str, allowed: Sequence[type]):
    """A torch module saved whole (``torch.save(module)``) read with ``weights_only=True``:
    tensors, containers and the classes in ``allowed`` only, so a planted pickle that names any
    other callable is refused (:class:`ModelLoadError` naming ``path``) without running it."""
    import torch

    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelLoadError(
            f"model artifact {path}: refused by torch's weights-only loader "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from e


def load_xtransformer(folder: str):
    """A PECOS ``XTransformer`` saved in ``folder`` (by ``XTransformer.save``), read part by part
    as PECOS' ``XTransformer.load`` does, except that the label head ``text_model`` is read with
    :func:`load_torch_module` and the transformer with :data:`HF_LOAD`; the linear models
    (``concat_model``, ``C.npz``) are PECOS' pickle-free formats.

    Example::

        xt = load_xtransformer("/run/vectorizer/encoder")
        xt.text_encoder.text_encoder.config.hidden_size  # 384
    """
    import numpy as np
    import scipy.sparse as smat
    import torch
    from pecos.utils import smat_util
    from pecos.xmc import MLModel
    from pecos.xmc.xlinear.model import XLinearModel
    from pecos.xmc.xtransformer.matcher import TransformerMatcher
    from pecos.xmc.xtransformer.model import XTransformer
    from pecos.xmc.xtransformer.network import ENCODER_CLASSES, TransformerLinearXMCHead

    root = os.path.join(folder, "text_encoder")
    encoder_dir = os.path.join(root, "text_encoder")
    config_path = os.path.join(encoder_dir, "config.json")
    try:
        with open(config_path, encoding="utf-8") as fh:
            model_type = json.load(fh)["model_type"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelLoadError(f"model artifact {config_path}: unreadable ({e!r})") from e
    if model_type not in ENCODER_CLASSES:
        raise ModelLoadError(
            f"model artifact {config_path}: model_type {model_type!r} is not one of PECOS' "
            f"{sorted(ENCODER_CLASSES)}"
        )
    dnn = ENCODER_CLASSES[model_type]
    param: dict[str, Any] = {}
    if os.path.exists(os.path.join(root, "param.json")):
        with open(os.path.join(root, "param.json"), encoding="utf-8") as fh:
            param = json.load(fh)
    config = dnn.config_class.from_pretrained(encoder_dir, trust_remote_code=False)
    text_encoder = dnn.model_class.from_pretrained(encoder_dir, config=config, **HF_LOAD)
    tokenizer = dnn.tokenizer_class.from_pretrained(
        os.path.join(root, "text_tokenizer"), trust_remote_code=False
    )
    head = os.path.join(root, "text_model")
    text_model = (
        load_torch_module(head, (TransformerLinearXMCHead, torch.nn.Embedding))
        if os.path.exists(head)
        else None
    )
    if text_model is not None and not isinstance(text_model, TransformerLinearXMCHead):
        raise ModelLoadError(f"model artifact {head}: not a PECOS label head")
    c_path = os.path.join(root, "C.npz")
    C = (
        smat_util.load_matrix(c_path)
        if os.path.exists(c_path)
        else smat.csr_matrix(np.ones((config.num_labels, 1), dtype=np.float32))
    )
    inner = os.path.join(root, "concat_model")
    matcher = TransformerMatcher(
        text_encoder,
        tokenizer,
        text_model=text_model,
        C=C,
        concat_model=MLModel.load(inner) if os.path.exists(inner) else None,
        train_params=TransformerMatcher.TrainParams.from_dict(param.get("train_params")),
        pred_params=TransformerMatcher.PredParams.from_dict(param.get("pred_params")),
    )
    outer = os.path.join(folder, "concat_model")
    ranker = XLinearModel.load(outer) if os.path.isdir(outer) else None
    return XTransformer(matcher, ranker)
