"""The train stage's variants as Spark tasks (``train.train_on: executors``; ``auto`` on a
cluster).

The downstream models of the variants are independent of each other. The driver decides
everything once (the label space, the folders, where each variant's matrices come from) and
starts the variant folders (label map, the baseline's vectorizer). A variant's matrices reach its
task one of two ways:

* :class:`FeaturesRead` (the ``features`` variants, where the driver's pyarrow reaches and lists
  the table: :func:`~pina_spark.storage.features_csr.variant_listing`): the driver
  writes the problem once (Y and the train / test ids, ``problem.npz``); the task reads its
  variant's rows of ``features`` itself (:func:`~pina_spark.storage.features_csr.read_variant`)
  and aligns them (:func:`~pina_spark.stages.train.inputs.align_features`, as the driver path
  does). The driver never holds a feature matrix.
* :class:`~pina_spark.stages.train.inputs.VariantInputs` (the baseline's tf-idf, or tables
  pyarrow cannot read): the driver writes the matrices as one ``.npz``, one variant at a time.

One Spark job then runs one task per variant: it trains XR-Linear on its ``spark.task.cpus``
threads (:func:`~pina_spark.stages.train.fit.fit_predict_xlinear`, the function the driver path
calls), writes the PECOS model into the variant folder and hands back the test rows' top-k. The
driver builds the predictions and publishes the models folder as before. Same models, same
predictions as the driver path (``tests/test_downstream.py``).

Example::

    fit_on_executors(spark, cfg, prob, inputs, models_dir, scratch)
    # {'baseline': (frame, {'train_s': 2.1, ...}), ...}
"""

import dataclasses as dc
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pina_spark import runtime, storage
from pina_spark.runtime.progress import heartbeat
from pina_spark.stages.train.fit import fit_predict_xlinear
from pina_spark.stages.train.inputs import VariantInputs, align_features, warn_missing
from pina_spark.stages.train.model_dir import save_pecos, start_model_dir
from pina_spark.stages.train.results import variant_result
from pina_spark.storage import npz

log = logging.getLogger(__name__)

__all__ = ["FeaturesRead", "VariantTask", "fit_on_executors"]


@dc.dataclass(frozen=True)
class FeaturesRead:
    """A variant whose task reads its own rows of ``features`` (the driver builds no matrix).

    Attributes:
        uri: the published ``features`` table.
        sparse_width: the variant's sparse width (its ``_pina_features.json``; ``None``: max
            index + 1, as the driver's reader does).
    """

    uri: str
    sparse_width: int | None


@dc.dataclass(frozen=True)
class VariantTask:
    """What one variant's task needs (the executor function closes over a tuple of these).

    A task reads its matrices one of two ways, and exactly one is set: ``matrices``, or
    ``problem`` with ``features``.

    Attributes:
        variant: its name.
        model_dir: the variant folder in the staging folder of ``downstream_models``.
        train: ``train`` config section as a plain dict (rebuilt on the executor).
        matrices: URI of the variant's ``.npz`` (``X_tr``, ``Y``, ``X_te``), written by the driver.
        problem: URI of the ``.npz`` every features task shares (``Y``, the train and test ids).
        features: where the task reads its rows of ``features`` (:class:`FeaturesRead`).

    >>> VariantTask("pina", "m/pina", {}, matrices="s/pina.npz").matrices
    's/pina.npz'
    >>> VariantTask("pina", "m/pina", {}, problem="s/problem.npz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: variant pina: give matrices, or problem with features (got matrices=None, ...
    """

    variant: str
    model_dir: str
    train: dict[str, Any]
    matrices: str | None = None
    problem: str | None = None
    features: FeaturesRead | None = None

    def __post_init__(self):
        given = (self.matrices is not None, self.problem is not None, self.features is not None)
        if given not in ((True, False, False), (False, True, True)):
            raise ValueError(
                f"variant {self.variant}: give matrices, or problem with features (got "
                f"matrices={self.matrices!r}, problem={self.problem!r}, features={self.features!r})"
            )


def _fit_work(tasks: Sequence[VariantTask]):
    """Driver side: the executor function of the variant tasks (``i`` -> ``tasks[i]``)."""

    def work(i: int, threads: int) -> dict[str, Any]:
        from pina_spark.config import TrainConfig

        t = tasks[i]
        facts: dict[str, Any] = {}
        if t.matrices is not None:
            raw = storage.read_inputs_of(t.matrices, f"variant {t.variant}")
            mats, _ = npz.loads(raw, ["X_tr", "Y", "X_te"])
            X_tr, Y, X_te = mats["X_tr"], mats["Y"], mats["X_te"]
        else:
            from pina_spark.storage.features_csr import read_variant

            assert t.problem is not None and t.features is not None  # VariantTask's check
            raw = storage.read_inputs_of(t.problem, f"variant {t.variant}")
            t0 = time.time()
            mats, arrays = npz.loads(raw, ["Y"])
            Y = mats["Y"]
            m = read_variant(t.features.uri, t.variant, t.features.sparse_width)
            X_tr, X_te, no_feat, missing = align_features(
                m.ids,
                m.X,
                npz.unpack_strings(arrays, "train_ids"),
                npz.unpack_strings(arrays, "test_ids"),
                t.variant,
            )
            del m
            facts = {
                "no_feat_rows": list(no_feat),
                "missing": list(missing),
                "n_features": int(X_tr.shape[1]),
                "prep_s": time.time() - t0,
            }
        tcfg = TrainConfig.from_dict(t.train, prefix="train.")
        model, cols_k, scores_k, train_s, predict_s = fit_predict_xlinear(
            X_tr, Y, X_te, tcfg, threads=threads
        )
        save_pecos(model, t.model_dir)
        return {
            "topk": _pack_topk(cols_k, scores_k),
            "secs": json.dumps([train_s, predict_s]),
            "facts": json.dumps(facts),
        }

    return work


