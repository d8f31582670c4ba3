"""The train stage's variants as Spark tasks (``train.train_on: executors``; ``auto`` on a
cluster).

The downstream models of the variants are independent of each other. The driver decides
everything once (:class:`~pina_spark.downstream.VariantInputs` per variant, the label space, the
folders), writes each variant's matrices as one ``.npz`` under a scratch folder of the run, and
starts the variant folder (label map, the baseline's vectorizer). One Spark job then runs one task
per variant: the task reads its ``.npz``, trains XR-Linear on its ``spark.task.cpus`` threads
(:func:`pina_spark.downstream.fit_predict_xlinear`, the function the driver path calls), writes
the PECOS model into the variant folder and hands back the test rows' top-k. The driver builds
the predictions and publishes the models folder as before. Same models, same predictions as the
driver path (``tests/test_downstream.py``).

Examples
--------
>>> fit_on_executors(spark, cfg, prob, inputs, models_dir, scratch)   # doctest: +SKIP
{'baseline': (frame, {'train_s': 2.1, ...}), ...}
"""

import dataclasses as dc
import json
import logging
from typing import Any, Dict, Iterable, List, Sequence, Tuple

import numpy as np

from . import io, npz, runtime
from .progress import heartbeat

log = logging.getLogger(__name__)

__all__ = ["VariantTask", "fit_on_executors"]


@dc.dataclass(frozen=True)
class VariantTask:
    """What one variant's task needs (the executor function closes over a tuple of these).

    Attributes:
        variant: its name.
        inputs: URI of its ``.npz`` (``X_tr``, ``Y``, ``X_te``).
        model_dir: the variant folder in the staging folder of ``downstream_models``.
        train: ``train`` config section as a plain dict (rebuilt on the executor).
    """

    variant: str
    inputs: str
    model_dir: str
    train: Dict[str, Any]


def _fit_work(tasks: Sequence[VariantTask]):
    """Driver side: the executor function of the variant tasks (``i`` -> ``tasks[i]``)."""

    def work(i: int, threads: int) -> Dict[str, Any]:
        from . import downstream
        from .config import TrainConfig

        t = tasks[i]
        raw = io.read_inputs_of(t.inputs, f"variant {t.variant}")
        mats, _ = npz.loads(raw, ["X_tr", "Y", "X_te"])
        tcfg = TrainConfig.from_dict(t.train, prefix="train.")
        model, cols_k, scores_k, train_s, predict_s = downstream.fit_predict_xlinear(
            mats["X_tr"], mats["Y"], mats["X_te"], tcfg, threads=threads
        )
        downstream.save_pecos(model, t.model_dir)
        return {"topk": _pack_topk(cols_k, scores_k), "secs": json.dumps([train_s, predict_s])}

    return work


def fit_on_executors(
    spark, cfg, prob, inputs: Iterable[Tuple[str, Any]], models_dir: str, scratch: str
) -> Dict[str, Tuple[Any, Dict[str, Any]]]:
    """Train the variants of ``inputs`` (``(variant, VariantInputs)`` pairs) as Spark tasks,
    one each. Each variant's matrices are written to its ``.npz`` as soon as they come and
    dropped, so the driver holds one variant's matrices at a time (``inputs`` may be a
    generator that builds them).

    Returns variant -> ``(predictions frame, statistics)`` in the order of ``inputs``, as
    :func:`pina_spark.downstream.variant_result` gives them. ``scratch``: a staging URI every
    executor reaches; deleted afterwards.
    """
    from . import downstream

    kept: Dict[str, Any] = {}
    try:
        with heartbeat("downstream models as Spark tasks"):
            tasks: List[VariantTask] = []
            for v, inp in inputs:
                uri = f"{scratch}/{v}.npz"
                io.write_bytes(
                    uri, npz.dumps({"X_tr": inp.X_tr, "Y": prob.Y, "X_te": inp.X_te}, {})
                )
                model_dir = f"{models_dir}/{v}"
                downstream.start_model_dir(inp.vec, prob.label_ids, model_dir)
                tasks.append(VariantTask(v, uri, model_dir, cfg.train.to_dict()))
                kept[v] = inp.without_matrices()
                del inp
            if not tasks:
                return {}
            log.info("train: %d variants as Spark tasks", len(tasks))
            got = runtime.one_task_each(
                spark, len(tasks), _fit_work(tasks), "topk binary, secs string"
            )
    finally:
        io.delete_path(spark, scratch)
    out: Dict[str, Tuple[Any, Dict[str, Any]]] = {}
    for i, t in enumerate(tasks):
        cols_k, scores_k = _unpack_topk(bytes(got[i]["topk"]))
        train_s, predict_s = json.loads(got[i]["secs"])
        out[t.variant] = downstream.variant_result(
            prob, t.variant, kept[t.variant], cols_k, scores_k, train_s, predict_s
        )
    return out


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
