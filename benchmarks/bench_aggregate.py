"""Benchmark of the aggregate stage against a single-machine scipy reference.

For each size N: N instance nodes with K neighbours drawn among them, Phi_pre = 384 dense dims
plus a tf-idf-like sparse part of ~20 non-zeros per node (S = 100,000), jointly unit-normalised,
synthetic and seeded (numpy). The inputs are written as the published ``nodes``,
``embeddings`` and ``neighbors`` Parquet tables of a run; then, in the same process:

* ``spark_s``: :func:`pina_spark.stages.aggregate.run` on ``local[2]`` (strategy ``auto``; the
  session is started and warmed up before the clock starts), from the Parquet inputs to the
  published ``features`` table (variants ``pina`` and ``vectorizer_only``);
* ``reference_s``: the same outputs computed with ``scipy.sparse`` on the driver alone
  (``P @ E``, pyarrow Parquet read and write, same compression), from the same inputs.

Usage::

    python benchmarks/bench_aggregate.py --json /tmp/bench_aggregate.json --sizes 20000,200000
    python benchmarks/bench_aggregate.py --json /tmp/b.json --writer arrow   # executor writer

Writes ``{"results": [{"n", "spark_s", "reference_s", "ratio", ...}, ...], "config": ...}`` and
logs the ratio and the time per instance of each size.
"""

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pina_spark import storage  # noqa: E402

log = logging.getLogger("bench_aggregate")

D_DENSE = 384
NNZ = 20
S_DIM = 100_000
K = 5
CHUNK = 100_000


# --------------------------------------------------------------------------- data
def _touch(path):
    open(os.path.join(path, "_SUCCESS"), "w").close()


