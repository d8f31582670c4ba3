"""``pina-spark tune``: grid search of the cheap stages on a validation split carved from TRAIN.

The test split is never read: a tuning run works in ``<root>/tune/work`` on derived tables built
from the *non-test* rows of the finished run ``<root>`` (``cfg.output`` + ``run.run_date``):

* ``nodes``: label nodes + train instances (``split = 'test'`` rows are filtered out in the
  scan); ``node_index`` is kept, so g's ``output_nodes.npy`` still applies,
* ``graph/instance_labels`` and ``embeddings``: restricted to those nodes.

The validation rows are the train instances with
:func:`pina_spark.storage.folds.is_validation` (``task.validation_fraction``). For every grid point:

1. *phase 1* (``neighbors``, ``aggregate``): ``nodes`` has the validation rows still as
   ``train``, so with ``neighbors.train_mode: out_of_fold`` their neighbours come from the fold
   model that never saw them (out-of-sample for g, like real test rows);
2. *phase 2* (``train``, ``evaluate``): ``nodes`` is republished with the validation rows as
   ``test``; the downstream models are trained on the remaining train rows and scored on the
   validation rows (the train stage takes train/test membership from ``nodes``, not from the
   ``split`` column of ``features``).

The embeddings and the pretrained models (vectorizer, g) of the run are reused
(``run.models`` when the run itself reused another run's models). Caveat reported in the table
header: g was pretrained on every train row *including* the validation rows (their labels are in
B_pre); only ``out_of_fold`` keeps their neighbours out-of-sample.

``neighbors`` is rerun only when the ``neighbors``/``inference`` sections change from one point
to the next (points are ordered with ``neighbors.*`` keys varying slowest), ``aggregate`` when
those or ``aggregate`` change.

Outputs: ``<root>/tune/results.json``, ``<root>/tune/results.md`` and
``<root>/tune/points/<id>/metrics.json`` (validation metrics of each point).

Examples
--------
>>> parse_grid(["neighbors.k=3,5", "neighbors.weighting=l1,softmax"])
{'neighbors.k': [3, 5], 'neighbors.weighting': ['l1', 'softmax']}
>>> [p["neighbors.k"] for p in grid_points({"neighbors.k": [3, 5]})]
[3, 5]
"""

import copy
import hashlib
import itertools
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError, PinaConfig, config_from_dict
from pina_spark.config import variants as V
from pina_spark.config.load import set_dotted
from pina_spark.stages import STAGES, StageContext, stats_dict
from pina_spark.storage.folds import is_validation, validation_fold

log = logging.getLogger(__name__)

__all__ = [
    "run_tune",
    "parse_grid",
    "grid_points",
    "point_id",
    "derive_validation_nodes",
    "derive_validation_folds",
    "work_tables",
    "run_stage",
    "publish_nodes",
    "results_markdown",
    "TUNE_DIR",
]

TUNE_DIR = "tune"
PHASE1 = ("neighbors", "aggregate")
PHASE2 = ("train", "evaluate")
#: variants trained for each point (the others do not depend on the tuned stages)
TUNED_VARIANTS = (V.BASELINE, V.PINA_NAIVE, V.PINA)


