"""Time of ``pretrain.encoder: contrastive`` fine-tuning at the default budget (issue #18 goal:
20k pairs of short texts within 15 minutes on 2 CPU cores).

Pairs are built from the real data in ``../shared/data`` the way B_pre gives them:

- ``titles``: Instacart product name with the name of a product co-bought with it in >= 2 orders
  (short product titles, the e-commerce case);
- ``articles``: citeulike-t article text (words by count, the rule of ``pina_spark.datasets``)
  with the name of one of its tags (long texts).

Each measurement fine-tunes MiniLM on ``--pairs`` pairs chosen by :func:`contrastive.choose_pairs`
with the default ``pretrain.contrastive`` settings, ``--repeat`` times; the JSON has every
measurement, the median pairs/s and the projected seconds for ``max_pairs`` (20,000) pairs.

Usage: python benchmarks/bench_finetune.py --json OUT [--sets titles,articles] [--pairs 2000]
       [--repeat 3] [--threads 2]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from itertools import combinations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "..", "shared", "data")


def title_pairs():
    import pandas as pd

    d = os.path.join(DATA, "instacart")
    op = pd.read_csv(
        os.path.join(d, "order_products_sample.csv"), usecols=["order_id", "product_id"]
    )
    names = pd.read_csv(os.path.join(d, "products.csv"), usecols=["product_id", "product_name"])
    name = dict(zip(names.product_id, names.product_name))
    counts = Counter()
    for _, items in op.groupby("order_id").product_id:
        for a, b in combinations(sorted(set(items.tolist())), 2):
            counts[(a, b)] += 1
    pairs = [(a, b) for (a, b), c in counts.items() if c >= 2]
    return (
        [str(a) for a, _ in pairs],
        [name[a] for a, _ in pairs],
        ["label"] * len(pairs),
        [str(b) for _, b in pairs],
        [name[b] for _, b in pairs],
    )


def article_pairs():
    from pina_spark.datasets import citeulike_text

    d = os.path.join(DATA, "citeulike-t")
    read = lambda n: open(os.path.join(d, n), encoding="utf-8").read().split("\n")  # noqa: E731
    vocab, mult, tags, ti = (
        read("vocabulary.dat"),
        read("mult.dat"),
        read("tags.dat"),
        read("tag-item.dat"),
    )
    a_ids, a_txt, t_ids, t_txt = [], [], [], []
    for t, line in enumerate(ti):
        items = line.split()[1:]
        if len(items) < 5:
            continue
        for a in items:
            a_ids.append(a)
            a_txt.append(citeulike_text(mult[int(a)].split()[1:], vocab))
            t_ids.append(str(t))
            t_txt.append(tags[t].replace("-", " ").replace("_", " "))
    return a_ids, a_txt, ["label"] * len(a_ids), t_ids, t_txt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--sets", default="titles,articles")
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    import torch

    from pina_spark.config import ContrastiveConfig
    from pina_spark.models.contrastive import choose_pairs, fine_tune
    from pina_spark.models.encoders import minilm_path

    torch.set_num_threads(a.threads)
    ccfg = ContrastiveConfig(device="cpu")
    results = []
    for name in a.sets.split(","):
        cand = {"titles": title_pairs, "articles": article_pairs}[name]()
        chosen = choose_pairs(*cand, max_pairs=a.pairs, seed=ccfg.seed)
        runs = []
        for r in range(a.repeat):
            with tempfile.TemporaryDirectory() as out:
                t0 = time.time()
                st = fine_tune(chosen["anchors"], chosen["positives"], minilm_path(), out, ccfg)
                runs.append(
                    {
                        "seconds": round(time.time() - t0, 2),
                        "steps": st["steps"],
                        "fit_seconds": st["seconds"],
                        "load": os.getloadavg()[0],
                    }
                )
            print(name, r, runs[-1], flush=True)
        pps = statistics.median(chosen["pairs"] / x["fit_seconds"] for x in runs)
        results.append(
            {
                "name": name,
                "pairs": chosen["pairs"],
                "candidates": chosen["candidates"],
                "threads": a.threads,
                "median_pairs_per_s": round(pps, 2),
                "projected_s_for_max_pairs": round(ccfg.max_pairs / pps, 1),
                "max_pairs": ccfg.max_pairs,
                "settings": ccfg.to_dict(),
                "runs": runs,
            }
        )
        print(
            f"| {name} | {chosen['pairs']} | {pps:.1f} | "
            f"{ccfg.max_pairs / pps / 60:.1f} min for {ccfg.max_pairs} pairs |",
            flush=True,
        )
    with open(a.json, "w") as fh:
        json.dump({"results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