def fit_on_executors(
    spark, cfg, prob, inputs: Iterable[tuple[str, Any]], models_dir: str, scratch: str
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Train the variants of ``inputs`` (``(variant, VariantInputs or FeaturesRead)`` pairs) as
    Spark tasks, one each. A :class:`FeaturesRead` variant's task reads its own features (the
    problem's Y and ids are written once, to ``problem.npz``); a ``VariantInputs`` variant's
    matrices are written to its ``.npz`` as soon as they come and dropped, so the driver holds
    at most one variant's matrices at a time (``inputs`` may be a generator that builds them).

    Returns variant -> ``(predictions frame, statistics)`` in the order of ``inputs``, as
    :func:`~pina_spark.stages.train.results.variant_result` gives them. ``scratch``: a staging URI
    every executor reaches; deleted afterwards.
    """
    kept: dict[str, Any] = {}
    try:
        with heartbeat("downstream models as Spark tasks"):
            tasks: list[VariantTask] = []
            problem_uri, problem_written = f"{scratch}/problem.npz", False
            for v, inp in inputs:
                model_dir = f"{models_dir}/{v}"
                if isinstance(inp, FeaturesRead):
                    if not problem_written:  # once, for every such variant
                        storage.write_bytes(problem_uri, _problem_bytes(prob))
                        problem_written = True
                    start_model_dir(None, prob.label_ids, model_dir)
                    tasks.append(
                        VariantTask(
                            v, model_dir, cfg.train.to_dict(), problem=problem_uri, features=inp
                        )
                    )
                    continue
                uri = f"{scratch}/{v}.npz"
                storage.write_bytes(
                    uri, npz.dumps({"X_tr": inp.X_tr, "Y": prob.Y, "X_te": inp.X_te}, {})
                )
                start_model_dir(inp.vec, prob.label_ids, model_dir)
                tasks.append(VariantTask(v, model_dir, cfg.train.to_dict(), matrices=uri))
                kept[v] = inp.without_matrices()
                del inp
            if not tasks:
                return {}
            log.info("train: %d variants as Spark tasks", len(tasks))
            got = runtime.one_task_each(
                spark, len(tasks), _fit_work(tasks), "topk binary, secs string, facts string"
            )
    finally:
        storage.delete_path(spark, scratch)
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    for i, t in enumerate(tasks):
        cols_k, scores_k = _unpack_topk(bytes(got[i]["topk"]))
        train_s, predict_s = json.loads(got[i]["secs"])
        if t.features is not None:  # what the task found in its features
            facts = json.loads(got[i]["facts"])
            warn_missing(t.variant, facts["missing"])
            kept[t.variant] = VariantInputs(
                None, None, None, tuple(facts["no_feat_rows"]), facts["prep_s"], facts["n_features"]
            )
        out[t.variant] = variant_result(
            prob, t.variant, kept[t.variant], cols_k, scores_k, train_s, predict_s
        )
    return out


def _problem_bytes(prob) -> bytes:
    """The problem every :class:`FeaturesRead` task shares: ``Y`` and the train / test ids in
    matrix order (:class:`pina_spark.stages.train.stage.LabelProblem`)."""
    return npz.dumps(
        {"Y": prob.Y},
        {
            **npz.pack_strings("train_ids", prob.train_ids),
            **npz.pack_strings("test_ids", prob.test_ids),
        },
    )


def _pack_topk(cols_k, scores_k) -> bytes:
    """Per-row top-k lists as one ``.npz`` (offsets + flat arrays)."""
    counts = np.array([len(c) for c in cols_k], dtype=np.int64)
    flat_c = np.concatenate(cols_k).astype(np.int64) if len(cols_k) else np.zeros(0, np.int64)
    flat_s = (
        np.concatenate(scores_k).astype(np.float32) if len(scores_k) else np.zeros(0, np.float32)
    )
    return npz.dumps({}, {"counts": counts, "cols": flat_c, "scores": flat_s})


def _unpack_topk(raw: bytes):
    """The lists :func:`_pack_topk` packed.

    Examples
    --------
    >>> c, s = _unpack_topk(_pack_topk([np.array([3, 1]), np.array([], np.int64)],
    ...                                [np.array([0.9, 0.5]), np.array([])]))
    >>> [x.tolist() for x in c], [x.tolist() for x in s]
    ([[3, 1], []], [[0.8999999761581421, 0.5], []])
    """
    _, a = npz.loads(raw, [])
    ends = np.cumsum(a["counts"])
    starts = ends - a["counts"]
    cols = [a["cols"][s:e] for s, e in zip(starts, ends)]
    scores = [a["scores"][s:e] for s, e in zip(starts, ends)]
    return cols, scores
