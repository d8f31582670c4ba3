"""``pretrain.encoder: contrastive``: pair choice, batches, a real fine-tune that reloads and
encodes identically on an executor, the leak guard (no test row reaches fine-tuning), and the
vectorizer parity measurement."""

import json
import os

import numpy as np
import pytest

from pina_spark import storage
from pina_spark.config import ConfigError, config_from_dict
from pina_spark.models.contrastive import choose_pairs, plan_batches
from pina_spark.models.parity import encoder_parity

TINY = {
    "epochs": 1,
    "max_pairs": 96,
    "max_length": 16,
    "batch_size": 16,
    "learning_rate": 1e-4,
    "device": "cpu",
}


# --------------------------------------------------------------------------- pure units
def _edges():
    rng = np.random.default_rng(3)
    a = [f"i{k}" for k in rng.integers(0, 40, 300)]
    p = [f"l{k}" for k in rng.integers(0, 25, 300)]
    return (a, [f"text of {x}" for x in a], ["label"] * 300, p, [f"name {x}" for x in p])


def test_choose_pairs_depends_on_ids_only():
    a, at, k, p, pt = _edges()
    ref = choose_pairs(a, at, k, p, pt, max_pairs=50, seed=1)
    perm = np.random.default_rng(0).permutation(len(a))
    shuf = choose_pairs(*[[x[i] for i in perm] for x in (a, at, k, p, pt)], max_pairs=50, seed=1)
    assert (shuf["anchors"], shuf["positives"]) == (ref["anchors"], ref["positives"])
    other = choose_pairs(a, at, k, p, pt, max_pairs=50, seed=2)
    assert other["anchors"] != ref["anchors"]  # the seed matters
    distinct = len(set(zip(a, p)))
    assert ref["pairs"] == 50 and ref["over_budget"] == distinct - 50
    assert ref["duplicates"] == 300 - distinct and ref["equal_text"] == 0


def test_choose_pairs_drops_equal_and_empty_texts():
    out = choose_pairs(
        ["a", "b", "c"],
        ["x", "same", ""],
        ["label"] * 3,
        ["l1", "l2", "l3"],
        ["y", "same", "z"],
        max_pairs=10,
        seed=0,
    )
    assert out["anchors"] == ["x"] and out["equal_text"] == 2


def test_plan_batches_no_text_twice_and_every_pair_placed():
    a, at, _, p, pt = _edges()
    kept = choose_pairs(a, at, ["label"] * len(a), p, pt, max_pairs=10**6, seed=0)
    anchors, positives = kept["anchors"], kept["positives"]
    batches = plan_batches(anchors, positives, batch_size=8, seed=5)
    assert sorted(i for b in batches for i in b) == list(range(len(anchors)))
    for b in batches:
        texts = [anchors[i] for i in b] + [positives[i] for i in b]
        assert len(texts) == len(set(texts)) and len(b) <= 8
    assert batches == plan_batches(anchors, positives, batch_size=8, seed=5)
    assert batches != plan_batches(anchors, positives, batch_size=8, seed=6)


def test_contrastive_config_is_strict():
    cfg = config_from_dict(
        {
            "output": "/tmp/x",
            "pretrain": {"encoder": "contrastive", "contrastive": {"max_pairs": 10}},
        }
    )
    assert cfg.pretrain.contrastive.max_pairs == 10 and cfg.pretrain.contrastive.symmetric
    with pytest.raises(ConfigError, match="pretrain.contrastive"):
        config_from_dict({"output": "/tmp/x", "pretrain": {"contrastive": {"max_pair": 1}}})
    with pytest.raises(ConfigError, match="batch_size"):
        config_from_dict({"output": "/tmp/x", "pretrain": {"contrastive": {"batch_size": 1}}})


def test_encoder_parity_detects_a_split_that_is_favoured():
    """Train rows placed on their labels, test rows only near them: the gap is large and
    positive; with the roles equal it is zero."""
    rng = np.random.default_rng(0)
    labels = rng.normal(size=(30, 16)).astype(np.float32)
    truth = [np.array([i % 30]) for i in range(200)]
    split = np.array(["train"] * 100 + ["test"] * 100)
    noise = rng.normal(size=(200, 16)).astype(np.float32)
    inst = (
        np.stack([labels[t[0]] for t in truth])
        + np.where(split[:, None] == "train", 0.05, 1.5) * noise
    )
    fav = encoder_parity(inst, split, truth, labels)
    assert fav["gap"]["cos_true"] > 0.2 and fav["gap"]["P@1"] > 0.2
    assert fav["train"]["rows"] == fav["test"]["rows"] == 100
    even = encoder_parity(
        np.stack([labels[t[0]] for t in truth]) + 0.3 * noise, split, truth, labels
    )
    assert abs(even["gap"]["cos_true"]) < 0.05


