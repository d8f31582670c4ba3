"""Benchmark of the graph stage against DuckDB computing the same thresholded co-purchase graph.

Spark side: the whole graph stage, ``pina_spark.stages.graph.run`` (what a user times: read and
validate every input table, publish the quarantine tables, ``nodes``, ``graph/i2i_edges``,
``graph/instance_labels`` and ``graph/pretrain_edges``), with ``task.labels: given`` and
``side_info: label_text``, on ``local[T]``; the Spark session start is excluded (paid once per
job). DuckDB side (same T threads, same Parquet events file, same run): distinct (basket, item),
baskets with at least 2 items, a self-join on the basket with a < b, count, ``count >=
min_count``, both directions written to Parquet. DuckDB reads only the events; it does no input
validation, node indices, labels or B_pre. The bench checks that both sides wrote identical
edges (same (src, dst, count) rows) before it reports a time. ``graph.max_basket_size`` is set
above the largest basket so that the down-sampling cap (which DuckDB does not do) never binds.

Data sets (``--datasets``):

* ``instacart_x1``, ``instacart_x10``, ``instacart_x100``: the real Instacart sample
  (``../shared/data/instacart``), every basket replicated with new basket ids; min_count 2.
* ``heavy``: a seeded long-tailed log shaped like a co-rating log (6,038 baskets of 20 to 1,435
  items, log-normal sizes, Zipf-like item popularity over 3,700 items, ~575k events, ~60M pair
  occurrences), where pair occurrences dominate; min_count 100.
* ``citeulike_users``: citeulike-t's user libraries as baskets (``../shared/data/citeulike-t``);
  min_count 5.
* ``demo``: the built-in demo data set (``pina-spark demo``'s inputs: its own instances,
  labels and instance_labels), min_count 2 as in ``conf/demo.yaml``: the demo's graph stage.

Usage::

    .venv/bin/python benchmarks/bench_graph.py --json runs/bench_graph.json
    .venv/bin/python benchmarks/bench_graph.py --datasets heavy --json out.json

Each side runs ``--repeat`` times per data set (alternating); ``spark_s`` and ``duckdb_s`` are
the medians, ``spark_runs_s`` / ``duckdb_runs_s`` every run.

Writes ``{"results": [{"name", "events", "pair_occurrences", "spark_s", "duckdb_s", "ratio",
"edges_equal", "edges", "steps_s", "load_avg_1m", ...}], "settings": {...}}`` and prints a
Markdown table (with the command that made it and the machine load) and the Spark stage's time
per step for each data set.
"""

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

log = logging.getLogger("bench_graph")

DATASETS = ("instacart_x1", "instacart_x10", "instacart_x100", "heavy", "citeulike_users", "demo")
#: min_count per data set (the heavy log: the threshold of the measured co-rating log; the demo:
#: conf/demo.yaml's)
MIN_COUNT = {"instacart": 2, "heavy": 100, "citeulike_users": 5, "demo": 2}
HEAVY_SEED = 20231


# --------------------------------------------------------------------------- data
def _write_events(path: str, parts) -> str:
    """Write ``(basket_ids, item_ids)`` chunks as one Parquet file of two string columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for b, i in parts:
        t = pa.table({"basket_id": pa.array(b, pa.string()), "item_id": pa.array(i, pa.string())})
        if writer is None:
            writer = pq.ParquetWriter(path, t.schema)
        writer.write_table(t)
    writer.close()
    return path


def instacart_events(data_dir: str, scale: int, path: str) -> str:
    """The Instacart sample's (order_id, product_id) replicated ``scale`` times (new ids)."""
    import pandas as pd

    raw = pd.read_csv(
        os.path.join(data_dir, "order_products_sample.csv"),
        usecols=["order_id", "product_id"],
        dtype=str,
    )
    b0, items = raw["order_id"].to_numpy(), raw["product_id"].to_numpy()
    return _write_events(
        path,
        ((b0 if r == 0 else (raw["order_id"] + f"#{r}").to_numpy(), items) for r in range(scale)),
    )


