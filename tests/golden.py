"""A content digest of a finished run: every published table and the evaluation metrics, in a
form that two runs of the same code and data reproduce, so a restructuring can prove that it
changed no output (tests/test_submit.py::test_demo_outputs_match_the_golden_digest).

Per table (each folder holding ``_SUCCESS``; the stages' commit records name the same ones):
its row count and schema; for every column without floating-point values, a hash of the sorted
multiset of its values (exact); for every floating-point column (scalars or lists), the sum, the
sum of absolute values and the sum of squares of its values, compared with a relative tolerance.
Floating-point sums tolerate the last-bit differences of a reordered reduction or another CPU;
anything derived discretely from them (neighbour ids, ranks, counts, metrics) must be identical.

Near ties and the CPU. g's scores tie closely enough for a few demo instances that another CPU's
floating-point kernels (SIMD width, BLAS code path) can order two neighbours the other way:
the same code gave ``pina_naive`` P@1 94.85 on the machine that made a digest and 94.64 on an
AMD EPYC, with the embeddings and every graph table bit-identical. The digest therefore records
the machine it was made on (:func:`machine`). On that machine the comparison is exact as above;
on another one, the discrete columns derived from g's or the downstream model's scores
(:data:`SCORE_DERIVED`) may differ, their float sums must agree within
:data:`OTHER_MACHINE_REL_TOL` and every metric within :data:`OTHER_MACHINE_METRIC_TOL` (two
scored demo instances); everything upstream of the scores (every graph table, the embeddings,
the row counts and schemas) stays exact. The ``eval`` table holds those metrics per instance
(:data:`PER_INSTANCE_METRICS`), so its sums get the metrics' budget, not a relative one: two
instances losing one hit each at P@3 move its sum of squares by 1.11 of 1,000.6 (an AMD EPYC
against the digest's Xeon), over :data:`OTHER_MACHINE_REL_TOL` while every metric moved by at
most 0.0014.

Regenerate the committed digest ONLY for a change that is meant to change outputs (or to record
the machine CI runs on), and say so in the commit message::

    pina-spark demo --output /tmp/demo
    python tests/golden.py /tmp/demo/run > tests/golden/demo_digest.json

>>> d = {"tables": {"t": {"rows": 1, "schema": "x: int64", "exact": {"x": "ab"}, "float": {}}},
...      "metrics": {"pina": {"P@1": 0.5}}}
>>> compare_digests(d, d)
[]
>>> e = {"tables": {}, "metrics": {"pina": {"P@1": 0.5}}}
>>> compare_digests(d, e)
['table t: missing from the run']
"""

import hashlib
import json
import math
import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

#: folders under a run root that hold no output tables (bookkeeping, models, scratch)
NOT_TABLES = ("_staging", "_commits", "models", "downstream_models", "_tmp", "_trash")
REL_TOL = 1e-4
ABS_TOL = 1e-6
#: tables whose columns are derived from scores (neighbour ranks, predicted labels, metrics)
SCORE_DERIVED = ("neighbors", "features", "predictions", "eval")
OTHER_MACHINE_REL_TOL = 1e-3
OTHER_MACHINE_METRIC_TOL = 0.005
#: tables of per-instance metrics in [0, 1] (the evaluate stage's): on another machine each
#: float sum may move by OTHER_MACHINE_METRIC_TOL per row, the budget the metrics' means have
PER_INSTANCE_METRICS = ("eval",)


def machine() -> dict[str, str]:
    """The CPU a digest is made on: model name and a hash of its feature flags (/proc/cpuinfo)."""
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = val.strip()
                elif key.strip() == "flags" and not flags:
                    flags = " ".join(sorted(val.split()))
    except OSError:
        pass
    return {"cpu": model, "flags": hashlib.sha256(flags.encode()).hexdigest()[:16]}


