"""Whether two run roots published the same results, bit for bit (reproducibility evidence).

Compares, table by table, every row of ``nodes``, ``graph/i2i_edges``, ``graph/pretrain_edges``,
``embeddings``, ``neighbors``, ``features`` and ``predictions`` of two run roots, sorted by each
table's key (the order of the rows in the files does not matter), column by column and exactly;
for a column that differs it prints how many rows differ (and the largest absolute difference of
a float column). Then the test P@1/3/5 of every variant side by side. Exit code 0 when every
table is equal, 1 otherwise. Used for the citation-graph runs in RESULTS.md (the same inputs as
Parquet, shuffled over three files and as CSV); ``tests/test_input_order.py`` holds the demo to
the same.

Usage: python benchmarks/tables_equal.py RUN_ROOT_A RUN_ROOT_B
Reads the Parquet tables with pyarrow (local paths).
"""

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

#: table -> the columns that identify a row
KEYS = {
    "nodes": ["node_index"],
    "graph/i2i_edges": ["src_id", "dst_id"],
    "graph/pretrain_edges": ["variant", "src_index", "dst_index", "block"],
    "embeddings": ["node_index"],
    "neighbors": ["variant", "instance_index"],
    "features": ["variant", "split", "instance_id"],
    "predictions": ["variant", "instance_id"],
}


def load(root: str, rel: str, key: list[str]) -> pa.Table:
    t = ds.dataset(f"{root}/{rel}", format="parquet", partitioning="hive").to_table()
    return t.sort_by([(k, "ascending") for k in key])


def column_diff(cx: pa.Array, cy: pa.Array) -> str | None:
    """``None`` when the two columns are equal, else what differs."""
    if pa.types.is_list(cx.type) or pa.types.is_large_list(cx.type):
        ox, oy = cx.offsets.to_numpy(), cy.offsets.to_numpy()
        if not np.array_equal(np.diff(ox), np.diff(oy)):
            return f"lengths differ in {int((np.diff(ox) != np.diff(oy)).sum())} rows"
        fx = cx.flatten().to_numpy(zero_copy_only=False)
        fy = cy.flatten().to_numpy(zero_copy_only=False)
        row = np.repeat(np.arange(len(ox) - 1), np.diff(ox))
        if fx.dtype.kind == "f":
            d = np.abs(fx.astype(np.float64) - fy)
            bad = np.unique(row[d > 0])
            return None if not len(bad) else f"{len(bad)} rows differ, max |d| {d.max():.3g}"
        bad = np.unique(row[fx != fy])
        return None if not len(bad) else f"{len(bad)} rows differ"
    if cx.equals(cy):
        return None
    if pa.types.is_floating(cx.type):
        d = np.abs(cx.to_numpy(zero_copy_only=False) - cy.to_numpy(zero_copy_only=False))
        return f"{int((d > 0).sum())} rows differ, max |d| {np.nanmax(d):.3g}"
    nx, ny = cx.to_pylist(), cy.to_pylist()
    return f"{sum(p != q for p, q in zip(nx, ny))} rows differ"


def table_diffs(a: str, b: str, tables=tuple(KEYS)) -> dict[str, tuple[int, dict[str, str]]]:
    """Per table of ``tables``: (rows of ``a``, {column: what differs}); the dict is empty when
    the two roots' tables are equal. A table whose row count or columns differ has the entry
    ``{"*": ...}``."""
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for rel in tables:
        x, y = load(a, rel, KEYS[rel]), load(b, rel, KEYS[rel])
        if x.num_rows != y.num_rows or sorted(x.column_names) != sorted(y.column_names):
            out[rel] = (x.num_rows, {"*": f"rows {x.num_rows} / {y.num_rows}, or the columns"})
            continue
        diffs = {}
        for col in sorted(x.column_names):
            d = column_diff(x.column(col).combine_chunks(), y.column(col).combine_chunks())
            if d is not None:
                diffs[col] = d
        out[rel] = (x.num_rows, diffs)
    return out


def main(a: str, b: str) -> int:
    diffs = table_diffs(a, b)
    for rel, (n, d) in diffs.items():
        print(f"{rel}: {n} rows, " + ("equal" if not d else f"differ: {d}"))
    equal = not any(d for _, d in diffs.values())
    ma = json.load(open(f"{a}/eval/metrics.json"))["variants"]
    mb = json.load(open(f"{b}/eval/metrics.json"))["variants"]
    for v in ma:
        pk = ", ".join(
            f"{k} {100 * ma[v][k]:.2f} / {100 * mb[v].get(k, float('nan')):.2f}"
            for k in ("P@1", "P@3", "P@5")
        )
        print(f"{v}: {pk}")
    print("all tables equal" if equal else "tables differ")
    return 0 if equal else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