# --------------------------------------------------------------------------- real fine-tunes
def _weights(vec_dir):
    from safetensors.numpy import load_file

    return load_file(os.path.join(vec_dir, "encoder", "model.safetensors"))


@pytest.mark.slow
def test_fine_tune_saves_reloads_and_encodes_identically_on_an_executor(
    spark, citeulike_dir, tmp_path
):
    """A real fine-tune on a tiny citeulike-t B_pre (articles -> tag names): the vectorizer
    folder holds the tuned model, which moved away from MiniLM, and an executor that loads the
    folder alone encodes exactly as the driver's copy does."""
    import torch
    from safetensors.numpy import load_file

    from pina_spark.models.encoders import minilm_path
    from pina_spark.models.vectorizer import PhiPre

    from test_pretrain import TFIDF, _citeulike_graph, _ctx, _write_graph, stage1

    torch.set_num_threads(2)
    nodes, edges = _citeulike_graph(citeulike_dir, n_articles=150)
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "run"),
            "pretrain": {
                "encoder": "contrastive",
                "max_length": 24,
                "tfidf": TFIDF,
                "finetune_holdout_fraction": 0.0,
                "contrastive": TINY,
                "xlinear": {"nr_splits": 4, "max_leaf_size": 20},
            },
            "neighbors": {"train_mode": "in_sample"},
        }
    )
    ctx = _ctx(spark, cfg)
    _write_graph(spark, ctx.paths, nodes, edges)
    stats = stage1(ctx)
    assert stats["encoder"] == "contrastive"
    models = ctx.paths.table(storage.MODELS)
    vec = ctx.paths.table(storage.VECTORIZER)
    spec = json.load(open(os.path.join(vec, "encoder.json")))
    assert spec["kind"] == "contrastive" and spec["path"] == "encoder"
    card = json.load(open(os.path.join(models, "model_card.json")))["contrastive"]
    assert card["pairs"] == TINY["max_pairs"] and card["steps"] >= 5
    assert card["loss_last"] < card["loss_first"]
    tuned, base = _weights(vec), load_file(os.path.join(minilm_path(), "model.safetensors"))
    key = "encoder.layer.5.output.dense.weight"
    tk, bk = [k for k in tuned if k.endswith(key)][0], [k for k in base if k.endswith(key)][0]
    assert np.abs(tuned[tk] - base[bk]).max() > 1e-6

    texts = [n[3] for n in nodes[:12]] + [n[3] for n in nodes[-8:]] + [""]
    driver = PhiPre.load(vec).encoder.encode(texts)
    assert np.allclose(np.linalg.norm(driver[:-1], axis=1), 1.0, atol=1e-5)
    assert not driver[-1].any()

    def on_executor(batches):
        import pandas as pd

        from pina_spark.models.artifacts import load_vectorizer  # the embed stage's loader

        enc = load_vectorizer(vec, "cpu").encoder
        for b in batches:
            emb = enc.encode(b["text"].tolist())
            yield pd.DataFrame({"i": b["i"], "v": [e.tolist() for e in emb]})

    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i long, text string")
    rows = df.repartition(2).mapInPandas(on_executor, "i long, v array<float>").collect()
    remote = np.array([r.v for r in sorted(rows, key=lambda r: r.i)], dtype=np.float32)
    assert np.abs(remote - driver).max() <= 1e-5
    # the frozen MiniLM gives other vectors: the executor really used the tuned weights
    from pina_spark.models.encoders import load_encoder

    frozen = load_encoder({"kind": "minilm", "path": None, "max_length": 24}).encode(texts[:3])
    assert np.abs(frozen - driver[:3]).max() > 1e-4


