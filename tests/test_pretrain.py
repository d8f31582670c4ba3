"""Stage 1 (pretraining) on a small real graph: citeulike-t articles + tags (label_text B_pre).

The B_pre tables are built here from ``mult.dat`` / ``vocabulary.dat`` / ``tags.dat`` /
``tag-item.dat`` (the first ``N_ARTICLES`` articles; tags on >= 5 of them; articles with at least
one such tag), following docs/design.md: variant ``pina`` = B + I_inst + I_label + BT, variant
``pina_naive`` = B. Article text: words by count desc (ties by vocabulary index), each repeated by
its count (the rule of ``pina_spark.datasets``).
"""

import dataclasses as dc
import json
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.models.artifacts import (
    OUTPUT_NODES,
    TRAIN_ROWS,
    g_dir,
    load_g,
    read_output_nodes,
    save_g,
    vectorizer_dir,
)
from pina_spark.models.bpre import Nodes, build_y, row_folds, variant_problem
from pina_spark.models.vectorizer import PhiPre
from pina_spark.stages.pretrain.fits import exclude_self, predict_g, ranking_metrics, train_g
from pina_spark.storage.folds import fold_of, is_heldout

N_ARTICLES = 1000
MIN_TAG = 5
FOLDS = 2
HOLDOUT = 0.2
TFIDF = {
    "ngram_range": [1, 1],
    "max_feature": 20000,
    "min_df_cnt": 2,
    "max_df_ratio": 0.98,
    "norm": "l2",
    "sublinear_tf": True,
}


# --------------------------------------------------------------------------- data
def _article_text(line, vocab):
    bag = []
    for e in line.split()[1:]:
        w, c = e.split(":")
        bag.append((-int(c), int(w)))
    bag.sort()
    return " ".join(" ".join([vocab[w]] * (-c)) for c, w in bag)


def _citeulike_graph(d, n_articles=N_ARTICLES, min_tag=MIN_TAG, test_fraction=0.0):
    """(nodes rows, edges rows) as plain lists following docs/design.md.

    ``n_articles=None``: every article. ``test_fraction > 0``: articles with
    ``in_sample_fraction(str(article), test_fraction, "pina-test")`` are test articles and, as in
    the graph stage, absent from B_pre (tags are still kept by their count over all articles)."""
    from pina_spark.storage.folds import in_sample_fraction

    read = lambda name: open(os.path.join(d, name), encoding="utf-8").read().split("\n")  # noqa
    vocab, mult, tags, ti = (
        read("vocabulary.dat"),
        read("mult.dat"),
        read("tags.dat"),
        read("tag-item.dat"),
    )
    n_articles = len(mult) if n_articles is None else n_articles
    tag_items = {}
    for t, ln in enumerate(ti):
        items = sorted({int(x) for x in ln.split()[1:] if int(x) < n_articles})
        if len(items) >= min_tag:
            if test_fraction > 0:
                items = [
                    a for a in items if not in_sample_fraction(str(a), test_fraction, "pina-test")
                ]
            if items:
                tag_items[t] = items
    tagged = sorted({a for items in tag_items.values() for a in items})
    inst_ids = [f"a{a:05d}" for a in tagged]  # sorted == numeric order
    lab_ids = [f"t{t:05d}" for t in sorted(tag_items)]
    n_inst = len(inst_ids)
    inst_index = {a: i for i, a in enumerate(tagged)}
    lab_index = {t: n_inst + j for j, t in enumerate(sorted(tag_items))}
    nodes = [
        (i, storage.KIND_INSTANCE, inst_ids[i], _article_text(mult[a], vocab), storage.SPLIT_TRAIN)
        for a, i in inst_index.items()
    ]
    nodes += [
        (
            j,
            storage.KIND_LABEL,
            lab_ids[j - n_inst],
            tags[t].replace("-", " ").replace("_", " "),
            None,
        )
        for t, j in lab_index.items()
    ]
    edges = []
    for t, items in tag_items.items():
        lj = lab_index[t]
        for a in items:
            ii = inst_index[a]
            for variant in ("pina", "pina_naive"):
                edges.append((ii, lj, 1.0, "B", variant))
            edges.append((lj, ii, 1.0, "BT", "pina"))
        edges.append((lj, lj, 1.0, "I_label", "pina"))
    for ii in inst_index.values():
        edges.append((ii, ii, 1.0, "I_inst", "pina"))
    return nodes, edges


def _write_graph(spark, paths, nodes, edges):
    from pyspark.sql import types as T

    ndf = spark.createDataFrame(nodes, storage.schema(storage.NODES))
    storage.write_table(ndf, paths, storage.NODES)
    eschema = T.StructType(
        [
            T.StructField(storage.SRC_INDEX, T.LongType()),
            T.StructField(storage.DST_INDEX, T.LongType()),
            T.StructField(storage.WEIGHT, T.FloatType()),
            T.StructField(storage.BLOCK, T.StringType()),
            T.StructField(storage.VARIANT, T.StringType()),
        ]
    )
    storage.write_table(
        spark.createDataFrame(edges, eschema),
        paths,
        storage.PRETRAIN_EDGES,
        partition_by=[storage.VARIANT],
    )


