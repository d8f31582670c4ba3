"""What a finished (or running) run looks like, from its files alone: ``pina-spark status RUN``
and ``pina-spark compare RUN_A RUN_B``. No SparkSession: the manifest, ``eval/metrics.json`` and
``eval/per_instance.parquet`` are read with :func:`pina_spark.storage.read_bytes` (local or ``s3://``).

Each command has a data form (:func:`status_data`, :func:`compare_data`: what ``--json`` prints,
schemas ``pina-spark-status/1`` and ``pina-spark-compare/1`` in docs/cli.md) and a text form
built from it. ``status`` exits :data:`EXIT_STAGE_FAILED` when a step of the run failed.

Example::

    print(status_text("runs/demo/run"))
    print(compare_text("runs/demo/run", "runs/demo-k10/run"))
"""

import json
import logging
from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, ConfigError
from pina_spark.orchestration.resume import NODES_STEP, stages_left_out
from pina_spark.stages.evaluate.stage import METRICS_FILE, eval_file, read_metrics

log = logging.getLogger(__name__)


#: exit code of ``pina-spark status`` when a step of the run is ``failed`` (1 is an unexpected
#: error, 2 a usage error or a folder without a manifest)
EXIT_STAGE_FAILED = 3
STATUS_SCHEMA = "pina-spark-status/1"
COMPARE_SCHEMA = "pina-spark-compare/1"


def _manifest(root: str) -> dict[str, Any]:
    uri = storage.RunPaths(root).manifest
    raw = storage.read_bytes(uri)
    if raw is None:
        raise ConfigError(
            f"{uri}: no run manifest (is {root} a run root? e.g. runs/demo/run or "
            "<output>/run_date=YYYY-MM-DD)"
        )
    return json.loads(raw)