@pytest.mark.slow
def test_fine_tuning_never_sees_a_test_row(spark, tmp_path):
    """Graph labels with co-purchase pairs (the mode where a leak is easiest): removing every
    test row from the inputs leaves the fine-tuned encoder's weights bit for bit unchanged."""
    import torch

    from pina_spark.orchestration.pipeline import make_context
    from pina_spark.stages import graph
    from pina_spark.stages.vectorizer import stage as vectorizer_stage

    from test_graph import _leak_inputs

    torch.set_num_threads(2)
    weights, cards = {}, {}
    for drop in (False, True):
        inst, ev, test, d = _leak_inputs(tmp_path, drop)
        cfg = config_from_dict(
            {
                "output": str(d / "run"),
                "side_info": "both",
                "task": {"labels": "graph"},
                "graph": {"min_count": 2, "max_basket_size": 4},
                "pretrain": {
                    "encoder": "contrastive",
                    "max_length": 16,
                    "finetune_holdout_fraction": 0.0,
                    "contrastive": {**TINY, "max_pairs": 64, "batch_size": 8},
                    "tfidf": {"ngram_range": [1, 1], "min_df_cnt": 1},
                    "xlinear": {"nr_splits": 2, "max_leaf_size": 10},
                },
                "neighbors": {"train_mode": "in_sample"},
                "input": {"instances": inst, "events": ev},
            }
        )
        ctx = make_context(spark, cfg)
        graph.run(ctx)
        vectorizer_stage.run(ctx)  # the fine-tune; g and the embeddings do not matter here
        vec = ctx.paths.table(storage.VECTORIZER)
        weights[drop] = _weights(vec)
        cards[drop] = json.load(open(os.path.join(vec, "vectorizer_card.json")))["contrastive"]
    assert cards[False]["pairs"] == cards[True]["pairs"] > 8
    assert cards[False]["candidates"] == cards[True]["candidates"]
    assert weights[False].keys() == weights[True].keys()
    for k in weights[False]:
        assert np.array_equal(weights[False][k], weights[True][k]), k


def test_candidates_skip_self_twins_and_the_heldout_items():
    """Graph labels (items a, b, c; a co-bought with b and c): candidate pairs are the instance
    rows' edges to other nodes, never self or the item's own label node; with a held-out report
    every pair that touches a held-out item, as anchor or as a label node that IS the item, is
    left out."""
    import pandas as pd

    from pina_spark.models.bpre import Nodes
    from pina_spark.models.finetune import contrastive_candidates
    from pina_spark.storage.folds import is_heldout

    from test_pretrain import _graph_labels_problem

    nodes = Nodes(
        pd.DataFrame(
            {
                storage.NODE_INDEX: [0, 1, 2, 3, 4, 5],
                storage.KIND: ["instance"] * 3 + ["label"] * 3,
                storage.NODE_ID: ["a", "b", "c", "a", "b", "c"],
                storage.TEXT: ["x"] * 6,
            }
        )
    )
    problems = {"pina": _graph_labels_problem(twins=True)}
    got = contrastive_candidates(problems, nodes, "both")
    assert sorted(zip(got["anchor"].tolist(), got["node"].tolist())) == [
        (0, 4),
        (0, 5),
        (1, 3),
        (2, 3),
    ]
    assert contrastive_candidates(problems, nodes, "instances")["anchor"].size == 0
    # a fraction that holds out exactly one of a, b, c
    frac = next(f / 100 for f in range(1, 100) if sum(is_heldout(i, f / 100) for i in "abc") == 1)
    held = [i for i in "abc" if is_heldout(i, frac)][0]
    got = contrastive_candidates(problems, nodes, "both", frac, twins=True)
    ids = {(nodes.node_id[a], nodes.node_id[n]) for a, n in zip(got["anchor"], got["node"])}
    assert ids == {p for p in {("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")} if held not in p}


def test_encoder_parity_leaves_twins_out():
    """With graph labels a train item is also a label node with its own text: that twin must not
    be ranked or averaged for it (only train items have one, so it would fake a gap)."""
    labels = np.array([[1, 0, 0], [0.8, 0.6, 0], [0, 0, 1]], dtype=np.float32)
    inst = np.array([[1, 0, 0], [1, 0, 0]], dtype=np.float32)  # a train item and a test item
    split, truth = np.array(["train", "test"]), [np.array([1]), np.array([1])]
    raw = encoder_parity(inst, split, truth, labels)
    assert raw["train"]["P@1"] == 0.0 and raw["test"]["P@1"] == 0.0  # label 0 ranks first
    fair = encoder_parity(inst, split, truth, labels, exclude=[0, -1])
    assert fair["train"]["P@1"] == 1.0 and fair["test"]["P@1"] == 0.0
    # the train row's mean over candidates leaves its twin out: (0.8 + 0) / 2
    assert fair["train"]["cos_margin"] == pytest.approx(0.8 - 0.4, abs=1e-6)
    assert raw["train"]["cos_margin"] == pytest.approx(0.8 - 1.8 / 3, abs=1e-6)
