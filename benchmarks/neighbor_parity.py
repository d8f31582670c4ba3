"""Train/test parity of predicted neighbours (issue #9 evidence).

For each variant and split: how much an instance's predicted neighbours say about its own true
labels. A label neighbour is a hit when it is one of the instance's labels; an instance
neighbour (i2i / both modes) scores the share of ITS labels that the instance also has. With
``neighbors.train_mode: in_sample`` the train rows' neighbours are far better than the test
rows' (g saw the train rows), which shifts the downstream model; ``out_of_fold`` should bring the
two splits level. It also prints the labels' share of the neighbours by count and by weight:
the weights are often peaked (l1 of PECOS scores), so a gap in the count can sit entirely in
neighbours of near-zero weight.

Usage: python benchmarks/neighbor_parity.py RUN_ROOT [--graph-labels]   (e.g. runs/citeulike-t)
``--graph-labels`` (runs with ``task.labels: graph``, where a label is an item): an instance
neighbour that is one of the item's labels (same id) counts as a hit.
Reads the run's ``nodes``, ``graph/instance_labels`` and ``neighbors`` Parquet tables with pyarrow.
"""

import os
import sys

import pyarrow.dataset as ds
import pyarrow.parquet as pq

root = sys.argv[1]
graph_labels = "--graph-labels" in sys.argv[2:]
nodes = pq.read_table(f"{root}/nodes").to_pandas()
il = pq.read_table(f"{root}/graph/instance_labels").to_pandas()
truth = il.groupby("instance_index")["label_index"].apply(set).to_dict()
split = dict(zip(nodes.node_index, nodes.split))
kind = dict(zip(nodes.node_index, nodes.kind))
node_id = dict(zip(nodes.node_index, nodes.node_id))
# task.labels graph: a label IS an item; an instance neighbour that is one of the item's labels
# (same id) is a hit too
truth_ids = {i: {node_id[lab] for lab in ls} for i, ls in truth.items()}
for variant in ("pina_naive", "pina"):
    path = f"{root}/neighbors/variant={variant}"
    if not os.path.isdir(path):
        continue
    nb = ds.dataset(path, format="parquet").to_table().to_pandas()
    for sp in ("train", "test"):
        rows = nb[[split.get(i) == sp for i in nb.instance_index]]
        lab_hit = lab_tot = inst_prec = inst_tot = inst_item_hit = n = top1 = 0
        w_all = w_lab = 0.0
        for i, ns, ws in zip(rows.instance_index, rows.neighbor, rows.score):
            t = truth.get(i, set())
            n += len(ns)
            w_all += float(sum(ws))
            w_lab += float(sum(w for j, w in zip(ns, ws) if kind[j] == "label"))
            for r, j in enumerate(ns):
                if kind[j] == "label":
                    lab_hit += j in t
                    lab_tot += 1
                    hit = j in t
                else:
                    theirs = truth.get(j, set())
                    p = len(theirs & t) / len(theirs) if theirs else 0.0
                    inst_prec += p
                    inst_tot += 1
                    item_hit = graph_labels and node_id[j] in truth_ids.get(i, ())
                    inst_item_hit += item_hit
                    hit = p > 0 or item_hit
                if r == 0:
                    top1 += bool(hit)
        print(
            f"{variant:10s} {sp:5s} rows={len(rows):6d} "
            f"label-neighbour precision={lab_hit / max(lab_tot, 1):.3f} (n={lab_tot}) "
            f"instance-neighbour label precision={inst_prec / max(inst_tot, 1):.3f} "
            f"(n={inst_tot}) instance-neighbour is a label of it (same id)="
            f"{inst_item_hit / max(inst_tot, 1):.3f} "
            f"top-1 neighbour hit={top1 / max(len(rows), 1):.3f} "
            f"share of neighbours that are labels={lab_tot / max(n, 1):.3f} "
            f"(of their weight={w_lab / w_all if w_all else 0.0:.4f})"
        )