def _tables(run_dir: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(run_dir):
        rel = os.path.relpath(root, run_dir)
        if rel == ".":
            continue
        top = rel.split(os.sep)[0]
        if top in NOT_TABLES or top.startswith(".") or "__old-" in rel:
            dirs[:] = []
            continue
        if "_SUCCESS" in files and any(
            f.endswith(".parquet") for _, _, fs in os.walk(root) for f in fs
        ):
            out.append(rel.replace(os.sep, "/"))
            dirs[:] = []
    return sorted(out)


def _is_float(t: pa.DataType) -> bool:
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return pa.types.is_floating(t)


def _flat_floats(col: pa.ChunkedArray):
    arr = col.combine_chunks()
    while isinstance(arr, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray):
        arr = arr.flatten()
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


def table_digest(path: str) -> dict[str, Any]:
    """Row count, schema, exact hashes of the non-float columns and sums of the float ones."""
    files = sorted(
        os.path.join(base, f)
        for base, _, fs in os.walk(path)
        for f in fs
        if f.endswith(".parquet") and not f.startswith((".", "_"))
    )
    tbl = ds.dataset(
        files, format="parquet", partitioning="hive", partition_base_dir=path
    ).to_table()
    exact, floats = {}, {}
    for name in sorted(tbl.column_names):
        col = tbl.column(name)
        if _is_float(col.type):
            v = _flat_floats(col)
            v = v[~np.isnan(v)]
            floats[name] = [float(v.sum()), float(abs(v).sum()), float((v * v).sum())]
        else:
            vals = sorted(json.dumps(x, sort_keys=True, default=str) for x in col.to_pylist())
            exact[name] = hashlib.sha256("\n".join(vals).encode()).hexdigest()[:16]
    schema = ", ".join(f"{f.name}: {f.type}" for f in sorted(tbl.schema, key=lambda f: f.name))
    return {"rows": tbl.num_rows, "schema": schema, "exact": exact, "float": floats}


def run_digest(run_dir: str) -> dict[str, Any]:
    """The digest of a finished run folder (``<output>/run`` of the demo)."""
    with open(os.path.join(run_dir, "eval", "metrics.json")) as fh:
        metrics = json.load(fh)
    scores = {
        v: {k: m[k] for k in sorted(m) if k.startswith(("P@", "R@", "nDCG@", "PSP@"))}
        for v, m in sorted(metrics.get("variants", metrics).items())
        if isinstance(m, dict)
    }
    return {
        "tables": {rel: table_digest(os.path.join(run_dir, rel)) for rel in _tables(run_dir)},
        "metrics": scores,
        "machine": machine(),
    }


def compare_digests(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Every difference, one line each; empty when the outputs match (see the module docstring
    for a digest made on another machine).

    >>> ev = {"rows": 1940, "schema": "P@3: double", "exact": {},
    ...       "float": {"P@3": [1.0, 1.0, 1000.6]}}
    >>> flip = dict(ev, float={"P@3": [1.0, 1.0, 999.5]})  # two instances lose a hit each
    >>> xeon, epyc = {"cpu": "Xeon"}, {"cpu": "EPYC"}
    >>> def digest(t, m):
    ...     return {"tables": {"eval": t}, "metrics": {}, "machine": m}
    >>> compare_digests(digest(ev, xeon), digest(flip, epyc))
    []
    >>> compare_digests(digest(ev, xeon), digest(flip, xeon))
    ['table eval: float column P@3 sums [1.0, 1.0, 1000.6] != [1.0, 1.0, 999.5]']
    >>> far = dict(ev, float={"P@3": [1.0, 1.0, 990.0]})  # beyond 0.005 per row
    >>> len(compare_digests(digest(ev, xeon), digest(far, epyc)))
    1
    """
    same_machine = expected.get("machine") == actual.get("machine")
    diffs = []
    for rel in sorted(set(expected["tables"]) | set(actual["tables"])):
        e, a = expected["tables"].get(rel), actual["tables"].get(rel)
        if a is None:
            diffs.append(f"table {rel}: missing from the run")
            continue
        if e is None:
            diffs.append(f"table {rel}: not in the golden digest")
            continue
        derived = not same_machine and rel.split("/")[0] in SCORE_DERIVED
        for key in ("rows", "schema"):
            if e[key] != a[key]:
                diffs.append(f"table {rel}: {key} {e[key]!r} != {a[key]!r}")
        for col in sorted(set(e["exact"]) | set(a["exact"])):
            if e["exact"].get(col) != a["exact"].get(col) and not (
                derived and col in e["exact"] and col in a["exact"]
            ):
                diffs.append(f"table {rel}: column {col} differs")
        tol = OTHER_MACHINE_REL_TOL if derived else REL_TOL
        abs_tol = ABS_TOL
        if derived and rel.split("/")[0] in PER_INSTANCE_METRICS:
            abs_tol = OTHER_MACHINE_METRIC_TOL * int(e["rows"])
        for col in sorted(set(e["float"]) | set(a["float"])):
            ev, av = e["float"].get(col), a["float"].get(col)
            ok = ev is not None and av is not None
            if not ok or not all(
                math.isclose(x, y, rel_tol=tol, abs_tol=abs_tol) for x, y in zip(ev, av)
            ):
                diffs.append(f"table {rel}: float column {col} sums {ev} != {av}")
    for variant in sorted(set(expected["metrics"]) | set(actual["metrics"])):
        em, am = expected["metrics"].get(variant, {}), actual["metrics"].get(variant, {})
        if same_machine:
            ok = em == am
        else:
            ok = set(em) == set(am) and all(
                abs(em[k] - am[k]) <= OTHER_MACHINE_METRIC_TOL for k in em
            )
        if not ok:
            diffs.append(f"metrics {variant}: {em} != {am}")
    return diffs


if __name__ == "__main__":
    json.dump(run_digest(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
