"""Stage 2b (pina_spark.stages.aggregate): Spark features against an independent scipy reference.

The reference is written here from the definition (V0, V1 = P @ E, V = [V0, a V1], all
normalisations over the full [dense ; sparse] vector), not with the module's helpers.
"""

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from pina_spark import storage
from pina_spark.config import config_from_dict, variants
from pina_spark.models import artifacts
from pina_spark.orchestration.pipeline import make_context
from pina_spark.runtime import embstore
from pina_spark.stages import aggregate
from pina_spark.storage import features, features_csr

TOL = 1e-5


# --------------------------------------------------------------------------- fixtures helpers
def _write(path, table):
    os.makedirs(path, exist_ok=True)
    pq.write_table(table, os.path.join(path, "part-0.parquet"))
    open(os.path.join(path, "_SUCCESS"), "w").close()


def _list(values, ptr, typ):
    return pa.ListArray.from_arrays(pa.array(np.asarray(ptr, np.int32)), pa.array(values, typ))


class Case:
    """Inputs of the stage: nodes, embeddings (E = [dense | sparse], csr), neighbours."""

    def __init__(self, inst_ids, splits, label_ids, dense, sparse, nbrs, S, null_dense=()):
        self.inst_ids, self.splits, self.label_ids = list(inst_ids), list(splits), list(label_ids)
        self.dense = np.asarray(dense, np.float32)
        self.sparse = sp.csr_matrix(sparse, dtype=np.float32)
        self.sparse.sort_indices()
        self.nbrs = nbrs  # variant -> {instance_index: (neighbors list, weights list)}
        self.S = S
        self.null_dense = set(null_dense)
        self.n_inst = len(self.inst_ids)
        self.M = self.n_inst + len(self.label_ids)

    def write(self, root):
        M, n = self.M, self.n_inst
        ids = self.inst_ids + self.label_ids
        nodes = pa.table(
            {
                storage.NODE_INDEX: pa.array(np.arange(M), pa.int64()),
                storage.KIND: pa.array(
                    [storage.KIND_INSTANCE] * n + [storage.KIND_LABEL] * (M - n)
                ),
                storage.NODE_ID: pa.array(ids),
                storage.TEXT: pa.array(["t"] * M),
                storage.SPLIT: pa.array(self.splits + [None] * (M - n), pa.string()),
            }
        )
        # as Spark writes it: node_index and kind not null
        nodes = nodes.cast(
            pa.schema(
                [
                    f.with_nullable(f.name not in (storage.NODE_INDEX, storage.KIND))
                    for f in nodes.schema
                ]
            )
        )
        _write(os.path.join(root, storage.NODES), nodes)
        D = self.dense.shape[1]
        dense_ptr = np.arange(M + 1) * D
        dense = _list(self.dense.reshape(-1), dense_ptr, pa.float32())
        if self.null_dense:  # some nodes store null dense arrays (read as zeros)
            mask = np.zeros(M, bool)
            mask[list(self.null_dense)] = True
            dense = pa.array(dense.to_pylist(), pa.list_(pa.float32()), mask=mask)
        order = np.random.RandomState(1).permutation(M)  # stored order != index order
        emb = pa.table(
            {
                storage.NODE_INDEX: pa.array(np.arange(M), pa.int64()),
                storage.DENSE: dense,
                storage.SPARSE_INDICES: _list(self.sparse.indices, self.sparse.indptr, pa.int32()),
                storage.SPARSE_VALUES: _list(self.sparse.data, self.sparse.indptr, pa.float32()),
            }
        ).take(pa.array(order))
        _write(os.path.join(root, storage.EMBEDDINGS), emb)
        for v, rows in self.nbrs.items():
            keys = sorted(rows)
            nb = [rows[k][0] for k in keys]
            w = [rows[k][1] for k in keys]
            t = pa.table(
                {
                    storage.INSTANCE_INDEX: pa.array(keys, pa.int64()),
                    storage.NEIGHBOR: pa.array(nb, pa.list_(pa.int64())),
                    storage.SCORE: pa.array(w, pa.list_(pa.float32())),
                }
            )
            d = os.path.join(root, storage.NEIGHBORS, f"{storage.VARIANT}={v}")
            os.makedirs(d, exist_ok=True)
            pq.write_table(t, os.path.join(d, "part-0.parquet"))
        open(os.path.join(root, storage.NEIGHBORS, "_SUCCESS"), "w").close()

    def E(self):
        """Phi_pre of every node as float64 csr [dense | sparse] (null dense -> zeros)."""
        dense = self.dense.astype(np.float64).copy()
        dense[list(self.null_dense)] = 0
        return sp.hstack([sp.csr_matrix(dense), self.sparse.astype(np.float64)], format="csr")

    def reference(self, a):
        """variant -> (n_inst x (2D + 2S)) float64 in the features layout
        [V0_dense, aV1_dense | V0_sparse, aV1_sparse], plus vectorizer_only (D + S)."""
        D, S, n = self.dense.shape[1], self.S, self.n_inst
        E = self.E()

        def rownorm(X):
            nrm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
            inv = np.zeros_like(nrm)
            inv[nrm > 0] = 1.0 / nrm[nrm > 0]
            return sp.diags(inv) @ X

        V0 = rownorm(E[:n])
        out = {variants.VECTORIZER_ONLY: V0.tocsr()}
        for v, rows in self.nbrs.items():
            r, c, w = [], [], []
            for i, (nb, wt) in rows.items():
                r += [i] * len(nb)
                c += list(nb)
                w += list(wt)
            P = sp.csr_matrix((np.asarray(w, np.float64), (r, c)), shape=(n, self.M))
            V1 = rownorm(P @ E)
            V = rownorm(sp.hstack([V0, a * V1], format="csr")).tocsc()
            # full layout [V0d V0s V1d V1s] -> features layout [V0d V1d V0s V1s]
            W = D + S
            cols = (
                list(range(0, D))
                + list(range(W, W + D))
                + list(range(D, W))
                + list(range(W + D, 2 * W))
            )
            out[v] = V[:, cols].tocsr()
        return out


