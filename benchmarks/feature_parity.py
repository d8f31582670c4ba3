"""Train/test parity of the aggregated features: does V1 favour the rows it was learned from?

For every instance of a run's ``features`` (variant ``pina`` by default), the cosine between its
own part V0 and its neighbour part V1, averaged over train and over test instances. V1 is built
from things learned on train rows (g's neighbours; with ``aggregate.label_features: pifa`` the
labels' centroids of train rows): a V1 that holds the instance's own row (in-sample g, or
centroids that include the instance) sits closer to V0 on train rows than on test rows, and
the downstream model learns to trust it more than it deserves at test time. Out of fold, the
train - test gap should stay at the level of the ``text`` label features of the same run's
neighbours.

Usage::

    python benchmarks/feature_parity.py RUN_ROOT [RUN_ROOT ...] [--variant pina]

Prints one row per run: the label features, rows, mean cos(V0, V1) on train and on test, the
gap, and a two-sided Welch t-test p of the gap. Reads the Parquet files with pyarrow; no Spark.
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def cosines(root: str, variant: str, split: str, dense_dim: int, sparse_dim: int):
    """cos(V0, V1) of every instance of ``features/variant=<v>/split=<s>`` (NaN where a part is
    zero)."""
    import pyarrow.dataset as ds

    path = os.path.join(root, "features", f"variant={variant}", f"split={split}")
    t = ds.dataset(path, format="parquet").to_table(
        columns=["dense", "sparse_indices", "sparse_values"]
    )
    D, S = dense_dim, sparse_dim
    dense = np.asarray(t.column("dense").combine_chunks().flatten(), np.float64).reshape(-1, 2 * D)
    d0, d1 = dense[:, :D], dense[:, D:]
    dot = (d0 * d1).sum(1)
    n0, n1 = (d0 * d0).sum(1), (d1 * d1).sum(1)
    idx_col = t.column("sparse_indices").combine_chunks()
    val_col = t.column("sparse_values").combine_chunks()
    lens = np.diff(np.asarray(idx_col.offsets))
    idx = np.asarray(idx_col.flatten(), np.int64)
    val = np.asarray(val_col.flatten(), np.float64)
    row = np.repeat(np.arange(t.num_rows), lens)
    first = idx < S
    n0 += np.bincount(row[first], val[first] ** 2, minlength=t.num_rows)
    n1 += np.bincount(row[~first], val[~first] ** 2, minlength=t.num_rows)
    # the dot product of the two sparse parts: V0 entry i meets V1 entry S + i of the same row
    key0 = row[first] * (S + 1) + idx[first]
    key1 = row[~first] * (S + 1) + (idx[~first] - S)
    _, i0, i1 = np.intersect1d(key0, key1, assume_unique=True, return_indices=True)
    dot += np.bincount(row[first][i0], val[first][i0] * val[~first][i1], minlength=t.num_rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        return dot / np.sqrt(n0 * n1)


def main(argv=None):
    from scipy.stats import ttest_ind

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--variant", default="pina")
    a = ap.parse_args(argv)
    print(
        "| run | label features | train rows | test rows | cos(V0,V1) train | "
        "cos(V0,V1) test | gap (train - test) | p |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for root in a.runs:
        vec = os.path.join(root, "vectorizer")  # runs before the stage split: models/vectorizer
        if not os.path.isdir(vec):
            vec = os.path.join(root, "models", "vectorizer")
        enc = json.load(open(os.path.join(vec, "encoder.json")))
        D, S = int(enc["dense_dim"]), int(enc["sparse_dim"])
        man = json.load(open(os.path.join(root, "_manifest.json")))
        lf = man["stages"]["aggregate"]["stats"].get("label_features", "text")
        tr = cosines(root, a.variant, "train", D, S)
        te = cosines(root, a.variant, "test", D, S)
        tr, te = tr[np.isfinite(tr)], te[np.isfinite(te)]
        p = ttest_ind(tr, te, equal_var=False).pvalue
        print(
            f"| {os.path.basename(root.rstrip('/'))} | {lf} | {tr.size} | {te.size} | "
            f"{tr.mean():.4f} | {te.mean():.4f} | {tr.mean() - te.mean():+.4f} | {p:.2g} |"
        )


if __name__ == "__main__":
    main()