def parse_grid(
    specs: Sequence[str], base: dict[str, list[Any]] | None = None
) -> dict[str, list[Any]]:
    """``["KEY=v1,v2", ...]`` (values parsed as YAML scalars) merged over ``base``
    (``tune.grid``); a key given on the command line replaces the config's list.

    Examples
    --------
    >>> parse_grid(["aggregate.v1_weight=0.5,1"], {"neighbors.k": [5]})
    {'neighbors.k': [5], 'aggregate.v1_weight': [0.5, 1]}
    >>> parse_grid(["neighbors.k"])
    Traceback (most recent call last):
    ...
    pina_spark.config.sections.ConfigError: --grid 'neighbors.k': expected KEY=v1,v2,...
    """
    import yaml

    grid: dict[str, list[Any]] = {k: list(v) for k, v in (base or {}).items()}
    for spec in specs or []:
        if "=" not in spec:
            raise ConfigError(f"--grid {spec!r}: expected KEY=v1,v2,...")
        key, raw = spec.split("=", 1)
        key = key.strip()
        vals = [yaml.safe_load(v.strip()) for v in raw.split(",") if v.strip() != ""]
        if not key or not vals:
            raise ConfigError(f"--grid {spec!r}: expected KEY=v1,v2,... with at least one value")
        grid[key] = vals
    for key, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"tune.grid.{key}: expected a non-empty list of values")
    return grid


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of ``grid``; ``neighbors.*``/``inference.*`` keys vary slowest so that
    consecutive points share the neighbours table as long as possible.

    Examples
    --------
    >>> grid_points({"aggregate.v1_weight": [0.5, 1.0], "neighbors.k": [3, 5]})[:2]
    [{'neighbors.k': 3, 'aggregate.v1_weight': 0.5}, {'neighbors.k': 3, 'aggregate.v1_weight': 1.0}]
    """
    keys = sorted(
        grid,
        key=lambda k: (
            0
            if k.split(".")[0] in ("neighbors", "inference")
            else 1
            if k.startswith("aggregate.")
            else 2,
            k,
        ),
    )
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def point_id(point: dict[str, Any]) -> str:
    """Stable short id of a grid point.

    Examples
    --------
    >>> point_id({"neighbors.k": 5}) == point_id({"neighbors.k": 5})
    True
    """
    return hashlib.sha256(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()[:10]


#: the stages whose outputs a tuning run reuses from the finished run
REUSED = ("graph", "vectorizer", "embed", "pretrain")


def _reads(entries: Sequence[str], key: str) -> bool:
    """Whether fingerprint ``entries`` (sections or dotted fields) cover ``key`` or a part of it."""
    return any(key == e or key.startswith(e + ".") or e.startswith(key + ".") for e in entries)


def grid_key_problem(cfg: PinaConfig, key: str) -> str | None:
    """Why ``key`` cannot be a tune grid key, or ``None``: a tuning run reruns only the stages
    of :data:`PHASE1` and :data:`PHASE2`, so a key must be read by one of them (their
    fingerprint fields) and by none of the :data:`REUSED` ones, whose outputs come from the
    run unchanged (a value set there would be reported for results it never made).
    ``inference.*`` only says how a stage runs, so the neighbours stage may take it.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> cfg = config_from_dict({"output": "/r"})
    >>> grid_key_problem(cfg, "neighbors.k") is None, grid_key_problem(cfg, "train.topk") is None
    (True, True)
    >>> print(grid_key_problem(cfg, "neighbors.folds").split(",")[0])
    tune grid key 'neighbors.folds': read by the pretrain stage
    >>> print(grid_key_problem(cfg, "pretrain.dense_weight").split(",")[0])
    tune grid key 'pretrain.dense_weight': read by the vectorizer stage
    """
    from pina_spark.stages import STAGES

    if key.split(".")[0] in ("output", "run", "input", "task", "tune"):
        return f"tune grid key {key!r}: only stage parameters can be tuned"
    for name in REUSED:
        entries = [e for e in STAGES[name].fingerprint_sections(cfg) if e != "inference"]
        if _reads(entries, key):
            return (
                f"tune grid key {key!r}: read by the {name} stage, whose outputs a tuning run "
                f"reuses from the run (it reruns {', '.join(PHASE1 + PHASE2)}): try other values "
                f"of it in runs of their own, compared with pina-spark compare"
            )
    if not any(_reads(STAGES[n].fingerprint_sections(cfg), key) for n in PHASE1 + PHASE2):
        return f"tune grid key {key!r}: no stage a tuning run reruns reads it"
    return None


def point_config(cfg: PinaConfig, point: dict[str, Any], work_root: str) -> PinaConfig:
    """The config of one grid point, run in ``work_root`` (strict: an unknown key or a bad value
    raises :class:`ConfigError` naming it, and so does a key no rerun stage reads,
    :func:`grid_key_problem`)."""
    data = copy.deepcopy(cfg.to_dict())
    for k, v in point.items():
        problem = grid_key_problem(cfg, k)
        if problem:
            raise ConfigError(problem)
        set_dotted(data, k, v, "tune grid key")
    data["output"] = work_root
    data["run"] = {"run_date": None, "models": None, "incremental": False, "force": False}
    tv = [v for v in data["train"]["variants"] if v in TUNED_VARIANTS] or [V.PINA]
    data["train"]["variants"] = tv
    data["evaluate"]["report_examples"] = 0
    data["tune"] = {}
    return config_from_dict(data, source=f"<tune point {point}>")


def derive_validation_nodes(nodes_pdf, fraction: float):
    """From the non-test ``nodes`` rows (pandas), the phase-1 and phase-2 tables and the
    validation ids. Phase 1 keeps validation rows as ``train``; phase 2 marks them ``test``.

    Examples
    --------
    >>> import pandas as pd
    >>> pdf = pd.DataFrame({"node_index": [0, 1, 2], "kind": ["instance", "instance", "label"],
    ...                     "node_id": ["a", "b", "L"], "text": ["x", "y", "z"],
    ...                     "split": ["train", "train", None]})
    >>> p1, p2, valid = derive_validation_nodes(pdf, 0.5)
    >>> sorted(p2.loc[p2.split == "test", "node_id"]) == sorted(valid)
    True
    >>> (p1.split == "test").any()
    False
    """
    inst = _train_instances(nodes_pdf, "derive_validation_nodes")
    is_val = inst & nodes_pdf[storage.NODE_ID].map(lambda i: is_validation(str(i), fraction))
    return (nodes_pdf.copy(), *_held_out_as_test(nodes_pdf, is_val))


def _train_instances(nodes_pdf, who: str):
    """The train-instance rows of ``nodes_pdf`` (a mask); a test row is an error."""
    if (nodes_pdf[storage.SPLIT] == storage.SPLIT_TEST).any():
        raise ValueError(f"{who}: test rows must be filtered out before")
    return (nodes_pdf[storage.KIND] == storage.KIND_INSTANCE) & (
        nodes_pdf[storage.SPLIT] == storage.SPLIT_TRAIN
    )


def _held_out_as_test(nodes_pdf, held):
    """``(phase-2 table with the ``held`` rows as test, their ids, sorted)``."""
    p2 = nodes_pdf.copy()
    p2.loc[held, storage.SPLIT] = storage.SPLIT_TEST
    return p2, sorted(nodes_pdf.loc[held, storage.NODE_ID].tolist())


def derive_validation_folds(nodes_pdf, folds: int):
    """Cross-validation over the train rows of the non-test ``nodes`` rows (pandas): every train
    instance is in one of ``folds`` validation folds (:func:`pina_spark.storage.folds.
    validation_fold`, a hash of its id). Returns the phase-1 table (every train row ``train``)
    and, per fold, ``(phase-2 table with that fold's rows as test, its ids)``.

    Examples
    --------
    >>> import pandas as pd
    >>> pdf = pd.DataFrame({"node_index": [0, 1, 2, 3], "node_id": ["a", "b", "c", "L"],
    ...                     "kind": ["instance"] * 3 + ["label"], "text": ["x", "y", "z", "w"],
    ...                     "split": ["train"] * 3 + [None]})
    >>> p1, per_fold = derive_validation_folds(pdf, 2)
    >>> sorted(i for _, ids in per_fold for i in ids)  # every train row once
    ['a', 'b', 'c']
    >>> all(sorted(p2.loc[p2.split == "test", "node_id"]) == ids for p2, ids in per_fold)
    True
    """
    inst = _train_instances(nodes_pdf, "derive_validation_folds")
    if folds < 2:
        raise ValueError(f"derive_validation_folds: folds={folds}, expected at least 2")
    fold = nodes_pdf[storage.NODE_ID].map(lambda i: validation_fold(str(i), folds))
    per_fold = [_held_out_as_test(nodes_pdf, inst & (fold == k)) for k in range(folds)]
    return nodes_pdf.copy(), per_fold


def results_markdown(results: dict[str, Any]) -> str:
    """The markdown table of ``results.json`` (one row per point, best ``metric`` in bold).

    Examples
    --------
    >>> r = {"note": "n", "metric": "P@1", "variant": "pina", "keys": ["neighbors.k"],
    ...      "points": [{"id": "a", "params": {"neighbors.k": 3},
    ...                  "valid": {"pina": {"P@1": 0.5, "P@3": 0.3, "P@5": 0.2}}}],
    ...      "best": "a"}
    >>> print(results_markdown(r).splitlines()[-1])
    | **a** | 3 | **50.00** | 30.00 | 20.00 |
    """
    keys = results["keys"]
    vs = results.get("variants_shown") or [results["variant"]]
    cols = [f"{v} P@{k}" for v in vs for k in (1, 3, 5)]
    lines = [
        f"# pina-spark tune: validation {results['metric']} of `{results['variant']}`",
        "",
        results["note"],
        "",
        "| point | " + " | ".join(keys) + " | " + " | ".join(cols) + " |",
        "|" + "---|" * (1 + len(keys) + len(cols)),
    ]
    for p in results["points"]:
        best = p["id"] == results.get("best")
        cells = []
        for v in vs:
            m = p["valid"].get(v, {})
            for k in (1, 3, 5):
                x = m.get(f"P@{k}")
                s = "" if x is None else f"{100 * x:.2f}"
                if best and v == results["variant"] and f"P@{k}" == results["metric"] and s:
                    s = f"**{s}**"
                cells.append(s)
        pid = f"**{p['id']}**" if best else p["id"]
        lines.append(
            f"| {pid} | "
            + " | ".join(str(p["params"][k]) for k in keys)
            + " | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def run_tune(cfg: PinaConfig, grid_specs: Sequence[str], spark=None) -> str:
    """Run the grid on the validation split; write ``tune/results.{json,md}``; return the table.

    Parameters
    ----------
    cfg : the finished run's config (its ``embeddings`` and ``models`` are reused).
    grid_specs : ``["KEY=v1,v2", ...]`` (merged over ``tune.grid``).
    spark : optional session (default: :func:`pina_spark.orchestration.session.get_spark`).

    Example::

        print(run_tune(cfg, ["neighbors.k=3,10"]))
        # # pina-spark tune: validation P@1 of `pina`
        # ...
    """

    from pina_spark.storage.manifest import Manifest

    if spark is None:
        from pina_spark.orchestration.session import get_spark

        spark = get_spark(cfg.spark)
    grid = parse_grid(grid_specs, cfg.tune.grid)
    if not grid:
        raise ConfigError("tune: empty grid; pass --grid KEY=v1,v2 or set tune.grid")
    src = storage.RunPaths(cfg.output, cfg.run.run_date)
    tune_root = src.table(TUNE_DIR)
    work = storage.RunPaths(tune_root + "/work")
    models_root = (
        storage.RunPaths(cfg.run.models).table(storage.MODELS)
        if cfg.run.models
        else src.table(storage.MODELS)
    )
    points = grid_points(grid)
    cfgs = [point_config(cfg, p, work.output) for p in points]  # all checked before any work
    metric = cfg.tune.metric
    if metric not in ("P@1", "P@3", "P@5"):
        raise ConfigError(f"tune.metric: {metric!r} is not one of ['P@1', 'P@3', 'P@5']")
    t_all = time.time()

    # derived tables: the test rows are filtered out in the scan and never materialised
    phase1_nodes, [(phase2_nodes, _)], valid_ids, n_train_rows = work_tables(spark, cfg, src, work)
    log.info(
        "tune: %d train rows, %d validation rows, %d grid points",
        n_train_rows,
        len(valid_ids),
        len(points),
    )

    manifest = Manifest(work.manifest)
    last_nb: str | None = None
    last_agg: str | None = None
    rows: list[dict[str, Any]] = []
    for point, pcfg in zip(points, cfgs):
        pid = point_id(point)
        t0 = time.time()
        ctx = StageContext(
            spark=spark, cfg=pcfg, paths=work, manifest=manifest, models_root=models_root
        )
        nb_fp = pcfg.fingerprint("neighbors", "inference")
        agg_fp = nb_fp + pcfg.fingerprint("aggregate")
        publish_nodes(spark, work, phase1_nodes)
        ran = []
        if nb_fp != last_nb:
            run_stage(ctx, "neighbors", pid)
            ran.append("neighbors")
        if agg_fp != last_agg or ran:
            run_stage(ctx, "aggregate", pid)
            ran.append("aggregate")
        last_nb, last_agg = nb_fp, agg_fp
        publish_nodes(spark, work, phase2_nodes)
        for name in PHASE2:
            run_stage(ctx, name, pid)
            ran.append(name)
        rows.append(_point_row(work, tune_root, pid, point, ran, t0))

    results = _results(cfg, metric, points, rows, valid_ids, n_train_rows, models_root)
    results["seconds"] = round(time.time() - t_all, 1)
    table = results_markdown(results)
    storage.write_bytes(
        f"{tune_root}/results.json", json.dumps(results, indent=2, default=str).encode()
    )
    storage.write_bytes(f"{tune_root}/results.md", (table + "\n").encode("utf-8"))
    log.info(
        "tune: %d points in %.1fs, best %s %s",
        len(rows),
        time.time() - t_all,
        results["best"],
        results["best_params"],
    )
    return table


def work_tables(spark, cfg: PinaConfig, src, work, cv_folds: int = 0):
    """Write the tune work folder's ``graph/instance_labels`` and ``embeddings`` (train and
    label rows only: the test rows are filtered out in the scan and never materialised) and
    return ``(phase-1 nodes, [(phase-2 nodes, their validation ids), ...], validation ids,
    train rows per fit)``: one phase-2 table, the carve-out of ``task.validation_fraction``,
    or with ``cv_folds`` >= 2 one per cross-validation fold (:func:`derive_validation_folds`;
    every train row is a validation row once, and the train rows per fit are the mean)."""
    from pyspark.sql import functions as F

    nodes = (
        storage.read_table(spark, src, storage.NODES)
        .where(
            (F.col(storage.KIND) == storage.KIND_LABEL)
            | (
                (F.col(storage.KIND) == storage.KIND_INSTANCE)
                & (F.col(storage.SPLIT) == storage.SPLIT_TRAIN)
            )
        )
        .select(storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.TEXT, storage.SPLIT)
    )
    nodes_pdf = nodes.toPandas().sort_values(storage.NODE_INDEX).reset_index(drop=True)
    n_inst = int((nodes_pdf[storage.KIND] == storage.KIND_INSTANCE).sum())
    if cv_folds >= 2:
        phase1_nodes, phase2 = derive_validation_folds(nodes_pdf, cv_folds)
        what = f"select.cv_folds={cv_folds}"
    else:
        phase1_nodes, p2, ids = derive_validation_nodes(nodes_pdf, cfg.task.validation_fraction)
        phase2 = [(p2, ids)]
        what = f"task.validation_fraction={cfg.task.validation_fraction}"
    valid_ids = sorted(i for _, ids in phase2 for i in ids)
    sizes = [len(ids) for _, ids in phase2]
    n_train_rows = n_inst - round(sum(sizes) / len(sizes))
    if min(sizes) == 0 or n_inst - max(sizes) <= 0:
        raise ConfigError(
            f"{what} gives {min(sizes)} validation and {n_inst - max(sizes)} train rows"
            + (" in a fold" if len(sizes) > 1 else "")
        )
    keep = spark.createDataFrame(nodes_pdf[[storage.NODE_INDEX]].astype("int64"))
    keep_inst = keep.withColumnRenamed(storage.NODE_INDEX, storage.INSTANCE_INDEX)
    il = storage.read_table(spark, src, storage.INSTANCE_LABELS).join(
        F.broadcast(keep_inst), storage.INSTANCE_INDEX, "left_semi"
    )
    storage.write_table(il, work, storage.INSTANCE_LABELS)
    emb = storage.read_table(spark, src, storage.EMBEDDINGS).join(
        F.broadcast(keep), storage.NODE_INDEX, "left_semi"
    )
    storage.write_table(emb, work, storage.EMBEDDINGS)
    return phase1_nodes, phase2, valid_ids, n_train_rows


def _results(cfg: PinaConfig, metric, points, rows, valid_ids, n_train_rows, models_root):
    """The results document: every point's validation scores, the best point by ``metric`` of
    ``pina`` (else the first variant), and the note on what the validation split means."""
    variant = V.PINA if any(V.PINA in r["valid"] for r in rows) else next(iter(rows[0]["valid"]))
    scored = [r for r in rows if r["valid"].get(variant, {}).get(metric) is not None]
    best = max(scored, key=lambda r: r["valid"][variant][metric])["id"] if scored else None
    oof = cfg.neighbors.train_mode == "out_of_fold"
    note = (
        f"Validation split: {len(valid_ids)} of {len(valid_ids) + n_train_rows} train "
        f"instances (task.validation_fraction={cfg.task.validation_fraction}, by hash of the "
        f"id); downstream models retrained on the other {n_train_rows}; test rows never "
        f"read. **Caveat:** g (and the vectorizer) were pretrained on all train rows, "
        f"validation rows included; "
        + (
            "with neighbors.train_mode=out_of_fold the validation rows' neighbours come from "
            "the fold model that never saw them (out-of-sample for g)."
            if oof
            else "with neighbors.train_mode=in_sample their neighbours are in-sample for g, so "
            "validation scores are optimistic."
        )
        + " Values are percent."
    )
    results = {
        "note": note,
        "metric": metric,
        "variant": variant,
        "keys": list(points[0]),
        "variants_shown": [
            v for v in (V.PINA, V.PINA_NAIVE, V.BASELINE) if any(v in r["valid"] for r in rows)
        ],
        "validation_fraction": cfg.task.validation_fraction,
        "n_valid": len(valid_ids),
        "n_train": n_train_rows,
        "models": models_root,
        "points": rows,
        "best": best,
        "best_params": next((r["params"] for r in rows if r["id"] == best), None),
    }
    return results


def _point_row(work, tune_root: str, pid: str, point, ran, t0: float) -> dict[str, Any]:
    """Read a point's metrics from the work folder, keep them under ``tune/points/<id>/`` and
    return its row of the results."""
    from pina_spark.stages.evaluate.stage import METRICS_FILE, eval_file, read_metrics

    m = read_metrics(work.root)
    if m is None:
        raise OSError(f"tune point {pid}: {eval_file(work.root, METRICS_FILE)} not written")
    storage.write_bytes(f"{tune_root}/points/{pid}/metrics.json", json.dumps(m, indent=2).encode())
    storage.write_bytes(
        f"{tune_root}/points/{pid}/point.json",
        json.dumps({"id": pid, "params": point}, default=str).encode(),
    )
    valid = {v: {k: m["variants"][v].get(k) for k in ("P@1", "P@3", "P@5")} for v in m["variants"]}
    log.info("tune point %s %s: %s", pid, point, {v: round(x["P@1"], 4) for v, x in valid.items()})
    return {
        "id": pid,
        "params": point,
        "valid": valid,
        "significance": m.get("significance", {}),
        "n_valid_scored": m.get("n_test_scored"),
        "stages_run": ran,
        "seconds": round(time.time() - t0, 1),
    }


def publish_nodes(spark, work, pdf) -> None:
    """Write the work folder's ``nodes`` table from ``pdf`` (a phase-1 or phase-2 table of
    :func:`derive_validation_nodes`)."""
    nodes_schema = storage.schema(storage.NODES)
    df = spark.createDataFrame(pdf[[f.name for f in nodes_schema.fields]], nodes_schema)
    storage.write_table(df.coalesce(1), work, storage.NODES)


def run_stage(ctx, name: str, pid: str) -> dict[str, Any]:
    """Run one stage of the pipeline in the tuning work root (recorded in its manifest)."""
    spec = STAGES[name]
    ctx.manifest.mark_started(name, pid)
    t0 = time.time()
    try:
        stats = stats_dict(spec.load()(ctx))
    except Exception as e:
        ctx.manifest.mark_failed(name, f"{type(e).__name__}: {e}")
        raise
    ctx.manifest.record_stage(name, stats, pid, time.time() - t0)
    return stats