def _read_features(root):
    """variant -> pyarrow table of the published features sorted by instance_id."""
    path = os.path.join(root, storage.FEATURES)
    assert os.path.exists(os.path.join(path, "_SUCCESS"))
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    out = {}
    for v in set(t.column(storage.VARIANT).to_pylist()):
        sub = t.filter(ds.field(storage.VARIANT) == v)
        out[v] = sub.sort_by(storage.INSTANCE_ID)
    return out


def _flat_lists(col):
    """(lengths, flat numpy values) of an Arrow list column."""
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lens = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    return lens.astype(np.int64), pc.list_flatten(col).to_numpy(zero_copy_only=False)


def _as_matrix(t, dense_w, sparse_w):
    dl, dv = _flat_lists(t.column(storage.DENSE))
    assert np.all(dl == dense_w)
    dense = dv.astype(np.float64).reshape(t.num_rows, dense_w)
    li, iv = _flat_lists(t.column(storage.SPARSE_INDICES))
    lv, vv = _flat_lists(t.column(storage.SPARSE_VALUES))
    assert np.array_equal(li, lv)
    ptr = np.r_[0, np.cumsum(li)]
    row = np.repeat(np.arange(t.num_rows), li)
    # ascending and unique inside every row
    same_row = row[1:] == row[:-1]
    assert np.all(iv[1:][same_row] > iv[:-1][same_row]), "sparse indices must be ascending"
    spm = sp.csr_matrix(
        (vv.astype(np.float64), iv.astype(np.int64), ptr), shape=(t.num_rows, sparse_w)
    )
    return sp.hstack([sp.csr_matrix(dense), spm], format="csr")


def _run(spark, case, tmp, strategy, a=1.0, extra=None, S_meta=True, writer="auto"):
    root = str(tmp)
    case.write(root)
    if S_meta:
        os.makedirs(os.path.join(root, storage.VECTORIZER), exist_ok=True)
        with open(os.path.join(root, storage.VECTORIZER, "encoder.json"), "w") as fh:
            json.dump({"sparse_dim": case.S, "dense_dim": case.dense.shape[1]}, fh)
    conf = {"output": root, "aggregate": {"strategy": strategy, "v1_weight": a, "writer": writer}}
    conf.update(extra or {})
    ctx = make_context(spark, config_from_dict(conf))
    stats = aggregate.run(ctx)
    return stats, _read_features(root)


def _check_against_reference(case, feats, a, stats):
    D, S, n = case.dense.shape[1], case.S, case.n_inst
    ref = case.reference(a)
    assert set(feats) == set(ref)
    for v, R in ref.items():
        t = feats[v]
        assert t.num_rows == n, (v, t.num_rows)
        assert t.column(storage.INSTANCE_ID).to_pylist() == sorted(case.inst_ids)
        order = np.argsort(np.asarray(case.inst_ids))
        vo = v == variants.VECTORIZER_ONLY
        X = _as_matrix(t, D if vo else 2 * D, S if vo else 2 * S)
        assert np.all(np.isfinite(X.data))
        diff = abs(X - R[order]).max() if X.nnz or R.nnz else 0.0
        assert diff <= TOL, (v, diff)
        assert t.column(storage.SPLIT).to_pylist() == [case.splits[i] for i in order]
        ids = np.asarray(case.inst_ids + case.label_ids, dtype=object)
        exp = [case.nbrs.get(v, {}).get(int(i), ([], [])) for i in order]
        lens, got_ids = _flat_lists(t.column(storage.NEIGHBOR_IDS))
        assert lens.tolist() == [len(nb) for nb, _ in exp]
        exp_nb = np.asarray([j for nb, _ in exp for j in nb], dtype=np.int64)
        assert got_ids.tolist() == ids[exp_nb].tolist()
        lw, got_w = _flat_lists(t.column(storage.NEIGHBOR_WEIGHTS))
        assert np.array_equal(lw, lens)
        np.testing.assert_allclose(got_w, [x for _, w in exp for x in w], rtol=0, atol=1e-7)
        assert sum(stats["rows"][v].values()) == n