def markdown_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A Markdown table (what the README shows; readable in a terminal too)."""
    cells = [[str(c) for c in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        + [line(r) for r in cells[1:]]
    )


def outdated_steps(stages: dict[str, Any], ignore: Sequence[str] = ()) -> dict[str, list[str]]:
    """Complete steps older than a step before them in the pipeline's order (each reads the
    outputs of those before it, directly or through them): ``{step: [earlier steps that
    finished after it]}``. Such a step's outputs and report describe outputs since replaced
    (``--stages neighbors,aggregate,train`` after an evaluate leaves evaluate's P@k over the
    old predictions). From the manifest's ``finished`` times alone; ``ignore``: steps the
    root's runs no longer consider (pretrain and neighbors once its variants need no
    neighbours), whose entries stay as they were.

    >>> outdated_steps({"train": {"status": "complete", "finished": "2026-01-02T00:00:00Z"},
    ...                 "evaluate": {"status": "complete", "finished": "2026-01-01T00:00:00Z"}})
    {'evaluate': ['train']}
    """
    order = [n for n in ("nodes",) + STAGE_NAMES if n in stages and n not in ignore]
    done = {
        n: stages[n].get("finished")
        for n in order
        if stages[n].get("status") == "complete" and stages[n].get("finished")
    }
    out: dict[str, list[str]] = {}
    for i, n in enumerate(order):
        if n in done:
            newer = [u for u in order[:i] if u in done and done[u] > done[n]]
            if newer:
                out[n] = newer
    return out


def _not_considered(m: dict[str, Any]) -> tuple[str, ...]:
    """The steps the root's last command no longer considers: pretrain and neighbors when its
    recorded ``train.variants`` need no neighbours (a root that follows a ``vectorizer_only``
    selection)."""
    variants = ((m.get("config") or {}).get("train") or {}).get("variants")
    return stages_left_out(variants) if variants else ()


def status_data(root: str) -> dict[str, Any]:
    """``pina-spark status --json``: the steps (status, start, duration, rows out, rows/s,
    error), the steps not run, the failed ones, the quarantine per input table, the last five
    commands, P@k per variant (when evaluate is complete) and the promotion decision."""
    m = _manifest(root)
    stages = m.get("stages", {})
    names = [n for n in ("nodes",) + STAGE_NAMES if n in stages]
    steps = [
        {
            "stage": n,
            "status": stages[n].get("status"),
            "started": stages[n].get("started"),
            "duration_s": stages[n].get("duration_s"),
            "rows_out": stages[n].get("rows_out") or {},
            "rows_per_s": stages[n].get("rows_per_s"),
            "error": stages[n].get("error"),
        }
        for n in names
    ]
    # the graph stage validates a run's inputs; a daily run's nodes pre-step its day's instances
    inputs = {
        **(((stages.get(NODES_STEP) or {}).get("stats") or {}).get("inputs") or {}),
        **(((stages.get("graph") or {}).get("stats") or {}).get("inputs") or {}),
    }
    quarantine = {
        t: {k: s.get(k) for k in ("rows_in", "rows_used", "rows_quarantined")}
        | {"reasons": dict(s.get("reasons") or {})}
        for t, s in sorted(inputs.items())
    }
    history = [
        {k: x.get(k) for k in ("run_id", "status", "started", "finished")}
        | {"stages": list(x.get("stages") or [])}
        for x in (m.get("history") or [])[-5:]
    ]
    evaluated = (stages.get("evaluate") or {}).get("status") == "complete"
    metrics = read_metrics(root) if evaluated else None
    return {
        "schema": STATUS_SCHEMA,
        "root": storage.RunPaths(root).root,
        "stages": steps,
        "not_run": [n for n in STAGE_NAMES if n not in stages],
        "failed": [n for n in names if stages[n].get("status") == "failed"],
        "outdated": outdated_steps(stages, _not_considered(m)),
        "quarantine": quarantine,
        "history": history,
        "metrics": (
            {"n_test_scored": metrics.get("n_test_scored"), "variants": metrics["variants"]}
            if metrics and metrics.get("variants")
            else None
        ),
        "promotion": ((stages.get("evaluate") or {}).get("stats") or {}).get("promotion"),
    }


def status_text(root: str, data: dict[str, Any] | None = None) -> str:
    """Stages (status, start, duration, rows out, rows/s), quarantine per input table, the last
    command runs and, when the evaluate stage is complete, P@1 per variant."""
    d = data or status_data(root)
    rows = [
        [
            e["stage"],
            e["status"],
            e["started"],
            None if e["duration_s"] is None else f"{e['duration_s']:.1f}s",
            ", ".join(f"{k}={v:,}" for k, v in sorted(e["rows_out"].items())) or "-",
            e["rows_per_s"],
        ]
        for e in d["stages"]
    ]
    out = [
        f"run {d['root']}",
        "",
        markdown_table(rows, ["stage", "status", "started", "duration", "rows out", "rows/s"]),
    ]
    if d["not_run"]:
        out.append(f"\nnot run: {', '.join(d['not_run'])}")
    for e in d["stages"]:
        if e["status"] == "failed":
            out.append(f"\nstage {e['stage']} failed: {e['error']}")
    for step, newer in (d.get("outdated") or {}).items():
        out.append(
            f"\nstep {step} is OUTDATED: {', '.join(newer)} republished after it, so its "
            f"outputs describe theirs from before; rerun it (pina-spark check shows the plan)"
        )
    if d["quarantine"]:
        q = [
            [
                t,
                s["rows_in"],
                s["rows_used"],
                s["rows_quarantined"],
                ", ".join(f"{r}={c}" for r, c in sorted(s["reasons"].items())) or "-",
            ]
            for t, s in d["quarantine"].items()
        ]
        out += [
            "",
            "quarantine (rows in <output>/quarantine/<table>):",
            markdown_table(q, ["table", "rows in", "used", "quarantined", "reasons"]),
        ]
    if d["history"]:
        h = [
            [x["run_id"], x["status"], x["started"], x["finished"], ",".join(x["stages"])]
            for x in d["history"]
        ]
        out += [
            "",
            "last commands:",
            markdown_table(h, ["run", "status", "started", "finished", "stages"]),
        ]
    metrics = d["metrics"]
    if metrics:
        p = [[v, f"{mv.get('P@1', 0):.4f}"] for v, mv in metrics["variants"].items()]
        n_scored = metrics.get("n_test_scored")
        stale = " (OUTDATED: see above)" if "evaluate" in (d.get("outdated") or {}) else ""
        out += [
            "",
            f"P@1 on {n_scored if n_scored is not None else 'the'} scored test "
            f"instances{stale}:",
            markdown_table(p, ["variant", "P@1"]),
        ]
    promotion = d["promotion"]
    if promotion:
        verdict = "promoted" if promotion.get("promoted") else "NOT promoted"
        out.append(f"\npromotion gate: {verdict} ({promotion.get('reason')})")
    return "\n".join(out)


def paired_results(
    a_root: str, b_root: str, ks: Sequence[int] = (1, 3, 5)
) -> dict[str, dict[str, Any]]:
    """Per variant present in both runs: the test instances scored in both (paired on
    ``instance_id``), mean P@k in A and B, and the paired t-test p-value of A against B."""
    from pina_spark.stages.evaluate.stage import paired_ttest, read_per_instance

    da, db = read_per_instance(a_root), read_per_instance(b_root)
    if da is None or db is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for v in sorted(set(da["variant"]) & set(db["variant"])):
        j = da[da["variant"] == v].merge(
            db[db["variant"] == v], on="instance_id", suffixes=("_a", "_b")
        )
        res: dict[str, Any] = {"n_paired": int(len(j))}
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


def compare_data(a_root: str, b_root: str) -> dict[str, Any]:
    """``pina-spark compare --json``: each metric of each variant in A and B, the step durations,
    and per variant the paired t-test on the test instances both runs scored (``{}`` when a
    run has no ``eval/per_instance.parquet``)."""
    ma, mb = read_metrics(a_root), read_metrics(b_root)
    if ma is None or mb is None:
        root = a_root if ma is None else b_root
        _manifest(root)  # not a run root: say so, rather than ask for its evaluate stage
        raise ConfigError(
            f"{eval_file(root, METRICS_FILE)}: not found (run "
            "the evaluate stage of that run first)"
        )
    va, vb = ma.get("variants", {}), mb.get("variants", {})
    keys = [
        k
        for k in ("P@1", "P@3", "P@5", "R@1", "R@5", "R@10")
        if any(k in x for x in list(va.values()) + list(vb.values()))
    ]
    metrics = []
    for v in (
        [x for x in va if x in vb] + [x for x in va if x not in vb] + [x for x in vb if x not in va]
    ):
        for k in keys:
            a, b = va.get(v, {}).get(k), vb.get(v, {}).get(k)
            diff = None if a is None or b is None else b - a
            metrics.append({"variant": v, "metric": k, "a": a, "b": b, "diff": diff})
    sa, sb = _manifest(a_root).get("stages", {}), _manifest(b_root).get("stages", {})
    durations = [
        {
            "stage": n,
            "a_s": (sa.get(n) or {}).get("duration_s"),
            "b_s": (sb.get(n) or {}).get("duration_s"),
        }
        for n in STAGE_NAMES
        if n in sa or n in sb
    ]
    return {
        "schema": COMPARE_SCHEMA,
        "a": storage.RunPaths(a_root).root,
        "b": storage.RunPaths(b_root).root,
        "metrics": metrics,
        "durations": durations,
        "paired": paired_results(a_root, b_root),
    }


def compare_text(a_root: str, b_root: str, data: dict[str, Any] | None = None) -> str:
    """Metrics of two runs side by side (A, B, B - A per variant and metric), stage durations,
    and the paired t-test on the test instances both runs scored."""
    d = data or compare_data(a_root, b_root)
    out = [f"A = {d['a']}", f"B = {d['b']}", ""]
    rows = [
        [m["variant"], m["metric"], _f(m["a"]), _f(m["b"]), _signed(m["diff"])]
        for m in d["metrics"]
    ]
    out += [markdown_table(rows, ["variant", "metric", "A", "B", "B - A"]), ""]
    dur = [[x["stage"], _secs(x["a_s"]), _secs(x["b_s"])] for x in d["durations"]]
    out += ["stage durations:", markdown_table(dur, ["stage", "A", "B"]), ""]
    paired = d["paired"]
    if not paired:
        out.append(
            "paired t-test: no eval/per_instance.parquet in one of the runs (rerun its "
            "evaluate stage with this version)"
        )
        return "\n".join(out)
    t: list[list[Any]] = []
    for v, res in paired.items():
        for k in ("P@1", "P@3", "P@5"):
            r = res.get(k)
            if r:
                t.append([v, k, res["n_paired"], _f(r["a"]), _f(r["b"]), _fmt_p(r["p"])])
    out += [
        "paired t-test of B against A on the test instances both runs scored "
        "(same instance_id):",
        markdown_table(t, ["variant", "metric", "paired", "A", "B", "p"]),
    ]
    return "\n".join(out)


def _secs(x: float | None) -> str | None:
    return None if x is None else f"{x:.1f}s"


def _signed(x: float | None) -> str | None:
    return None if x is None else f"{x:+.4f}"


def _f(x: float | None) -> str | None:
    return None if x is None else f"{x:.4f}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"