def heavy_events(
    path: str, seed: int = HEAVY_SEED, n_baskets: int = 6038, n_items: int = 3700
) -> str:
    """A seeded long-tailed log: log-normal basket sizes in [20, 1435], items drawn without
    replacement with Zipf-like popularity (exponent 0.9)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sizes = np.clip(np.round(rng.lognormal(4.16, 0.89, n_baskets)), 20, 1435).astype(int)
    sizes[0] = 1435
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.9
    pop /= pop.sum()
    perm = rng.permutation(n_items)
    bs, its = [], []
    for k, s in enumerate(sizes):
        chosen = perm[rng.choice(n_items, size=s, replace=False, p=pop)]
        bs.append(np.full(s, f"u{k}", dtype=object))
        its.append(np.array([f"m{j}" for j in chosen], dtype=object))
    return _write_events(path, [(np.concatenate(bs), np.concatenate(its))])


def citeulike_events(data_dir: str, path: str) -> str:
    """citeulike-t ``users.dat``: user k's library is basket ``u<k>`` of articles ``a<id>``."""
    import numpy as np

    bs, its = [], []
    with open(os.path.join(data_dir, "users.dat")) as fh:
        for k, line in enumerate(fh):
            ids = line.split()[1:]
            bs += [f"u{k}"] * len(ids)
            its += [f"a{i}" for i in ids]
    return _write_events(path, [(np.array(bs, dtype=object), np.array(its, dtype=object))])


def stage_inputs(events_path: str, out_dir: str) -> dict:
    """Instances (every item, ~1/5 test by a hash of the id), 50 labels and 2 labels per
    instance, written as Parquet next to the events: the inputs of the graph stage."""
    import hashlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    items = pc.unique(pq.read_table(events_path, columns=["item_id"])["item_id"]).to_pylist()
    items.sort()
    h = np.array([int(hashlib.md5(i.encode()).hexdigest()[:8], 16) for i in items])
    split = np.where(h % 5 == 0, "test", "train")
    inst = pa.table(
        {"instance_id": items, "text": [f"item {i}" for i in items], "split": split.tolist()}
    )
    labels = pa.table(
        {"label_id": [f"l{k}" for k in range(50)], "text": [f"label {k}" for k in range(50)]}
    )
    il = pa.table(
        {
            "instance_id": items + items,
            "label_id": [f"l{x % 50}" for x in h] + [f"l{(x // 50) % 50}" for x in h],
        }
    )
    out = {"events": events_path}
    for name, t in (("instances", inst), ("labels", labels), ("instance_labels", il)):
        out[name] = os.path.join(out_dir, f"{name}.parquet")
        pq.write_table(t, out[name])
    return out


