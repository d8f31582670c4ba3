"""What a finished (or running) run looks like, from its files alone: ``pina-spark status RUN``
and ``pina-spark compare RUN_A RUN_B``. No SparkSession: the manifest, ``eval/metrics.json`` and
``eval/per_instance.parquet`` are read with :func:`pina_spark.storage.read_bytes` (local or ``s3://``).

Example::

    print(status_text("runs/demo/run"))
    print(compare_text("runs/demo/run", "runs/demo-k10/run"))
"""

import json
import logging
from typing import Any, Dict, List, Optional, Sequence

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, ConfigError

log = logging.getLogger(__name__)

_METRICS = "metrics.json"


def _manifest(root: str) -> Dict[str, Any]:
    uri = storage.RunPaths(root).manifest
    raw = storage.read_bytes(uri)
    if raw is None:
        raise ConfigError(
            f"{uri}: no run manifest (is {root} a run root? e.g. runs/demo/run or "
            "<output>/run_date=YYYY-MM-DD)"
        )
    return json.loads(raw)


def _metrics(root: str) -> Optional[Dict[str, Any]]:
    raw = storage.read_bytes(storage.RunPaths(root).table(storage.EVAL) + "/" + _METRICS)
    return json.loads(raw) if raw else None


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A Markdown table (what the README shows; readable in a terminal too)."""
    cells = [[str(c) for c in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        + [line(r) for r in cells[1:]]
    )


def _rows_out(entry: Dict[str, Any]) -> str:
    rows = entry.get("rows_out") or {}
    return ", ".join(f"{k}={v:,}" for k, v in sorted(rows.items())) or "-"


def status_text(root: str) -> str:
    """Stages (status, start, duration, rows out, rows/s), quarantine per input table, the last
    command runs and, when the evaluate stage is complete, P@1 per variant."""
    m = _manifest(root)
    stages = m.get("stages", {})
    names = [n for n in ("nodes",) + STAGE_NAMES if n in stages]
    rows = []
    for n in names:
        e = stages[n]
        dur = e.get("duration_s")
        rows.append(
            [
                n,
                e.get("status"),
                e.get("started"),
                None if dur is None else f"{dur:.1f}s",
                _rows_out(e),
                e.get("rows_per_s"),
            ]
        )
    out = [
        f"run {storage.RunPaths(root).root}",
        "",
        _table(rows, ["stage", "status", "started", "duration", "rows out", "rows/s"]),
    ]
    missing = [n for n in STAGE_NAMES if n not in stages]
    if missing:
        out.append(f"\nnot run: {', '.join(missing)}")
    failed = [(n, stages[n].get("error")) for n in names if stages[n].get("status") == "failed"]
    for n, err in failed:
        out.append(f"\nstage {n} failed: {err}")
    inputs = ((stages.get("graph") or {}).get("stats") or {}).get("inputs") or {}
    if inputs:
        q = [
            [
                t,
                s.get("rows_in"),
                s.get("rows_used"),
                s.get("rows_quarantined"),
                ", ".join(f"{r}={c}" for r, c in sorted((s.get("reasons") or {}).items())) or "-",
            ]
            for t, s in sorted(inputs.items())
        ]
        out += [
            "",
            "quarantine (rows in <output>/quarantine/<table>):",
            _table(q, ["table", "rows in", "used", "quarantined", "reasons"]),
        ]
    hist = m.get("history") or []
    if hist:
        h = [
            [
                x.get("run_id"),
                x.get("status"),
                x.get("started"),
                x.get("finished"),
                ",".join(x.get("stages") or []),
            ]
            for x in hist[-5:]
        ]
        out += ["", "last commands:", _table(h, ["run", "status", "started", "finished", "stages"])]
    metrics = _metrics(root) if (stages.get("evaluate") or {}).get("status") == "complete" else None
    if metrics and metrics.get("variants"):
        p = [[v, f"{mv.get('P@1', 0):.4f}"] for v, mv in metrics["variants"].items()]
        n_scored = metrics.get("n_test_scored")
        out += [
            "",
            f"P@1 on {n_scored if n_scored is not None else 'the'} scored test instances:",
            _table(p, ["variant", "P@1"]),
        ]
    promotion = ((stages.get("evaluate") or {}).get("stats") or {}).get("promotion")
    if promotion:
        verdict = "promoted" if promotion.get("promoted") else "NOT promoted"
        out.append(f"\npromotion gate: {verdict} ({promotion.get('reason')})")
    return "\n".join(out)


def _per_instance(root: str):
    """``eval/per_instance.parquet`` as a pyarrow table, or ``None`` (run older than it)."""
    from pina_spark.stages.evaluate.stage import PER_INSTANCE_FILE

    raw = storage.read_bytes(storage.RunPaths(root).table(storage.EVAL) + "/" + PER_INSTANCE_FILE)
    if raw is None:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(raw))


def paired_results(
    a_root: str, b_root: str, ks: Sequence[int] = (1, 3, 5)
) -> Dict[str, Dict[str, Any]]:
    """Per variant present in both runs: the test instances scored in both (paired on
    ``instance_id``), mean P@k in A and B, and the paired t-test p-value of A against B."""
    from pina_spark.stages.evaluate.stage import paired_ttest

    ta, tb = _per_instance(a_root), _per_instance(b_root)
    if ta is None or tb is None:
        return {}
    out: Dict[str, Dict[str, Any]] = {}
    da, db = ta.to_pandas(), tb.to_pandas()
    for v in sorted(set(da["variant"]) & set(db["variant"])):
        j = da[da["variant"] == v].merge(
            db[db["variant"] == v], on="instance_id", suffixes=("_a", "_b")
        )
        res: Dict[str, Any] = {"n_paired": int(len(j))}
        for k in ks:
            col = f"P@{k}"
            if f"{col}_a" not in j:
                continue
            a, b = j[f"{col}_a"].to_numpy(), j[f"{col}_b"].to_numpy()
            res[col] = {
                "a": float(a.mean()) if len(a) else None,
                "b": float(b.mean()) if len(b) else None,
                "p": paired_ttest(a, b)["p"],
            }
        out[v] = res
    return out


def compare_text(a_root: str, b_root: str) -> str:
    """Metrics of two runs side by side (A, B, B - A per variant and metric), stage durations,
    and the paired t-test on the test instances both runs scored."""
    ma, mb = _metrics(a_root), _metrics(b_root)
    if ma is None or mb is None:
        root = a_root if ma is None else b_root
        raise ConfigError(
            f"{storage.RunPaths(root).table(storage.EVAL)}/{_METRICS}: not found (run "
            "the evaluate stage of that run first)"
        )
    out = [f"A = {storage.RunPaths(a_root).root}", f"B = {storage.RunPaths(b_root).root}", ""]
    va, vb = ma.get("variants", {}), mb.get("variants", {})
    rows: List[List[Any]] = []
    keys = [
        k
        for k in ("P@1", "P@3", "P@5", "R@1", "R@5", "R@10")
        if any(k in x for x in list(va.values()) + list(vb.values()))
    ]
    for v in (
        [x for x in va if x in vb] + [x for x in va if x not in vb] + [x for x in vb if x not in va]
    ):
        for k in keys:
            a, b = va.get(v, {}).get(k), vb.get(v, {}).get(k)
            rows.append(
                [
                    v,
                    k,
                    None if a is None else f"{a:.4f}",
                    None if b is None else f"{b:.4f}",
                    None if a is None or b is None else f"{b - a:+.4f}",
                ]
            )
    out += [_table(rows, ["variant", "metric", "A", "B", "B - A"]), ""]
    sa, sb = _manifest(a_root).get("stages", {}), _manifest(b_root).get("stages", {})
    d = [[n, _dur(sa.get(n)), _dur(sb.get(n))] for n in STAGE_NAMES if n in sa or n in sb]
    out += ["stage durations:", _table(d, ["stage", "A", "B"]), ""]
    paired = paired_results(a_root, b_root)
    if not paired:
        out.append(
            "paired t-test: no eval/per_instance.parquet in one of the runs (rerun its "
            "evaluate stage with this version)"
        )
        return "\n".join(out)
    t: List[List[Any]] = []
    for v, res in paired.items():
        for k in ("P@1", "P@3", "P@5"):
            r = res.get(k)
            if r:
                t.append([v, k, res["n_paired"], _f(r["a"]), _f(r["b"]), _fmt_p(r["p"])])
    out += [
        "paired t-test of B against A on the test instances both runs scored "
        "(same instance_id):",
        _table(t, ["variant", "metric", "paired", "A", "B", "p"]),
    ]
    return "\n".join(out)


def _dur(e: Optional[Dict[str, Any]]) -> Optional[str]:
    if not e or e.get("duration_s") is None:
        return None
    return f"{e['duration_s']:.1f}s"


def _f(x: Optional[float]) -> Optional[str]:
    return None if x is None else f"{x:.4f}"


def _fmt_p(p: Optional[float]) -> str:
    if p is None:
        return "-"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"
