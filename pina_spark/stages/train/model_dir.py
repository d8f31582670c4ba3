"""A variant's folder under ``downstream_models/``: ``labels.json`` (column -> label node_id),
``vectorizer/`` for the baseline, and the PECOS model (``xlinear/``); written here and read
back here alone.
"""

import json
import os
import tempfile

from pina_spark import storage


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
