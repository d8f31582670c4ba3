"""Stage 2a on Spark (pina_spark/stages/neighbors/): embeddings and neighbours equal single-process
PhiPre / PECOS on the same rows, are identical across partitionings, load each model once per
worker, route train rows to their out-of-fold model, and fail naming a broken artifact.

One tiny run is built once per module: 150 instances + 24 labels with topical texts, a real
Phi_pre (MiniLM + PECOS tf-idf), and PECOS g models (full + 3 folds, variants pina/pina_naive)
trained the way docs/design.md describes B_pre.
"""

import dataclasses as dc
import glob
import json
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from pina_spark import config, runtime, storage
from pina_spark.models import artifacts
from pina_spark.orchestration import pipeline
from pina_spark.runtime import arrow as inference_arrow
from pina_spark.runtime import embstore, faults
from pina_spark.stages.embed import stage as embed_stage
from pina_spark.stages.neighbors import files as inference_files
from pina_spark.stages.neighbors import plan as neighbors_plan
from pina_spark.stages.neighbors import stage as neighbors_stage
from pina_spark.stages.neighbors import topk
from pina_spark.storage import folds

N_INST, N_LAB, N_TOPICS, F = 150, 24, 6, 3
BATCH = 16


def _texts(rng):
    words = [
        [
            f"{w}{t}"
            for w in (
                "alpha",
                "beta",
                "gamma",
                "delta",
                "omega",
                "sigma",
                "kappa",
                "theta",
                "zeta",
                "rho",
            )
        ]
        for t in range(N_TOPICS)
    ]
    inst = []
    for i in range(N_INST):
        t = i % N_TOPICS
        u = int(rng.integers(N_TOPICS))
        txt = " ".join(list(rng.choice(words[t], 5)) + list(rng.choice(words[u], 2)))
        inst.append((f"doc{i:04d}", txt, "test" if i % 5 == 0 else "train", t))
    labs = [
        (f"tag{j:03d}", "label " + " ".join(rng.choice(words[j % N_TOPICS], 3)), j % N_TOPICS)
        for j in range(N_LAB)
    ]
    return inst, labs


def _csr_rows(dense_lists, idx_lists, val_lists, sparse_dim):
    from pina_spark.models.vectorizer import stack_features

    dense = np.array(dense_lists, dtype=np.float32)
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in idx_lists])])
    S = sp.csr_matrix(
        (
            np.concatenate(val_lists).astype(np.float32) if indptr[-1] else [],
            np.concatenate(idx_lists).astype(np.int32) if indptr[-1] else [],
            indptr,
        ),
        shape=(len(idx_lists), sparse_dim),
        dtype=np.float32,
    )
    return stack_features(dense, S)


def _train_g(X, Y):
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    X = X.tocsr().astype(np.float32)
    X.sort_indices()
    Y = sp.csr_matrix(Y, dtype=np.float32)
    Y.sort_indices()
    emb = LabelEmbeddingFactory.create(Y, X, method="pifa")
    C = Indexer.gen(emb, indexer_type="hierarchicalkmeans", nr_splits=4, max_leaf_size=8, seed=0)
    return XLinearModel.train(X, Y, C=C, threshold=0.0)


def _save_g(model, out_nodes, d):
    model.save(d)
    np.save(os.path.join(d, artifacts.OUTPUT_NODES), np.asarray(out_nodes, dtype=np.int64))
    open(os.path.join(d, "_SUCCESS"), "w").close()


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory):
    from pyspark.sql import Row

    from pina_spark.models.vectorizer import PhiPre

    root = str(tmp_path_factory.mktemp("inference-run"))
    rng = np.random.default_rng(7)
    inst, labs = _texts(rng)
    inst.sort()
    labs.sort()
    rows = [
        Row(node_index=i, kind=storage.KIND_INSTANCE, node_id=a, text=t, split=s)
        for i, (a, t, s, _) in enumerate(inst)
    ]
    rows += [
        Row(node_index=N_INST + j, kind=storage.KIND_LABEL, node_id=a, text=t, split=None)
        for j, (a, t, _) in enumerate(labs)
    ]
    cfg = config.config_from_dict(
        {
            "output": root,
            "input": {"instances": os.path.join(root, "in.parquet")},
            "neighbors": {"k": 5, "folds": F, "train_mode": "out_of_fold"},
            "inference": {"rows_per_task": 19, "batch_size": BATCH},
        }
    )
    ctx = pipeline.make_context(spark, cfg)
    storage.write_table(
        spark.createDataFrame(rows, storage.schema(storage.NODES)), ctx.paths, storage.NODES
    )

    models = ctx.models_root
    pcfg = config.PretrainConfig(
        tfidf={"ngram_range": [1, 1], "min_df_cnt": 0, "max_df_ratio": 1.0, "norm": "l2"}
    )
    phi = PhiPre.fit([r.text for r in rows if r.split != "test"], pcfg)
    vec = artifacts.vectorizer_dir(models)
    phi.save(vec)
    open(f"{vec}/_SUCCESS", "w").close()
    os.makedirs(models, exist_ok=True)
    open(f"{models}/folds.json", "w").write(json.dumps({"folds": F, "rule": "folds.fold_of"}))
    open(f"{models}/_SUCCESS", "w").close()

    embed_stats = embed_stage.run(ctx)

    # g models on X = Phi_pre (from the published embeddings), B_pre as in docs/design.md
    emb = (
        storage.read_table(spark, ctx.paths, storage.EMBEDDINGS)
        .toPandas()
        .sort_values(storage.NODE_INDEX)
    )
    X = _csr_rows(
        list(emb[storage.DENSE]),
        list(emb[storage.SPARSE_INDICES]),
        list(emb[storage.SPARSE_VALUES]),
        phi.sparse_dim,
    )
    topic = {i: t for i, (_, _, _, t) in enumerate(inst)}
    topic.update({N_INST + j: t for j, (_, _, t) in enumerate(labs)})
    train = [i for i, r in enumerate(rows[:N_INST]) if r.split == "train"]
    lab_nodes = list(range(N_INST, N_INST + N_LAB))
    fold = {i: folds.fold_of(rows[i].node_id, F) for i in train}
    inst_labels = {i: [n for n in lab_nodes if topic[n] == topic[i]][: 1 + i % 3] for i in train}

    def build(variant, skip_fold):
        tr = [i for i in train if fold[i] != skip_fold]
        if variant == "pina_naive":
            inputs, outputs = tr, lab_nodes
            edges = [(i, n) for i in tr for n in inst_labels[i]]
        else:  # every model of a variant has one output space, as the pretrain stage makes them
            inputs, outputs = tr + lab_nodes, train + lab_nodes
            edges = [(i, n) for i in tr for n in inst_labels[i]] + [(i, i) for i in tr]
            edges += [(n, n) for n in lab_nodes] + [(n, i) for i in tr for n in inst_labels[i]]
        r_of = {v: k for k, v in enumerate(inputs)}
        c_of = {v: k for k, v in enumerate(outputs)}
        Y = sp.coo_matrix(
            (np.ones(len(edges)), ([r_of[a] for a, _ in edges], [c_of[b] for _, b in edges])),
            shape=(len(inputs), len(outputs)),
        ).tocsr()
        Y.data[:] = 1.0
        return _train_g(X[inputs], Y), outputs

    for variant in neighbors_plan.VARIANTS:
        for f in [None] + list(range(F)):
            m, outs = build(variant, f)
            d = artifacts.g_dir(models, variant, f)
            os.makedirs(d)
            _save_g(m, outs, d)
    nb_stats = neighbors_stage.run(ctx)
    return dict(
        ctx=ctx,
        cfg=cfg,
        phi=phi,
        rows=rows,
        X=X,
        embed_stats=embed_stats,
        nb_stats=nb_stats,
        models=models,
        root=root,
    )


