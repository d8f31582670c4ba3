"""Train stage: downstream XMC models (PECOS XR-Linear, or XR-Transformer with
``train.model: xtransformer``) for every variant, predictions on test.

Variants (``train.variants``), all trained in one run on the TRAIN split and predicted on the
TEST split with the same ``train.xlinear`` parameters and the same label space:

* ``baseline``: tf-idf of the instance text only (a PECOS ``Preprocessor`` fitted on the *train*
  instance texts, with the ``pretrain.tfidf`` kwargs),
* ``vectorizer_only``, ``pina_naive``, ``pina``: the ``features`` table variants (dense block
  first, then the sparse block, as one CSR with sorted indices).

Modules: :mod:`.fit` (one model's fit and prediction), :mod:`.inputs` (the label problem and
the aligned feature matrices), :mod:`.model_dir` (a variant's model folder), :mod:`.results`
(predictions and statistics), :mod:`.tasks` (the variants as Spark tasks) and this module (the
driver path and :func:`run`).

A variant whose features are missing is skipped with a warning and listed under ``skipped`` in
the stage statistics and in ``predictions/_train_stats.json``.

Label space: the label nodes with at least one *train* instance (a label never seen in train
cannot be predicted by any variant). Train instances without labels are left out of training.

Outputs
-------
* ``<root>/downstream_models/<variant>/`` (PECOS ``xlinear/`` or ``xtransformer/``, plus
  ``vectorizer/`` for baseline, ``labels.json`` = column -> label node_id), written into a
  staging folder and published by the rename swap with ``predictions`` (the models folder
  ``models/`` is pretrain's alone),
* ``<root>/predictions`` partitioned by ``variant``: ``instance_id``, ``label_ids``
  (label node_ids, best first), ``scores``; one row per test instance (an empty list when the
  variant has no features for that instance), top ``train.topk``,
* ``<root>/predictions/_train_stats.json``: ``{"variants": {v: {"train_s": .., "predict_s": ..,
  ...}}, "skipped": {v: reason}}`` (read by the evaluate stage).

The variants' models are independent of each other: ``train.train_on`` (``auto``: executors on a
cluster) trains them as Spark tasks, one per variant (:mod:`pina_spark.stages.train.tasks`), or one
after another on the driver; same models, same predictions. Where the driver's pyarrow reaches and
lists the table (:func:`~pina_spark.storage.features_csr.variant_listing`), the feature matrices
are read with it (:func:`~pina_spark.storage.features_csr.read_variant`): by
the driver for its own fits, and as tasks by each task for its variant, so the driver then holds
no feature matrix (only the baseline's tf-idf is built on the driver). Elsewhere the driver reads
them through Spark (:func:`~pina_spark.storage.features_csr.features_to_csr`: Arrow batches per
partition, no per-row py4j), and hands them to the tasks.
"""

import json
import logging
import time
from typing import Any

from pina_spark import runtime, storage
from pina_spark.config import ConfigError
from pina_spark.config import variants as V
from pina_spark.stages.train import tasks
from pina_spark.stages.train.fit import fit_predict_xlinear, topk_from_csr, train_xtransformer
from pina_spark.stages.train.inputs import (
    LabelProblem,
    VariantInputs,
    label_problem,
    variant_inputs,
)
from pina_spark.stages.train.model_dir import save_model
from pina_spark.stages.train.results import TRAIN_STATS_FILE, variant_result
from pina_spark.stages.train.stats import TrainStats
from pina_spark.storage.features import read_sparse_width, variant_dir
from pina_spark.storage.features_csr import variant_listing

log = logging.getLogger(__name__)


