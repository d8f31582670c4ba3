"""Benchmark of the embed and neighbors stages (Spark, ``local[2]``) against a plain
single-process loop doing the same work with the same number of threads, in the same run.

Data (``--data``): ``titles``, short product titles (the first ``--rows`` Instacart products by
id, ``../shared/data/instacart``; labels: their aisles, label text = aisle name), or
``citeulike`` (default), long texts (``../shared/data/citeulike-t``). The first ``--rows``
articles are instances (every 5th by id-hash is ``test``, see
:func:`pina_spark.storage.folds.is_heldout`); an article's text is
its bag of words, words by count descending (ties: vocabulary order), each repeated by its count.
Labels are the tags on at least 5 of these articles (label text = tag name). Phi_pre (MiniLM +
PECOS tf-idf) is fitted on the train texts and labels; g (PECOS XR-Linear, variant ``pina``,
``in_sample``) is trained here on B_pre = train instance -> its tags, label -> its train
instances, label -> itself, from the embeddings the Spark embed stage published.

Measured (wall clock, model folders and inputs already on local disk, Spark session warm; with
``--stages neighbors`` the Python workers first import what the embed stage imports, as they
would have after it):

* ``embed``: :func:`pina_spark.stages.embed.stage.run` (``nodes`` Parquet -> published
  ``embeddings``), against: pyarrow read of ``nodes`` -> ``PhiPre.load`` -> ``transform`` in
  one call (the encoder sorts every text by length, then batches of ``batch_size``) -> pyarrow
  Parquet write, with torch / tf-idf on 2 threads.
* ``neighbors``: :func:`pina_spark.stages.neighbors.stage.run` (``nodes`` +
  ``embeddings`` -> published ``neighbors``), against: pyarrow read of ``nodes`` and
  ``embeddings`` -> PECOS predict-only load -> X, predict, top-K and weights in blocks ->
  Parquet write, PECOS on 2 threads.

rows/s = rows processed / wall seconds; ratio = spark / reference (>= 0.9 is the goal).

``--repeat N`` (each stage; one measurement is at the mercy of the machine's noise): N
measurements, each in a fresh Spark application (new Python workers: no vectorizer, g,
embeddings copy or task order kept from an earlier measurement; for the neighbours the workers
first import what the embed stage imports), each followed by the reference; the result holds
the median Spark and reference seconds (ratio = ratio of the medians) and every measurement
under ``repeats``.

Usage::

    python benchmarks/bench_inference.py --json /tmp/bench_inference.json --rows 3000
    # time only the neighbours stage again, on the embeddings and g of an earlier run
    python benchmarks/bench_inference.py --json /tmp/nb.json --rows 3000 --workdir /tmp/bi \\
        --stages neighbors
    # the neighbours stage measured 5 times (fresh Spark application each), medians reported
    python benchmarks/bench_inference.py --json /tmp/bi.json --rows 30000 --repeat 5

Writes ``{"results": [{"stage", "rows", "spark_rows_per_s", "reference_rows_per_s", "ratio",
...}], "config": {...}}`` and prints the results.
"""

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pina_spark import config, storage  # noqa: E402
from pina_spark.models import artifacts  # noqa: E402
from pina_spark.orchestration import pipeline  # noqa: E402
from pina_spark.runtime import arrow as inference_arrow  # noqa: E402
from pina_spark.runtime.arrow import list_array  # noqa: E402
from pina_spark.stages.embed import stage as embed_stage  # noqa: E402
from pina_spark.stages.neighbors import stage as neighbors_stage  # noqa: E402
from pina_spark.stages.neighbors import topk  # noqa: E402
from pina_spark.storage import folds  # noqa: E402