# --------------------------------------------------------------------------- citeulike-t
def _citeulike_case(d):
    rng = np.random.RandomState(0)
    rows, cols, vals = [], [], []
    with open(os.path.join(d, "mult.dat")) as fh:
        for i, line in enumerate(fh):
            for tok in line.split()[1:]:
                w, c = tok.split(":")
                rows.append(i)
                cols.append(int(w))
                vals.append(float(c))
    n = i + 1
    V = max(cols) + 1
    counts = sp.csr_matrix((vals, (rows, cols)), shape=(n, V))
    counts.sum_duplicates()
    empty = np.arange(0, n, 997)  # empty texts: zero Phi_pre
    counts = sp.diags((~np.isin(np.arange(n), empty)).astype(float)) @ counts
    counts.eliminate_zeros()
    df = np.bincount(counts.indices, minlength=V)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    tf = counts.copy()
    tf.data = 1.0 + np.log(tf.data)
    tfidf = tf @ sp.diags(idf)
    nrm = np.sqrt(np.asarray(tfidf.multiply(tfidf).sum(1)).ravel())
    tfidf = sp.diags(np.where(nrm > 0, 1 / np.maximum(nrm, 1e-30), 0)) @ tfidf
    R = rng.normal(size=(V, 32)) / np.sqrt(32)
    dense = np.asarray(tfidf @ R)
    dn = np.linalg.norm(dense, axis=1, keepdims=True)
    dense = np.where(dn > 0, dense / np.maximum(dn, 1e-30), 0)
    # Phi_pre = [w dense ; (1-w) tfidf] / ||.||, w = 0.5
    full = sp.hstack([sp.csr_matrix(0.5 * dense), 0.5 * tfidf], format="csr")
    fn = np.sqrt(np.asarray(full.multiply(full).sum(1)).ravel())
    scale = np.where(fn > 0, 1 / np.maximum(fn, 1e-30), 0)
    dense = dense * 0.5 * scale[:, None]
    tfidf = sp.diags(0.5 * scale) @ tfidf
    # labels: 300 tags, Phi_pre = normalised mean tf-idf of their items (random dense part)
    n_lab = 300
    lab_sp, lab_items = [], []
    with open(os.path.join(d, "tag-item.dat")) as fh:
        for j, line in enumerate(fh):
            if j >= n_lab:
                break
            items = [int(x) for x in line.split()[1:]]
            lab_items.append(items)
            lab_sp.append(np.asarray(tfidf[items].mean(axis=0)).ravel())
    lab_sp = sp.csr_matrix(np.vstack(lab_sp))
    lab_dense = rng.normal(size=(n_lab, 32)) * 0.05
    lab_full = sp.hstack([sp.csr_matrix(lab_dense), lab_sp], format="csr")
    ln = np.sqrt(np.asarray(lab_full.multiply(lab_full).sum(1)).ravel())
    lab_dense = lab_dense / ln[:, None]
    lab_sp = sp.diags(1 / ln) @ lab_sp
    # neighbours: up to 4 cited articles (+ 1 tag node); rows without citations: no row,
    # except every 50th of them which gets an explicit empty row
    pina, naive = {}, {}
    with open(os.path.join(d, "citations.dat")) as fh:
        cites = [[int(x) for x in line.split()[1:]] for line in fh]
    assert len(cites) == n
    for i, c in enumerate(cites):
        c = [j for j in c if j != i][:4]
        if not c:
            if i % 50 == 0:
                pina[i] = ([], [])
            continue
        nb = c + [n + (i % n_lab)]
        w = rng.uniform(0.1, 1.0, size=len(nb))
        w = (w / w.sum()).astype(np.float32)
        pina[i] = (nb, [float(x) for x in w])
        nb2 = c[::-1]
        w2 = np.full(len(nb2), 1.0 / len(nb2), np.float32)
        naive[i] = (nb2, [float(x) for x in w2])
    inst_ids = [f"a{i:05d}" for i in range(n)]
    splits = ["test" if i % 5 == 0 else "train" for i in range(n)]
    label_ids = [f"tag{j:03d}" for j in range(n_lab)]
    return Case(
        inst_ids,
        splits,
        label_ids,
        np.vstack([dense, lab_dense]),
        sp.vstack([tfidf, lab_sp]),
        {"pina": pina, "pina_naive": naive},
        S=V,
        null_dense=[n + 7],
    )


@pytest.fixture(scope="module")
def citeulike_case(citeulike_dir):
    return _citeulike_case(citeulike_dir)


@pytest.fixture(scope="module")
def citeulike_runs(spark, citeulike_case, tmp_path_factory):
    """broadcast (embeddings memory-mapped by the executors, broadcast_via auto -> files) with
    the JVM writer (storage.write_table); shuffle with the executor-side pyarrow writer
    (aggregate.writer=arrow)."""
    out = {}
    for strategy, writer in (("broadcast", "spark"), ("shuffle", "arrow")):
        tmp = tmp_path_factory.mktemp(f"cite-{strategy}")
        out[strategy] = (tmp, *_run(spark, citeulike_case, tmp, strategy, a=0.7, writer=writer))
        assert out[strategy][1]["writer"] == writer
    assert out["broadcast"][1]["broadcast_via"] == "files"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_citeulike_matches_scipy_reference(citeulike_case, citeulike_runs, strategy):
    tmp, stats, feats = citeulike_runs[strategy]
    assert stats["strategy"] == strategy
    assert citeulike_case.n_inst == 25975
    _check_against_reference(citeulike_case, feats, 0.7, stats)
    # empty-text articles without neighbours are exact zeros, never NaN
    t = feats["pina"]
    pos = {x: k for k, x in enumerate(t.column(storage.INSTANCE_ID).to_pylist())}
    zero_rows = [
        i
        for i in range(0, citeulike_case.n_inst, 997)
        if i not in citeulike_case.nbrs["pina"] or not citeulike_case.nbrs["pina"][i][0]
    ]
    assert zero_rows
    for i in zero_rows:
        k = pos[citeulike_case.inst_ids[i]]
        assert not any(t.column(storage.DENSE)[k].as_py())
        assert t.column(storage.SPARSE_INDICES)[k].as_py() == []
    meta = json.loads(open(os.path.join(str(tmp), storage.FEATURES, features.FEATURES_META)).read())
    assert meta["sparse_dim"] == citeulike_case.S and meta["dense_dim"] == 32


