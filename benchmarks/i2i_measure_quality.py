"""Which co-purchase edge signal carries the labels? (issue #9: ``graph.measure``)

For a data set with events AND given labels (citeulike-t: users' libraries and tags), build the
TRAIN-only I2I graph with the library's own :func:`pina_spark.stages.graph.i2i_edges` for each
``graph.measure`` and ask, of every train item's top-K neighbours by that measure (score desc,
id asc, the order the graph stage uses), how much they say about the item's own labels:

* ``coverage``: share of train items with at least one neighbour,
* ``share_tag``: share of (item, neighbour) pairs whose label sets intersect,
* ``label_prec``: mean |labels(nbr) & labels(item)| / |labels(nbr)| over those pairs,
* ``label_recall``: mean over covered items of |labels(item) & union labels(nbrs)| / |labels(item)|.

Only train items and train events are read (the split column of the instances table), so the
choice it informs never sees a test row. It is a property of the graph itself, not of g: it
bounds what neighbour text can tell the downstream model in ``i2i`` mode.

Usage::

    python benchmarks/i2i_measure_quality.py --data data/citeulike-t [--k 5] [--min-count 2]
        [--max-basket-size 200] [--json OUT]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder written by pina-spark prepare-data")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--max-basket-size", type=int, default=200)
    ap.add_argument("--measures", default="count,jaccard,pmi,llr")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from pina_spark import storage
    from pina_spark.config import GraphConfig, SparkConfig
    from pina_spark.orchestration.session import get_spark
    from pina_spark.stages import graph

    spark = get_spark(
        SparkConfig(
            master="local[2]",
            app_name="i2i-measure-quality",
            conf={"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "4g"},
        )
    )
    inst = pq.read_table(
        f"{a.data}/instances.parquet", columns=["instance_id", "split"]
    ).to_pandas()
    train = set(inst.loc[inst.split == "train", "instance_id"])
    il = pq.read_table(f"{a.data}/instance_labels.parquet").to_pandas()
    il = il[il.instance_id.isin(train)]
    labels = il.groupby("instance_id")["label_id"].apply(frozenset).to_dict()
    ev = spark.read.parquet(f"{a.data}/events.parquet")
    train_df = spark.createDataFrame(pd.DataFrame({storage.ITEM_ID: sorted(train)}))
    ev = ev.join(F.broadcast(train_df), storage.ITEM_ID, "left_semi")
    rows = []
    for measure in a.measures.split(","):
        t0 = time.time()
        cfg = GraphConfig(min_count=a.min_count, max_basket_size=a.max_basket_size, measure=measure)
        e = graph.i2i_edges(ev, cfg)
        w = Window.partitionBy(storage.SRC_ID).orderBy(
            F.col(storage.SCORE).desc(), F.col(storage.DST_ID).asc()
        )
        top = (
            e.withColumn("_r", F.row_number().over(w))
            .filter(F.col("_r") <= a.k)
            .select(storage.SRC_ID, storage.DST_ID)
            .toPandas()
        )
        share = prec = 0.0
        pairs = 0
        recall = []
        for src, dsts in top.groupby(storage.SRC_ID)[storage.DST_ID]:
            mine = labels.get(src, frozenset())
            union = set()
            for d in dsts:
                theirs = labels.get(d, frozenset())
                union |= theirs
                inter = len(mine & theirs)
                share += inter > 0
                prec += inter / len(theirs) if theirs else 0.0
                pairs += 1
            if mine:
                recall.append(len(mine & union) / len(mine))
        n_items = len(train)
        covered = top[storage.SRC_ID].nunique()
        r = {
            "measure": measure,
            "k": a.k,
            "min_count": a.min_count,
            "train_items": n_items,
            "coverage": covered / n_items,
            "share_tag": share / max(pairs, 1),
            "label_prec": prec / max(pairs, 1),
            "label_recall": float(np.mean(recall)) if recall else 0.0,
            "directed_edges": int(e.count()),
            "seconds": round(time.time() - t0, 1),
        }
        rows.append(r)
        print(json.dumps(r), flush=True)
    print()
    print(
        "| measure | coverage | neighbours sharing a label | label precision "
        f"| label recall of top-{a.k} |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['measure']} | {r['coverage']:.3f} | {r['share_tag']:.3f} | "
            f"{r['label_prec']:.3f} | {r['label_recall']:.3f} |"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": rows}, f, indent=2)
    spark.stop()


if __name__ == "__main__":
    main()