def _ctx(spark, cfg):
    from pina_spark.orchestration import pipeline

    return pipeline.make_context(spark, cfg)


def stage1(ctx):
    """Stage 1 as the pipeline runs it: fit the vectorizer, embed every node on the executors,
    train g from the ``embeddings`` table; returns the pretrain stage's statistics."""
    from pina_spark.stages import embed, pretrain, vectorizer

    vectorizer.run(ctx)
    embed.run(ctx)
    return pretrain.run(ctx)


@pytest.fixture(scope="module")
def citeulike_run(spark, citeulike_dir, tmp_path_factory):
    """One pretraining run on the small citeulike graph (minilm encoder, out_of_fold F=2)."""
    import torch

    torch.set_num_threads(2)
    out = str(tmp_path_factory.mktemp("pretrain_run"))
    nodes, edges = _citeulike_graph(citeulike_dir)
    cfg = config_from_dict(
        {
            "output": out,
            "pretrain": {
                "encoder": "minilm",
                "max_length": 32,
                "tfidf": TFIDF,
                "finetune_holdout_fraction": HOLDOUT,
                "dense_weight": 0.5,
                "xlinear": {"nr_splits": 8, "max_leaf_size": 50, "topk": 20},
                # g's fits as Spark tasks (auto picks the driver in local mode): the stage's
                # executor path, checked against the driver's loop below
                "train_on": "executors",
            },
            "neighbors": {"train_mode": "out_of_fold", "folds": FOLDS, "leave_self_out": True},
            "inference": {"batch_size": 64, "rows_per_task": 400},
        }
    )
    ctx = _ctx(spark, cfg)
    _write_graph(spark, ctx.paths, nodes, edges)
    stats = stage1(ctx)
    return {
        "cfg": cfg,
        "ctx": ctx,
        "stats": stats,
        "nodes": nodes,
        "edges": edges,
        "models": ctx.paths.table(storage.MODELS),
    }


# --------------------------------------------------------------------------- small units
def test_build_y_and_exclude_self():
    Y = build_y(
        np.array([3, 3, 8, 8]),
        np.array([3, 9, 9, 9]),
        np.array([1, 1, 2, 1]),
        np.array([3, 8]),
        np.array([3, 9]),
    )
    assert Y.toarray().tolist() == [[1.0, 1.0], [0.0, 3.0]]  # duplicates summed
    with pytest.raises(ValueError):
        build_y(np.array([4]), np.array([3]), np.ones(1), np.array([3, 8]), np.array([3, 9]))
    P = exclude_self(Y, np.array([3, 8]), np.array([3, 9]))
    assert P.toarray().tolist() == [[0.0, 1.0], [0.0, 3.0]]


def _graph_labels_problem(twins):
    """task.labels graph: train items a, b, c (instances 0-2), the same items as labels (3-5);
    a co-bought with b and c. B_pre of variant pina = B + I_inst + I_label + BT."""
    import pandas as pd

    nodes = pd.DataFrame(
        {
            storage.NODE_INDEX: [0, 1, 2, 3, 4, 5],
            storage.KIND: ["instance"] * 3 + ["label"] * 3,
            storage.NODE_ID: ["a", "b", "c", "a", "b", "c"],
            storage.TEXT: ["x"] * 6,
        }
    )
    B = [(0, 4), (0, 5), (1, 3), (2, 3)]  # a->b, a->c, b->a, c->a
    edges = B + [(i, i) for i in range(6)] + [(lab, i) for i, lab in B]
    epdf = pd.DataFrame(
        {
            storage.SRC_INDEX: [e[0] for e in edges],
            storage.DST_INDEX: [e[1] for e in edges],
            storage.WEIGHT: 1.0,
            storage.VARIANT: "pina",
            storage.BLOCK: "x",
        }
    )
    return variant_problem(epdf, "pina", Nodes(nodes), True, twins=twins)


def test_graph_labels_twins_leave_folds_together():
    """An item's label row lists the train items co-bought with it, i.e. its own labels: the fold
    (and held-out) model that leaves out item a's instance row must leave out its label row too,
    and a's label node is excluded from a's predictions like self."""
    pb = _graph_labels_problem(twins=True)
    assert pb.rows.tolist() == [0, 1, 2, 3, 4, 5]
    assert pb.twin_col.tolist() == [3, 4, 5, -1, -1, -1]
    assert pb.entity.tolist() == ["a", "b", "c", "a", "b", "c"]
    folds = row_folds(pb.entity, 3)
    assert folds[0] == folds[3] == fold_of("a", 3) and folds[1] == folds[4]
    # a's label row (3) has a's labels b, c as instance columns (1, 2): the leak the fold avoids
    assert pb.Y[3].toarray()[0].tolist() == [0, 1, 1, 1, 0, 0]
    P = exclude_self(sp.csr_matrix(np.ones((3, 6))), pb.rows[:3], pb.cols, pb.twin_col[:3])
    assert P.toarray().tolist() == [[0, 1, 1, 0, 1, 1], [1, 0, 1, 1, 0, 1], [1, 1, 0, 1, 1, 0]]
    # given labels (ids of labels and instances are different namespaces): no twins, label rows
    # stay in every fold
    pb = _graph_labels_problem(twins=False)
    assert pb.twin_col.tolist() == [-1] * 6
    assert row_folds(pb.entity, 3)[3:].tolist() == [-1, -1, -1]