# --------------------------------------------------------------------------- helpers
def _with(ctx, **sections):
    cfg = ctx.cfg
    for name, changes in sections.items():
        cfg = cfg.replace(**{name: dc.replace(getattr(cfg, name), **changes)})
    return dc.replace(ctx, cfg=cfg)


def _collect_neighbors(df):
    return {
        (r[storage.VARIANT], r[storage.INSTANCE_INDEX]): (
            list(r[storage.NEIGHBOR]),
            list(r[storage.SCORE]),
        )
        for r in df.collect()
    }


def _model_loader(models, variant):
    """``fold -> (PECOS model, output nodes)`` of one variant, each loaded once."""
    from pecos.xmc.xlinear.model import XLinearModel

    cache = {}

    def model(f):
        if f not in cache:
            d = artifacts.g_dir(models, variant, f)
            m = XLinearModel.load(d, is_predict_only=True)
            cache[f] = (m, np.load(os.path.join(d, artifacts.OUTPUT_NODES)))
        return cache[f]

    return model


def _cross_reference(fold_models, x, onodes, nb):
    """A test row's scores from every fold model, one model and one candidate at a time."""

    def allowed(node):
        if nb.node_kinds == "labels":
            return node >= N_INST
        return node < N_INST if nb.node_kinds == "instances" else True

    extra = 2 if nb.leave_self_out else 0
    n_bad = sum(not allowed(int(n)) for n in onodes)
    topk = min(len(onodes), nb.k + extra + n_bad, max(100, 10 * (nb.k + extra)))
    full = [m.predict(x, only_topk=len(onodes), threads=1).toarray()[0] for m in fold_models]
    tops = [[c for c in np.argsort(-p, kind="stable")[:topk] if p[c] != 0] for p in full]
    agg = np.zeros(len(onodes))
    for p, top in zip(full, tops):
        agg[top] += p[top]
    return sp.csr_matrix(agg / len(fold_models))


def _reference(env, nb, variants=neighbors_plan.VARIANTS, seed=0):
    """Single-process: PECOS predict of every instance row with the model(s) it must use, then
    filtering / ordering / weighting written as plain Python loops. Out of fold, a test row
    takes every fold model (cross-fitting): each model's top ``topk`` scores averaged (0 where a
    model did not return the candidate); ``topk`` is the stage's rule: k + 2 (self and twin) +
    the outputs node_kinds excludes, capped at max(100, 10 (k + 2)). ``seed``: the fold split
    the models were trained on (their ``folds.json``)."""
    rows, X = env["rows"], env["X"]
    out, used = {}, {}
    oof = nb.train_mode == "out_of_fold"
    for variant in variants:
        model = _model_loader(env["models"], variant)
        for i, r in enumerate(rows[:N_INST]):
            if oof:
                f = folds.fold_of(r.node_id, F, seed) if r.split == "train" else "cross"
            else:
                f = None
            if f == "cross":
                onodes = model(0)[1]
                y = _cross_reference([model(g)[0] for g in range(F)], X[i], onodes, nb)
            else:
                m, onodes = model(f)
                y = m.predict(X[i], only_topk=m.nr_labels, threads=1).tocsr()
            cand = []
            for c, s in zip(y.indices, y.data):
                node = int(onodes[c])
                if nb.leave_self_out and node == i:
                    continue
                if nb.node_kinds == "labels" and node < N_INST:
                    continue
                if nb.node_kinds == "instances" and node >= N_INST:
                    continue
                cand.append((-float(s), node))
            cand.sort()
            top = cand[: nb.k]
            s = np.array([-c for c, _ in top], dtype=np.float64)
            if nb.weighting == "softmax":
                e = np.exp((s - s.max()) / nb.temperature) if len(s) else s
                s = e / e.sum() if len(s) else s
            elif nb.weighting == "l1":
                if (s < 0).any():
                    s = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                s = s / s.sum() if len(s) and s.sum() > 0 else s
            out[(variant, i)] = ([n for _, n in top], list(s))
            used[(variant, i)] = f
    return out, used


def _assert_same(got, ref, tol=1e-6):
    assert set(got) == set(ref)
    for key in ref:
        assert got[key][0] == ref[key][0], key
        np.testing.assert_allclose(got[key][1], ref[key][1], atol=tol, err_msg=str(key))


# --------------------------------------------------------------------------- embeddings
@pytest.mark.slow
def test_embeddings_equal_single_process_phi_pre(env, spark):
    ctx, phi, rows = env["ctx"], env["phi"], env["rows"]
    emb = (
        storage.read_table(spark, ctx.paths, storage.EMBEDDINGS)
        .toPandas()
        .sort_values(storage.NODE_INDEX)
    )
    assert emb[storage.NODE_INDEX].tolist() == list(range(len(rows)))  # every node, once
    texts = [r.text for r in rows]
    # node-order blocks: not the stage's batches (length-sorted), the same numbers within 1e-5
    for s in range(0, len(texts), BATCH):
        dense, sparse = phi.transform(texts[s : s + BATCH], batch_size=BATCH)
        for j in range(dense.shape[0]):
            e = emb.iloc[s + j]
            np.testing.assert_allclose(np.asarray(e[storage.DENSE]), dense[j], atol=1e-5)
            row = sparse[j]
            assert list(e[storage.SPARSE_INDICES]) == row.indices.tolist()
            np.testing.assert_allclose(np.asarray(e[storage.SPARSE_VALUES]), row.data, atol=1e-5)
    norms = [
        np.sum(np.square(d)) + np.sum(np.square(v))
        for d, v in zip(emb[storage.DENSE], emb[storage.SPARSE_VALUES])
    ]
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