log = logging.getLogger("bench_inference")
DATA = os.environ.get("PINA_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
THREADS = 2


def _lines(path):
    with open(path) as fh:
        return fh.read().split("\n")


def load_citeulike(n_rows, min_tag_items=5):
    """(instances [(id, text, split)], labels [(id, text)], tags per article index)."""
    d = os.path.join(DATA, "citeulike-t")
    vocab = _lines(os.path.join(d, "vocabulary.dat"))
    inst = []
    for i, line in enumerate(_lines(os.path.join(d, "mult.dat"))[:n_rows]):
        parts = line.split()
        pairs = sorted(
            ((int(c), int(w)) for w, c in (p.split(":") for p in parts[1:])),
            key=lambda x: (-x[0], x[1]),
        )
        text = " ".join(" ".join([vocab[w]] * c) for c, w in pairs)
        aid = f"a{i:05d}"
        inst.append((aid, text, "test" if folds.is_heldout(aid, 0.2, "bench-split") else "train"))
    names = _lines(os.path.join(d, "tags.dat"))
    labels, art_tags = [], {}
    for t, line in enumerate(_lines(os.path.join(d, "tag-item.dat"))):
        items = [int(x) for x in line.split()[1:] if int(x) < n_rows]
        if len(items) >= min_tag_items:
            labels.append((f"t{t:05d}", names[t]))
            for it in items:
                art_tags.setdefault(it, []).append(len(labels) - 1)
    return inst, labels, art_tags


def load_titles(n_rows, min_items=5):
    """Short product titles (the e-commerce case): the first ``n_rows`` Instacart products by id
    (text = product name), labels = their aisles with at least ``min_items`` of them (label text
    = aisle name). Same return shape as :func:`load_citeulike`."""
    import csv

    d = os.path.join(DATA, "instacart")
    with open(os.path.join(d, "aisles.csv"), newline="") as fh:
        aisle_name = {r["aisle_id"]: r["aisle"] for r in csv.DictReader(fh)}
    with open(os.path.join(d, "products.csv"), newline="") as fh:
        prods = sorted(csv.DictReader(fh), key=lambda r: int(r["product_id"]))[:n_rows]
    inst, by_aisle = [], {}
    for i, r in enumerate(prods):
        pid = f"p{int(r['product_id']):06d}"
        inst.append(
            (
                pid,
                r["product_name"],
                "test" if folds.is_heldout(pid, 0.2, "bench-split") else "train",
            )
        )
        by_aisle.setdefault(r["aisle_id"], []).append(i)
    labels, art_tags = [], {}
    for aid in sorted(by_aisle, key=int):
        if len(by_aisle[aid]) >= min_items:
            labels.append((f"aisle{int(aid):04d}", aisle_name[aid]))
            for it in by_aisle[aid]:
                art_tags.setdefault(it, []).append(len(labels) - 1)
    return inst, labels, art_tags


DATASETS = {"citeulike": load_citeulike, "titles": load_titles}


def _warm_worker(batches):
    """Executor side (``--stages neighbors``): import what a worker that ran the embed stage
    has imported (numpy, pyarrow, scipy, torch, PECOS' tf-idf), nothing of the neighbour
    stage itself."""
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import scipy.sparse  # noqa: F401
    import torch  # noqa: F401
    from pecos.utils.featurization.text import vectorizers  # noqa: F401

    yield from batches


def _sync_threads(n):
    import torch

    torch.set_num_threads(n)


# --------------------------------------------------------------------------- references
def reference_embed(nodes_path, vec_dir, out_path, batch_size):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pina_spark.models.vectorizer import PhiPre

    t0 = time.time()
    tbl = pq.read_table(nodes_path, columns=[storage.NODE_INDEX, storage.TEXT]).sort_by(
        storage.NODE_INDEX
    )
    phi = PhiPre.load(vec_dir, device="cpu")
    phi.tfidf_threads = THREADS
    idx = tbl.column(storage.NODE_INDEX).to_numpy()
    texts = tbl.column(storage.TEXT).to_pylist()
    # one call over every text: the encoder sorts them all by length before cutting batches,
    # the best batching a single process can do (the stage's batches are nearly the same: it
    # sorts by length capped at 4,096 characters and gives blank texts slots of their own)
    dense, sparse = phi.transform(texts, batch_size=batch_size)
    n, d = dense.shape
    rb = pa.RecordBatch.from_arrays(
        [
            pa.array(idx[:n]),
            list_array(np.full(n, d), dense.ravel(), pa.float32()),
            list_array(np.diff(sparse.indptr), sparse.indices.astype(np.int32), pa.int32()),
            list_array(np.diff(sparse.indptr), sparse.data, pa.float32()),
        ],
        names=[storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES],
    )
    writer = pq.ParquetWriter(out_path, rb.schema, compression="zstd")
    writer.write_batch(rb)
    writer.close()
    return len(texts), time.time() - t0


def reference_neighbors(nodes_path, emb_path, g_dir, dense_dim, k, out_path, batch_size):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pecos.xmc.xlinear.model import XLinearModel

    t0 = time.time()
    nodes = pq.read_table(nodes_path, columns=[storage.NODE_INDEX, storage.KIND])
    inst = nodes.filter(pc.equal(nodes.column(storage.KIND), storage.KIND_INSTANCE))
    emb = pq.read_table(emb_path)
    keep = pc.is_in(emb.column(storage.NODE_INDEX), value_set=inst.column(storage.NODE_INDEX))
    emb = emb.filter(keep).sort_by(storage.NODE_INDEX)
    g = XLinearModel.load(g_dir, is_predict_only=True)
    col_map = np.load(os.path.join(g_dir, artifacts.OUTPUT_NODES)).astype(np.int64)
    writer = None
    n_all = emb.num_rows
    for s in range(0, n_all, batch_size):
        tbl = emb.slice(s, batch_size)
        X = inference_arrow.features_from_arrow(tbl, dense_dim, int(g.model.nr_features))
        own = tbl.column(storage.NODE_INDEX).to_numpy()
        Y = g.predict(X, only_topk=k + 2, threads=THREADS)
        nodes_k, scores, counts = topk.topk_neighbors(Y, col_map, own, np.full_like(own, -1), k)
        w = topk.normalize_scores(scores, counts, "l1")
        m = np.arange(k)[None, :] < counts[:, None]
        rb = pa.RecordBatch.from_arrays(
            [
                pa.array(own),
                list_array(counts, nodes_k[m], pa.int64()),
                list_array(counts, w[m].astype(np.float32), pa.float32()),
            ],
            names=[storage.INSTANCE_INDEX, storage.NEIGHBOR, storage.SCORE],
        )
        if writer is None:
            writer = pq.ParquetWriter(out_path, rb.schema, compression="zstd")
        writer.write_batch(rb)
    writer.close()
    return n_all, time.time() - t0


# --------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True, help="output JSON file")
    ap.add_argument("--rows", type=int, default=3000, help="instances used")
    ap.add_argument(
        "--data",
        choices=sorted(DATASETS),
        default="citeulike",
        help="citeulike: citeulike-t articles (long bag-of-words texts), tags as "
        "labels; titles: Instacart product names (short titles), aisles as "
        "labels",
    )
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--tasks", type=int, default=4, help="partitions per stage")
    ap.add_argument(
        "--task-cpus",
        type=int,
        default=1,
        choices=(1, 2),
        help="spark.task.cpus: 1 = two tasks at a time of 1 thread each (default), 2 = one "
        "task at a time on both threads, as the reference runs",
    )
    ap.add_argument(
        "--workdir",
        default=None,
        help="keep inputs, models and tables here " "(default: a temp folder, removed at the end)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="measurements per stage (each in a fresh Spark application, each "
        "followed by the reference); the medians are reported. Embed at 20k short "
        "titles takes ~2 min per measurement, at all of citeulike-t ~12 min",
    )
    ap.add_argument(
        "--stages",
        default="embed,neighbors",
        help="stages to time: embed,neighbors (default) or neighbors, which reuses "
        "the vectorizer, embeddings and g of an earlier run in --workdir",
    )
    args = ap.parse_args(argv)
    stages = [x.strip() for x in args.stages.split(",") if x.strip()]
    if set(stages) - {"embed", "neighbors"} or not stages:
        ap.error(f"--stages: expected embed and/or neighbors, got {args.stages!r}")
    if "embed" not in stages and not args.workdir:
        ap.error("--stages without embed needs --workdir of an earlier run")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("py4j", "pina_spark.storage"):
        logging.getLogger(name).setLevel(logging.WARNING)

    from pyspark.sql import Row

    from pina_spark.models.vectorizer import PhiPre
    from pina_spark.orchestration.session import get_spark

    work = args.workdir or tempfile.mkdtemp(prefix="bench-inference-")
    inst, labels, art_tags = DATASETS[args.data](args.rows)
    n_nodes = len(inst) + len(labels)

    def make_cfg(rows):  # rows per task such that the stage over ``rows`` rows has --tasks tasks
        return config.config_from_dict(
            {
                "output": os.path.join(work, "run"),
                "input": {"instances": args.data},
                "neighbors": {"k": 5, "train_mode": "in_sample"},
                "inference": {
                    "rows_per_task": int(math.ceil(rows / float(args.tasks))),
                    "batch_size": args.batch_size,
                    "torch_threads": args.task_cpus,
                },
                "spark": {"master": f"local[{THREADS}]"},
            }
        )

    cfg = make_cfg(n_nodes)  # embed: every node
    cfg_nb = make_cfg(len(inst))  # neighbors: the instance nodes
    spark_conf = {
        "spark.sql.shuffle.partitions": str(args.tasks),
        "spark.ui.enabled": "false",
        "spark.task.cpus": str(args.task_cpus),
    }
    spark = get_spark(cfg.spark, spark_conf)
    ctx = pipeline.make_context(spark, cfg)
    rows = [
        Row(node_index=i, kind=storage.KIND_INSTANCE, node_id=a, text=t, split=s)
        for i, (a, t, s) in enumerate(inst)
    ]
    rows += [
        Row(node_index=len(inst) + j, kind=storage.KIND_LABEL, node_id=a, text=t, split=None)
        for j, (a, t) in enumerate(labels)
    ]
    models = ctx.models_root
    results = []

    def fresh_application(warm):
        """A new Spark application (nothing kept in the workers from the last measurement),
        warmed by ``warm(spark)``."""
        nonlocal spark, ctx
        spark.stop()
        spark = get_spark(cfg.spark, spark_conf)
        ctx = pipeline.make_context(spark, cfg)
        warm(spark)

    if "embed" not in stages:
        for rel in (storage.NODES, storage.EMBEDDINGS):
            if not storage.is_complete(spark, ctx.paths.table(rel)):
                raise SystemExit(
                    f"--stages {args.stages}: {ctx.paths.table(rel)} is missing; "
                    f"run the embed stage into this --workdir first"
                )
        n_have = spark.read.parquet(ctx.paths.table(storage.NODES)).count()
        if n_have != n_nodes:
            raise SystemExit(
                f"--stages {args.stages}: {work} holds {n_have} nodes, --rows "
                f"{args.rows} makes {n_nodes}: use the --rows of that run"
            )
        _warm_session(spark)
    else:
        storage.write_table(
            spark.createDataFrame(rows, storage.schema(storage.NODES)), ctx.paths, storage.NODES
        )
        spark.range(100).selectExpr("sum(id)").collect()  # warm the session
        _sync_threads(THREADS)
        t0 = time.time()
        phi = PhiPre.fit([r.text for r in rows if r.split != "test"], cfg.pretrain)
        phi.save(artifacts.vectorizer_dir(models))
        open(f"{artifacts.vectorizer_dir(models)}/_SUCCESS", "w").close()
        os.makedirs(models, exist_ok=True)
        with open(f"{models}/folds.json", "w") as fh:
            json.dump({"folds": 0, "train_mode": "in_sample"}, fh)
        open(f"{models}/_SUCCESS", "w").close()
        log.info(
            "vectorizer fitted in %.1fs (D=%d, S=%d)",
            time.time() - t0,
            phi.dense_dim,
            phi.sparse_dim,
        )
        del phi
        results.append(
            _measure_repeatedly(
                "embed",
                args.repeat,
                lambda: time_embed(ctx, models, work, args.batch_size),
                lambda: fresh_application(lambda s: s.range(100).selectExpr("sum(id)").collect()),
            )
        )
    gdir = artifacts.g_dir(models, "pina")
    if "neighbors" in stages:
        if "embed" in stages or not os.path.exists(os.path.join(gdir, "_SUCCESS")):
            train_g(ctx, models, gdir, rows, len(inst), n_nodes, art_tags)
        import pecos.xmc.xlinear.model  # noqa: F401  (the reference's imports are warm either way)

        results.append(
            _measure_repeatedly(
                "neighbors",
                args.repeat,
                lambda: time_neighbors(spark, ctx, cfg, cfg_nb, gdir, work, args.batch_size),
                lambda: fresh_application(_warm_session),
            )
        )

    out = {
        "results": results,
        "config": {
            "data": args.data,
            "rows": args.rows,
            "instances": len(inst),
            "labels": len(labels),
            "nodes": n_nodes,
            "master": f"local[{THREADS}]",
            "reference_threads": THREADS,
            "batch_size": args.batch_size,
            "tasks": args.tasks,
            "task_cpus": args.task_cpus,
            "stages": stages,
            "repeat": args.repeat,
            "encoder": cfg.pretrain.encoder,
            "max_length": cfg.pretrain.max_length,
            "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
    }
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=1)
    for r in results:
        log.info(
            "%-9s rows=%d spark %.1f rows/s (%.1fs)  reference %.1f rows/s (%.1fs)  " "ratio %.3f",
            r["stage"],
            r["rows"],
            r["spark_rows_per_s"],
            r["spark_s"],
            r["reference_rows_per_s"],
            r["reference_s"],
            r["ratio"],
        )
    sys.stdout.write(json.dumps(out["results"], indent=1) + "\n")
    spark.stop()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _warm_session(spark):
    """The Python workers import what the embed stage would have imported before them, and
    the session runs one job."""
    spark.range(0, THREADS, 1, THREADS).mapInArrow(_warm_worker, "id long").collect()
    spark.range(100).selectExpr("sum(id)").collect()


def _measure_repeatedly(stage, repeat, measure, fresh):
    """``measure()`` ``repeat`` times, ``fresh()`` (a new Spark application) before every one
    but the first; each measurement logged, the medians returned (:func:`_median_result`)."""
    runs = []
    for rep in range(repeat):
        if rep:
            fresh()
        runs.append(measure())
        log.info(
            "%s measurement %d/%d: spark %.2fs reference %.2fs ratio %.3f",
            stage,
            rep + 1,
            repeat,
            runs[-1]["spark_s"],
            runs[-1]["reference_s"],
            runs[-1]["ratio"],
        )
    return _median_result(runs)


def _median_result(runs):
    """One result from repeated measurements: median Spark and reference seconds, the ratio
    of the medians' rates, and every measurement under ``repeats``."""
    import statistics

    if len(runs) == 1:
        return runs[0]
    out = dict(runs[-1])
    spark_s = statistics.median(r["spark_s"] for r in runs)
    ref_s = statistics.median(r["reference_s"] for r in runs)
    out.update(
        spark_s=round(spark_s, 3),
        reference_s=round(ref_s, 3),
        spark_rows_per_s=round(out["rows"] / spark_s, 2),
        reference_rows_per_s=round(out["reference_rows"] / ref_s, 2),
        repeats=[{k: r[k] for k in ("spark_s", "reference_s", "ratio")} for r in runs],
    )
    out["ratio"] = round(out["spark_rows_per_s"] / out["reference_rows_per_s"], 3)
    return out


def time_embed(ctx, models, work, batch_size):
    """The embed stage against :func:`reference_embed` (same run, same threads)."""
    t0 = time.time()
    st = embed_stage.run(ctx)
    spark_s = time.time() - t0  # the whole stage call, driver prep included
    _sync_threads(THREADS)
    n_ref, dt_ref = reference_embed(
        ctx.paths.table(storage.NODES),
        artifacts.vectorizer_dir(models),
        os.path.join(work, "ref_embeddings.parquet"),
        batch_size,
    )
    return _result("embed", st, spark_s, n_ref, dt_ref)


def _result(stage, st, spark_s, n_ref, dt_ref):
    spark_rps, ref_rps = st["rows"] / spark_s, n_ref / dt_ref
    return {
        "stage": stage,
        "rows": st["rows"],
        "reference_rows": n_ref,
        "spark_s": round(spark_s, 3),
        "reference_s": round(dt_ref, 3),
        "spark_rows_per_s": round(spark_rps, 2),
        "reference_rows_per_s": round(ref_rps, 2),
        "ratio": round(spark_rps / ref_rps, 3),
        "partitions": st["partitions"],
        "model_loads": st["model_loads"],
        "worker_processes": st["worker_processes"],
    }


def _phi_dim(models):
    with open(f"{artifacts.vectorizer_dir(models)}/encoder.json") as fh:
        spec = json.load(fh)
    return int(spec["dense_dim"]), int(spec["sparse_dim"])


def train_g(ctx, models, gdir, rows, n_inst, n_nodes, art_tags):
    """g (not timed): XR-Linear on B_pre = train instance -> its tags, tag -> its train
    instances, tag -> itself, from the published embeddings."""
    import pyarrow.parquet as pq
    import scipy.sparse as sp
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    phi_dim, sparse_dim = _phi_dim(models)
    emb = pq.read_table(ctx.paths.table(storage.EMBEDDINGS)).sort_by(storage.NODE_INDEX)
    X_all = inference_arrow.features_from_arrow(emb, phi_dim, phi_dim + sparse_dim)
    train = [i for i, r in enumerate(rows[:n_inst]) if r.split == "train"]
    lab_nodes = list(range(n_inst, n_nodes))
    inputs = train + lab_nodes
    r_of = {v: j for j, v in enumerate(inputs)}
    edges = [(i, n_inst + t) for i in train for t in art_tags.get(i, [])]
    edges += [(n_inst + t, i) for i in train for t in art_tags.get(i, [])]
    edges += [(n, n) for n in lab_nodes]
    Y = sp.csr_matrix(
        (
            np.ones(len(edges), np.float32),
            ([r_of[a] for a, _ in edges], [r_of[b] for _, b in edges]),
        ),
        shape=(len(inputs), len(inputs)),
    )
    Y.sum_duplicates()
    Y.data[:] = 1.0
    Y.sort_indices()
    Xg = X_all[inputs]
    t0 = time.time()
    C = Indexer.gen(
        LabelEmbeddingFactory.create(Y, Xg, method="pifa"),
        indexer_type="hierarchicalkmeans",
        nr_splits=16,
        max_leaf_size=100,
        seed=0,
    )
    g = XLinearModel.train(Xg, Y, C=C, threshold=0.1)
    os.makedirs(gdir, exist_ok=True)
    g.save(gdir)
    np.save(os.path.join(gdir, artifacts.OUTPUT_NODES), np.asarray(inputs, dtype=np.int64))
    open(os.path.join(gdir, "_SUCCESS"), "w").close()
    log.info("g trained in %.1fs (%d rows, %d outputs)", time.time() - t0, len(inputs), len(inputs))


def time_neighbors(spark, ctx, cfg, cfg_nb, gdir, work, batch_size):
    """The neighbours stage against :func:`reference_neighbors` (same run, same threads)."""
    ctx_nb = pipeline.make_context(spark, cfg_nb)
    t0 = time.time()
    st = neighbors_stage.run(ctx_nb)
    spark_s = time.time() - t0
    n_ref, dt_ref = reference_neighbors(
        ctx.paths.table(storage.NODES),
        ctx.paths.table(storage.EMBEDDINGS),
        gdir,
        _phi_dim(ctx.models_root)[0],
        cfg.neighbors.k,
        os.path.join(work, "ref_neighbors.parquet"),
        batch_size,
    )
    return _result("neighbors", st, spark_s, n_ref, dt_ref)


if __name__ == "__main__":
    sys.exit(main())
