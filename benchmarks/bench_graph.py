"""Benchmark of the graph job: I2I edges from an events Parquet file to written edges.

Spark (``pina_spark.graph.i2i_edges``, local[N]) against a single-process pandas/numpy reference
doing the same work (distinct (basket, item), the same hash cap, unordered pairs counted once per
basket, min_count, both directions, Parquet out), on the real Instacart sample and on copies
replicated 10x and 100x (every basket repeated with new basket ids). Both outputs are checked to
have the same edges before a timing is reported.

Usage::

    .venv/bin/python benchmarks/bench_graph.py --json runs/bench_graph.json
    .venv/bin/python benchmarks/bench_graph.py --scales 1,10 --json out.json

Writes ``{"results": [{"events": n, "spark_s": t, "reference_s": t, "ratio": spark/reference,
...}], "settings": {...}}`` and prints the ratios. Timings include reading the events Parquet
and writing the edges; Spark's session start-up is excluded (it is paid once per job), but the
first scale's Spark time includes the JVM/Python-worker warm-up of the session's first jobs.
The 1-minute load average after each scale is recorded: on a shared machine it matters.
"""
import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

log = logging.getLogger("bench_graph")


def make_events(data_dir: str, scale: int, out_dir: str) -> str:
    """Write the Instacart sample's (basket_id, item_id) replicated ``scale`` times as Parquet."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    raw = pd.read_csv(os.path.join(data_dir, "order_products_sample.csv"),
                      usecols=["order_id", "product_id"], dtype=str)
    path = os.path.join(out_dir, f"events_x{scale}.parquet")
    writer = None
    for r in range(scale):
        b = raw["order_id"] if r == 0 else raw["order_id"] + f"#{r}"
        t = pa.table({"basket_id": pa.array(b.to_numpy(), pa.string()),
                      "item_id": pa.array(raw["product_id"].to_numpy(), pa.string())})
        if writer is None:
            writer = pq.ParquetWriter(path, t.schema)
        writer.write_table(t)
    writer.close()
    return path


def reference(events_path: str, out_path: str, max_basket_size: int, min_count: int) -> int:
    """Single-process pandas/numpy I2I edges; returns the number of directed edges written."""
    import hashlib
    import numpy as np
    import pandas as pd
    df = pd.read_parquet(events_path).drop_duplicates()
    bcode, _ = pd.factorize(df["basket_id"])
    icode, items = pd.factorize(df["item_id"], sort=True)
    items = np.asarray(items, dtype=object)
    n_items = np.int64(len(items))
    sizes_all = np.bincount(bcode)
    big = sizes_all[bcode] > max_basket_size
    if big.any():  # the documented cap: rank by sha1(basket \x1f item), keep the first ones
        sub = df[big]
        h = [hashlib.sha1(f"{b}\x1f{i}".encode()).hexdigest()
             for b, i in zip(sub["basket_id"], sub["item_id"])]
        rank = pd.DataFrame({"b": bcode[big], "h": h, "i": sub["item_id"].to_numpy()}) \
            .sort_values(["b", "h", "i"]).groupby("b").cumcount().sort_index()
        keep = np.ones(len(df), dtype=bool)
        keep[np.flatnonzero(big)] = rank.to_numpy() < max_basket_size
        bcode, icode = bcode[keep], icode[keep]
    order = np.lexsort((icode, bcode))
    b, it = bcode[order], icode[order].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    sizes = np.diff(np.r_[starts, len(b)])
    cum = np.cumsum(sizes.astype(np.int64) * (sizes - 1) // 2)
    keys, counts, g0 = [], [], 0
    while g0 < len(starts):
        base = cum[g0 - 1] if g0 else 0
        g1 = max(int(np.searchsorted(cum, base + 8_000_000, side="right")), g0 + 1)
        lo, hi = starts[g0], (starts[g1] if g1 < len(starts) else len(b))
        codes, sz = it[lo:hi], sizes[g0:g1]
        ends = np.repeat(np.cumsum(sz), sz)
        pos = np.arange(len(codes), dtype=np.int64)
        after = ends - pos - 1
        left = np.repeat(pos, after)
        right = left + 1 + (np.arange(int(after.sum()), dtype=np.int64)
                            - np.repeat(np.cumsum(after) - after, after))
        uk, cnt = np.unique(codes[left] * n_items + codes[right], return_counts=True)
        keys.append(uk)
        counts.append(cnt)
        g0 = g1
    uk, inv = np.unique(np.concatenate(keys), return_inverse=True)
    cnt = np.bincount(inv.ravel(), weights=np.concatenate(counts)).astype(np.int64)
    sel = cnt >= min_count
    a, c, cnt = items[uk[sel] // n_items], items[uk[sel] % n_items], cnt[sel]
    out = pd.DataFrame({"src_id": np.concatenate([a, c]), "dst_id": np.concatenate([c, a]),
                        "count": np.concatenate([cnt, cnt]),
                        "score": np.concatenate([cnt, cnt]).astype(float)})
    out.to_parquet(out_path, index=False)
    return len(out)


def spark_job(spark, events_path: str, out_path: str, graph_cfg) -> int:
    """The Spark graph job; returns the number of directed edges written."""
    from pina_spark import graph
    ev = spark.read.parquet(events_path)
    graph.i2i_edges(ev, graph_cfg).write.mode("overwrite").parquet(out_path)
    return spark.read.parquet(out_path).count()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", required=True, help="output JSON file")
    p.add_argument("--scales", default="1,10,100", help="comma-separated replication factors")
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "instacart"))
    p.add_argument("--min-count", type=int, default=2)
    p.add_argument("--max-basket-size", type=int, default=100)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--shuffle-partitions", type=int, default=8)
    p.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pina_spark.config import GraphConfig
    from pina_spark.session import get_spark
    from pina_spark.config import SparkConfig
    cfg = GraphConfig(min_count=args.min_count, max_basket_size=args.max_basket_size)
    work = args.workdir or tempfile.mkdtemp(prefix="bench_graph_")
    os.makedirs(work, exist_ok=True)
    spark = get_spark(SparkConfig(master=args.master, app_name="bench_graph", conf={
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.driver.memory": "6g", "spark.ui.enabled": "false"}))
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        for scale in [int(s) for s in args.scales.split(",") if s.strip()]:
            ev_path = make_events(args.data, scale, work)
            import pyarrow.parquet as pq
            n_events = pq.ParquetFile(ev_path).metadata.num_rows
            t0 = time.perf_counter()
            n_spark = spark_job(spark, ev_path, os.path.join(work, f"spark_x{scale}"), cfg)
            spark_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            n_ref = reference(ev_path, os.path.join(work, f"ref_x{scale}.parquet"),
                              cfg.max_basket_size, cfg.min_count)
            ref_s = time.perf_counter() - t0
            if n_spark != n_ref:
                raise SystemExit(f"x{scale}: Spark wrote {n_spark} edges, reference {n_ref}")
            row = {"scale": scale, "events": n_events, "edges": n_spark,
                   "spark_s": round(spark_s, 3), "reference_s": round(ref_s, 3),
                   "ratio": round(spark_s / ref_s, 3),
                   "load_avg_1m_after": round(os.getloadavg()[0], 2)}
            results.append(row)
            print(f"x{scale}: {n_events} events, {n_spark} edges: spark {spark_s:.1f}s, "
                  f"reference {ref_s:.1f}s, ratio {spark_s / ref_s:.2f}", flush=True)
            os.remove(ev_path)
    finally:
        spark.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    out = {"results": results,
           "settings": {"master": args.master, "shuffle_partitions": args.shuffle_partitions,
                        "min_count": cfg.min_count, "max_basket_size": cfg.max_basket_size,
                        "cpus": os.cpu_count(), "python": platform.python_version(),
                        "note": "timings on a shared machine; Spark session start excluded"}}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=2)
    print("ratios:", ", ".join(f"x{r['scale']}={r['ratio']}" for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
