"""Stage 1b, pretraining g: the neighbour predictor per variant, trained from the ``embeddings``
table.

Inputs: ``graph/pretrain_edges`` (B_pre, partitioned by ``variant``) and ``nodes`` as XMC problems
(:mod:`pina_spark.models.bpre`), and X = Phi_pre of the input rows read from ``embeddings``
(written by the embed stage on the executors with the vectorizer stage's ``<run>/vectorizer``): the
driver encodes nothing. The fits run on the driver (which reads X:
:func:`features_from_embeddings`) or as Spark tasks (:mod:`pina_spark.stages.pretrain.fits`; each
task takes its rows' X from its machine's memory-mapped ``embeddings``, so the driver builds no X:
:func:`fit_inputs`). Output: the models folder ``<run>/models/`` (its layout, saving and loading:
:mod:`pina_spark.models.artifacts`; fold model f never saw fold f's instance rows), whose
``model_card.json`` holds g's held-out P@k / R@k per variant (``pretrain_report``; the evaluate
stage publishes it as ``<run>/eval/pretrain.json``) and a copy of the vectorizer's card.

Decisions (what the public reference gets wrong, and how it is done here)

- **Texts.** Every B_pre input row is represented by the TEXT of its node (instance text for
  instance rows, label text for label rows), never by an id: its row of ``embeddings``. Dense and
  sparse parts of X come from the same ``embeddings`` row, joined on ``node_index``, so row
  ``r`` of both parts is node ``rows[r]``.
- **Phi_pre** is fitted once by the vectorizer stage (tf-idf on the texts of the union of the
  input rows of every variant) and shared by all variants.
- **g** is always PECOS XR-Linear on X = Phi_pre(rows) (hierarchical k-means on PIFA label
  embeddings of X). ``pretrain.encoder`` (``contrastive``, ``xtransformer``: fine-tuned by the
  vectorizer stage, :mod:`pina_spark.models.finetune`) only changes Phi_dnn. Its settings are
  ``pretrain.xlinear`` for every variant but the leaf of ``pina_naive``'s tree
  (``pretrain.naive_max_leaf_size``; :meth:`~pina_spark.config.PretrainConfig.xlinear_of`),
  decided once per variant before the fits.
- **Y** of a variant: rows = distinct ``src_index`` (sorted), columns = distinct ``dst_index``
  (sorted; ``output_nodes.npy`` maps column -> node_index), values = ``weight`` (duplicates
  summed).
- **leave_self_out** (``neighbors.leave_self_out``, default on): every *self* entry of an
  instance row (``src_index == dst_index`` with the row node of kind instance, i.e. the I_inst
  identity edges) is dropped from Y, so a training instance is never rewarded for predicting
  itself. The instance's column stays in the output space (other rows, e.g. BT label -> instance
  or A edges, still point at it; a column left with no positive at all stays as an all-zero
  column so every model of a variant has the same output space). Rows left with no positive
  (an i2i instance whose only edge was I_inst) stay in X/Y as negative-only rows. Label rows keep
  their I_label identity (labels are never neighbour queries). The neighbour stage also removes
  self from predictions.
- **out_of_fold** (``neighbors.train_mode``, default): F = ``neighbors.folds`` models per variant
  and no other; model ``f`` is trained on all rows except the INSTANCE rows with
  ``folds.fold_of(node_id, F) == f`` (label rows always kept). Every fold model has the same
  output space (``output_nodes.npy``). ``train_rows.npy`` next to each model lists the node
  indices of its training rows. With ``task.labels: graph`` an item is both an instance node
  and a label node (same ``node_id``); the label row of an item lists the train items
  co-bought with it, i.e. the item's own labels, so model ``f`` also leaves out the LABEL rows
  of fold f's items, and the item's label node is excluded from its predictions like self.
  Otherwise a train item's "out of fold" neighbours would be read from its own label row, a
  train-only leak that test items (never labels) cannot get. Train rows are predicted by
  their fold's model; test and new rows by all F models together (cross-fitting,
  their scores averaged: the neighbours stage), so no ``full`` model is fitted.
- **in_sample**: one ``full`` model on every row (the paper's recipe; no held-out report).
- **Held-out report** (out of fold): right after training, fold model f predicts fold f's
  instance rows, which it never saw; self and twin label are excluded from the predictions and
  from the truth, and P@1/3/5, R@1/3/5/10 are averaged over every train instance row with at
  least one positive (``heldout_eval``; ``finetune_heldout``: the same over the rows whose item
  was also kept out of the encoder's fine-tuning pairs, ``pretrain.finetune_holdout_fraction``,
  the rows neither g nor a fine-tuned encoder learnt from). No model is fitted for the report.

- **Which variants.** g is fitted for the variants of B_pre that ``train.variants`` trains
  (:func:`pina_spark.config.variants.g_variants`; :func:`pina_spark.models.bpre.load_problems`
  builds their problems alone): a run that trains ``pina`` alone (one that follows a ``pina``
  selection) fits no ``pina_naive`` g, and the neighbours stage predicts ``pina`` alone. The
  vectorizer stage still fits Phi_pre on every variant's rows, so it is the same either way.
  A rerun that trains fewer variants keeps models that hold more; one that trains a variant
  the models lack refits (:func:`pina_spark.orchestration.resume.g_lacking`).
- **run.models** set to an earlier run: nothing is trained; the stage checks that the models
  folder is complete and returns
  :meth:`~pina_spark.stages.pretrain.stats.PretrainStats.reused` (``reused_models``).
- **Cost.** Training cost/size of the fold models is in ``model_card.json`` (``folds_train_s``,
  ``folds_size_bytes``, per fold; ``fits_train_s``: every fit of the variant) and in the stage
  statistics (``<variant>_folds_train_s``); reading X from ``embeddings`` in
  ``times_s.read_features``.
"""