def run(ctx) -> TrainStats:
    """Train every configured variant on train, predict test, publish ``predictions``.

    Example::

        run(ctx).to_dict()  # {'n_train': 800, ..., 'variants': ['baseline', 'pina'], ...}
    """
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    tcfg = cfg.train
    if tcfg.model not in ("xlinear", "xtransformer"):
        raise ConfigError(f"train.model: {tcfg.model!r} is not one of ['xlinear', 'xtransformer']")
    prob = label_problem(spark, paths)
    feat_uri = paths.table(storage.FEATURES)
    feat_ok = storage.is_complete(spark, feat_uri)
    models_dir = paths.staging(storage.DOWNSTREAM_MODELS)
    trained: list[str] = []
    skipped: dict[str, str] = {}
    read_by: str | None = None
    per_variant: dict[str, dict[str, Any]] = {}
    pred_frames = []
    where = "driver" if tcfg.model == "xtransformer" else runtime.fits_where(spark, tcfg.train_on)

    def each_variant(make=lambda v: variant_inputs(spark, cfg, prob, v, feat_uri)):
        """``(variant, make(variant))``, built one at a time as they are consumed."""
        for variant in tcfg.variants:
            if variant != V.BASELINE and (
                not feat_ok or not storage.path_exists(spark, variant_dir(feat_uri, variant))
            ):
                reason = f"no features for variant {variant} in {feat_uri}"
                log.warning("train: skipping variant %s: %s", variant, reason)
                skipped[variant] = reason
                continue
            trained.append(variant)
            yield variant, make(variant)

    if where == "driver":
        for variant, inp in each_variant():  # one variant's matrices held at a time
            frame, per_variant[variant] = _train_variant(
                spark, cfg, prob, variant, inp, f"{models_dir}/{variant}"
            )
            del inp
            pred_frames.append(frame)
    else:
        # decided once, by the rule the driver's own read follows: the tasks read their own
        # features where the driver's pyarrow reaches and lists them (an s3:// table whose
        # credentials are the JVM's is read by the driver, through Spark); executors are taken
        # to share the driver's credentials, as on EMR, where both use the instance profile
        # (the first variant that lists decides: one whose folder is missing is skipped below)
        feature_variants = [v for v in tcfg.variants if v != V.BASELINE] if feat_ok else []
        if feature_variants:
            lists = any(variant_listing(feat_uri, v) is not None for v in feature_variants)
            read_by = "tasks" if lists else "driver"

        def make(v: str):
            if v == V.BASELINE or read_by != "tasks":
                return variant_inputs(spark, cfg, prob, v, feat_uri)
            return tasks.FeaturesRead(feat_uri, read_sparse_width(feat_uri, v))

        log.info(
            "train: the variants as Spark tasks (train.train_on %s)%s",
            tcfg.train_on,
            f", features read by the {read_by}" if read_by else "",
        )
        for variant, (frame, st) in tasks.fit_on_executors(
            spark, cfg, prob, each_variant(make), models_dir, paths.staging("train-fits")
        ).items():
            pred_frames.append(frame)
            per_variant[variant] = st
    if not pred_frames:
        storage.discard_staging(spark, models_dir)
        raise storage.InputError(f"train: no variant could be trained (skipped: {skipped})")
    storage.write_bytes(storage.join(models_dir, "_SUCCESS"), b"")
    storage.publish(spark, models_dir, paths.table(storage.DOWNSTREAM_MODELS))
    _publish_predictions(spark, paths, pred_frames)
    storage.write_bytes(
        paths.table(storage.PREDICTIONS) + "/" + TRAIN_STATS_FILE,
        json.dumps(
            {"variants": per_variant, "skipped": skipped, "model": tcfg.model}, indent=2
        ).encode(),
    )
    return TrainStats(
        n_train=len(prob.train_ids),
        n_test=len(prob.test_ids),
        n_labels_trained=len(prob.label_ids),
        n_train_without_labels=int((~prob.has_lab).sum()),
        variants=trained,
        skipped=skipped,
        train_on=where,
        features_read_by=read_by,
        train_s={v: per_variant[v]["train_s"] for v in trained},
    )


def _train_variant(spark, cfg, prob: LabelProblem, variant: str, inp: VariantInputs, model_uri):
    """Fit one variant on the driver, predict the test rows, save the model: ``(the
    predictions frame, the variant's statistics)``."""
    tcfg = cfg.train
    if tcfg.model == "xtransformer":
        t1 = time.time()
        model = train_xtransformer(prob.train_text, inp.X_tr, prob.Y, cfg)
        train_s = time.time() - t1
        t2 = time.time()
        topk, beam = max(tcfg.topk, 1), max(tcfg.xlinear.beam_size, 1)
        P = model.predict(prob.test_text, X_feat=inp.X_te, only_topk=topk, beam_size=beam)
        cols_k, scores_k = topk_from_csr(P, tcfg.topk)
        predict_s = time.time() - t2
    else:
        model, cols_k, scores_k, train_s, predict_s = fit_predict_xlinear(
            inp.X_tr, prob.Y, inp.X_te, tcfg
        )
    save_model(model, inp.vec, prob.label_ids, model_uri)
    return variant_result(prob, variant, inp, cols_k, scores_k, train_s, predict_s)


def _publish_predictions(spark, paths, pred_frames) -> None:
    """Write and publish ``predictions`` (partitioned by ``variant``) from the driver's frames:
    by pyarrow where it reaches the run root (:func:`pina_spark.storage.write_arrow`), so the rows
    never travel inside Spark's tasks (they did through ``createDataFrame``: 12 MB tasks at 100k
    products, 12 times Spark's recommended size), else through Spark."""
    import pandas as pd
    import pyarrow as pa

    pdf = pd.concat(pred_frames, ignore_index=True)
    schema = pa.schema(
        [
            (storage.INSTANCE_ID, pa.string()),
            (storage.LABEL_IDS, pa.list_(pa.string())),
            (storage.SCORES, pa.list_(pa.float32())),
            (storage.VARIANT, pa.string()),
        ]
    )
    tbl = pa.Table.from_pandas(pdf[schema.names], schema=schema, preserve_index=False)
    storage.write_arrow(spark, tbl, paths, storage.PREDICTIONS, partition_by=storage.VARIANT)