def generate(root, n, seed=0):
    """Write nodes, embeddings, neighbors (variant pina) of a run with ``n`` instances."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.RandomState(seed)
    for rel in (storage.NODES, storage.EMBEDDINGS, storage.NEIGHBORS + "/variant=pina"):
        os.makedirs(os.path.join(root, rel), exist_ok=True)
    writers = {}
    try:
        for c0 in range(0, n, CHUNK):
            c1 = min(n, c0 + CHUNK)
            m = c1 - c0
            idx = np.arange(c0, c1, dtype=np.int64)
            ids = pa.array([f"x{i:09d}" for i in range(c0, c1)])
            nodes = pa.table(
                {
                    storage.NODE_INDEX: idx,
                    storage.KIND: pa.array([storage.KIND_INSTANCE] * m),
                    storage.NODE_ID: ids,
                    storage.TEXT: pa.array([""] * m),
                    storage.SPLIT: pa.array(np.where(idx % 5 == 0, "test", "train")),
                }
            )
            dense = rng.standard_normal((m, D_DENSE)).astype(np.float32)
            nnz = rng.randint(NNZ // 2, NNZ * 3 // 2 + 1, size=m)
            ptr = np.r_[0, np.cumsum(nnz)].astype(np.int32)
            sidx = np.empty(ptr[-1], np.int32)
            for_rows = rng.randint(0, S_DIM, size=ptr[-1]).astype(np.int32)
            # sort within rows (vectorised: sort by (row, index)), duplicates nudged apart
            row = np.repeat(np.arange(m), nnz)
            order = np.lexsort((for_rows, row))
            sidx[:] = for_rows[order]
            dup = np.r_[False, (sidx[1:] == sidx[:-1]) & (row[1:] == row[:-1])]
            sidx[dup] = (sidx[dup] + 1) % S_DIM  # rare; may unsort, fine for a benchmark
            sval = rng.uniform(0.1, 1.0, size=ptr[-1]).astype(np.float32)
            sq = (dense.astype(np.float64) ** 2).sum(1) + np.bincount(
                row, weights=sval.astype(np.float64) ** 2, minlength=m
            )
            inv = (1.0 / np.sqrt(sq)).astype(np.float32)
            dense *= inv[:, None]
            sval *= np.repeat(inv, nnz)
            emb = pa.table(
                {
                    storage.NODE_INDEX: idx,
                    storage.DENSE: pa.ListArray.from_arrays(
                        pa.array(np.arange(m + 1, dtype=np.int32) * D_DENSE), dense.reshape(-1)
                    ),
                    storage.SPARSE_INDICES: pa.ListArray.from_arrays(pa.array(ptr), pa.array(sidx)),
                    storage.SPARSE_VALUES: pa.ListArray.from_arrays(pa.array(ptr), pa.array(sval)),
                }
            )
            nb = rng.randint(0, n, size=(m, K)).astype(np.int64)
            w = rng.uniform(0.05, 1.0, size=(m, K))
            w = (w / w.sum(1, keepdims=True)).astype(np.float32)
            kptr = pa.array(np.arange(m + 1, dtype=np.int32) * K)
            nbr = pa.table(
                {
                    storage.INSTANCE_INDEX: idx,
                    storage.NEIGHBOR: pa.ListArray.from_arrays(kptr, nb.reshape(-1)),
                    storage.SCORE: pa.ListArray.from_arrays(kptr, w.reshape(-1)),
                }
            )
            for rel, t in (
                (storage.NODES, nodes),
                (storage.EMBEDDINGS, emb),
                (storage.NEIGHBORS + "/variant=pina", nbr),
            ):
                if rel not in writers:
                    writers[rel] = pq.ParquetWriter(
                        os.path.join(root, rel, "part-0.parquet"), t.schema, compression="zstd"
                    )
                writers[rel].write_table(t)
    finally:
        for wr in writers.values():
            wr.close()
    for rel in (storage.NODES, storage.EMBEDDINGS, storage.NEIGHBORS):
        _touch(os.path.join(root, rel))
    os.makedirs(os.path.join(root, storage.VECTORIZER), exist_ok=True)
    with open(os.path.join(root, storage.VECTORIZER, "encoder.json"), "w") as fh:
        json.dump({"dense_dim": D_DENSE, "sparse_dim": S_DIM}, fh)


# --------------------------------------------------------------------------- reference
def reference(root, out, a=1.0, chunk=200_000):
    """Single-machine scipy: read the Parquet inputs, V = [V0, a V1] / ||.|| with
    V1 = normalise(P @ E), write pina and vectorizer_only features as Parquet.

    E (dense + CSR) is held whole; the instances go through in chunks of ``chunk`` rows
    (``P[chunk] @ E``), each written as row groups of the per (variant, split) files, so the
    reference fits in memory at 2M instances (E alone is ~3.3 GB there)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import scipy.sparse as sp

    def flat(col):
        col = col.combine_chunks()
        return pc.list_flatten(col).to_numpy(), pc.list_value_length(col).fill_null(
            0
        ).to_numpy().astype(np.int64)

    nodes = pq.read_table(
        os.path.join(root, storage.NODES),
        columns=[storage.NODE_INDEX, storage.NODE_ID, storage.SPLIT],
    )
    emb = pq.read_table(os.path.join(root, storage.EMBEDDINGS))
    nbr = pq.read_table(os.path.join(root, storage.NEIGHBORS, "variant=pina"))
    M = emb.num_rows
    node = emb.column(storage.NODE_INDEX).to_numpy()
    lookup = np.empty(node.max() + 1, np.int64)
    lookup[node] = np.arange(M)
    dv, _ = flat(emb.column(storage.DENSE))
    E_d = dv.reshape(M, -1)
    iv, il = flat(emb.column(storage.SPARSE_INDICES))
    vv, _ = flat(emb.column(storage.SPARSE_VALUES))
    # writable copies: zero-copy views of Arrow buffers are read-only (sum_duplicates writes)
    E_s = sp.csr_matrix((np.array(vv), np.array(iv), np.r_[0, np.cumsum(il)]), shape=(M, S_DIM))
    E_s.sum_duplicates()
    del emb, iv, vv
    inst = nodes.column(storage.NODE_INDEX).to_numpy()
    n = inst.size
    ipos = np.full(inst.max() + 1, -1, np.int64)
    ipos[inst] = np.arange(n)
    nb, nl = flat(nbr.column(storage.NEIGHBOR))
    wv, _ = flat(nbr.column(storage.SCORE))
    rows = np.repeat(ipos[nbr.column(storage.INSTANCE_INDEX).to_numpy()], nl)
    P = sp.csr_matrix((wv, (rows, lookup[nb])), shape=(n, M))
    ids = nodes.column(storage.NODE_ID).combine_chunks()
    split = nodes.column(storage.SPLIT).combine_chunks()
    # neighbour ids / weights in instance order
    order_nb = np.argsort(rows, kind="stable")
    cnt = np.bincount(rows, minlength=n)
    nptr_all = np.r_[0, np.cumsum(cnt)]
    node_ids_by_index = ids.take(pa.array(ipos.clip(0)))
    nb_sorted = nb[order_nb]
    w_sorted = wv[order_nb].astype(np.float32)

    def norms(d, s):
        return np.sqrt(
            np.einsum("ij,ij->i", d, d, dtype=np.float64) + np.asarray(s.multiply(s).sum(1)).ravel()
        )

    def lists(ptr, values):
        return pa.ListArray.from_arrays(pa.array(np.asarray(ptr, np.int32)), values)

    writers = {}
    try:
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            m = c1 - c0
            lk = lookup[inst[c0:c1]]
            X0d, X0s = E_d[lk], E_s[lk]
            n0 = norms(X0d, X0s)
            Pc = P[c0:c1]
            V1d = Pc @ E_d
            V1s = Pc @ E_s
            n1 = norms(V1d, V1s)
            inv0 = np.where(n0 > 0, 1 / np.where(n0 > 0, n0, 1), 0)
            inv1 = np.where(n1 > 0, 1 / np.where(n1 > 0, n1, 1), 0)
            nv = np.sqrt((n0 > 0) + a * a * (n1 > 0))
            nvi = np.where(nv > 0, 1 / np.where(nv > 0, nv, 1), 0)
            s0, s1 = inv0 * nvi, a * inv1 * nvi
            pina_d = np.hstack([X0d * s0[:, None], V1d * s1[:, None]]).astype(np.float32)
            pina_s = sp.hstack([sp.diags(s0) @ X0s, sp.diags(s1) @ V1s], format="csr").astype(
                np.float32
            )
            pina_s.sort_indices()
            vo_d = (X0d * inv0[:, None]).astype(np.float32)
            vo_s = (sp.diags(inv0) @ X0s).tocsr().astype(np.float32)
            p0, p1 = nptr_all[c0], nptr_all[c1]
            nptr = nptr_all[c0 : c1 + 1] - p0
            nb_ids = node_ids_by_index.take(pa.array(nb_sorted[p0:p1]))
            cid, csplit = ids.slice(c0, m), split.slice(c0, m)

            def table(dense, spm, with_nb):
                W = dense.shape[1]
                cols = {
                    storage.INSTANCE_ID: cid,
                    storage.DENSE: lists(np.arange(m + 1) * W, pa.array(dense.reshape(-1))),
                    storage.SPARSE_INDICES: lists(
                        spm.indptr, pa.array(spm.indices.astype(np.int32))
                    ),
                    storage.SPARSE_VALUES: lists(spm.indptr, pa.array(spm.data)),
                }
                if with_nb:
                    cols[storage.NEIGHBOR_IDS] = lists(nptr, nb_ids)
                    cols[storage.NEIGHBOR_WEIGHTS] = lists(nptr, pa.array(w_sorted[p0:p1]))
                else:
                    z = np.zeros(m + 1, np.int32)
                    cols[storage.NEIGHBOR_IDS] = lists(z, pa.array([], pa.string()))
                    cols[storage.NEIGHBOR_WEIGHTS] = lists(z, pa.array([], pa.float32()))
                return pa.table(cols)

            for variant, (d, s, w) in (
                ("pina", (pina_d, pina_s, True)),
                ("vectorizer_only", (vo_d, vo_s, False)),
            ):
                t = table(d, s, w)
                for sv in ("train", "test"):
                    sub = t.filter(pc.equal(csplit, sv))
                    k = (variant, sv)
                    if k not in writers:
                        p = os.path.join(out, f"variant={variant}", f"split={sv}")
                        os.makedirs(p, exist_ok=True)
                        writers[k] = pq.ParquetWriter(
                            os.path.join(p, "part-0.parquet"),
                            sub.schema,
                            compression="zstd",
                            use_dictionary=[storage.INSTANCE_ID, storage.NEIGHBOR_IDS],
                        )
                    writers[k].write_table(sub)
    finally:
        for wr in writers.values():
            wr.close()
    _touch(out)
    return n