import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from pina_spark import runtime, storage
from pina_spark.config import redact
from pina_spark.config import variants as V
from pina_spark.models import artifacts, bpre
from pina_spark.models.artifacts import FOLDS_JSON
from pina_spark.models.card import VECTORIZER_KEYS, ModelCard, write_model_card
from pina_spark.runtime import embstore
from pina_spark.stages.pretrain import fits as gtrain
from pina_spark.stages.pretrain.stats import PretrainStats, PretrainVariantStats
from pina_spark.storage.folds import is_heldout
from pina_spark.storage.manifest import library_versions

log = logging.getLogger(__name__)

__all__ = ["run", "features_from_embeddings"]

FOLD_RULE = (
    "pina_spark.storage.folds.fold_of(node_id, F, fold_seed) = min(int(u * F), F - 1) with "
    "u = (n * A) % 2**48 / 16**12, n = int(sha1('pina-fold' + '\\x1f' + node_id)[:12], 16), "
    "A = folds.split_multiplier(fold_seed) (1 for seed 0); applied to instance input rows; "
    "a label row is in every fold model, except with task.labels graph, where a label row "
    "leaves with its item's instance row (its twin)"
)


# --------------------------------------------------------------------------- X from embeddings
def features_from_embeddings(spark, paths, rows: np.ndarray, dense_dim: int, sparse_dim: int):
    """X for g: ``hstack([dense, sparse])`` (csr float32, sorted indices) of the nodes ``rows``
    (sorted node indices), read from the run's ``embeddings`` table on the driver
    (:func:`pina_spark.storage.collect_table`: pyarrow where it reaches the table, else a Spark
    collect through Arrow); row ``r`` is node ``rows[r]``, exactly what :meth:`PhiPre.features`
    gives for their texts.

    Raises
    ------
    pina_spark.storage.InputError
        When a row has no embedding (the embed stage did not run on these ``nodes``) or the
        table's widths are not the vectorizer's.

    Example::

        X = features_from_embeddings(spark, ctx.paths, all_rows, 384, 20000)
    """
    from pina_spark.runtime.arrow import features_from_arrow

    rows = np.asarray(rows, dtype=np.int64)
    cols = [storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES]
    tbl = storage.collect_table(
        spark,
        paths,
        storage.EMBEDDINGS,
        cols,
        keep=(storage.NODE_INDEX, rows),
        what="pretrain-rows",
    ).sort_by(storage.NODE_INDEX)
    got = tbl.column(storage.NODE_INDEX).to_numpy().astype(np.int64)
    if not np.array_equal(got, rows):
        missing = np.setdiff1d(rows, got)
        raise _not_covered(
            paths, len(rows), len(missing), missing[:5], len(got) - len(np.unique(got))
        )
    try:
        # the neighbors stage builds g's X at prediction time with the same function
        return features_from_arrow(tbl, dense_dim, dense_dim + sparse_dim)
    except ValueError as e:
        raise storage.InputError(
            f"{paths.table(storage.EMBEDDINGS)} does not match the vectorizer: {e}"
        ) from e