@pytest.mark.slow
def test_arrow_writer_table_is_the_contract(spark, citeulike_runs):
    """The executor-written table (shuffle run) reads in Spark with the contract's types and
    leaves no staging files behind."""
    tmp = citeulike_runs["shuffle"][0]
    df = spark.read.parquet(os.path.join(str(tmp), storage.FEATURES))
    assert dict(df.dtypes) == {
        storage.INSTANCE_ID: "string",
        storage.DENSE: "array<float>",
        storage.SPARSE_INDICES: "array<int>",
        storage.SPARSE_VALUES: "array<float>",
        storage.NEIGHBOR_IDS: "array<string>",
        storage.NEIGHBOR_WEIGHTS: "array<float>",
        storage.VARIANT: "string",
        storage.SPLIT: "string",
    }
    staging = os.path.join(str(tmp), "_staging")
    assert not os.path.exists(staging) or not os.listdir(staging)


@pytest.mark.slow
def test_citeulike_strategies_identical(citeulike_runs):
    """broadcast + JVM writer and shuffle + pyarrow writer store the same bits."""
    fb = citeulike_runs["broadcast"][2]
    fs = citeulike_runs["shuffle"][2]
    for v in fb:
        for col in (
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
            storage.NEIGHBOR_IDS,
            storage.NEIGHBOR_WEIGHTS,
            storage.INSTANCE_ID,
            storage.SPLIT,
        ):
            assert fb[v].column(col).equals(fs[v].column(col)), (v, col)


@pytest.mark.slow
def test_export_csr_round_trip(spark, citeulike_case, citeulike_runs, tmp_path):
    root, _, feats = citeulike_runs["broadcast"]
    S, D = citeulike_case.S, 32
    for v, split in (("pina", "test"), ("vectorizer_only", "train")):
        out = str(tmp_path / f"X.{v}.{split}.npz")
        info = features_csr.export_csr(
            spark, os.path.join(str(root), storage.FEATURES), v, split, out
        )
        X = sp.load_npz(out)
        ids = open(info["ids_path"]).read().split("\n")[:-1]
        t = feats[v].filter(ds.field(storage.SPLIT) == split)
        assert ids == t.column(storage.INSTANCE_ID).to_pylist() == sorted(ids)
        vo = v == "vectorizer_only"
        dw, sw = (D, S) if vo else (2 * D, 2 * S)
        assert X.shape == (t.num_rows, dw + sw) == (info["rows"], info["cols"])
        assert X.dtype == np.float32 and X.has_sorted_indices
        ref = _as_matrix(t, dw, sw)
        assert abs(X.astype(np.float64) - ref).max() == 0.0


# --------------------------------------------------------------------------- synthetic
def _hub_case(n=1500, n_lab=20, D=6, S=40, seed=3):
    rng = np.random.RandomState(seed)
    M = n + n_lab
    dense = rng.normal(size=(M, D)).astype(np.float32)
    sparse = sp.random(M, S, density=0.1, random_state=rng, format="csr", dtype=np.float64)
    sparse.data = rng.uniform(0.1, 1, size=sparse.nnz)
    full = sp.hstack([sp.csr_matrix(dense.astype(np.float64)), sparse], format="csr")
    nrm = np.sqrt(np.asarray(full.multiply(full).sum(1)).ravel())
    dense = (dense / nrm[:, None]).astype(np.float32)
    sparse = sp.diags(1 / nrm) @ sparse
    empty = [3, 4, 5]  # empty text: zero Phi_pre
    dense[empty] = 0
    sparse = sp.diags(np.where(np.isin(np.arange(M), empty), 0.0, 1.0)) @ sparse
    rows = {}
    for i in range(n):
        if i in (4, 9):
            continue  # no neighbours row at all
        if i == 5:
            rows[i] = ([], [])  # an empty neighbour list
            continue
        k = 5
        nb = list(rng.choice(M, size=k, replace=False))
        if i % 10 != 7:
            nb[0] = n + 1  # the hub: most rows share it
        if i % 13 == 0:
            nb[2] = nb[1]  # a duplicate neighbour sums up
        w = rng.uniform(0.05, 1, size=k)
        rows[i] = ([int(x) for x in nb], [float(x) for x in (w / w.sum()).astype(np.float32)])
    rows[3] = ([4, 5], [0.5, 0.5])  # empty text, zero neighbours
    inst_ids = [f"i{i:05d}" for i in range(n)]
    splits = ["train" if i % 3 else "test" for i in range(n)]
    return Case(
        inst_ids, splits, [f"L{j}" for j in range(n_lab)], dense, sparse, {"pina": rows}, S=S
    )