@pytest.mark.slow
def test_embed_stage_loads_the_vectorizer_once_per_worker(env):
    st = env["embed_stats"]
    assert st["rows"] == st["rows_written"] == N_INST + N_LAB
    assert st["partitions"] == 10  # ceil(174 / 19)
    assert st["max_loads_per_worker_model"] == 1
    assert 1 <= st["model_loads"] == st["worker_processes"] < st["partitions"]


@pytest.mark.slow
def test_embeddings_identical_across_partitionings(env, spark):
    ctx = env["ctx"]
    nodes = storage.read_table(spark, ctx.paths, storage.NODES)
    n = len(env["rows"])
    vec = artifacts.vectorizer_dir(env["models"])
    results = []
    for parts in (1, 3):
        inf = dc.replace(ctx.cfg.inference, rows_per_task=-(-n // parts))
        df = embed_stage.embed_frame(nodes, vec, inf, n)
        results.append(
            sorted(tuple((r[0], tuple(r[1]), tuple(r[2]), tuple(r[3]))) for r in df.collect())
        )
    published = storage.read_table(spark, ctx.paths, storage.EMBEDDINGS).collect()
    results.append(
        sorted(
            tuple(
                (
                    r[storage.NODE_INDEX],
                    tuple(r[storage.DENSE]),
                    tuple(r[storage.SPARSE_INDICES]),
                    tuple(r[storage.SPARSE_VALUES]),
                )
            )
            for r in published
        )
    )  # 8 parts
    assert results[0] == results[1] == results[2]


@pytest.mark.slow
def test_embed_batches_are_length_sorted_on_any_partitioning(env, spark, tmp_path, monkeypatch):
    """Each encoder call gets ``batch_size`` consecutive nodes of the whole table sorted by
    (text length, node index), on any partitioning and whatever the rank chunks, with the
    numbers of a single-process call on those texts; the Spark SQL length equals
    :func:`plan.text_length`."""
    from pina_spark.stages.embed import plan as plan_mod
    from pina_spark.stages.embed import stage as embed_mod

    ctx, phi, rows = env["ctx"], env["phi"], env["rows"]
    n = len(rows)
    nodes = storage.read_table(spark, ctx.paths, storage.NODES)
    vec = artifacts.vectorizer_dir(env["models"])
    texts = {r.node_index: r.text for r in rows}
    probe = [None, "", "shoe", "\U0001f600 smile", "x" * 5000]
    sql = spark.createDataFrame([(t,) for t in probe], "text string").selectExpr(
        f"{plan_mod.LENGTH_SQL} AS n"
    )
    assert [r.n for r in sql.collect()] == [plan_mod.text_length(t) for t in probe]
    order = sorted(texts, key=lambda i: (plan_mod.text_length(texts[i]), i))
    expected = [order[s : s + BATCH] for s in range(0, n, BATCH)]
    assert len({plan_mod.text_length(texts[i]) for i in order}) > 3 and len(expected) > 3
    log_path = str(tmp_path / "calls.txt")

    def load_recording(local_dir, device):
        inner = artifacts.load_vectorizer(local_dir, device)

        class Recording:
            def transform(self, batch_texts, batch_size):
                with open(log_path, "a") as fh:
                    fh.write(json.dumps([list(batch_texts), batch_size]) + "\n")
                return inner.transform(batch_texts, batch_size=batch_size)

        return Recording()

    results = []
    for parts, chunk in ((1, plan_mod.RANK_CHUNK), (3, 7)):  # 7: ranks within many chunks
        monkeypatch.setattr(embed_mod, "RANK_CHUNK", chunk)
        open(log_path, "w").close()
        inf = dc.replace(ctx.cfg.inference, rows_per_task=-(-n // parts))
        df = embed_stage.embed_frame(
            nodes, vec, inf, n, version=f"b{parts}", load_fn=load_recording
        )
        got = sorted((r[0], tuple(r[1]), tuple(r[2]), tuple(r[3])) for r in df.collect())
        calls = [json.loads(x) for x in open(log_path).read().split("\n") if x]
        assert {bs for _, bs in calls} == {BATCH}
        # every call's texts are exactly one expected batch's texts (texts may repeat)
        call_texts = sorted(sorted(t) for t, _ in calls)
        assert call_texts == sorted(sorted(texts[i] for i in b) for b in expected), parts
        results.append(got)
    assert results[0] == results[1]
    for batch in expected:
        dense, sparse = phi.transform([texts[i] for i in batch], batch_size=BATCH)
        for j, i in enumerate(batch):
            idx, d, si, sv = results[0][i]
            assert idx == i
            np.testing.assert_allclose(np.asarray(d), dense[j], atol=1e-5)
            assert list(si) == sparse[j].indices.tolist()


# --------------------------------------------------------------------------- neighbours
@pytest.mark.slow
def test_neighbors_equal_single_process_pecos_out_of_fold(env, spark):
    ctx = env["ctx"]
    got = _collect_neighbors(storage.read_table(spark, ctx.paths, storage.NEIGHBORS))
    ref, used = _reference(env, ctx.cfg.neighbors)
    _assert_same(got, ref)
    for (_v, i), (nodes, scores) in got.items():
        assert len(nodes) == ctx.cfg.neighbors.k and i not in nodes
        assert abs(sum(scores) - 1.0) < 1e-5
        assert scores == sorted(scores, reverse=True)
    st = env["nb_stats"]
    assert st["rows"] == N_INST and st["variants"]["pina"]["rows"] == N_INST
    per_model = st["variants"]["pina"]["rows_per_model"]
    n_train = sum(r.split == "train" for r in env["rows"][:N_INST])
    assert per_model["cross"] == N_INST - n_train  # test rows: every fold model together
    assert sum(per_model[f"fold={f}"] for f in range(F)) == n_train
    # every worker loaded every model it needed exactly once (8 models, 8 tasks)
    assert st["max_loads_per_worker_model"] == 1


@pytest.mark.slow
def test_out_of_fold_routes_train_rows_to_their_fold_model(env, spark):
    ctx = env["ctx"]
    nb = ctx.cfg.neighbors
    oof, used = _reference(env, nb, ["pina"])
    full, _ = _reference(env, dc.replace(nb, train_mode="in_sample"), ["pina"])
    train = [i for i, r in enumerate(env["rows"][:N_INST]) if r.split == "train"]
    assert all(used[("pina", i)] == folds.fold_of(env["rows"][i].node_id, F) for i in train)
    # the fold models demonstrably differ from the full model on the rows they never saw...
    differ = [i for i in train if oof[("pina", i)][0] != full[("pina", i)][0]]
    assert len(differ) >= len(train) // 4
    # ...and the published table follows the fold model (previous test), not the full one
    got = _collect_neighbors(storage.read_table(spark, ctx.paths, storage.NEIGHBORS))
    assert all(got[("pina", i)][0] == oof[("pina", i)][0] for i in differ)
    # test instances use every fold model together (cross-fitting), never a full model
    test_rows = [i for i, r in enumerate(env["rows"][:N_INST]) if r.split == "test"]
    assert test_rows and all(used[("pina", i)] == "cross" for i in test_rows)


@pytest.mark.slow
def test_test_rows_are_cross_fitted_from_the_fold_models(env, spark, tmp_path):
    """Out of fold, a test row's neighbours come from every fold model together (cross-fitting):
    with the full models deleted from a copy of the models folder, the stage runs, predicts the
    test rows with the F fold models' scores averaged, and equals the single-process reference;
    train rows keep their own fold's model."""
    models = _copy_models(env, tmp_path / "no_full")
    for v in neighbors_plan.VARIANTS:
        shutil.rmtree(artifacts.g_dir(models, v))  # g/<v>/full: never needed out of fold
    ctx = dc.replace(env["ctx"], models_root=models)
    df, info = neighbors_stage.neighbors_frame(spark, ctx)
    assert info["cross_fit"] == "mean" and "pina/full" not in info["models"]
    got = _collect_neighbors(df)
    ref, used = _reference(env, ctx.cfg.neighbors)
    _assert_same(got, ref)
    test_rows = [i for i, r in enumerate(env["rows"][:N_INST]) if r.split == "test"]
    assert test_rows and all(used[("pina", i)] == "cross" for i in test_rows)
    # the combination matters: the full model (trained on every train row) ranks differently
    full, _ = _reference(env, dc.replace(ctx.cfg.neighbors, train_mode="in_sample"), ["pina"])
    assert any(got[("pina", i)][1] != full[("pina", i)][1] for i in test_rows)


@pytest.mark.slow
def test_train_rows_follow_the_split_the_models_were_trained_on(env, spark, tmp_path):
    """Fold models trained on split 4 (``fold_seed`` in their ``folds.json``): a train row
    takes the fold model of its fold under split 4, on both paths (the executors' stored hash
    units and the JVM's routing, re-checked in Python), and equals the single-process
    reference with that split. Routing by split 0 instead would give other neighbours."""
    models = _copy_models(env, tmp_path / "seed4")
    doc = json.load(open(f"{models}/folds.json"))
    json.dump({**doc, "fold_seed": 4}, open(f"{models}/folds.json", "w"))
    train = [i for i, r in enumerate(env["rows"][:N_INST]) if r.split == "train"]
    moved = [
        i
        for i in train
        if folds.fold_of(env["rows"][i].node_id, F, 4) != folds.fold_of(env["rows"][i].node_id, F)
    ]
    assert len(moved) > len(train) // 3
    ref, used = _reference(env, env["ctx"].cfg.neighbors, seed=4)
    old, _ = _reference(env, env["ctx"].cfg.neighbors)
    assert any(ref[("pina", i)] != old[("pina", i)] for i in moved)
    for via in ("files", "shuffle"):
        c = _with(env["ctx"], inference={"embeddings_via": via}, neighbors={"fold_seed": 4})
        df, info = neighbors_stage.neighbors_frame(spark, dc.replace(c, models_root=models))
        assert info["embeddings_via"] == via and info["fold_seed"] == 4
        _assert_same(_collect_neighbors(df), ref)
    assert all(used[("pina", i)] == folds.fold_of(env["rows"][i].node_id, F, 4) for i in train)


@pytest.mark.slow
def test_neighbors_identical_across_partitionings(env, spark):
    ctx = env["ctx"]
    got = []
    for parts in (1, 3):
        c = _with(ctx, inference={"rows_per_task": -(-N_INST // parts)})
        df, info = neighbors_stage.neighbors_frame(spark, c)
        # rounded up to a multiple of the task slots (local[2]: 2 and 4 tasks)
        slots = runtime.task_slots(spark)
        assert info["partitions"] == -(-parts // slots) * slots
        got.append(sorted((k, v) for k, v in _collect_neighbors(df).items()))
    assert env["nb_stats"]["partitions"] == 8  # the published table
    got.append(
        sorted(_collect_neighbors(storage.read_table(spark, ctx.paths, storage.NEIGHBORS)).items())
    )
    assert got[0] == got[1] == got[2]


@pytest.mark.slow
def test_embeddings_via_files_and_shuffle_give_identical_neighbors(env, spark):
    """The published table came from the memory-mapped embeddings (auto -> files on local
    paths); joining the embedding rows in Spark (shuffle) gives the same bits, in both
    train modes."""
    st = env["nb_stats"]
    assert st["embeddings_via"] == "files" and st["instances_without_embeddings"] == 0
    published = _collect_neighbors(storage.read_table(spark, env["ctx"].paths, storage.NEIGHBORS))
    for mode in ("out_of_fold", "in_sample"):
        got = {}
        for via in ("files", "shuffle"):
            c = _with(env["ctx"], inference={"embeddings_via": via}, neighbors={"train_mode": mode})
            df, info = neighbors_stage.neighbors_frame(spark, c)
            assert info["embeddings_via"] == via
            got[via] = _collect_neighbors(df)
        assert got["files"] == got["shuffle"]
        if mode == "out_of_fold":
            assert got["files"] == published


@pytest.mark.slow
def test_both_modes_count_instances_without_embeddings(env, spark, tmp_path):
    """An instance node without an embedding row gets no neighbours row in both modes, and
    both count them (manifest statistic + warning) instead of losing them silently: files in
    its tasks, shuffle on the driver, where an incremental run counts only its selection."""
    base = env["ctx"]
    paths = storage.RunPaths(str(tmp_path / "holes"))
    shutil.copytree(
        storage.local_path(base.paths.table(storage.NODES)),
        storage.local_path(paths.table(storage.NODES)),
    )
    holes = [3, 4, 77]
    emb = storage.read_table(spark, base.paths, storage.EMBEDDINGS)
    storage.write_table(emb.where(~emb[storage.NODE_INDEX].isin(holes)), paths, storage.EMBEDDINGS)
    got = {}
    for via in ("files", "shuffle"):
        c = _with(dc.replace(base, paths=paths), inference={"embeddings_via": via})
        st = neighbors_stage.run(c)
        got[via] = _collect_neighbors(storage.read_table(spark, paths, storage.NEIGHBORS))
        assert st["rows"] == N_INST - len(holes)
        assert st["instances_without_embeddings"] == len(holes), via
    assert got["files"] == got["shuffle"]
    assert not {i for _, i in got["files"]} & set(holes)
    # an incremental run's selection: only its own holes count (4 and 77, not 3)
    sel_uri = str(tmp_path / "selection")
    spark.createDataFrame([(4,), (5,), (77,)], [storage.NODE_INDEX]).write.parquet(sel_uri)
    c = dc.replace(base, paths=paths, incremental_rows=sel_uri)
    assert neighbors_stage.count_without_embeddings(spark, c) == 2


def test_store_features_equal_features_from_arrow(tmp_path):
    """embstore.features (rows gathered from the memory-mapped copy) builds the same X as
    features_from_arrow on the same embedding rows, including an all-null row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pina_spark.runtime import embstore

    rng = np.random.default_rng(3)
    D, S, n = 4, 9, 12
    dense = [list(rng.normal(size=D).astype(np.float32)) for _ in range(n)]
    dense[5] = None
    idx = [
        sorted(rng.choice(S, size=int(rng.integers(0, 4)), replace=False).tolist())
        for _ in range(n)
    ]
    val = [list(rng.random(len(x)).astype(np.float32)) for x in idx]
    node = (np.arange(n) * 3 + 1).tolist()  # sparse node indices, unsorted files
    tbl = pa.table(
        {
            storage.NODE_INDEX: pa.array(node, pa.int64()),
            storage.DENSE: pa.array(dense, pa.list_(pa.float32())),
            storage.SPARSE_INDICES: pa.array(idx, pa.list_(pa.int32())),
            storage.SPARSE_VALUES: pa.array(val, pa.list_(pa.float32())),
        }
    )
    os.makedirs(tmp_path / "emb")
    os.makedirs(tmp_path / "nodes")
    pq.write_table(tbl.slice(6), str(tmp_path / "emb" / "part-0.parquet"))
    pq.write_table(tbl.slice(0, 6), str(tmp_path / "emb" / "part-1.parquet"))
    open(tmp_path / "emb" / "_SUCCESS", "w").close()
    pq.write_table(
        pa.table(
            {
                storage.NODE_INDEX: pa.array(node, pa.int64()),
                storage.NODE_ID: [f"n{i}" for i in node],
            }
        ),
        str(tmp_path / "nodes" / "part-0.parquet"),
    )
    spec = embstore.StoreSpec(str(tmp_path / "emb"), str(tmp_path / "nodes"), D, S, key="test")
    out = str(tmp_path / "store")
    embstore._build(spec, out)
    E = {k: np.load(os.path.join(out, k + ".npy")) for k in embstore._MAPPED_FILES}
    E.update(dense_dim=D, sparse_dim=S)
    want = [7, 16, 1, 34, 19]  # node indices, any order
    rows = embstore.store_rows(E, want + [2, -1, 999])
    assert (rows[len(want) :] == -1).all()
    X = embstore.features(E, rows[: len(want)], D + S + 2)
    pos = [node.index(w) for w in want]
    ref = inference_arrow.features_from_arrow(tbl.take(pos), D, D + S + 2)
    np.testing.assert_array_equal(X.toarray(), ref.toarray())
    assert X.has_sorted_indices and X.dtype == np.float32
    with pytest.raises(ValueError, match="different vectorizers"):
        embstore.features(E, rows[:2], D + S - 1)


def test_features_from_arrow_equal_the_coo_construction():
    """features_from_arrow builds X in place (features_csr) and gives exactly the csr matrix of
    the COO construction it replaced: sliced and chunked columns, null lists (no entries),
    short dense lists, explicit zeros kept, unsorted and repeated sparse columns summed; and it
    refuses lists that do not fit g."""
    import pyarrow as pa
    import scipy.sparse as sp

    rng = np.random.default_rng(7)
    D, S, n = 5, 11, 40
    dense = [
        list(rng.normal(size=int(rng.integers(0, D + 1))).astype(np.float32)) for _ in range(n)
    ]
    dense[3], dense[4] = None, [0.0] * D
    idx = [rng.integers(0, S, size=int(rng.integers(0, 6))).tolist() for _ in range(n)]
    idx[7] = None
    val = [None if x is None else list(rng.random(len(x)).astype(np.float32)) for x in idx]
    val[8] = [0.0] * len(idx[8])
    tbl = pa.table(
        {
            storage.DENSE: pa.array(dense, pa.list_(pa.float32())),
            storage.SPARSE_INDICES: pa.array(idx, pa.list_(pa.int32())),
            storage.SPARSE_VALUES: pa.array(val, pa.list_(pa.float32())),
        }
    )
    for t in (tbl, tbl.slice(5, 30), pa.concat_tables([tbl.slice(0, 17), tbl.slice(17)])):
        rows, cols, vals = [], [], []
        for r, (d, i, v) in enumerate(
            zip(
                *(
                    t.column(c).to_pylist()
                    for c in (storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES)
                )
            )
        ):
            for j, x in enumerate(d or []):
                rows.append(r), cols.append(j), vals.append(x)
            for j, x in zip(i or [], v or []):
                rows.append(r), cols.append(j + D), vals.append(x)
        ref = sp.csr_matrix(
            (np.array(vals, np.float32), (rows, cols)), shape=(t.num_rows, D + S + 3)
        )
        ref.sum_duplicates()
        ref.sort_indices()
        X = inference_arrow.features_from_arrow(t, D, D + S + 3)
        assert X.dtype == np.float32 and X.has_canonical_format
        np.testing.assert_array_equal(X.indptr, ref.indptr)
        np.testing.assert_array_equal(X.indices, ref.indices)
        np.testing.assert_array_equal(X.data, ref.data)
        if t is tbl:  # the explicit zeros of row 4 are kept
            part = slice(X.indptr[4], X.indptr[5])
            dense4 = X.indices[part] < D
            assert dense4.sum() == D and not X.data[part][dense4].any()
    with pytest.raises(ValueError, match="different vectorizers"):
        inference_arrow.features_from_arrow(tbl, D, D + S - 1)
    with pytest.raises(ValueError, match="longer than dense_dim"):
        inference_arrow.features_from_arrow(tbl, D - 1, D + S)
    bad = tbl.set_column(2, storage.SPARSE_VALUES, pa.array([[1.0]] * n, pa.list_(pa.float32())))
    with pytest.raises(ValueError, match="differ in length"):
        inference_arrow.features_from_arrow(bad, D, D + S)


def _store_of(nodes_tbl):
    """An in-memory store (the node facts of embstore) of a nodes table, for task_rows."""
    from pina_spark.runtime import embstore

    size = int(max(nodes_tbl.column(storage.NODE_INDEX).to_pylist()) + 1)
    kind, twin, unit = embstore.node_facts(nodes_tbl, size)
    return {"kind": kind, "twin": twin, "fold_unit": unit}


def _nodes_table(n, seed):
    """A nodes table with shuffled indices: instances (train / test / null split), labels
    (every 4th instance id is also a label: its twin) and another kind."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    idx = rng.permutation(n + n // 4 + 3)
    rows = []
    for j in range(n):
        rows.append(
            (
                int(idx[j]),
                f"item{j}",
                storage.KIND_INSTANCE,
                [storage.SPLIT_TRAIN, storage.SPLIT_TEST, None][j % 3],
            )
        )
    for j in range(n // 4):
        rows.append((int(idx[n + j]), f"item{4 * j}", storage.KIND_LABEL, None))
    for j in range(3):
        rows.append((int(idx[n + n // 4 + j]), f"other{j}", "other", None))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    return pa.table(
        {
            storage.NODE_INDEX: pa.array([r[0] for r in rows], pa.int64()),
            storage.NODE_ID: [r[1] for r in rows],
            storage.KIND: [r[2] for r in rows],
            storage.SPLIT: pa.array([r[3] for r in rows], pa.string()),
        }
    ), rows


def test_node_facts_kinds_twins_and_fold_units():
    """The store's node facts: kind codes, the twin label of an item that is also a label, and
    fold units that give exactly folds.fold_of for train instances (any number of folds)."""
    from pina_spark.runtime import embstore

    tbl, rows = _nodes_table(40, 1)
    size = max(r[0] for r in rows) + 1
    kind, twin, unit = embstore.node_facts(tbl, size)
    label_of = {r[1]: r[0] for r in rows if r[2] == storage.KIND_LABEL}
    code = {
        storage.KIND_INSTANCE: embstore.KIND_INSTANCE,
        storage.KIND_LABEL: embstore.KIND_LABEL,
        "other": embstore.KIND_OTHER,
    }
    for i, nid, k, split in rows:
        assert kind[i] == code[k]
        want_twin = label_of.get(nid, -1) if k == storage.KIND_INSTANCE else -1
        assert twin[i] == want_twin, (i, nid)
        for n_folds, seed in ((2, 0), (3, 0), (7, 0), (3, 1), (7, 5)):
            got = int(folds.fold_of_unit(unit[[i]], n_folds, seed)[0])
            want = (
                folds.fold_of(nid, n_folds, seed)
                if (k == storage.KIND_INSTANCE and split == storage.SPLIT_TRAIN)
                else -1
            )
            assert got == want
    assert sum(1 for t in twin if t >= 0) == 10
    assert kind.size == size and (kind == embstore.KIND_NONE).sum() == 0


@pytest.mark.parametrize("n_folds", [0, 3])
def test_task_rows_cover_every_instance_once_in_route_order(n_folds):
    """The slices of 1, 3 and 8 tasks are contiguous pieces of one (route, node index) order:
    together every instance node exactly once, sizes within one row of each other."""
    tbl, rows = _nodes_table(53, 2)
    E = _store_of(tbl)
    inst = sorted(r for r in rows if r[2] == storage.KIND_INSTANCE)
    route = {
        i: (folds.fold_of(nid, n_folds) if n_folds and s == storage.SPLIT_TRAIN else -1)
        for i, nid, _, s in inst
    }
    want = sorted(route, key=lambda i: (route[i], i))
    for n_tasks in (1, 3, 8):
        got, sizes = [], []
        for t in range(n_tasks):
            nodes, routes = inference_files.task_rows(
                inference_files.task_order(E, n_folds), n_tasks, t
            )
            assert routes.tolist() == [route[i] for i in nodes.tolist()]
            got += nodes.tolist()
            sizes.append(len(nodes))
        assert got == want
        assert max(sizes) - min(sizes) <= 1
    sel = np.array(sorted(want[::4] + [r[0] for r in rows if r[2] == storage.KIND_LABEL][:2]))
    order = inference_files.task_order(E, n_folds, sel)
    got = [i for t in range(3) for i in inference_files.task_rows(order, 3, t)[0].tolist()]
    assert got == [i for i in want if i in set(sel.tolist())]


def test_route_chunks_split_at_route_changes_and_batch_size():
    chunks = inference_files.route_chunks(np.array([-1, -1, -1, 0, 0, 2]), 2)
    assert chunks == [(0, 2), (2, 3), (3, 5), (5, 6)]
    assert inference_files.route_chunks(np.zeros(0, np.int64), 4) == []


def test_task_files_are_replaced_by_a_retry_and_empty_variants_keep_the_schema(tmp_path):
    """write_task_files: one file per variant under variant=<v>/, written under a hidden name
    and renamed, so a second attempt of the task replaces it (no duplicate, no temp file left);
    a variant without rows still gets a readable empty file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = inference_arrow.neighbors_arrow_schema()
    t = pa.table(
        {
            storage.INSTANCE_INDEX: pa.array([2, 5], pa.int64()),
            storage.NEIGHBOR: pa.array([[1, 3], []], pa.list_(pa.int64())),
            storage.SCORE: pa.array([[0.75, 0.25], []], pa.list_(pa.float32())),
            storage.VARIANT: ["pina", "pina"],
        },
        schema=schema,
    )
    sink = neighbors_plan.Sink(uri=str(tmp_path / "stage"), compression="zstd")
    for attempt in (0, 1):
        meta = inference_files.write_task_files(
            {"pina": t, "pina_naive": schema.empty_table()}, sink, 7, attempt
        )
        assert meta.column(0).to_pylist() == ["pina", "pina_naive"]
        assert meta.column(1).to_pylist() == [2, 0]
    files = sorted(
        os.path.relpath(p, tmp_path / "stage")
        for p in glob.glob(str(tmp_path / "stage" / "**" / "*"), recursive=True)
        if os.path.isfile(p)
    )
    assert files == ["variant=pina/part-00007.parquet", "variant=pina_naive/part-00007.parquet"]
    assert not glob.glob(str(tmp_path / "stage" / "*" / ".*"))
    got = pq.read_table(str(tmp_path / "stage" / "variant=pina" / "part-00007.parquet"))
    assert got.column_names == [storage.INSTANCE_INDEX, storage.NEIGHBOR, storage.SCORE]
    assert got.column(storage.NEIGHBOR).to_pylist() == [[1, 3], []]
    empty = pq.read_table(str(tmp_path / "stage" / "variant=pina_naive" / "part-00007.parquet"))
    assert empty.num_rows == 0 and empty.schema.equals(got.schema)


@pytest.mark.slow
def test_files_mode_tasks_write_the_published_files(env, spark, tmp_path):
    """With embeddings_via: files the tasks themselves wrote the published table (pyarrow): one
    file per task and variant, rows in instance_index order; Spark reads it with the contract
    schema; the sink frame reports every instance once per variant."""
    import pyarrow.parquet as pq

    st = env["nb_stats"]
    assert st["writer"] == "arrow" and st["embeddings_via"] == "files"
    final = storage.local_path(env["ctx"].paths.table(storage.NEIGHBORS))
    for v in st["variants"]:
        files = sorted(glob.glob(os.path.join(final, f"{storage.VARIANT}={v}", "*.parquet")))
        assert len(files) == st["partitions"]
        for f in files:
            idx = pq.read_table(f).column(storage.INSTANCE_INDEX).to_pylist()
            assert idx == sorted(idx)
    got_types = {
        f.name: f.dataType
        for f in storage.read_table(spark, env["ctx"].paths, storage.NEIGHBORS).schema.fields
    }
    want = {f.name: f.dataType for f in storage.schema(storage.NEIGHBORS).fields}
    assert {k: got_types[k] for k in want} == want and storage.VARIANT in got_types
    sink = neighbors_plan.Sink(uri=str(tmp_path / "sink"), compression="snappy")
    meta, info = neighbors_stage.neighbors_frame(spark, env["ctx"], sink=sink)
    assert info["writer"] == "arrow"
    got = meta.collect()
    assert len(got) == info["partitions"] * len(info["variants"])
    for v in info["variants"]:
        assert sum(r["rows"] for r in got if r["variant"] == v) == N_INST
    c = _with(env["ctx"], inference={"embeddings_via": "shuffle"})
    assert neighbors_stage.neighbors_frame(spark, c, sink=sink)[1]["writer"] == "spark"


@pytest.mark.slow
def test_g_mmap_gives_identical_neighbors_and_one_compiled_copy_per_machine(env, spark):
    """g in PECOS' memory-mapped form (the default, neighbors_stage.g_mmap) predicts exactly what
    the saved model does; every worker of the machine maps the same compiled folder."""
    assert env["nb_stats"]["g_mmap"] is True
    published = _collect_neighbors(storage.read_table(spark, env["ctx"].paths, storage.NEIGHBORS))
    c = _with(env["ctx"], inference={"g_mmap": False})
    df, info = neighbors_stage.neighbors_frame(spark, c)
    assert info["g_mmap"] is False
    assert _collect_neighbors(df) == published
    gdir = artifacts.g_dir(env["models"], "pina", 0)

    def compile_twice(batches):
        import os

        import pyarrow as pa

        from pina_spark.models.artifacts import g_mmap_copy

        for b in batches:
            a = g_mmap_copy(gdir)
            done = os.stat(os.path.join(a, "_DONE")).st_mtime_ns
            again = g_mmap_copy(gdir)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([a] * b.num_rows),
                    pa.array(
                        [again == a and done == os.stat(os.path.join(a, "_DONE")).st_mtime_ns]
                        * b.num_rows
                    ),
                ],
                ["dir", "reused"],
            )

    got = spark.range(0, 4, 1, 4).mapInArrow(compile_twice, "dir string, reused boolean").collect()
    assert len({r["dir"] for r in got}) == 1 and all(r["reused"] for r in got)
    assert os.path.exists(os.path.join(got[0]["dir"], "param.json"))
    with pytest.raises(RuntimeError, match="executor"):
        artifacts.g_mmap_copy(gdir)


def test_choose_embeddings_via():
    assert embstore.choose_embeddings_via("files", "/r/e", "/r/n", 1)[0] == "files"
    assert embstore.choose_embeddings_via("auto", "gs://b/e", "gs://b/n", 8192)[0] == "shuffle"
    with pytest.raises(ValueError, match="embeddings_via=files"):
        embstore.choose_embeddings_via("files", "hdfs:///r/e", "hdfs:///r/n", 8192)
    with pytest.raises(ValueError, match="not one of"):
        embstore.choose_embeddings_via("mmap", "/r/e", "/r/n", 8192)


@pytest.mark.slow
def test_embeddings_via_auto_respects_the_mmap_limit(env):
    p = env["ctx"].paths
    e, n = p.table(storage.EMBEDDINGS), p.table(storage.NODES)
    assert embstore.choose_embeddings_via("auto", e, n, 8192)[0] == "files"
    via, why = embstore.choose_embeddings_via("auto", e, n, 0)
    assert via == "shuffle" and "mmap_max_mb" in why


@pytest.mark.slow
def test_twin_label_excluded_only_with_graph_labels(env, spark, tmp_path):
    """task.labels graph: an item's label node (same node_id) is excluded like self. With given
    labels, ids of labels and instances are separate namespaces: an id clash excludes nothing."""
    import shutil

    from pyspark.sql import Row

    base = _with(env["ctx"], neighbors={"train_mode": "in_sample"})
    ref = _collect_neighbors(neighbors_stage.neighbors_frame(spark, base)[0])
    pick = {}  # instance -> a label node among its pina neighbours
    for (v, i), (nodes, _) in sorted(ref.items()):
        lab = next((n for n in nodes if n >= N_INST), None)
        if v == "pina" and lab is not None and lab not in pick.values():
            pick[i] = lab
        if len(pick) == 3:
            break
    assert len(pick) == 3
    new_id = {lab: env["rows"][i].node_id for i, lab in pick.items()}
    rows = [
        Row(**{**r.asDict(), "node_id": new_id.get(r.node_index, r.node_id)}) for r in env["rows"]
    ]
    paths = storage.RunPaths(str(tmp_path / "twins"))
    storage.write_table(
        spark.createDataFrame(rows, storage.schema(storage.NODES)), paths, storage.NODES
    )
    for rel in (storage.EMBEDDINGS, storage.VECTORIZER, storage.MODELS):
        shutil.copytree(
            storage.local_path(base.paths.table(rel)), storage.local_path(paths.table(rel))
        )
    for labels, excluded in (("given", False), ("graph", True)):
        c = _with(
            dc.replace(base, paths=paths, models_root=paths.table(storage.MODELS)),
            task={"labels": labels},
        )
        got = _collect_neighbors(neighbors_stage.neighbors_frame(spark, c)[0])
        for i, lab in pick.items():
            assert (lab not in got[("pina", i)][0]) == excluded, (labels, i, lab)
            if not excluded:
                assert got[("pina", i)] == ref[("pina", i)]
            assert len(got[("pina", i)][0]) == base.cfg.neighbors.k


@pytest.mark.slow
def test_in_sample_labels_only_softmax(env, spark):
    ctx = _with(
        env["ctx"],
        neighbors={
            "train_mode": "in_sample",
            "node_kinds": "labels",
            "weighting": "softmax",
            "temperature": 0.5,
            "k": 3,
        },
    )
    df, info = neighbors_stage.neighbors_frame(spark, ctx)
    assert info["folds"] == 0 and info["models"] == ["pina/full", "pina_naive/full"]
    got = _collect_neighbors(df)
    ref, _ = _reference(env, ctx.cfg.neighbors)
    _assert_same(got, ref)
    assert all(n >= N_INST for nodes, _ in got.values() for n in nodes)


def test_normalize_scores_branches():
    s = np.array([[2.0, 1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    c = np.array([2, 2, 0])
    l1 = topk.normalize_scores(s, c, "l1")
    np.testing.assert_allclose(l1[0], [2 / 3, 1 / 3, 0])
    z = np.exp(1) + np.exp(-1)
    np.testing.assert_allclose(l1[1], [np.exp(1) / z, np.exp(-1) / z, 0])  # softmax, then L1
    assert l1[2].tolist() == [0, 0, 0]
    sm = topk.normalize_scores(s, c, "softmax", temperature=2.0)
    np.testing.assert_allclose(sm[0, :2], np.exp([1.0, 0.5]) / np.exp([1.0, 0.5]).sum())
    assert topk.normalize_scores(s, c, "raw")[1].tolist() == [1.0, -1.0, 0.0]


def test_topk_ties_by_node_index_and_exclusions():
    Y = sp.csr_matrix(np.array([[0.5, 0.5, 0.9, 0.5, 0.2]], dtype=np.float32))
    col_map = np.array([9, 4, 7, -1, 3])  # column 3 is not an allowed neighbour
    nodes, scores, counts = topk.topk_neighbors(Y, col_map, np.array([7]), np.array([-1]), 3)
    assert nodes[0].tolist() == [4, 9, 3] and counts.tolist() == [3]
    nodes, _, counts = topk.topk_neighbors(Y, col_map, np.array([7]), np.array([9]), 5)
    assert nodes[0, : counts[0]].tolist() == [4, 3]


# --------------------------------------------------------------------------- failures
def _copy_models(env, root) -> str:
    """A copy of the run's two model folders (vectorizer and g's) under ``root``; returns the
    copy's models folder."""
    for rel in (storage.VECTORIZER, storage.MODELS):
        shutil.copytree(storage.local_path(env["ctx"].paths.table(rel)), os.path.join(root, rel))
    return os.path.join(str(root), storage.MODELS)


@pytest.mark.slow
def test_corrupt_g_fails_naming_the_artifact(env, spark, tmp_path):
    models = _copy_models(env, tmp_path / "other")
    bad = artifacts.g_dir(models, "pina_naive", 0)
    for p in glob.glob(os.path.join(bad, "**", "*.npz"), recursive=True):
        open(p, "wb").write(b"not a numpy archive")
    ctx = dc.replace(env["ctx"], models_root=models)
    df, _ = neighbors_stage.neighbors_frame(spark, ctx)
    with pytest.raises(Exception) as ei:
        df.collect()
    assert bad in str(ei.value)


@pytest.mark.slow
def test_missing_models_fail_naming_the_artifact(env, spark, tmp_path):
    models = _copy_models(env, tmp_path / "copy")
    shutil.rmtree(artifacts.g_dir(models, "pina", 1))
    ctx = dc.replace(env["ctx"], models_root=models)
    with pytest.raises(storage.InputError, match="g/pina/fold=1"):
        neighbors_stage.neighbors_frame(spark, ctx)
    os.remove(f"{artifacts.vectorizer_dir(models)}/encoder.json")
    with pytest.raises(storage.InputError, match="vectorizer/encoder.json"):
        embed_stage.run(ctx)
    os.remove(f"{artifacts.vectorizer_dir(models)}/_SUCCESS")
    with pytest.raises(storage.InputError, match="vectorizer.*_SUCCESS"):
        embed_stage.run(ctx)
    os.remove(f"{models}/_SUCCESS")
    with pytest.raises(storage.InputError, match="_SUCCESS"):
        neighbors_stage.run(ctx)


@pytest.mark.slow
def test_injected_fault_reaches_the_executor_function(env, spark):
    plan = faults.fault_plan(
        config.config_from_dict(
            {"output": "/tmp/x", "faults": {"fail_first_attempt": ["neighbors"]}}
        ),
        "neighbors",
    )
    df, _ = neighbors_stage.neighbors_frame(spark, env["ctx"], fault_plan=plan)
    with pytest.raises(Exception, match="injected fault: stage neighbors"):
        df.collect()


@pytest.mark.parametrize("seed", [0, 3])
def test_fold_expr_matches_folds_module(spark, seed):
    """The JVM's fold of an id (Spark SQL) is the Python one, for split 0 and another split."""
    from pyspark.sql import functions as sf

    ids = [f"item-{i}" for i in range(300)] + ["", "ünï", "a\x1fb"]
    df = spark.createDataFrame([(i,) for i in ids], "id string")
    expr = folds.fold_expr(sf.col("id"), 7, seed)
    got = {r.id: r.f for r in df.select("id", expr.alias("f")).collect()}
    assert got == {i: folds.fold_of(i, 7, seed) for i in ids}
    if seed:  # another split: most ids change fold
        assert sum(got[i] != folds.fold_of(i, 7) for i in ids) > len(ids) // 2