def pair_occurrences(events_path: str) -> int:
    """Sum over baskets of C(distinct items, 2)."""
    import numpy as np
    import pandas as pd

    df = pd.read_parquet(events_path, columns=["basket_id", "item_id"]).drop_duplicates()
    s = df.groupby("basket_id").size().to_numpy().astype(np.int64)
    return int((s * (s - 1) // 2).sum())


# --------------------------------------------------------------------------- the two sides
def duckdb_edges(events_path: str, out_path: str, min_count: int, threads: int) -> None:
    """DuckDB: the thresholded graph, both directions, to Parquet."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {int(threads)}")
    con.execute(f"""
        COPY (
          WITH e AS (SELECT DISTINCT basket_id, item_id FROM read_parquet('{events_path}')),
               b AS (SELECT basket_id FROM e GROUP BY basket_id HAVING count(*) >= 2),
               u AS (SELECT e.basket_id, e.item_id FROM e SEMI JOIN b USING (basket_id)),
               p AS (SELECT x.item_id AS a, y.item_id AS b, count(*) AS c
                     FROM u x JOIN u y ON x.basket_id = y.basket_id AND x.item_id < y.item_id
                     GROUP BY 1, 2 HAVING count(*) >= {int(min_count)})
          SELECT a AS src_id, b AS dst_id, c AS "count", CAST(c AS DOUBLE) AS score FROM p
          UNION ALL
          SELECT b, a, c, CAST(c AS DOUBLE) FROM p
        ) TO '{out_path}' (FORMAT parquet)""")
    con.close()


def spark_stage(
    spark, inputs: dict, out_dir: str, min_count: int, max_basket_size: int, shuffle_partitions: int
):
    """The whole graph stage; returns its statistics (with ``steps_s``)."""
    from pina_spark.config import config_from_dict
    from pina_spark.orchestration.pipeline import make_context
    from pina_spark.stages import graph

    cfg = config_from_dict(
        {
            "output": out_dir,
            "side_info": "label_text",
            "task": {"labels": "given"},
            "graph": {"min_count": min_count, "max_basket_size": max_basket_size},
            "input": inputs,
        }
    )
    return graph.run(make_context(spark, cfg))


def edges_equal(spark_dir: str, duck_path: str):
    """(equal, n_spark, n_duckdb): the same directed (src, dst, count) rows on both sides."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    cols = ["src_id", "dst_id", "count"]
    a = ds.dataset(spark_dir, format="parquet").to_table(columns=cols)
    b = pq.read_table(duck_path, columns=cols)
    a = a.sort_by([(c, "ascending") for c in cols])
    b = b.sort_by([(c, "ascending") for c in cols]).cast(a.schema)
    return a.equals(b), a.num_rows, b.num_rows


# --------------------------------------------------------------------------- main
def make_dataset(name: str, work: str, instacart_dir: str, citeulike_dir: str) -> str:
    path = os.path.join(work, f"events_{name}.parquet")
    if name.startswith("instacart_x"):
        return instacart_events(instacart_dir, int(name[len("instacart_x") :]), path)
    if name == "heavy":
        return heavy_events(path)
    if name == "citeulike_users":
        return citeulike_events(citeulike_dir, path)
    raise SystemExit(f"unknown data set {name!r} (expected one of {', '.join(DATASETS)})")


def markdown(results, command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "Medians of the repeats (every run in the JSON); the steps are "
        "those of the last Spark run.",
        "",
        "| data set | events | pair occurrences | edges | graph stage (Spark) s, median | "
        "DuckDB s, median "
        "| ratio | Spark ns / pair occurrence | edges equal | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['events']:,} | {r['pair_occurrences']:,} | "
            f"{r['edges']:,} | {r['spark_s']:.1f} | {r['duckdb_s']:.2f} | "
            f"**{r['ratio']:.2f}** | {r['spark_ns_per_pair']:.0f} | "
            f"{r['edges_equal']} | {r['load_avg_1m']} |"
        )
    steps = [s for r in results for s in r["steps_s"]]
    order = list(dict.fromkeys(steps))
    lines += [
        "",
        "Graph stage, seconds per step:",
        "",
        "| step | " + " | ".join(r["name"] for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for s in order:
        lines.append(
            f"| {s} | "
            + " | ".join(f"{r['steps_s'][s]:.2f}" if s in r["steps_s"] else "-" for r in results)
            + " |"
        )
    lines.append(
        "| **total (time_s)** | " + " | ".join(f"{r['stage_time_s']:.2f}" for r in results) + " |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", required=True, help="output JSON file")
    p.add_argument(
        "--datasets",
        default="instacart_x1,instacart_x10,instacart_x100,heavy",
        help=f"comma list of {', '.join(DATASETS)}",
    )
    p.add_argument("--instacart", default=os.path.join(ROOT, "..", "shared", "data", "instacart"))
    p.add_argument("--citeulike", default=os.path.join(ROOT, "..", "shared", "data", "citeulike-t"))
    p.add_argument("--threads", type=int, default=2, help="local[T] for Spark, T DuckDB threads")
    p.add_argument("--max-basket-size", type=int, default=100_000)
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each side per data set; the table shows medians",
    )
    args = p.parse_args(argv)
    command = "python benchmarks/bench_graph.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pina_spark.config import SparkConfig
    from pina_spark.orchestration.session import get_spark

    work = args.workdir or tempfile.mkdtemp(prefix="bench_graph_")
    os.makedirs(work, exist_ok=True)
    spark = get_spark(
        SparkConfig(
            master=f"local[{args.threads}]",
            app_name="bench_graph",
            conf={
                "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
                "spark.driver.memory": "6g",
                "spark.ui.enabled": "false",
            },
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        for name in [s.strip() for s in args.datasets.split(",") if s.strip()]:
            d = os.path.join(work, name)
            os.makedirs(d, exist_ok=True)
            if name == "demo":
                from pina_spark.datasets import write_demo_data

                inputs = write_demo_data(os.path.join(d, "input"))
                ev = inputs["events"]
            else:
                ev = make_dataset(name, work, args.instacart, args.citeulike)
                inputs = stage_inputs(ev, d)
            import pyarrow.parquet as pq

            n_events = pq.ParquetFile(ev).metadata.num_rows
            n_pairs = pair_occurrences(ev)
            min_count = MIN_COUNT.get(name.split("_x")[0], MIN_COUNT.get(name, 2))
            spark_runs, duck_runs = [], []
            for r in range(args.repeat):  # alternated, so drifting machine load hits both sides
                run_dir = os.path.join(d, f"run{r}")
                t0 = time.perf_counter()
                st = spark_stage(
                    spark, inputs, run_dir, min_count, args.max_basket_size, args.shuffle_partitions
                )
                spark_runs.append(time.perf_counter() - t0)
                duck_out = os.path.join(d, f"duckdb_edges{r}.parquet")
                t0 = time.perf_counter()
                duckdb_edges(ev, duck_out, min_count, args.threads)
                duck_runs.append(time.perf_counter() - t0)
                same, n_spark, n_duck = edges_equal(
                    os.path.join(run_dir, "graph", "i2i_edges"), duck_out
                )
                if not same:
                    raise SystemExit(
                        f"{name}: Spark wrote {n_spark} edges, DuckDB {n_duck}: "
                        f"the edges differ"
                    )
                if r + 1 < args.repeat:
                    shutil.rmtree(run_dir, ignore_errors=True)
            spark_s, duck_s = statistics.median(spark_runs), statistics.median(duck_runs)
            row = {
                "name": name,
                "events": n_events,
                "pair_occurrences": n_pairs,
                "min_count": min_count,
                "edges": n_spark,
                "spark_s": round(spark_s, 3),
                "duckdb_s": round(duck_s, 3),
                "ratio": round(spark_s / duck_s, 3),
                "spark_runs_s": [round(t, 3) for t in spark_runs],
                "duckdb_runs_s": [round(t, 3) for t in duck_runs],
                "spark_ns_per_pair": round(spark_s / max(n_pairs, 1) * 1e9, 2),
                "edges_equal": same,
                "steps_s": st.get("steps_s", {}),
                "stage_time_s": st.get("time_s"),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
            results.append(row)
            print(
                f"{name}: {n_events} events, {n_pairs} pair occurrences, {n_spark} edges: "
                f"graph stage {spark_s:.1f}s, DuckDB {duck_s:.2f}s, ratio "
                f"{spark_s / duck_s:.2f}, steps {row['steps_s']}",
                flush=True,
            )
            shutil.rmtree(d, ignore_errors=True)
            if os.path.exists(ev):
                os.remove(ev)
    finally:
        spark.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    out = {
        "results": results,
        "command": command,
        "settings": {
            "threads": args.threads,
            "shuffle_partitions": args.shuffle_partitions,
            "max_basket_size": args.max_basket_size,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "note": "shared machine; Spark session start excluded",
        },
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=2)
    print(markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