@pytest.fixture(scope="module")
def hub_case():
    return _hub_case()


@pytest.mark.slow
def test_hub_both_strategies_agree_with_reference(spark, hub_case, tmp_path):
    """Hub-heavy neighbours: broadcast (chosen by auto, S from the data; embeddings both
    memory-mapped by the executors and shipped as a Spark broadcast variable) and shuffle
    (chosen by auto with both broadcast limits 0, AQE skew-join splitting enabled with a tiny
    threshold) give the reference, and the same bits."""
    res = {}
    key = "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes"
    old = spark.conf.get(key)
    spark.conf.set(key, "4k")
    try:
        stats, feats = _run(spark, hub_case, tmp_path / "b", "auto", a=1.3, S_meta=False)
        # no encoder.json: S = max index + 1 (the random case touches every column)
        assert stats["sparse_dim"] == int(hub_case.sparse.indices.max()) + 1 == hub_case.S
        assert stats["strategy"] == "broadcast" and "auto" in stats["reason"]
        assert stats["broadcast_via"] == "files" and "mmap_max_mb" in stats["reason"]
        _check_against_reference(hub_case, feats, 1.3, stats)
        res["broadcast"] = feats
        stats, feats = _run(
            spark,
            hub_case,
            tmp_path / "bs",
            "auto",
            a=1.3,
            S_meta=False,
            extra={"aggregate": {"strategy": "auto", "broadcast_via": "spark", "v1_weight": 1.3}},
        )
        assert stats["strategy"] == "broadcast" and stats["broadcast_via"] == "spark"
        assert "broadcast_max_mb" in stats["reason"]
        _check_against_reference(hub_case, feats, 1.3, stats)
        res["broadcast_spark"] = feats
        stats, feats = _run(
            spark,
            hub_case,
            tmp_path / "s",
            "auto",
            a=1.3,
            extra={
                "aggregate": {
                    "strategy": "auto",
                    "broadcast_max_mb": 0,
                    "mmap_max_mb": 0,
                    "v1_weight": 1.3,
                }
            },
        )
        assert stats["strategy"] == "shuffle"
        _check_against_reference(hub_case, feats, 1.3, stats)
        res["shuffle"] = feats
    finally:
        spark.conf.set(key, old)
    for v in res["broadcast"]:
        for other in ("broadcast_spark", "shuffle"):
            a, b = res["broadcast"][v], res[other][v]
            assert a.column(storage.DENSE).equals(b.column(storage.DENSE)), (v, other)
            assert a.column(storage.SPARSE_VALUES).equals(b.column(storage.SPARSE_VALUES)), (
                v,
                other,
            )
    t = res["shuffle"]["pina"]
    pos = {x: k for k, x in enumerate(t.column(storage.INSTANCE_ID).to_pylist())}
    for i in (3, 4, 5):  # empty text and no (or only empty) neighbours: zeros, finite
        k = pos[f"i{i:05d}"]
        assert t.column(storage.DENSE)[k].as_py() == [0.0] * 12
        assert t.column(storage.SPARSE_VALUES)[k].as_py() == []
    i9 = pos["i00009"]  # no neighbours row: V1 = 0, so V = V0
    v0 = res["shuffle"]["vectorizer_only"]
    k0 = {x: k for k, x in enumerate(v0.column(storage.INSTANCE_ID).to_pylist())}["i00009"]
    np.testing.assert_allclose(
        t.column(storage.DENSE)[i9].as_py()[:6], v0.column(storage.DENSE)[k0].as_py(), atol=1e-7
    )
    assert t.column(storage.NEIGHBOR_IDS)[i9].as_py() == []


@pytest.mark.parametrize("via,limit", [("spark", "broadcast_max_mb"), ("files", "mmap_max_mb")])
def test_broadcast_too_large_is_refused_before_running(spark, hub_case, tmp_path, via, limit):
    with pytest.raises(ValueError, match=f"strategy=shuffle.*{limit}"):
        _run(
            spark,
            hub_case,
            tmp_path,
            "broadcast",
            extra={"aggregate": {"strategy": "broadcast", "broadcast_via": via, limit: 0}},
        )
    assert not os.path.exists(os.path.join(str(tmp_path), storage.FEATURES))