def _not_covered(
    paths, n_rows: int, n_missing: int, examples, repeated: int
) -> "storage.InputError":
    """The error of an ``embeddings`` table that lacks or repeats pretraining rows."""
    return storage.InputError(
        f"{paths.table(storage.EMBEDDINGS)} lacks {n_missing} of the {n_rows} pretraining rows "
        f"(e.g. node_index {[int(x) for x in examples]}) and repeats {repeated}: run the embed "
        "stage on this run's nodes first"
    )


def check_embeddings_cover(spark, paths, rows: np.ndarray) -> None:
    """Driver side, before fit tasks read X themselves: every pretraining row (sorted node
    indices ``rows``) has exactly one row in ``embeddings`` (counted by Spark; only up to 5
    missing ids are collected), else the :class:`storage.InputError` that
    :func:`features_from_embeddings` raises."""
    from pyspark.sql import functions as F

    emb = storage.read_table(spark, paths, storage.EMBEDDINGS).select(storage.NODE_INDEX)
    with storage.values_frame(spark, paths, storage.NODE_INDEX, rows, "pretrain-rows") as want:
        per_node = (
            emb.join(want, storage.NODE_INDEX, "left_semi").groupBy(storage.NODE_INDEX).count()
        )
        got = per_node.agg(
            F.count(F.lit(1)).alias("nodes"),
            F.coalesce(F.sum(F.col("count") - 1), F.lit(0)).alias("repeated"),
        ).first()
        nodes, repeated = int(got["nodes"]), int(got["repeated"])
        if nodes != len(rows) or repeated:
            anti = want.join(emb, storage.NODE_INDEX, "left_anti")
            examples = [r[storage.NODE_INDEX] for r in anti.limit(5).collect()]
            raise _not_covered(paths, len(rows), len(rows) - nodes, examples, repeated)


def fit_inputs(paths, where: str, dense_dim: int, sparse_dim: int, mmap_max_mb: float):
    """Driver side, decided once: how g's fits get X. ``(store spec, description)``: with fits
    on the executors, where pyarrow reaches the tables there and their copy is within
    ``pretrain.mmap_max_mb`` (:func:`pina_spark.runtime.embstore.choose_embeddings_via`), each fit
    task takes its rows from its machine's memory-mapped ``embeddings``
    (:func:`pina_spark.runtime.embstore.open_store`; within one application, the copy the neighbours
    stage then maps), so the driver never holds X; otherwise (``None``, ...) the driver reads X
    (:func:`features_from_embeddings`) and ships it in the fits' bundles.

    Examples
    --------
    >>> fit_inputs(None, "driver", 384, 1000, 8192)
    (None, 'driver: X read from embeddings by the driver (fits on the driver)')
    """
    if where != "executors":
        return None, "driver: X read from embeddings by the driver (fits on the driver)"
    emb, nodes = paths.table(storage.EMBEDDINGS), paths.table(storage.NODES)
    via, why = embstore.choose_embeddings_via(
        "auto", emb, nodes, float(mmap_max_mb), section="pretrain"
    )
    if via == "files":
        try:
            spec = embstore.store_spec(emb, nodes, dense_dim, sparse_dim)
        except ValueError as e:
            via, why = "shuffle", str(e)
    if via != "files":
        return None, f"bundles: X read by the driver and shipped to the tasks ({why})"
    return spec, f"store: each fit task maps the embeddings table on its machine ({why})"