def test_ranking_metrics_by_hand():
    P = sp.csr_matrix(
        np.array(
            [[0.9, 0.8, 0.1, 0.0], [0.5, 0.5, 0.0, 0.7], [0.3, 0.0, 0.0, 0.0]], dtype=np.float32
        )
    )
    T = sp.csr_matrix(np.array([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]))
    m = ranking_metrics(P, T, (1, 3), (1, 3))
    assert m["rows"] == 2  # the row with no positive is skipped
    assert m["P@1"] == pytest.approx(0.0)  # row0 top=col0 (miss), row1 top=col3 (miss)
    # row0 top3 = 0,1,2 -> 2 hits; row1 top3 = 3,0,1 (tie 0.5: lower column first) -> 1 hit
    assert m["P@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert m["R@3"] == pytest.approx((1.0 + 1.0) / 2)


def _ranking_metrics_by_loop(pred, truth, p_ks, r_ks):
    """The per-row definition ranking_metrics computes in bulk: top kmax of each row by score
    desc, column asc; hits against the row's positives; means over rows with a positive."""
    pred, truth = sp.csr_matrix(pred), sp.csr_matrix(truth)
    truth.eliminate_zeros()
    kmax = max(list(p_ks) + list(r_ks))
    hits, npos = {k: [] for k in set(p_ks) | set(r_ks)}, []
    for r in range(pred.shape[0]):
        pos = set(truth.indices[truth.indptr[r] : truth.indptr[r + 1]].tolist())
        if not pos:
            continue
        idx = pred.indices[pred.indptr[r] : pred.indptr[r + 1]]
        val = pred.data[pred.indptr[r] : pred.indptr[r + 1]]
        top = idx[np.lexsort((idx, -val))[:kmax]]
        hit = np.array([t in pos for t in top], dtype=float)
        for k in hits:
            hits[k].append(hit[:k].sum())
        npos.append(len(pos))
    out = {"rows": len(npos)}
    for k in p_ks:
        out[f"P@{k}"] = round(float(np.mean(np.array(hits[k]) / k)), 6)
    for k in r_ks:
        out[f"R@{k}"] = round(float(np.mean(np.array(hits[k]) / np.array(npos, float))), 6)
    return out


def _exclude_self_by_loop(pred, row_nodes, output_nodes, twin_nodes):
    pred = sp.csr_matrix(pred, copy=True)
    pos_of = {int(n): i for i, n in enumerate(output_nodes)}
    for r in range(pred.shape[0]):
        drop = {pos_of.get(int(n)) for n in (row_nodes[r], twin_nodes[r]) if n >= 0} - {None}
        s, e = pred.indptr[r], pred.indptr[r + 1]
        pred.data[s:e][np.isin(pred.indices[s:e], list(drop))] = 0.0
    pred.eliminate_zeros()
    return pred


def test_ranking_metrics_and_exclude_self_match_their_per_row_definition():
    """The bulk forms equal a plain loop over rows on random scores with ties (scores
    rounded to one decimal), explicit zeros, rows without any score and rows without a
    positive; self and twin columns that are and are not among the outputs."""
    rng = np.random.RandomState(7)
    for trial in range(5):
        n, m = 60, 25
        dense = np.round(rng.rand(n, m), 1) * (rng.rand(n, m) < 0.4)
        dense[rng.rand(n) < 0.1] = 0.0
        pred = sp.csr_matrix(dense.astype(np.float32))
        pred.data[rng.rand(pred.nnz) < 0.1] = 0.0  # explicit zeros: stored, ranked last
        truth = sp.csr_matrix((rng.rand(n, m) < 0.1).astype(np.float32))
        out_nodes = np.sort(rng.choice(1000, m, replace=False)).astype(np.int64)
        rows = np.where(rng.rand(n) < 0.7, out_nodes[rng.randint(0, m, n)], 5000 + np.arange(n))
        twins = np.where(rng.rand(n) < 0.5, out_nodes[rng.randint(0, m, n)], -1)
        a = exclude_self(pred, rows, out_nodes, twins)
        b = _exclude_self_by_loop(pred, rows, out_nodes, twins)
        assert (a != b).nnz == 0 and a.nnz == b.nnz
        assert a.nnz < pred.nnz  # some self and twin scores were there to drop
        ks = ((1, 3, 5), (1, 3, 5, 10))
        assert ranking_metrics(pred, truth, *ks) == _ranking_metrics_by_loop(pred, truth, *ks)
        got = ranking_metrics(a, truth, (1, 3, 5), (1, 3, 5, 10))
        assert got == _ranking_metrics_by_loop(a, truth, (1, 3, 5), (1, 3, 5, 10)), trial
        assert 0 < got["rows"] < n and got["P@1"] > 0


def test_g_dir():
    assert g_dir("s3://b/r/models/", "pina") == "s3://b/r/models/g/pina/full"
    assert g_dir("/x/models", "pina_naive", 0) == "/x/models/g/pina_naive/fold=0"


def test_save_load_predict_only_identical_scores(tmp_path):
    from pina_spark.config import XLinearConfig

    rng = np.random.RandomState(0)
    X = sp.random(300, 50, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    Y = sp.csr_matrix((rng.rand(300, 40) < 0.05).astype(np.float32))
    xcfg = XLinearConfig(nr_splits=4, max_leaf_size=10, topk=10)
    model = train_g(X, Y, xcfg)
    out_nodes = np.arange(100, 140, dtype=np.int64)
    save_g(model, out_nodes, str(tmp_path / "g"))
    loaded = load_g(str(tmp_path / "g"), predict_only=True)
    nodes_back = read_output_nodes(str(tmp_path / "g"))
    assert nodes_back.dtype == np.int64 and (nodes_back == out_nodes).all()
    a = predict_g(model, X[:50], xcfg)
    b = predict_g(loaded, X[:50], xcfg)
    assert a.nnz > 0 and (a != b).nnz == 0
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.data, b.data)


def test_train_g_passes_solver_parameters_to_pecos():
    """``solver`` (what bench_g_options.py compares) reaches PECOS' rankers: PECOS' own
    defaults give g unchanged, a one-iteration solver gives other weights."""
    from pina_spark.config import XLinearConfig

    rng = np.random.RandomState(1)
    X = sp.random(300, 50, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    Y = sp.csr_matrix((rng.rand(300, 40) < 0.05).astype(np.float32))
    xcfg = XLinearConfig(nr_splits=4, max_leaf_size=10, topk=10)

    def weights(solver):
        return train_g(X, Y, xcfg, solver=solver).model.model_chain[-1].W

    base = weights(None)
    assert (weights({"eps": 0.1, "max_iter": 100}) != base).nnz == 0
    assert (weights({"max_iter": 1}) != base).nnz > 0


# --------------------------------------------------------------------------- the stage
@pytest.mark.slow
def test_stage_artifacts_and_card(citeulike_run):
    models = citeulike_run["models"]
    assert json.load(open(os.path.join(models, "model_card.json")))["fits_on"] == "executors"
    assert os.path.exists(os.path.join(models, "_SUCCESS"))
    for v in ("pina", "pina_naive"):
        assert not os.path.exists(g_dir(models, v))  # out of fold: no full model
        for f in range(FOLDS):
            assert os.path.exists(os.path.join(g_dir(models, v, f), OUTPUT_NODES))
    folds = json.load(open(os.path.join(models, "folds.json")))
    assert folds["folds"] == FOLDS and "sha1" in folds["rule"]
    card = json.load(open(os.path.join(models, "model_card.json")))
    assert card["versions"]["libpecos"] and card["config"]["neighbors"]["folds"] == FOLDS
    pina = card["variants"]["pina"]
    n_inst = sum(1 for n in citeulike_run["nodes"] if n[1] == storage.KIND_INSTANCE)
    assert pina["instance_rows"] == n_inst and pina["self_edges_dropped"] == n_inst
    assert pina["folds_train_s"] > 0 and len(pina["folds"]) == FOLDS
    assert pina["fits_train_s"] == pina["folds_train_s"]  # F fits, nothing else
    assert card["variants"]["pina_naive"]["label_rows"] == 0
    rep = card["pretrain_report"]  # the evaluate stage publishes it as eval/pretrain.json
    assert set(rep["variants"]) == {"pina", "pina_naive"} and rep["times_s"]["stage"] > 0


@pytest.mark.slow
def test_g_reads_the_same_x_from_embeddings_as_encoding_its_rows(spark, citeulike_run):
    """g is trained on X read from the ``embeddings`` table (encoded once, on the executors,
    in the embed stage's batches): on this real sample it equals Phi_pre of the pretraining
    rows' texts encoded directly on the driver, the old design, within 1e-5, row by row in
    the same node order. The driver encoded nothing in the run."""
    from pina_spark.models import bpre
    from pina_spark.stages.pretrain.stage import features_from_embeddings

    ctx = citeulike_run["ctx"]
    nodes, problems, rows = bpre.load_problems(spark, ctx.paths, ctx.cfg)
    phi = PhiPre.load(vectorizer_dir(citeulike_run["models"]))
    X_tab = features_from_embeddings(spark, ctx.paths, rows, phi.dense_dim, phi.sparse_dim)
    texts = [str(t or "") for t in nodes.text[nodes.pos(rows)]]
    X_dir = phi.features(texts, batch_size=64)  # the embed stage's: inference.batch_size
    assert X_tab.shape == X_dir.shape == (len(rows), phi.dense_dim + phi.sparse_dim)
    diff = abs(X_tab - X_dir)
    assert diff.max() <= 1e-5, diff.max()
    # the sparse (tf-idf) block is exactly the same, and no row is empty in one and not the other
    assert (X_tab[:, phi.dense_dim :] != X_dir[:, phi.dense_dim :]).nnz == 0
    assert citeulike_run["stats"]["encoded_rows"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("inputs", ["store", "bundle"])
def test_fits_on_executors_equal_fits_on_the_driver(spark, citeulike_run, tmp_path, inputs):
    """g's fits as Spark tasks (``pretrain.train_on: executors``: one fit per task, models
    copied back) save the same models and the same held-out report as the driver's loop over
    the same plan, on this real sample, whether the tasks take X from their machine's
    memory-mapped ``embeddings`` (``store``: the bundle holds no X, the driver builds none) or
    from a bundle the driver wrote with X in it (``bundle``: tables pyarrow cannot read)."""
    from pina_spark.models import bpre
    from pina_spark.stages.pretrain import fits as gtrain
    from pina_spark.stages.pretrain import stage as pretrain
    from pina_spark.stages.pretrain.stage import features_from_embeddings

    ctx = citeulike_run["ctx"]
    nodes, problems, rows = bpre.load_problems(spark, ctx.paths, ctx.cfg)
    pb = problems["pina_naive"]
    phi = PhiPre.load(vectorizer_dir(citeulike_run["models"]))
    D, S = phi.dense_dim, phi.sparse_dim
    X = features_from_embeddings(spark, ctx.paths, pb.rows, D, S)
    out = np.array([e is not None and is_heldout(e, HOLDOUT) for e in pb.entity])
    b = gtrain.make_bundle(pb, X, bpre.row_folds(pb.entity, FOLDS), out)
    fits = gtrain.plan_fits("pina_naive", FOLDS)
    assert [f.kind for f in fits] == ["fold"] * FOLDS
    xcfg = ctx.cfg.pretrain.xlinear_of("pina_naive")  # the stage's settings for this variant
    drv, exe = str(tmp_path / "driver"), str(tmp_path / "executors")
    on_driver = [gtrain.run_fit(f, b, xcfg, drv) for f in fits]
    scratch = str(tmp_path / "scratch")
    store, how = pretrain.fit_inputs(ctx.paths, "executors", D, S, 8192)
    assert store is not None and how.startswith("store"), how
    # above pretrain.mmap_max_mb the driver ships X in the bundles instead
    assert pretrain.fit_inputs(ctx.paths, "executors", D, S, 0)[0] is None
    if inputs == "store":
        shipped = gtrain.make_bundle(pb, None, bpre.row_folds(pb.entity, FOLDS), out)
        assert "X" not in gtrain.load_bundle(gtrain.save_bundle(shipped))
    else:
        shipped, store = b, None
    made = []
    gtrain.write_bundles(lambda v: made.append(v) or shipped, ["pina_naive"], scratch)
    assert made == ["pina_naive"]
    on_tasks = gtrain.fits_on_executors(
        spark, fits, {"pina_naive": xcfg}, scratch, exe, store=store
    )

    def no_times(card):  # seconds differ, and so do the sizes of the g_info.json holding them
        drop = ("train_s", "steps_s", "size_bytes", "predict_s")
        flat = {k: v for k, v in card.items() if k not in drop}
        flat["oof_eval"] = {k: v for k, v in card["oof_eval"].items() if k not in drop}
        return flat

    assert [no_times(c) for c in on_tasks] == [no_times(c) for c in on_driver]
    sample = X[:300]
    for f in fits:
        a = load_g(g_dir(drv, "pina_naive", f.fold))
        c = load_g(g_dir(exe, "pina_naive", f.fold))
        pa, pc = predict_g(a, sample, xcfg), predict_g(c, sample, xcfg)
        assert (pa != pc).nnz == 0, f.name
        assert np.array_equal(pa.data, pc.data), f.name
        assert np.array_equal(
            np.load(os.path.join(g_dir(exe, "pina_naive", f.fold), TRAIN_ROWS)),
            np.load(os.path.join(g_dir(drv, "pina_naive", f.fold), TRAIN_ROWS)),
        )
    # the stage ran its fits as tasks on the store: the driver's loop reproduces its report
    card = json.load(open(os.path.join(citeulike_run["models"], "model_card.json")))
    assert card["fit_inputs"].startswith("store"), card["fit_inputs"]
    assert "read_features" not in card["times_s"]  # the driver read no X
    report = gtrain.heldout_report(on_driver)
    assert report is not None
    assert report["P@1"] == card["variants"]["pina_naive"]["heldout_eval"]["P@1"]


@pytest.mark.slow
def test_fit_task_names_the_nodes_the_store_lacks(spark, citeulike_run, tmp_path):
    """A fit task whose input nodes are not all in ``embeddings`` fails with the fit's name
    and the missing node indices, not with a shape error inside PECOS."""
    from pina_spark.models import bpre
    from pina_spark.stages.pretrain import fits as gtrain
    from pina_spark.stages.pretrain import stage as pretrain

    ctx = citeulike_run["ctx"]
    nodes, problems, rows = bpre.load_problems(spark, ctx.paths, ctx.cfg)
    rows_bad = np.asarray(problems["pina_naive"].rows).copy()
    rows_bad[-1] = 10**9  # a node the embed stage never saw
    pb = dc.replace(problems["pina_naive"], rows=rows_bad)
    phi = PhiPre.load(vectorizer_dir(citeulike_run["models"]))
    store, _ = pretrain.fit_inputs(ctx.paths, "executors", phi.dense_dim, phi.sparse_dim, 8192)
    n = len(pb.rows)
    b = gtrain.make_bundle(pb, None, np.zeros(n, np.int64), np.zeros(n, bool))
    scratch = str(tmp_path / "scratch")
    gtrain.write_bundles(lambda v: b, ["pina_naive"], scratch)
    # the driver checks the same before it starts any task, with the InputError it always gave
    with pytest.raises(storage.InputError, match=r"lacks 1 of the .* node_index \[1000000000\]"):
        pretrain.check_embeddings_cover(spark, ctx.paths, np.sort(pb.rows))
    pretrain.check_embeddings_cover(spark, ctx.paths, rows)  # the run's own rows: all there
    fit = gtrain.Fit("pina_naive", "full")
    with pytest.raises(
        Exception, match=r"g\[pina_naive/full\]: 1 of its .* node_index \[1000000000\]"
    ):
        gtrain.fits_on_executors(
            spark,
            [fit],
            {"pina_naive": ctx.cfg.pretrain.xlinear_of("pina_naive")},
            scratch,
            str(tmp_path / "m"),
            store=store,
        )


@pytest.mark.slow
def test_heldout_p1_beats_popularity(citeulike_run):
    """g's held-out P@1 (reported by the stage: every train article, each predicted by the fold
    model that never saw it) vs predicting the most popular tag; the articles also kept out of
    fine-tuning (``finetune_heldout``) are reported apart."""
    nodes, edges = citeulike_run["nodes"], citeulike_run["edges"]
    node_id = {n[0]: n[2] for n in nodes}
    labels_of = {}
    for s, d, _, b, v in edges:
        if v == "pina" and b == "B":
            labels_of.setdefault(s, set()).add(d)
    held = {i for i in labels_of if is_heldout(node_id[i], HOLDOUT)}
    assert 100 < len(held) < len(labels_of)
    pop = {}
    for labs in labels_of.values():  # popularity over every row: a stricter baseline
        for lab in labs:
            pop[lab] = pop.get(lab, 0) + 1
    top = max(pop, key=lambda lab: (pop[lab], -lab))
    baseline_p1 = np.mean([top in labels_of[i] for i in labels_of])
    models = citeulike_run["ctx"].paths.table(storage.MODELS)
    rep = json.loads(storage.read_bytes(models + "/model_card.json"))["pretrain_report"]
    for v in ("pina", "pina_naive"):
        ev = rep["variants"][v]
        assert ev["heldout_rows"] == len(labels_of)
        assert ev["finetune_heldout"]["rows"] == len(held)
        assert ev["P@1"] >= max(0.25, 3 * baseline_p1), (v, ev, baseline_p1)
        assert ev["R@10"] > ev["R@1"]
    assert citeulike_run["stats"]["pina_P@1"] == rep["variants"]["pina"]["P@1"]


@pytest.mark.slow
def test_fold_models_exclude_exactly_their_fold(citeulike_run):
    _assert_folds_exclude_their_rows(citeulike_run, citeulike_run["models"], seed=0)


@pytest.mark.slow
def test_fold_seed_refits_g_on_another_split(spark, citeulike_run, tmp_path):
    """``neighbors.fold_seed: 1`` on a copy of the run: the pretrain stage refits g on split 1
    (recorded in ``folds.json`` and the card), each fold model leaves out exactly the instance
    rows of its fold under split 1, and those are other rows than under split 0."""
    from pina_spark.stages import pretrain

    root = str(tmp_path / "seed1")
    shutil.copytree(citeulike_run["ctx"].paths.root, root)
    cfg = citeulike_run["cfg"]
    cfg = cfg.replace(output=root, neighbors=dc.replace(cfg.neighbors, fold_seed=1))
    pretrain.run(_ctx(spark, cfg))
    models = os.path.join(root, storage.MODELS)
    assert json.load(open(os.path.join(models, "folds.json")))["fold_seed"] == 1
    card = json.load(open(os.path.join(models, "model_card.json")))
    assert card["config"]["neighbors"]["fold_seed"] == 1
    left = _assert_folds_exclude_their_rows(citeulike_run, models, seed=1)
    before = _assert_folds_exclude_their_rows(citeulike_run, citeulike_run["models"], seed=0)
    assert left != before


def _leaf_sizes(models, v, fold):
    """The sizes of the leaf clusters of fold model ``fold`` of variant ``v``'s g."""
    m = load_g(g_dir(models, v, fold), predict_only=False)
    return np.diff(m.model.model_chain[-1].C.tocsc().indptr)


def _model_files(models, v, fold):
    """``{file: sha256}`` of every file of a saved g but its ``g_info.json`` (which holds its
    seconds), as the stage recorded them in each folder's ``_CHECKSUMS.json``."""
    from pina_spark.models.artifacts import G_INFO
    from pina_spark.runtime.checksums import CHECKSUMS

    root, out = g_dir(models, v, fold), {}
    for d, _, names in os.walk(root):
        if CHECKSUMS in names:
            for n, digest in json.load(open(os.path.join(d, CHECKSUMS))).items():
                if n != G_INFO:
                    out[os.path.relpath(os.path.join(d, n), root)] = digest
    assert out, f"no {CHECKSUMS} under {root}"
    return out


@pytest.mark.slow
def test_naive_max_leaf_size_refits_pina_naive_alone(spark, citeulike_run, tmp_path):
    """``pretrain.naive_max_leaf_size`` on a copy of the run: ``pina_naive``'s fold models get
    leaf clusters of at most that many outputs, where ``xlinear.max_leaf_size`` gave them
    larger ones; ``pina``'s models are the same files as before (its settings are unchanged)."""
    from pina_spark.stages import pretrain

    leaf = 10
    root = str(tmp_path / "leaf")
    shutil.copytree(citeulike_run["ctx"].paths.root, root)
    cfg = citeulike_run["cfg"]
    assert cfg.pretrain.xlinear_of("pina_naive").max_leaf_size > leaf  # the fixture's: 50
    cfg = cfg.replace(output=root, pretrain=dc.replace(cfg.pretrain, naive_max_leaf_size=leaf))
    pretrain.run(_ctx(spark, cfg))
    models, before = os.path.join(root, storage.MODELS), citeulike_run["models"]
    card = json.load(open(os.path.join(models, "model_card.json")))
    assert card["config"]["pretrain"]["naive_max_leaf_size"] == leaf
    for f in range(FOLDS):
        assert _leaf_sizes(models, "pina_naive", f).max() <= leaf
        assert _leaf_sizes(before, "pina_naive", f).max() > leaf
        assert _model_files(models, "pina", f) == _model_files(before, "pina", f)
        assert _model_files(models, "pina_naive", f) != _model_files(before, "pina_naive", f)
    _assert_folds_exclude_their_rows(citeulike_run, models, seed=0)


def _assert_folds_exclude_their_rows(run, models, seed):
    """Every fold model of ``models`` leaves out exactly the instance rows of its fold under
    split ``seed`` (and keeps every output node); returns the rows each left out."""
    nodes = {n[0]: n for n in run["nodes"]}
    left = {}
    for v in ("pina", "pina_naive"):
        srcs = np.unique([e[0] for e in run["edges"] if e[4] == v])
        full_out = np.unique([e[1] for e in run["edges"] if e[4] == v])
        seen = set()
        for f in range(FOLDS):
            rows = set(np.load(os.path.join(g_dir(models, v, f), TRAIN_ROWS)).tolist())
            excluded = set(srcs.tolist()) - rows
            expect = {
                s
                for s in srcs.tolist()
                if nodes[s][1] == storage.KIND_INSTANCE and fold_of(nodes[s][2], FOLDS, seed) == f
            }
            left[(v, f)] = excluded
            assert excluded == expect and len(expect) > 0
            assert all(nodes[s][1] == storage.KIND_INSTANCE for s in excluded)
            seen |= excluded
            assert np.array_equal(
                np.load(os.path.join(g_dir(models, v, f), OUTPUT_NODES)), full_out
            )
        # every instance row is left out by exactly one fold model
        assert seen == {s for s in srcs.tolist() if nodes[s][1] == storage.KIND_INSTANCE}
    return left


@pytest.mark.slow
def test_dense_and_sparse_parts_line_up_for_graph_nodes(citeulike_run):
    """Batch Phi_pre rows of instance AND label nodes == each node vectorised alone by the encoder
    and the tf-idf, then weighted and normalised by hand."""
    phi = PhiPre.load(vectorizer_dir(citeulike_run["models"]))
    nodes = citeulike_run["nodes"]
    sample = nodes[::97][:12] + [n for n in nodes if n[1] == storage.KIND_LABEL][:4]
    texts = [n[3] for n in sample]
    dense, sparse = phi.transform(texts, batch_size=5)
    w = phi.dense_weight
    for i, t in enumerate(texts):
        dnn = phi.encoder.encode([t])[0].astype(np.float64)
        tf = phi.preprocessor.predict([t]).toarray()[0].astype(np.float64)
        d = w * dnn / np.linalg.norm(dnn)
        s = (1 - w) * tf / np.linalg.norm(tf) if np.linalg.norm(tf) > 0 else tf
        z = np.sqrt((d**2).sum() + (s**2).sum())
        assert np.allclose(dense[i], d / z, atol=2e-5), sample[i][:3]
        assert np.allclose(sparse[i].toarray()[0], s / z, atol=1e-6), sample[i][:3]


@pytest.mark.slow
def test_saved_models_reload_and_align(citeulike_run):
    """Vectorizer + g reload (predict-only) from models/ and give the stage's scores back."""
    models = citeulike_run["models"]
    phi = PhiPre.load(vectorizer_dir(models))
    nodes = citeulike_run["nodes"]
    # rows fold model 0 was trained on
    sample = [n for n in nodes if n[1] == storage.KIND_INSTANCE and fold_of(n[2], FOLDS) != 0][:40]
    X = phi.features([n[3] for n in sample])
    cfg = citeulike_run["cfg"]
    g0 = g_dir(models, "pina", 0)
    m1, out1 = load_g(g0, predict_only=True), read_output_nodes(g0)
    m2, out2 = load_g(g0, predict_only=False), read_output_nodes(g0)
    assert np.array_equal(out1, out2)
    a, b = predict_g(m1, X, cfg.pretrain.xlinear), predict_g(m2, X, cfg.pretrain.xlinear)
    assert a.shape == (len(sample), len(out1)) and a.nnz > 0
    assert np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, atol=1e-6)
    # fold model 0 was trained with these rows' labels: their top prediction is mostly a tag
    # of theirs (a model fed misaligned rows would not be)
    labels_of = {}
    for s, d, _, blk, v in citeulike_run["edges"]:
        if v == "pina" and blk == "B":
            labels_of.setdefault(s, set()).add(d)
    top = [
        out1[
            a.indices[a.indptr[r] : a.indptr[r + 1]][
                np.argmax(a.data[a.indptr[r] : a.indptr[r + 1]])
            ]
        ]
        for r in range(len(sample))
    ]
    hit = np.mean([t in labels_of[n[0]] for t, n in zip(top, sample)])
    assert hit >= 0.5, hit


@pytest.mark.slow  # ~25 s of CPU, but 4+ minutes of wall time on the shared 2-core box
def test_xtransformer_encoder_trains_and_encodes_on_cpu(spark, citeulike_dir, tmp_path):
    """encoder: xtransformer: fine-tune on a tiny B_pre (CPU, max_length 16, 4 steps), save the
    encoder under vectorizer/encoder, reload it and encode; g stays XR-Linear on Phi_pre."""
    import torch
    from safetensors.numpy import load_file

    from pina_spark.models.encoders import minilm_path

    torch.set_num_threads(2)
    nodes, edges = _citeulike_graph(citeulike_dir, n_articles=150)
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "run"),
            "pretrain": {
                "encoder": "xtransformer",
                "max_length": 16,
                "tfidf": TFIDF,
                "finetune_holdout_fraction": 0.0,
                "xtransformer": {
                    "num_train_epochs": 1,
                    "max_steps": 4,
                    "batch_size": 8,
                    "learning_rate": 5e-4,
                },
                "xlinear": {"nr_splits": 4, "max_leaf_size": 20},
            },
            "neighbors": {"train_mode": "in_sample"},
        }
    )
    ctx = _ctx(spark, cfg)
    _write_graph(spark, ctx.paths, nodes, edges)
    stats = stage1(ctx)
    models = ctx.paths.table(storage.MODELS)
    vec = vectorizer_dir(models)
    spec = json.load(open(os.path.join(vec, "encoder.json")))
    assert spec["kind"] == "xtransformer" and spec["path"] == "encoder"
    assert os.path.isdir(os.path.join(vec, "encoder", "text_encoder"))
    card = json.load(open(os.path.join(models, "model_card.json")))
    assert card["xtransformer"]["variant"] == "pina" and card["xtransformer"]["rows"] > 100
    assert not os.path.exists(g_dir(models, "pina", 0))  # in_sample: no fold models
    # the saved encoder was fine-tuned: its weights moved away from the MiniLM it started from
    base = load_file(os.path.join(minilm_path(), "model.safetensors"))
    enc_dir = os.path.join(vec, "encoder", "text_encoder", "text_encoder")
    tuned_file = [f for f in os.listdir(enc_dir) if f.endswith((".safetensors", ".bin"))][0]
    if tuned_file.endswith(".safetensors"):
        tuned = load_file(os.path.join(enc_dir, tuned_file))
    else:
        tuned = {k: v.numpy() for k, v in torch.load(os.path.join(enc_dir, tuned_file)).items()}
    key = "encoder.layer.5.output.dense.weight"
    tk = [k for k in tuned if k.endswith(key)][0]
    bk = [k for k in base if k.endswith(key)][0]
    assert tuned[tk].shape == base[bk].shape
    assert np.abs(tuned[tk] - base[bk]).max() > 1e-6
    # executors: load from the folder alone, encode, Phi_pre rows unit norm, g predicts
    phi = PhiPre.load(vec)
    assert phi.encoder.kind == "xtransformer" and phi.dense_dim == 384
    texts = [n[3] for n in nodes[:20]] + [""]
    dense, sparse = phi.transform(texts)
    norms = np.sqrt((dense**2).sum(1) + np.asarray(sparse.multiply(sparse).sum(1)).ravel())
    assert np.allclose(norms[:-1], 1.0, atol=1e-5) and norms[-1] == 0.0
    assert np.allclose(phi.encoder.encode(texts[:5]), phi.encoder.encode(texts[:5]), atol=1e-5)
    model, out_nodes = load_g(g_dir(models, "pina")), read_output_nodes(g_dir(models, "pina"))
    pred = predict_g(model, phi.features(texts[:5]), cfg.pretrain.xlinear)
    assert pred.shape == (5, len(out_nodes)) and pred.nnz > 0
    assert stats["encoder"] == "xtransformer"