@pytest.mark.slow
def test_mapped_embeddings_follow_republished_tables(spark, tmp_path):
    """broadcast_via=files: the executors' memory-mapped copy is keyed by the table files, so
    republishing the embeddings (same run folder, same session, same Python workers) gives the
    new features, not a stale copy; one copy per key on the machine, no temp folders left."""
    case = _hub_case(n=300, n_lab=5, seed=11)
    stats, feats = _run(spark, case, tmp_path, "broadcast")
    assert stats["broadcast_via"] == "files"
    _check_against_reference(case, feats, 1.0, stats)
    case2 = _hub_case(n=300, n_lab=5, seed=12)  # same ids, other vectors
    shutil.rmtree(os.path.join(str(tmp_path), storage.EMBEDDINGS))
    stats2, feats2 = _run(spark, case2, tmp_path, "broadcast")
    _check_against_reference(case2, feats2, 1.0, stats2)
    assert not feats2["pina"].column(storage.DENSE).equals(feats["pina"].column(storage.DENSE))
    roots = set(
        spark.sparkContext.parallelize(range(4), 4).map(lambda _: embstore.mapped_root()).collect()
    )
    for root in roots:
        names = os.listdir(root)
        assert not [x for x in names if ".tmp-" in x], names
        built = [x for x in names if not x.endswith(".lock")]
        assert len(built) == len(set(built)) and all(
            os.path.exists(os.path.join(root, x, "_DONE")) for x in built
        ), names


def test_mapped_embeddings_refuse_the_driver():
    with pytest.raises(RuntimeError, match="executor side"):
        embstore.open_store(embstore.StoreSpec("e", "n", 1, 1, "x"))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_incremental_rows_computes_only_the_selected_instances(spark, hub_case, tmp_path, strategy):
    """An incremental run's rows (``ctx.incremental_rows``: node indices) gives exactly the
    selected instances' rows of the full run, in every variant."""
    import pyarrow.compute as pc

    _, full = _run(spark, hub_case, tmp_path / "full", strategy, a=1.3)
    root = str(tmp_path / "sel")
    hub_case.write(root)
    chosen = list(range(0, hub_case.n_inst, 7))
    sel_uri = os.path.join(str(tmp_path), "selection")
    _write(sel_uri, pa.table({storage.NODE_INDEX: pa.array(chosen, pa.int64())}))
    conf = {"output": root, "aggregate": {"strategy": strategy, "v1_weight": 1.3}}
    ctx = make_context(spark, config_from_dict(conf))
    ctx.incremental_rows = sel_uri
    stats = aggregate.run(ctx)
    assert stats["strategy"] == strategy
    got = _read_features(root)
    ids = sorted(hub_case.inst_ids[i] for i in chosen)
    assert set(got) == set(full)
    for v, t in got.items():
        assert t.column(storage.INSTANCE_ID).to_pylist() == ids, v
        ref = full[v].filter(pc.is_in(full[v].column(storage.INSTANCE_ID), pa.array(ids)))
        for col in t.column_names:
            assert t.column(col).equals(ref.column(col)), (v, col)


def test_choose_broadcast_via():
    assert aggregate.choose_broadcast_via("auto", "/r/embeddings", "/r/nodes")[0] == "files"
    assert aggregate.choose_broadcast_via(None, "s3://b/r/e", "s3://b/r/n")[0] == "files"
    assert aggregate.choose_broadcast_via("auto", "hdfs:///r/e", "hdfs:///r/n")[0] == "spark"
    assert aggregate.choose_broadcast_via("auto", "/r/e", None)[0] == "spark"
    assert aggregate.choose_broadcast_via("spark", "/r/e", "/r/n")[0] == "spark"
    with pytest.raises(ValueError, match="Parquet tables"):
        aggregate.choose_broadcast_via("files", None, None)
    with pytest.raises(ValueError, match="auto, files, spark"):
        aggregate.choose_broadcast_via("mmap", "/r/e", "/r/n")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_injected_fault_raises_inside_reduction(spark, tmp_path, strategy):
    case = _hub_case(n=50, n_lab=3)
    with pytest.raises(Exception, match="injected fault: stage aggregate"):
        _run(
            spark, case, tmp_path, strategy, extra={"faults": {"fail_first_attempt": ["aggregate"]}}
        )


def test_choose_writer():
    assert aggregate.choose_writer(None, "/r/_staging/features")[0] == "arrow"
    assert aggregate.choose_writer("AUTO", "file:///r/_staging/features")[0] == "arrow"
    assert aggregate.choose_writer(None, "s3://b/r/_staging/features")[0] == "arrow"
    w, why = aggregate.choose_writer(None, "hdfs:///r/_staging/features")
    assert w == "spark" and "hdfs://" in why
    assert aggregate.choose_writer(None, "s3a://b/r/_staging/features")[0] == "spark"
    assert aggregate.choose_writer("spark", "/r")[0] == "spark"
    assert aggregate.choose_writer("arrow", "hdfs:///r")[0] == "arrow"
    with pytest.raises(ValueError, match="auto, spark, arrow"):
        aggregate.choose_writer("jvm", "/r")


def test_choose_strategy_and_estimate():
    assert aggregate.choose_strategy("auto", 10, 512)[0] == "broadcast"
    assert aggregate.choose_strategy("auto", 600, 512)[0] == "shuffle"
    assert aggregate.choose_strategy("shuffle", 1, 512)[0] == "shuffle"
    with pytest.raises(ValueError, match="broadcast_max_mb"):
        aggregate.choose_strategy("broadcast", 600, 512)
    mb = embstore.estimate_mb(
        {"rows": 2**20, "dense_values": 2**20 * 384, "sparse_values": 2**20 * 20}
    )
    assert mb == pytest.approx(384 * 4 + 160 + 12)