# --------------------------------------------------------------------------- the stage
def run(ctx) -> PretrainStats:
    """Pretraining g: train g (F fold models, or the full one ``in_sample``) per variant on X
    read from ``embeddings``, report, publish.

    Example::

        from pina_spark.orchestration import pipeline
        run(pipeline.make_context(spark, cfg))
        # PretrainStats(variants='pina,pina_naive', input_rows=2200, encoded_rows=0, ...)
    """
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    dst = paths.table(storage.MODELS)
    if storage.norm(ctx.models_root) != storage.norm(dst):
        log.info(
            "pretrain: run.models is set, reusing the models at %s (no training)", ctx.models_root
        )
        if not storage.is_complete(spark, ctx.models_root):
            raise storage.InputError(
                f"run.models: {ctx.models_root} is missing or incomplete (no _SUCCESS)"
            )
        return PretrainStats.reused(ctx.models_root)
    pcfg, ncfg = cfg.pretrain, cfg.neighbors
    t_stage = time.time()
    vec = artifacts.require_vectorizer(spark, dst)
    enc = artifacts.read_json(storage.join(vec, artifacts.ENCODER_JSON))
    vcard = artifacts.read_json(storage.join(vec, artifacts.VECTORIZER_CARD))
    storage.require_complete(spark, paths, storage.EMBEDDINGS)
    # g of the variants the run trains alone: a run following a pina selection fits no
    # pina_naive g (the vectorizer stage still reads every variant's rows)
    nodes, problems, all_rows = bpre.load_problems(
        spark, paths, cfg, V.g_variants(cfg.train.variants)
    )
    variants = sorted(problems)
    for v, pb in problems.items():
        log.info("pretrain %s: %s", v, json.dumps(pb.stats, sort_keys=True))

    work = tempfile.mkdtemp(prefix="pina-pretrain-")
    tmp = os.path.join(work, storage.MODELS)  # exactly what gets published
    os.makedirs(tmp)
    card = ModelCard(
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        versions=library_versions(artifacts.MODEL_LIBS),
        config=redact.redact_config(
            {
                "pretrain": pcfg.to_dict(),
                "neighbors": {k: v for k, v in ncfg.to_dict().items() if k in ncfg.G_TRAINING},
            }
        ),
        g="PECOS XR-Linear on X = Phi_pre(row text), read from the embeddings table, "
        "for every encoder kind; pretrain.encoder only changes Phi_dnn",
        leave_self_out_rule=(
            "instance rows: self entries (I_inst) dropped from Y; label rows "
            "keep I_label; output space unchanged"
        )
        if ncfg.leave_self_out
        else "off: Y = B_pre as given",
        # the vectorizer's card, as fitted by the vectorizer stage (fine-tuning included)
        vectorizer_card={k: vcard[k] for k in VECTORIZER_KEYS if k in vcard},
        times_s=dict(vcard.get("times_s", {})),
    )
    card.times_s["vectorizer_stage"] = card.times_s.pop("stage", None)
    report: dict[str, Any] = {
        "variants": {},
        "finetune_holdout_fraction": pcfg.finetune_holdout_fraction,
        "protocol": "out of fold: every train instance row is predicted by the fold model "
        "that never saw it (nor its twin label row); self and twin excluded from predictions "
        "and truth; averages over rows with >= 1 positive. finetune_heldout: the rows whose "
        "item folds.is_heldout(node_id, finetune_holdout_fraction) also kept out of the "
        "encoder's fine-tuning pairs",
    }
    try:
        out_of_fold = ncfg.train_mode == "out_of_fold"
        F = int(ncfg.folds) if out_of_fold else 0
        where = runtime.fits_where(spark, pcfg.train_on)
        D, S = int(enc["dense_dim"]), int(enc["sparse_dim"])
        store, card.fit_inputs = fit_inputs(paths, where, D, S, pcfg.mmap_max_mb)
        X_all: Any = None
        if store is not None:  # the tasks read X: check here what the driver would have
            check_embeddings_cover(spark, paths, all_rows)
        if store is None:  # the fits' X, built here from the embeddings table
            t0 = time.time()
            X_all = features_from_embeddings(spark, paths, all_rows, D, S)
            card.times_s["read_features"] = round(time.time() - t0, 2)
            log.info(
                "pretrain: X of %d input rows read from embeddings in %.1fs (%d nnz)",
                X_all.shape[0],
                time.time() - t0,
                X_all.nnz,
            )
        log.info("pretrain: the fits' inputs: %s", card.fit_inputs)
        row_facts, fits = {}, []
        # g's settings per variant, decided here once (pina_naive's leaf: naive_max_leaf_size)
        xcfgs = {v: pcfg.xlinear_of(v) for v in variants}
        for v in variants:
            pb = problems[v]
            fold = (
                bpre.row_folds(pb.entity, F, int(ncfg.fold_seed))
                if F
                else np.zeros(len(pb.rows), np.int64)
            )
            frac = pcfg.finetune_holdout_fraction
            out = np.array(
                [e is not None and frac > 0 and is_heldout(e, frac) for e in pb.entity],
                dtype=bool,
            )
            row_facts[v] = (fold, out)
            fits += gtrain.plan_fits(v, F)

        def bundle_of(v: str) -> dict[str, Any]:
            """Variant ``v``'s bundle, made when needed: one variant's X at a time beside
            ``X_all`` (no copy when the variant has every input row, in order), or no X at
            all when the tasks read theirs from the store."""
            if X_all is None:
                return gtrain.make_bundle(problems[v], None, *row_facts[v])
            idx = np.searchsorted(all_rows, problems[v].rows)
            same = len(idx) == X_all.shape[0] and np.array_equal(idx, np.arange(len(idx)))
            return gtrain.make_bundle(problems[v], X_all if same else X_all[idx], *row_facts[v])

        t0 = time.time()
        log.info(
            "pretrain: %d fits of g on the %s (pretrain.train_on %s)",
            len(fits),
            where,
            pcfg.train_on,
        )
        if where == "executors":
            scratch = paths.staging("pretrain-fits")
            try:
                gtrain.write_bundles(bundle_of, variants, scratch)
                X_all = None  # the tasks read the bundles' files: the driver holds no X now
                results = gtrain.fits_on_executors(spark, fits, xcfgs, scratch, tmp, store=store)
            finally:
                storage.delete_path(spark, scratch)
        else:
            results = []
            for v in variants:  # one variant's bundle at a time
                b = bundle_of(v)
                results += [gtrain.run_fit(f, b, xcfgs[v], tmp) for f in fits if f.variant == v]
                del b
        card.times_s["fits"] = round(time.time() - t0, 2)
        card.fits_on = where
        for v in variants:
            mine = [r for r, f in zip(results, fits) if f.variant == v]
            card.variants[v] = gtrain.variant_card(problems[v].stats, mine, F)
            if "heldout_eval" in card.variants[v]:
                ev = card.variants[v]["heldout_eval"]
                report["variants"][v] = ev
                log.info("g[%s] out-of-fold B_pre rows: %s", v, json.dumps(ev, sort_keys=True))
            else:
                report["variants"][v] = {"rows": 0, "why": "in_sample: one model saw every row"}
        folds_doc = {
            "train_mode": ncfg.train_mode,
            "folds": F,
            "fold_seed": int(ncfg.fold_seed) if F else 0,
            "rule": FOLD_RULE,
            "leave_self_out": ncfg.leave_self_out,
            "fold_model_path": "g/<variant>/fold=<f>: trained without the instance "
            "rows of fold f (task.labels graph: and without the "
            "label rows of those items)",
            "test_rows": "predicted by every fold model together, scores averaged"
            if F
            else "predicted by g/<variant>/full",
        }
        with open(os.path.join(tmp, FOLDS_JSON), "w") as fh:
            json.dump(folds_doc, fh, indent=1, sort_keys=True)
        card.folds = folds_doc
        card.times_s["stage"] = round(time.time() - t_stage, 2)
        report["times_s"] = card.times_s
        card.pretrain_report = report  # evaluate copies it to eval/pretrain.json
        write_model_card(card, tmp)
        artifacts.publish(spark, tmp, dst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = PretrainStats(
        variants=",".join(variants),
        input_rows=int(len(all_rows)),
        encoder=pcfg.encoder,
        encoded_rows=0,  # X is read from embeddings
        dense_dim=int(enc["dense_dim"]),
        sparse_dim=int(enc["sparse_dim"]),
        seconds=round(time.time() - t_stage, 1),
        per_variant={v: PretrainVariantStats.of_card(card.variants[v]) for v in variants},
        detail={"variants": card.variants, "times_s": card.times_s},
    )
    log.info(
        "pretrain done in %.1fs: %s",
        time.time() - t_stage,
        {k: v for k, v in stats.to_dict().items() if k != "detail"},
    )
    return stats
