"""Stage 1a, the vectorizer: fit Phi_pre = [Phi_dnn ; Phi_stat] on the pretraining rows and
publish it as ``<run>/vectorizer``, before anything is encoded.

Inputs: ``graph/pretrain_edges`` (B_pre) and ``nodes``, as driver-side XMC problems
(:func:`pina_spark.models.bpre.load_problems`). Steps, all on the driver and none of them encoding a
row for later use:

- **Phi_stat**: the PECOS tf-idf, fitted once on the texts of the union of every variant's input
  rows (train instances and labels; never a test row: B_pre has none).
- **Phi_dnn**: the frozen encoder (``minilm``, ``hf``), or one fine-tuned on B_pre
  (``contrastive``, ``xtransformer``: :mod:`pina_spark.models.finetune`); a GPU is used where the
  driver has one.
- **Publish**: ``PhiPre.save`` into a local folder with ``vectorizer_card.json`` (what was fitted,
  fine-tuning statistics, times, library versions), then
  :func:`pina_spark.models.artifacts.publish`.

The embed stage then encodes every node exactly once, on the executors, with this folder, and
the pretrain stage trains g from the ``embeddings`` table: the driver encodes nothing.

``run.models`` set to an earlier run: nothing is fitted; the stage checks that the run's
vectorizer folder is complete.

Example::

    from pina_spark.orchestration import pipeline
    run(pipeline.make_context(spark, cfg))
    # VectorizerStats(encoder='minilm', fitted_on_rows=2200, encoded_rows=0, ...)
"""

import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any

from pina_spark import storage
from pina_spark.config import redact
from pina_spark.models import artifacts, bpre, finetune
from pina_spark.stages.vectorizer.stats import VectorizerStats
from pina_spark.storage.manifest import library_versions

log = logging.getLogger(__name__)

__all__ = ["run"]


def run(ctx) -> VectorizerStats:
    """Fit (and fine-tune) the vectorizer on the pretraining rows; publish it."""
    from pina_spark.models.vectorizer import PhiPre

    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    dst = paths.table(storage.VECTORIZER)
    if storage.norm(ctx.models_root) != storage.norm(paths.table(storage.MODELS)):
        vec = artifacts.require_vectorizer(spark, ctx.models_root)
        log.info("vectorizer: run.models is set, reusing %s (nothing fitted)", vec)
        return VectorizerStats.reused(vec)
    pcfg = cfg.pretrain
    t_stage = time.time()
    nodes, problems, all_rows = bpre.load_problems(spark, paths, cfg)
    texts = ["" if t is None else str(t) for t in nodes.text[nodes.pos(all_rows)]]
    card: dict[str, Any] = {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": library_versions(artifacts.MODEL_LIBS),
        "config": redact.redact_config({"pretrain": pcfg.to_dict()}),
        "times_s": {},
    }
    work = tempfile.mkdtemp(prefix="pina-vectorizer-")
    tmp = os.path.join(work, storage.VECTORIZER)  # exactly what gets published
    try:
        t0 = time.time()
        pre = PhiPre.fit_tfidf(texts, pcfg)
        card["times_s"]["tfidf_fit"] = round(time.time() - t0, 2)
        encoder, enc_dir = None, None
        t0 = time.time()
        if pcfg.encoder == "xtransformer":
            encoder, enc_dir, card["xtransformer"] = finetune.fine_tune_xtransformer(
                pre, problems, nodes, pcfg, os.path.join(work, "xtransformer")
            )
        elif pcfg.encoder == "contrastive":
            encoder, enc_dir, card["contrastive"] = finetune.fine_tune_contrastive(
                problems, nodes, pcfg, os.path.join(work, "contrastive"), cfg.task.labels_are_items
            )
        if encoder is not None:
            card["times_s"]["fine_tune"] = round(time.time() - t0, 2)
        phi = PhiPre.fit(texts, pcfg, encoder=encoder, encoder_dir=enc_dir, preprocessor=pre)
        phi.save(tmp)
        card["vectorizer"] = {
            **phi.spec(),
            "fitted_on_rows": int(len(all_rows)),
            "size_bytes": artifacts.dir_size(tmp),
        }
        card["times_s"]["stage"] = round(time.time() - t_stage, 2)
        with open(os.path.join(tmp, artifacts.VECTORIZER_CARD), "w") as fh:
            json.dump(card, fh, indent=1, sort_keys=True)
        artifacts.publish(spark, tmp, dst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = VectorizerStats(
        encoder=pcfg.encoder,
        fitted_on_rows=int(len(all_rows)),
        dense_dim=phi.dense_dim,
        sparse_dim=phi.sparse_dim,
        encoded_rows=0,  # the embed stage encodes; fine-tuning trains on pairs, not rows
        seconds=round(time.time() - t_stage, 1),
        contrastive_pairs=card.get("contrastive", {}).get("pairs"),
        xtransformer_rows=card.get("xtransformer", {}).get("rows"),
    )
    log.info("vectorizer done: %s", stats.to_dict())
    return stats