# --------------------------------------------------------------------------- label features
def _pifa_case(n=400, n_lab=12, D=4, S=30, F=3, seed=5):
    """Instances with labels and label neighbours: label 0 has a single train instance (its
    out-of-fold centroid is empty for that instance's fold), label 11 has none."""
    case = _hub_case(n=n, n_lab=n_lab, D=D, S=S, seed=seed)
    rng = np.random.RandomState(seed)
    pairs = set()
    for i in range(n):
        for j in rng.choice(np.arange(1, n_lab - 1), size=rng.randint(1, 4), replace=False):
            pairs.add((i, n + int(j)))
    pairs.add((7, n))  # label 0: instance 7 alone (train)
    rows = {}
    for i in range(n):  # neighbours: labels (some of them the instance's own) and instances
        if i == 4:
            continue
        nb = [n + int(j) for j in rng.choice(n_lab, size=3, replace=False)] + [
            int(x) for x in rng.choice(n, size=2, replace=False)
        ]
        w = rng.uniform(0.05, 1, size=5)
        rows[i] = (nb, [float(x) for x in (w / w.sum()).astype(np.float32)])
    rows[7] = ([n, n + 11, 8], [0.5, 0.25, 0.25])
    case.nbrs = {"pina": rows}
    case.pairs = sorted(pairs)
    case.F = F
    return case


def _pifa_reference(case, mode, a, max_nnz=0, seed=0):
    """The features of ``pina`` with label features, from the definition: a label neighbour of
    a train instance of fold f is the normalised sum of its train instances outside fold f
    (of all of them for a test instance); ``text_pifa`` adds the label's own normalised row;
    then only the ``max_nnz`` largest tf-idf entries stay (ties: lower column) and the row is
    normalised again. ``seed``: the fold split (``neighbors.fold_seed``)."""
    from pina_spark.storage.folds import fold_of

    n, M, F = case.n_inst, case.M, case.F
    E = case.E().toarray()

    def unit(x):
        s = np.sqrt((x * x).sum())
        return x / s if s > 0 else x * 0

    fold = [
        fold_of(case.inst_ids[i], F, seed) if case.splits[i] == "train" else -1 for i in range(n)
    ]
    members = {
        j: [i for i, jj in case.pairs if jj == j and case.splits[i] == "train"] for j in range(n, M)
    }

    D, S = case.dense.shape[1], case.S

    def label_row(j, f):
        c = unit(sum((E[i] for i in members[j] if f < 0 or fold[i] != f), np.zeros(E.shape[1])))
        c = unit(c + unit(E[j])) if mode == "text_pifa" else c
        if max_nnz:
            nz = [col for col in range(D, D + S) if c[col] != 0]
            keep = sorted(nz, key=lambda col: (-abs(c[col]), col))[:max_nnz]
            c = c.copy()
            c[[col for col in nz if col not in keep]] = 0
        return unit(c)

    out = np.zeros((n, 2 * (D + S)))
    for i in range(n):
        v0 = unit(E[i])
        nb, w = case.nbrs["pina"].get(i, ([], []))
        v1 = sum(
            (wt * (label_row(j, fold[i]) if j >= n else E[j]) for j, wt in zip(nb, w)),
            np.zeros(E.shape[1]),
        )
        v1 = unit(v1)
        v = np.concatenate([v0, a * v1])
        v = unit(v)
        W = D + S
        out[i] = np.concatenate([v[:D], v[W : W + D], v[D:W], v[W + D :]])
    return out


#: the tf-idf entries a label feature keeps in the tests: binding (centroids of this case hold
#: nearly all S = 30 columns), so the reference checks the cap too
CAP = 12