# --------------------------------------------------------------------------- spark
def spark_session(driver_memory):
    from pyspark.sql import SparkSession

    from pina_spark.orchestration.session import DEFAULT_CONF

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.master("local[2]").appName("bench-aggregate")
    conf = dict(
        DEFAULT_CONF,
        **{
            "spark.ui.enabled": "false",
            "spark.driver.memory": driver_memory,
            "spark.sql.shuffle.partitions": "8",
        },
    )
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_spark(spark, root, strategy, broadcast_via="auto", writer="auto"):
    from pina_spark.config import config_from_dict
    from pina_spark.orchestration.pipeline import make_context
    from pina_spark.stages import aggregate

    cfg = config_from_dict(
        {
            "output": root,
            "aggregate": {"strategy": strategy, "broadcast_via": broadcast_via, "writer": writer},
        }
    )
    return aggregate.run(make_context(spark, cfg))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--sizes", default="20000,200000")
    ap.add_argument("--strategy", default="auto", choices=["auto", "broadcast", "shuffle"])
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument(
        "--writer",
        default="auto",
        choices=["auto", "spark", "arrow"],
        help="how features are written (aggregate.writer; auto = arrow " "on local paths)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument(
        "--broadcast-via",
        default="auto",
        choices=["auto", "files", "spark"],
        help="aggregate.broadcast_via (how the broadcast strategy ships the " "embeddings)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    work = args.workdir or tempfile.mkdtemp(prefix="bench-aggregate-")
    spark = spark_session(args.driver_memory)
    # warm up: JVM, Python workers, imports (not timed)
    warm = os.path.join(work, "warmup")
    generate(warm, 2000, seed=99)
    run_spark(spark, warm, args.strategy, args.broadcast_via, args.writer)
    shutil.rmtree(warm, ignore_errors=True)
    results = []
    for n in sizes:
        root = os.path.join(work, f"n{n}")
        t = time.time()
        generate(root, n)
        log.info("n=%d: inputs generated in %.1fs", n, time.time() - t)
        t = time.time()
        stats = run_spark(spark, root, args.strategy, args.broadcast_via, args.writer)
        spark_s = time.time() - t
        t = time.time()
        reference(root, os.path.join(root, "features_reference"))
        ref_s = time.time() - t
        r = {
            "n": n,
            "spark_s": round(spark_s, 3),
            "reference_s": round(ref_s, 3),
            "ratio": round(spark_s / ref_s, 3),
            "strategy": stats["strategy"],
            "writer": stats.get("writer"),
            "spark_write_s": stats.get("write_s"),
            "broadcast_via": stats.get("broadcast_via"),
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "reason": stats["reason"],
            "spark_us_per_instance": round(1e6 * spark_s / n, 2),
            "reference_us_per_instance": round(1e6 * ref_s / n, 2),
        }
        results.append(r)
        log.info(
            "n=%d: spark %.2fs (%s), reference %.2fs, ratio %.2f, %.1f us/instance "
            "(reference %.1f)",
            n,
            spark_s,
            stats["strategy"],
            ref_s,
            r["ratio"],
            r["spark_us_per_instance"],
            r["reference_us_per_instance"],
        )
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        with open(args.json, "w") as fh:  # partial results survive a later failure
            json.dump({"results": results, "config": vars(args)}, fh, indent=1)
    for a, b in zip(results, results[1:]):
        log.info(
            "time per instance %d -> %d: x%.2f",
            a["n"],
            b["n"],
            b["spark_us_per_instance"] / a["spark_us_per_instance"],
        )
    spark.stop()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
