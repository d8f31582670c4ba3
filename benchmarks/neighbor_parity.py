"""Train/test parity of predicted neighbours (issue #9 evidence).

For each variant and split: the precision of an instance's predicted label-neighbours against its
own true labels. With ``neighbors.train_mode: in_sample`` the train rows' neighbours are far better
than the test rows' (g saw the train rows), which shifts the downstream model; ``out_of_fold``
should bring the two splits level.

Usage: python benchmarks/neighbor_parity.py RUN_ROOT      (e.g. runs/citeulike-t)
Reads the run's ``nodes``, ``graph/instance_labels`` and ``neighbors`` Parquet tables with pyarrow.
"""
import sys, numpy as np, pyarrow.parquet as pq, pyarrow.dataset as ds
root = sys.argv[1]
nodes = pq.read_table(f"{root}/nodes").to_pandas()
il = pq.read_table(f"{root}/graph/instance_labels").to_pandas()
truth = il.groupby("instance_index")["label_index"].apply(set).to_dict()
split = dict(zip(nodes.node_index, nodes.split)); kind = dict(zip(nodes.node_index, nodes.kind))
for variant in ("pina_naive", "pina"):
    nb = ds.dataset(f"{root}/neighbors/variant={variant}", format="parquet").to_table().to_pandas()
    for sp in ("train", "test"):
        rows = nb[[split.get(i) == sp for i in nb.instance_index]]
        hit = tot = lab = n = top1 = 0
        for i, ns in zip(rows.instance_index, rows.neighbor):
            t = truth.get(i, set()); labs = [j for j in ns if kind[j] == "label"]
            hit += sum(j in t for j in labs); tot += len(labs); n += len(ns); lab += len(labs)
            top1 += bool(labs) and labs[0] in t
        print(f"{variant:10s} {sp:5s} rows={len(rows):6d} label-neighbour precision={hit/max(tot,1):.3f} "
              f"top-1 label hit={top1/max(len(rows),1):.3f} share of neighbours that are labels={lab/max(n,1):.3f}")