def _run_label_features(spark, case, root, strategy, aggregate, fold_seed=0):
    """The aggregate stage on ``case`` with its instance labels written, ``v1_weight`` 1.2, the
    ``aggregate`` settings given and g's F folds of split ``fold_seed``."""
    il = pa.table(
        {
            storage.INSTANCE_INDEX: pa.array([i for i, _ in case.pairs], pa.int64()),
            storage.LABEL_INDEX: pa.array([j for _, j in case.pairs], pa.int64()),
        }
    )
    _write(os.path.join(str(root), storage.INSTANCE_LABELS), il)
    return _run(
        spark,
        case,
        root,
        strategy,
        a=1.2,
        extra={
            "aggregate": {"strategy": strategy, **aggregate, "v1_weight": 1.2},
            "neighbors": {"folds": case.F, "fold_seed": fold_seed},
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pifa", "text_pifa"])
def test_label_features_match_the_out_of_fold_reference(spark, tmp_path, mode):
    """aggregate.label_features pifa / text_pifa: every strategy and transport gives the
    reference built from the definition (out-of-fold centroids for train rows, full ones for
    test rows), the published neighbour ids are the labels' own, the scratch table is gone,
    and vectorizer_only does not change."""
    case = _pifa_case()
    res = {}
    for name, agg in [
        ("files", {"strategy": "broadcast", "broadcast_via": "files"}),
        ("spark", {"strategy": "broadcast", "broadcast_via": "spark"}),
        ("shuffle", {"strategy": "shuffle"}),
    ]:
        root = tmp_path / name
        stats, feats = _run_label_features(
            spark,
            case,
            root,
            agg["strategy"],
            aggregate=dict(agg, label_features=mode, label_features_max_nnz=CAP),
        )
        assert stats["label_features"] == mode
        assert stats["label_features_rows"] == (case.F + 1) * len(case.label_ids)
        t = feats["pina"]
        order = np.argsort(np.asarray(case.inst_ids))
        X = _as_matrix(t, 2 * case.dense.shape[1], 2 * case.S).toarray()
        R = _pifa_reference(case, mode, 1.2, CAP)[order]
        assert np.abs(X - R).max() <= TOL, (name, np.abs(X - R).max())
        ids = np.asarray(case.inst_ids + case.label_ids, dtype=object)
        exp = [case.nbrs["pina"].get(int(i), ([], []))[0] for i in order]
        assert t.column(storage.NEIGHBOR_IDS).to_pylist() == [list(ids[e]) for e in exp]
        ref0 = case.reference(1.2)[variants.VECTORIZER_ONLY][order].toarray()
        X0 = _as_matrix(feats[variants.VECTORIZER_ONLY], case.dense.shape[1], case.S).toarray()
        assert np.abs(X0 - ref0).max() <= TOL
        left = os.listdir(os.path.join(str(root), storage.STAGING))
        assert not [x for x in left if "label_features" in x], left
        res[name] = t
    for other in ("spark", "shuffle"):
        assert res["files"].column(storage.DENSE).equals(res[other].column(storage.DENSE)), other


@pytest.mark.slow
def test_label_features_follow_the_fold_seed(spark, tmp_path):
    """With ``neighbors.fold_seed`` the out-of-fold centroids follow g's other split: a train
    row aggregates its labels without the train rows of its fold under that seed (the
    reference with the seed), which here differs from split 0's."""
    case = _pifa_case()
    _, feats = _run_label_features(
        spark, case, tmp_path, "broadcast", {"label_features": "pifa"}, fold_seed=2
    )
    order = np.argsort(np.asarray(case.inst_ids))
    X = _as_matrix(feats["pina"], 2 * case.dense.shape[1], 2 * case.S).toarray()
    want = _pifa_reference(case, "pifa", 1.2, seed=2)[order]
    assert np.abs(X - want).max() <= TOL
    assert np.abs(X - _pifa_reference(case, "pifa", 1.2)[order]).max() > 0.01


@pytest.mark.slow
def test_label_features_follow_the_folds_of_g_over_the_config(spark, tmp_path):
    """A run with ``run.models`` routes its neighbours by the models' ``folds.json``, whatever
    its own ``neighbors`` section says; the label features' centroids follow the same folds
    (they used the config's: here F + 1 folds and split 0 against g's F folds of split 2)."""
    case = _pifa_case()
    models = os.path.join(str(tmp_path), storage.MODELS)
    os.makedirs(models, exist_ok=True)
    with open(os.path.join(models, artifacts.FOLDS_JSON), "w") as fh:
        json.dump({"folds": case.F, "fold_seed": 2, "train_mode": "out_of_fold"}, fh)
    il = pa.table(
        {
            storage.INSTANCE_INDEX: pa.array([i for i, _ in case.pairs], pa.int64()),
            storage.LABEL_INDEX: pa.array([j for _, j in case.pairs], pa.int64()),
        }
    )
    _write(os.path.join(str(tmp_path), storage.INSTANCE_LABELS), il)
    stats, feats = _run(
        spark,
        case,
        tmp_path,
        "broadcast",
        a=1.2,
        extra={
            "aggregate": {"strategy": "broadcast", "label_features": "pifa", "v1_weight": 1.2},
            "neighbors": {"folds": case.F + 1, "fold_seed": 0},
        },
    )
    assert stats["label_features_rows"] == (case.F + 1) * len(case.label_ids)
    order = np.argsort(np.asarray(case.inst_ids))
    X = _as_matrix(feats["pina"], 2 * case.dense.shape[1], 2 * case.S).toarray()
    assert np.abs(X - _pifa_reference(case, "pifa", 1.2, seed=2)[order]).max() <= TOL


def test_label_features_differ_from_text_where_a_label_is_aggregated():
    """The reference of ``pifa`` is not the reference of ``text`` on this case (so the test
    above could fail), and an instance that is its label's only train row gets nothing from
    that label's out-of-fold centroid."""
    case = _pifa_case()
    text = case.reference(1.2)["pina"].toarray()  # the features layout, as below
    pifa = _pifa_reference(case, "pifa", 1.2)
    assert np.abs(pifa - text).max() > 0.05
    capped = _pifa_reference(case, "pifa", 1.2, CAP)
    assert np.abs(capped - pifa).max() > 0.01  # the cap binds on this case
    # instance 7: neighbours label 0 (only train row: 7 itself), label 11 (no train rows), 8
    i7 = _pifa_reference(case, "pifa", 1.0)[7]
    E = case.E().toarray()
    D, S = case.dense.shape[1], case.S
    v1 = np.concatenate([i7[D : 2 * D], i7[2 * D + S :]])
    e8 = np.concatenate([E[8, :D], E[8, D:]])
    e8 = e8 / np.sqrt((e8 * e8).sum())
    np.testing.assert_allclose(v1 / np.sqrt((v1 * v1).sum()), e8, atol=1e-9)
