"""Building g's X from the ``embeddings`` table: in place against the COO construction.

The pretrain stage (X of every pretraining row, on the driver) and the neighbours stage (X of a
task's rows) turn ``embeddings`` rows into ``hstack([dense, sparse])`` with
:func:`pina_spark.runtime.arrow.features_from_arrow`. It writes the csr arrays in place
(:func:`pina_spark.runtime.arrow.features_csr`); the reference is the construction it replaced,
kept here (:func:`coo_reference`): (row, column, value) triplets of every entry,
``scipy.sparse.csr_matrix`` from COO, ``sum_duplicates``, ``sort_indices``. Both start from
the same pyarrow table (read before the clocks start) and must give the same arrays (checked on
every run). Two modes, each with medians of ``--repeat`` and every measurement: ``warm``, both in
one process, alternating which goes first; ``fresh``, one build per new process, as a stage
makes it once per driver or task (a process's first large allocations cost most on some
machines).

Usage::

    python benchmarks/bench_features.py --embeddings RUN/embeddings --dense-dim 384 \\
        --repeat 5 --json /tmp/bench_features.json

``--sparse-dim`` defaults to the largest sparse index + 1. Writes ``{"rows", "nnz",
"nnz_per_row", "warm": {...}, "fresh": {"reference_s", "new_s", "ratio", "runs"}, "runs"}``
(ratio = reference / new).
"""

import argparse
import hashlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pina_spark import storage  # noqa: E402
from pina_spark.runtime.arrow import features_from_arrow  # noqa: E402

log = logging.getLogger("bench_features")


def coo_reference(table, dense_dim: int, n_features: int):
    """The construction before ``features_csr``: COO triplets of every entry, then csr. The
    lists are read by the same helper as the new path (``_list_parts``: no gather where a
    column is one contiguous run; the old code always gathered), so the reference is, if
    anything, faster than the code it stands for."""
    import scipy.sparse as sp

    from pina_spark.runtime.arrow import _list_parts, concat_ranges

    def triplets(col):
        lens, vals = _list_parts(col)
        rows = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
        return rows, concat_ranges(np.zeros(len(lens), dtype=np.int64), lens), vals

    dr, dp, dv = triplets(table.column(storage.DENSE))
    sr, _, si = triplets(table.column(storage.SPARSE_INDICES))
    _, _, sv = triplets(table.column(storage.SPARSE_VALUES))
    cols = np.concatenate([dp, si.astype(np.int64) + dense_dim])
    rows = np.concatenate([dr, sr])
    vals = np.concatenate([dv, sv]).astype(np.float32)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(table.num_rows, n_features), dtype=np.float32)
    X.sum_duplicates()
    X.sort_indices()
    return X


BUILDERS = {"reference": coo_reference, "new": features_from_arrow}


def _read(path: str, dense_dim: int, sparse_dim: int):
    """The table as the stage has it before the conversion (sorted by node), and S."""
    import pyarrow.dataset as ds

    cols = [storage.NODE_INDEX, storage.DENSE, storage.SPARSE_INDICES, storage.SPARSE_VALUES]
    tbl = ds.dataset(path, format="parquet").to_table(columns=cols).sort_by(storage.NODE_INDEX)
    S = sparse_dim or int(
        np.max(tbl.column(storage.SPARSE_INDICES).combine_chunks().values.to_numpy()) + 1
    )
    return tbl, S


def _digest(X) -> str:
    h = hashlib.sha1()
    for part in (X.indptr, X.indices, X.data):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


def one(path: str, what: str, dense_dim: int, sparse_dim: int) -> dict:
    """One build in this process (``--one``): seconds and the matrix's digest."""
    tbl, S = _read(path, dense_dim, sparse_dim)
    t0 = time.perf_counter()
    X = BUILDERS[what](tbl, dense_dim, dense_dim + S)
    secs = time.perf_counter() - t0
    return {"what": what, "s": round(secs, 4), "nnz": int(X.nnz), "digest": _digest(X)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embeddings", required=True, help="a run's published embeddings folder")
    ap.add_argument("--dense-dim", type=int, default=384)
    ap.add_argument("--sparse-dim", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--one", choices=sorted(BUILDERS), help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.one:  # a fresh process's single build
        print(json.dumps(one(args.embeddings, args.one, args.dense_dim, args.sparse_dim)))
        return {}
    if not args.json:
        ap.error("--json is required")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    D = args.dense_dim
    tbl, S = _read(args.embeddings, D, args.sparse_dim)
    order = ["reference", "new"]
    runs = []
    for i in range(args.repeat):  # warm: both in this process, alternating which goes first
        got = {}
        for name in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            got[name] = BUILDERS[name](tbl, D, D + S)
            s = round(time.perf_counter() - t0, 4)
            runs.append({"mode": "warm", "repeat": i, "what": name, "s": s})
        if _digest(got["reference"]) != _digest(got["new"]):
            raise SystemExit("the two constructions differ")
        nnz = int(got["new"].nnz)
        del got
    digests = set()
    for i in range(args.repeat):  # fresh: one build per process, as a stage makes it
        for name in order if i % 2 == 0 else order[::-1]:
            res = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--embeddings",
                    args.embeddings,
                    "--one",
                    name,
                    "--dense-dim",
                    str(D),
                    "--sparse-dim",
                    str(S),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(res.stdout.strip().splitlines()[-1])
            digests.add(r["digest"])
            runs.append({"mode": "fresh", "repeat": i, "what": name, "s": r["s"]})
    if len(digests) != 1:
        raise SystemExit("the two constructions differ between processes")
    out: dict = {
        "embeddings": args.embeddings,
        "rows": tbl.num_rows,
        "nnz": nnz,
        "nnz_per_row": round(nnz / max(tbl.num_rows, 1), 1),
        "repeat": args.repeat,
    }
    for mode in ("warm", "fresh"):
        med = {
            w: statistics.median(r["s"] for r in runs if r["mode"] == mode and r["what"] == w)
            for w in order
        }
        out[mode] = {
            "reference_s": med["reference"],
            "new_s": med["new"],
            "ratio": round(med["reference"] / med["new"], 2),
            "runs": {
                w: [r["s"] for r in runs if r["mode"] == mode and r["what"] == w] for w in order
            },
        }
        log.info(
            "%s, %d rows, %.1f entries per row: COO reference %.3f s, in place %.3f s "
            "(medians of %d): ratio %.2f; runs %s",
            mode,
            out["rows"],
            out["nnz_per_row"],
            med["reference"],
            med["new"],
            args.repeat,
            out[mode]["ratio"],
            out[mode]["runs"],
        )
    out["runs"] = runs
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
