"""The work of a downstream XR-Linear fit, level by level of its label tree, from a finished run.

For each level: the positive parent clusters per train row, and the ranker rows per train row
(each row trains the rankers of every child of its positive parents: PECOS' teacher-forced
negatives). Their sum per row times the rows is the fit's work in rows x rankers, so two runs'
sums say how much of a fit's growth the tree explains (README, "300k products").

Usage::

    .venv/bin/python benchmarks/label_tree_work.py RUN_100K RUN_300K
"""

import sys

import numpy as np
import pandas as pd
import scipy.sparse as sp

from pina_spark import storage
from pina_spark.stages.train.model_dir import read_model_dir

for run in sys.argv[1:]:
    paths = storage.RunPaths(run)
    labels, m = read_model_dir(
        storage.join(paths.table(storage.DOWNSTREAM_MODELS), "pina"), is_predict_only=False
    )
    chain = m.model.model_chain
    nodes = pd.read_parquet(
        paths.table(storage.NODES), columns=[storage.NODE_INDEX, storage.NODE_ID, storage.SPLIT]
    )
    il = pd.read_parquet(paths.table(storage.INSTANCE_LABELS))
    pos = {lab_id: i for i, lab_id in enumerate(labels)}
    idx2id = dict(zip(nodes.node_index, nodes.node_id))
    tr = set(nodes.node_index[nodes.split == "train"])
    il = il[il.instance_index.isin(tr)]
    lab = il.label_index.map(idx2id).map(pos)
    ok = lab.notna()
    rows = pd.factorize(il.instance_index[ok])[0]
    Y = sp.csr_matrix(
        (np.ones(ok.sum()), (rows, lab[ok].astype(int))), shape=(rows.max() + 1, len(labels))
    )
    Y.data[:] = 1
    print(
        run, "train rows", Y.shape[0], "labels", Y.shape[1], "positives per row", Y.nnz / Y.shape[0]
    )
    # chain[l].C: children(l) x clusters(l-1) ... build label->cluster at each level
    Cs = [c.C for c in chain]
    # level matrices from the leaf up
    cur = Y.tocsc()
    per_level = []
    for lev in range(len(Cs) - 1, -1, -1):
        C = Cs[lev].tocsr()  # nodes at level lev x parents
        parents = (cur @ C).tocsr()
        parents.data[:] = 1
        kids_of_parent = np.asarray(C.sum(axis=0)).ravel()
        # rows a level-l ranker set trains on: for each row, children of its positive parents
        work = float((parents @ kids_of_parent).sum()) / Y.shape[0]
        per_level.append((lev, C.shape[0], C.shape[1], parents.nnz / Y.shape[0], work))
        cur = parents.tocsc()
    print(f"  ranker rows per train row, all levels: {sum(w for *_, w in per_level):.1f}")
    for lev, n, p, pp, w in reversed(per_level):
        print(
            f"  level {lev}: {n} nodes under {p} parents; positive parents per row {pp:.2f}; "
            f"ranker rows per train row {w:.1f}"
        )
