"""Evaluate stage: P@k / R@k per downstream variant, paired t-tests, ``report.md`` and ``pk.png``.

Reads ``predictions`` (partitioned by ``variant``), ``nodes``, ``graph/instance_labels``, the
optional ``input.filter_pairs`` table and, for the qualitative table, ``features`` (variant
``pina``: ``neighbor_ids`` / ``neighbor_weights``). Writes ``<root>/eval/metrics.json``,
``<root>/eval/report.md``, ``<root>/eval/pk.png``, ``<root>/eval/pretrain.json`` (g's held-out
report, from the models' card) and ``_SUCCESS``, into a staging folder published by the rename
swap.

Metric conventions (the paper's appendix; shared by every variant)
------------------------------------------------------------------
* ``P@k = |top-k ∩ Y| / k`` and ``R@k = |top-k ∩ Y| / |Y|``, fractions in ``[0, 1]``, averaged
  over the scored test instances. A variant that returned fewer than ``k`` labels is charged for
  the missing ones (the denominator of P@k stays ``k``); duplicates in a prediction list count once.
* **Instances with no true labels** (none in ``graph/instance_labels``, or none left after
  reciprocal-pair removal) are **excluded from both P and R** (R is undefined for them and keeping
  them only in P would make P and R average over different populations). They are counted in
  ``metrics.json`` as ``n_test_no_labels``; ``n_test_scored`` is the population actually averaged.
* A test instance with labels but without a prediction row for a variant counts with zeros.
* Significance: instance-wise paired t-test (:func:`scipy.stats.ttest_rel`) of each variant against
  ``baseline`` on P@1, P@3, P@5 over the same scored instances (``<v>_vs_baseline``), and of
  ``pina`` against ``vectorizer_only`` and ``pina_naive``, ``pina_naive`` against
  ``vectorizer_only`` when those variants ran; two identical vectors give ``p = 1.0`` (scipy
  would return NaN).

The metric functions are pure (lists / numpy in, numbers out) so notebooks can reuse them.

Examples
--------
>>> m = precision_recall_at_k([["a", "b", "c"]], [{"a", "c", "d"}], ks=[1, 3])
>>> round(m["P@3"], 4), round(m["R@3"], 4)
(0.6667, 0.6667)
"""

import json
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pina_spark import storage
from pina_spark.config import variants as V
from pina_spark.models.card import read_model_card
from pina_spark.stages.evaluate.stats import EvaluateStats

log = logging.getLogger(__name__)

__all__ = [
    "precision_recall_at_k",
    "per_instance_precision_recall",
    "paired_ttest",
    "filter_pairs",
    "metrics_table_markdown",
    "run",
    "REPORTED_KS",
    "TRAIN_STATS_FILE",
    "METRICS_FILE",
    "REPORT_FILE",
    "read_metrics",
    "eval_file",
    "read_per_instance",
]

#: the run's metrics (``<root>/eval/metrics.json``): written by :func:`run`, read through
#: :func:`read_metrics`
METRICS_FILE = "metrics.json"
#: the evaluate stage's report, under ``eval/``
REPORT_FILE = "report.md"
#: cut-offs that are always in metrics.json (more from ``evaluate.ks`` are added)
REPORTED_KS = (1, 3, 5, 10)
#: cut-offs of the significance tests
TTEST_KS = (1, 3, 5)
#: JSON the train stage writes inside the predictions table: {"variants": {v: {"train_s": ..}}}
TRAIN_STATS_FILE = "_train_stats.json"
VARIANT_ORDER = V.ALL


#: per-instance P@k of every variant on the scored test instances (``pina-spark compare``
#: pairs two runs on it): columns ``variant``, ``instance_id``, ``P@1``, ``P@3``, ``P@5``
PER_INSTANCE_FILE = "per_instance.parquet"
#: g's held-out report, copied from the models' card (``eval/`` is written by this stage only)
PRETRAIN_REPORT = "pretrain.json"


def per_instance_parquet(
    instance_ids: Sequence[str], per_inst: dict[str, dict[int, np.ndarray]]
) -> bytes:
    """Parquet bytes of :data:`PER_INSTANCE_FILE` (``per_inst[variant][k]`` aligned with
    ``instance_ids``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list] = {"variant": [], "instance_id": []}
    for k in TTEST_KS:
        cols[f"P@{k}"] = []
    for v, by_k in per_inst.items():
        cols["variant"].extend([v] * len(instance_ids))
        cols["instance_id"].extend(instance_ids)
        for k in TTEST_KS:
            cols[f"P@{k}"].extend(np.asarray(by_k[k], dtype=np.float64).tolist())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), sink)
    return sink.getvalue().to_pybytes()


def eval_file(root: str, name: str) -> str:
    """The URI of file ``name`` (:data:`METRICS_FILE`, :data:`PER_INSTANCE_FILE`) in the run
    root's ``eval/`` folder, which this stage writes and is the one reader of.

    >>> eval_file("s3://b/run", METRICS_FILE)
    's3://b/run/eval/metrics.json'
    """
    return storage.RunPaths(root).table(storage.EVAL) + "/" + name


def read_metrics(root: str) -> dict[str, Any] | None:
    """The run root's :data:`METRICS_FILE` as a dict; ``None`` where the run has none (not
    evaluated).

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> read_metrics(root) is None
    True
    >>> storage.write_bytes(eval_file(root, METRICS_FILE), b'{"variants": {"pina": {}}}')
    >>> read_metrics(root)
    {'variants': {'pina': {}}}
    """
    raw = storage.read_bytes(eval_file(root, METRICS_FILE))
    return json.loads(raw) if raw else None


def read_per_instance(root: str):
    """The run root's :data:`PER_INSTANCE_FILE` as a pandas DataFrame with columns
    ``variant``, ``instance_id``, ``P@1``, ``P@3``, ``P@5``; ``None`` where the run has none
    (not evaluated, or older than the file).

    Examples
    --------
    >>> ones = {1: [1.0], 3: [0.5], 5: [0.2]}
    >>> root = __import__("tempfile").mkdtemp()
    >>> storage.write_bytes(eval_file(root, PER_INSTANCE_FILE),
    ...                     per_instance_parquet(["i1"], {"pina": ones}))
    >>> read_per_instance(root)[["variant", "instance_id", "P@1"]].values.tolist()
    [['pina', 'i1', 1.0]]
    """
    raw = storage.read_bytes(eval_file(root, PER_INSTANCE_FILE))
    if raw is None:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(raw)).to_pandas()


# --------------------------------------------------------------------------- pure metrics
def per_instance_precision_recall(
    pred_ids: Sequence[Sequence[Any]],
    true_sets: Sequence[Iterable[Any]],
    ks: Sequence[int] = REPORTED_KS,
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], np.ndarray]:
    """Per-instance P@k and R@k (for the t-test and for averaging).

    Parameters
    ----------
    pred_ids : sequence of ranked prediction lists (best first), one per instance; ``None`` or
        an empty list means "no prediction". Duplicates are counted once.
    true_sets : sequence of the true label ids of each instance (same length).
    ks : cut-offs.

    Returns
    -------
    (P, R, has_truth) : ``P[k]`` and ``R[k]`` are float64 arrays of length ``n``; ``R[k]`` is
        ``nan`` where the instance has no true label; ``has_truth`` is the boolean mask of
        instances with at least one true label (the ones :func:`precision_recall_at_k` averages).

    Examples
    --------
    >>> P, R, m = per_instance_precision_recall([["a", "x"], []], [{"a", "b"}, {"c"}], ks=[1, 2])
    >>> P[1].tolist(), P[2].tolist(), R[2].tolist(), m.tolist()
    ([1.0, 0.0], [0.5, 0.0], [0.5, 0.0], [True, True])
    >>> P, R, m = per_instance_precision_recall([["a"]], [set()], ks=[1])
    >>> P[1].tolist(), np.isnan(R[1]).tolist(), m.tolist()
    ([0.0], [True], [False])
    """
    if len(pred_ids) != len(true_sets):
        raise ValueError(
            f"pred_ids has {len(pred_ids)} rows but true_sets has "
            f"{len(true_sets)}; they must be aligned"
        )
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}")
    n = len(pred_ids)
    kmax = max(ks) if ks else 0
    hits = np.zeros((n, kmax), dtype=np.float64)  # hits[i, r] = 1 if rank r (0-based) is a hit
    n_true = np.zeros(n, dtype=np.float64)
    for i, (pred, truth) in enumerate(zip(pred_ids, true_sets)):
        truth = set(truth) if truth is not None else set()
        n_true[i] = len(truth)
        if not truth or pred is None:
            continue
        seen: set[Any] = set()
        r = 0
        for lab in pred:
            if r >= kmax:
                break
            if lab in seen:
                continue
            seen.add(lab)
            if lab in truth:
                hits[i, r] = 1.0
            r += 1
    cum = np.cumsum(hits, axis=1) if kmax else hits
    has_truth = n_true > 0
    P: dict[int, np.ndarray] = {}
    R: dict[int, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in ks:
            c = cum[:, k - 1] if n else np.zeros(0)
            P[k] = c / k
            R[k] = np.where(has_truth, c / np.maximum(n_true, 1.0), np.nan)
    return P, R, has_truth


def precision_recall_at_k(
    pred_ids: Sequence[Sequence[Any]],
    true_sets: Sequence[Iterable[Any]],
    ks: Sequence[int] = REPORTED_KS,
) -> dict[str, float]:
    """Mean P@k and R@k over the instances that have at least one true label.

    Parameters
    ----------
    pred_ids : ranked prediction lists (best first), one per instance.
    true_sets : true label ids per instance.
    ks : cut-offs.

    Returns
    -------
    dict : ``{"P@1": .., "R@1": .., ..., "n": scored instances}``; metrics are 0.0 when no
        instance has a true label.

    Examples
    --------
    Fewer than k predictions are charged as misses; the empty-truth instance is excluded:

    >>> m = precision_recall_at_k([["a"], ["b", "c"], ["z"]], [{"a", "q"}, {"c"}, set()],
    ...                           ks=[1, 3])
    >>> m["P@1"], round(m["P@3"], 4), m["R@1"], m["R@3"], m["n"]
    (0.5, 0.3333, 0.25, 0.75, 2)
    """
    P, R, mask = per_instance_precision_recall(pred_ids, true_sets, ks)
    out: dict[str, float] = {}
    n = int(mask.sum())
    for k in ks:
        out[f"P@{k}"] = float(P[k][mask].mean()) if n else 0.0
        out[f"R@{k}"] = float(R[k][mask].mean()) if n else 0.0
    out["n"] = n
    return out


def paired_ttest(a: ArrayLike, b: ArrayLike) -> dict[str, float | None]:
    """Instance-wise paired t-test of ``a`` against ``b`` (:func:`scipy.stats.ttest_rel`).

    Returns ``{"t": t, "p": p}``. Identical vectors give ``t = 0.0, p = 1.0`` (not NaN); a
    constant non-zero difference gives ``p = 0.0``; fewer than two pairs give ``None``.

    Examples
    --------
    >>> r = paired_ttest([1, 2, 3, 5], [1, 1, 2, 3])   # d = 0,1,1,2: mean 1, sd sqrt(2/3)
    >>> round(r["t"], 4), round(r["p"], 4)
    (2.4495, 0.0917)
    >>> paired_ttest([1, 0, 1], [1, 0, 1])
    {'t': 0.0, 'p': 1.0}
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired_ttest: shapes differ {x.shape} vs {y.shape}")
    if x.size < 2:
        return {"t": None, "p": None}
    d = x - y
    if np.all(d == 0):
        return {"t": 0.0, "p": 1.0}
    if np.all(d == d[0]):  # zero variance, non-zero mean: infinitely significant
        return {"t": math.copysign(math.inf, d[0]), "p": 0.0}
    from scipy import stats

    res = stats.ttest_rel(x, y)
    return {"t": float(res.statistic), "p": float(res.pvalue)}


def filter_pairs(
    pred_ids: Sequence[Sequence[Any]],
    true_sets: Sequence[Iterable[Any]],
    instance_ids: Sequence[Any],
    pairs: Iterable[tuple[Any, Any]],
) -> tuple[list[list[Any]], list[set[Any]]]:
    """Reciprocal-pair removal: drop every ``(instance_id, label_id)`` in ``pairs`` from both the
    ranked predictions (later labels move up) and the ground truth.

    Examples
    --------
    >>> p, t = filter_pairs([["a", "b", "c"]], [{"a", "c"}], ["i1"], [("i1", "a")])
    >>> p, sorted(t[0])
    ([['b', 'c']], ['c'])
    """
    drop: dict[Any, set[Any]] = {}
    for inst, lab in pairs:
        drop.setdefault(inst, set()).add(lab)
    out_p: list[list[Any]] = []
    out_t: list[set[Any]] = []
    for inst, pred, truth in zip(instance_ids, pred_ids, true_sets):
        d = drop.get(inst)
        pred = list(pred) if pred is not None else []
        truth = set(truth) if truth is not None else set()
        if d:
            pred = [x for x in pred if x not in d]
            truth = truth - d
        out_p.append(pred)
        out_t.append(truth)
    return out_p, out_t


def metrics_table_markdown(metrics: dict[str, Any], ks: Sequence[int] = REPORTED_KS) -> str:
    """The metrics table of ``report.md``: percent with 2 decimals, relative gain against
    ``baseline`` and the t-test p-values (P@1/3/5).

    Examples
    --------
    >>> m = {"variants": {"baseline": {"P@1": 0.5, "R@1": 0.25, "train_s": 1.0},
    ...                   "pina": {"P@1": 0.6, "R@1": 0.3, "train_s": 2.0}},
    ...      "significance": {"pina_vs_baseline": {"P@1": 0.01}}}
    >>> print(metrics_table_markdown(m, ks=[1]).splitlines()[3])
    | pina | 60.00 | 30.00 | 2.0 | +20.00% | 0.010 |
    """
    variants = _ordered(metrics["variants"])
    base = metrics["variants"].get(V.BASELINE)
    cols = [f"P@{k}" for k in ks] + [f"R@{k}" for k in ks]
    header = (
        "| variant | " + " | ".join(cols) + " | train_s | gain P@1 vs baseline | "
        "p (P@1 / P@3 / P@5) |"
    )
    lines = [header, "|" + "---|" * (len(cols) + 4)]
    for v in variants:
        m = metrics["variants"][v]
        vals = [_pct(m.get(c)) for c in cols]
        ts = m.get("train_s")
        gain, pv = "", ""
        if v != V.BASELINE and base is not None:
            b1, v1 = base.get("P@1"), m.get("P@1")
            if b1:
                gain = f"{100.0 * (v1 - b1) / b1:+.2f}%"
            sig = metrics.get("significance", {}).get(f"{v}_vs_baseline", {})
            pv = " / ".join(_fmt_p(sig.get(f"P@{k}")) for k in TTEST_KS if f"P@{k}" in sig)
        lines.append(f"| {v} | " + " | ".join(vals) + f" | {_fmt_s(ts)} | {gain} | {pv} |")
    return "\n".join(lines)


def _pct(x) -> str:
    return "" if x is None else f"{100.0 * x:.2f}"


def _fmt_s(x) -> str:
    return "" if x is None else f"{x:.1f}"


def _fmt_p(p) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


def _ordered(variants: Iterable[str]) -> list[str]:
    vs = list(variants)
    return [v for v in VARIANT_ORDER if v in vs] + sorted(v for v in vs if v not in VARIANT_ORDER)


# --------------------------------------------------------------------------- stage
def run(ctx) -> EvaluateStats:
    """Score every variant of ``predictions`` on the test split and write ``eval/``.

    Example::

        run(ctx)  # EvaluateStats(variants=['baseline', 'pina'], n_test=500, ...)
    """
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    nodes, test, n_train = _test_split(spark, paths)
    test_ids = test[storage.NODE_ID].tolist()
    truths = _truths(spark, paths, nodes, test)
    variants, preds = _predictions(spark, paths, test_ids)
    n_filtered = 0
    if cfg.input.filter_pairs:
        preds, truths, n_filtered = _filter_pairs_input(
            spark, paths, cfg.input.filter_pairs, test_ids, preds, truths
        )
    ks = sorted(set(REPORTED_KS) | set(int(k) for k in cfg.evaluate.ks))
    train_stats = _read_train_stats(paths.table(storage.PREDICTIONS))
    out_variants, per_inst, mask = score_variants(preds, truths, ks, train_stats)
    n_scored = int(mask.sum()) if mask is not None else int(sum(1 for t in truths if t))
    metrics: dict[str, Any] = {
        "variants": out_variants,
        "significance": significance_table(per_inst),
        "n_train": n_train,
        "n_test": len(test_ids),
        "n_labels": int((nodes[storage.KIND] == storage.KIND_LABEL).sum()),
        "side_info": cfg.side_info,
        "n_test_scored": n_scored,
        "n_test_no_labels": len(test_ids) - n_scored,
        "filter_pairs": cfg.input.filter_pairs,
        "n_filter_pairs_on_test": n_filtered,
        "ks": ks,
        "skipped_variants": train_stats.get("_skipped", {}),
        "empty_truth_policy": "excluded from P and R",
    }
    # eval/ is this stage's alone: written into a staging folder, published by the rename swap
    eval_dir = paths.staging(storage.EVAL)
    try:
        _write_eval(ctx, eval_dir, metrics, ks, test_ids, truths, preds, per_inst)
        storage.publish(spark, eval_dir, paths.table(storage.EVAL))
    except BaseException:
        storage.discard_staging(spark, eval_dir)
        raise
    log.info("evaluate: %s", {v: round(m["P@1"], 4) for v, m in out_variants.items()})
    decision = None
    if cfg.evaluate.promote:
        from pina_spark.orchestration import promotion

        decision = promotion.consider(cfg, paths.root, metrics, read_metrics)
    return EvaluateStats(
        variants=variants,
        n_test=len(test_ids),
        n_test_scored=n_scored,
        promotion=decision,
        p_at_1={v: round(m["P@1"], 6) for v, m in out_variants.items()},
    )


def _test_split(spark, paths):
    """``(nodes, test instances sorted by id, number of train instances)`` (pandas, without the
    texts: the report reads the few it shows, :func:`_node_texts`); an :class:`storage.InputError`
    when no instance is ``test``."""
    nodes = (
        storage.read_table(spark, paths, storage.NODES)
        .select(storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.SPLIT)
        .toPandas()
    )
    inst = nodes[nodes[storage.KIND] == storage.KIND_INSTANCE]
    test = inst[inst[storage.SPLIT] == storage.SPLIT_TEST].sort_values(storage.NODE_ID)
    if not len(test):
        raise storage.InputError(
            f"{paths.table(storage.NODES)}: no instance with split='test'; nothing to evaluate"
        )
    return nodes, test, int((inst[storage.SPLIT] == storage.SPLIT_TRAIN).sum())


def _truths(spark, paths, nodes, test) -> list[set[str]]:
    """The true labels (label ``node_id``) of every test instance, in ``test`` order."""
    from pyspark.sql import functions as F

    il = storage.read_table(spark, paths, storage.INSTANCE_LABELS)
    test_rows = test[storage.NODE_INDEX].to_numpy()
    with storage.values_frame(
        spark, paths, storage.INSTANCE_INDEX, test_rows, "evaluate-test"
    ) as test_idx:
        y = il.join(F.broadcast(test_idx), storage.INSTANCE_INDEX).toPandas()
    idx2id = dict(zip(nodes[storage.NODE_INDEX].astype("int64"), nodes[storage.NODE_ID]))
    truth_by_id: dict[str, set[str]] = {}
    for ii, li in zip(
        y[storage.INSTANCE_INDEX].astype("int64"), y[storage.LABEL_INDEX].astype("int64")
    ):
        truth_by_id.setdefault(idx2id[ii], set()).add(idx2id[li])
    return [truth_by_id.get(i, set()) for i in test[storage.NODE_ID]]


def _predictions(spark, paths, test_ids: list[str]):
    """``(variants, {variant: predicted label ids per test instance})``, aligned with
    ``test_ids`` (a missing prediction is an empty list, with a warning)."""
    preds_df = storage.read_table(spark, paths, storage.PREDICTIONS)
    variants = _ordered(r[0] for r in preds_df.select(storage.VARIANT).distinct().collect())
    preds_pd = preds_df.select(
        storage.VARIANT, storage.INSTANCE_ID, storage.LABEL_IDS, storage.SCORES
    ).toPandas()
    preds: dict[str, list[list[str]]] = {}
    for v in variants:
        sub = preds_pd[preds_pd[storage.VARIANT] == v]
        by_id = dict(zip(sub[storage.INSTANCE_ID], sub[storage.LABEL_IDS]))
        missing = sum(1 for i in test_ids if i not in by_id)
        if missing:
            log.warning(
                "variant %s: %d of %d test instances have no prediction (scored as 0)",
                v,
                missing,
                len(test_ids),
            )
        preds[v] = [list(by_id[i]) if i in by_id and by_id[i] is not None else [] for i in test_ids]
    return variants, preds


def _filter_pairs_input(spark, paths, uri: str, test_ids, preds, truths):
    """Reciprocal-pair removal with the ``input.filter_pairs`` table: ``(preds, truths,
    pairs on test instances)``. The test ids reach Spark as a file (``storage.values_frame``), not
    inside the tasks."""
    from pyspark.sql import functions as F

    fp = (
        storage.read_input(spark, uri, "filter_pairs")
        .where(F.col(storage.CORRUPT).isNull())
        .select(storage.INSTANCE_ID, storage.LABEL_ID)
        .dropna()
    )
    with storage.values_frame(
        spark, paths, storage.INSTANCE_ID, test_ids, "evaluate-test-ids", kind="string"
    ) as test_sdf:
        pairs = [
            (r[0], r[1]) for r in fp.join(F.broadcast(test_sdf), storage.INSTANCE_ID).collect()
        ]
    before = sum(len(t) for t in truths)
    new_truths = filter_pairs([[]] * len(test_ids), truths, test_ids, pairs)[1]
    preds = {v: filter_pairs(p, truths, test_ids, pairs)[0] for v, p in preds.items()}
    log.info(
        "filter_pairs: %d pairs on test instances, %d true pairs removed",
        len(pairs),
        before - sum(len(t) for t in new_truths),
    )
    return preds, new_truths, len(pairs)


def score_variants(preds, truths, ks: Sequence[int], train_stats: dict[str, Any]):
    """``(metrics per variant, per-instance P@k (TTEST_KS) per variant, scored mask)``: P@k and
    R@k averaged over the test instances with labels, plus the train stage's timings.

    Examples
    --------
    >>> m, per, mask = score_variants({"pina": [["a"], ["b"]]}, [{"a"}, set()], [1], {})
    >>> m["pina"]["P@1"], mask.tolist()
    (1.0, [True, False])
    """
    out_variants: dict[str, dict[str, Any]] = {}
    per_inst: dict[str, dict[int, np.ndarray]] = {}
    mask = None
    for v, pv in preds.items():
        P, R, mask = per_instance_precision_recall(pv, truths, ks)
        m: dict[str, Any] = {}
        for k in ks:
            m[f"P@{k}"] = float(P[k][mask].mean()) if mask.any() else 0.0
        for k in ks:
            m[f"R@{k}"] = float(R[k][mask].mean()) if mask.any() else 0.0
        m["train_s"] = train_stats.get(v, {}).get("train_s")
        for extra in ("predict_s", "n_features", "n_labels_trained"):
            if extra in train_stats.get(v, {}):
                m[extra] = train_stats[v][extra]
        out_variants[v] = m
        per_inst[v] = {k: P[k][mask] for k in TTEST_KS if k in P}
    return out_variants, per_inst, mask


def significance_table(per_inst: dict[str, dict[int, np.ndarray]]):
    """Paired t-test p-values on P@1/3/5: every variant against ``baseline``, and whether the
    neighbourhood adds anything over the vectorizer alone (``pina`` / ``pina_naive`` against
    ``vectorizer_only``) and over g on B (``pina`` against ``pina_naive``)."""
    significance: dict[str, dict[str, float | None]] = {}
    pairs = [(v, V.BASELINE) for v in per_inst if v != V.BASELINE]
    pairs += [
        (V.PINA, V.VECTORIZER_ONLY),
        (V.PINA, V.PINA_NAIVE),
        (V.PINA_NAIVE, V.VECTORIZER_ONLY),
    ]
    for a, b in pairs:
        if a in per_inst and b in per_inst:
            significance[f"{a}_vs_{b}"] = {
                f"P@{k}": paired_ttest(per_inst[a][k], per_inst[b][k])["p"] for k in TTEST_KS
            }
    return significance


def _write_eval(ctx, eval_dir, metrics, ks, test_ids, truths, preds, per_inst) -> None:
    """Every file of ``eval/`` into ``eval_dir`` (the staging folder), ``_SUCCESS`` last."""
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    if cfg.evaluate.parity_max_per_split > 0:
        from pina_spark.models.parity import PARITY_JSON, measure_run

        parity = measure_run(
            spark, paths, cfg.evaluate.parity_max_per_split, exclude_twins=cfg.task.labels_are_items
        )
        if parity is not None:
            parity["encoder"] = cfg.pretrain.encoder
            metrics["encoder_parity"] = parity
            storage.write_bytes(
                eval_dir + "/" + PARITY_JSON, json.dumps(parity, indent=2).encode("utf-8")
            )
    storage.write_bytes(
        eval_dir + "/" + METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=False).encode()
    )
    scored_ids = [i for i, t in zip(test_ids, truths) if t]
    storage.write_bytes(
        eval_dir + "/" + PER_INSTANCE_FILE, per_instance_parquet(scored_ids, per_inst)
    )
    storage.write_bytes(eval_dir + "/pk.png", _plot_pk(metrics, ks))
    examples_md = _examples_markdown(spark, paths, cfg, test_ids, truths, preds)
    report = _report_markdown(metrics, ks, examples_md, _selection_section(cfg))
    storage.write_bytes(eval_dir + "/" + REPORT_FILE, report.encode("utf-8"))
    held = _pretrain_report(ctx.models_root)
    if held is not None:
        storage.write_bytes(eval_dir + "/" + PRETRAIN_REPORT, held)
    storage.write_bytes(eval_dir + "/_SUCCESS", b"")


def _selection_section(cfg) -> str:
    """The selection this run follows (that of ``run.models``' root, when ``select.follow`` is
    not ``off``), for the top of ``report.md``; ``""`` when it follows none."""
    if cfg.select.follow == "off" or not cfg.run.models:
        return ""
    from pina_spark.selection.artifact import (
        SelectionError,
        read_selection,
        selection_summary,
        selection_uri,
    )

    root = storage.norm(cfg.run.models)
    try:
        rec = read_selection(root)
    except SelectionError:  # the run refused it before any stage ran; nothing to show here
        return ""
    return "" if rec is None else selection_summary(rec, selection_uri(root))


def _pretrain_report(models_root: str) -> bytes | None:
    """g's held-out P@k / R@k per variant (``pretrain_report`` of the models' card), as the
    bytes of ``eval/pretrain.json``; ``None`` (logged) where the card has none."""
    card = read_model_card(models_root)
    rep = card.pretrain_report if card is not None else None
    if rep is None:
        log.info("evaluate: no pretrain_report in %s; no %s", models_root, PRETRAIN_REPORT)
        return None
    return json.dumps(rep, indent=1, sort_keys=True).encode("utf-8")


def _read_train_stats(pred_uri: str) -> dict[str, dict[str, Any]]:
    raw = storage.read_bytes(pred_uri + "/" + TRAIN_STATS_FILE)
    if not raw:
        log.warning("%s/%s missing: train_s will be null", pred_uri, TRAIN_STATS_FILE)
        return {}
    d = json.loads(raw)
    out = dict(d.get("variants", {}))
    out["_skipped"] = d.get("skipped", {})
    return out


def _plot_pk(metrics: dict[str, Any], ks: Sequence[int]) -> bytes:
    import io as _bio

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for v in _ordered(metrics["variants"]):
        m = metrics["variants"][v]
        ax.plot(list(ks), [100.0 * m[f"P@{k}"] for k in ks], marker="o", label=v)
    ax.set_xlabel("k")
    ax.set_ylabel("P@k (%)")
    ax.set_xticks(list(ks))
    ax.set_title(f"P@k per variant (side_info={metrics.get('side_info')})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = _bio.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _md(text: Any, limit: int = 120) -> str:
    s = "" if text is None else str(text)
    s = " ".join(s.split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("|", "\\|")


def _examples_markdown(spark, paths, cfg, test_ids, truths, preds) -> str:
    """Qualitative table: the first ``evaluate.report_examples`` scored test instances (by id)."""
    n = int(cfg.evaluate.report_examples)
    if n <= 0:
        return ""
    chosen = [i for i, t in zip(test_ids, truths) if t][:n]
    if not chosen:
        return "_No scored test instance to show._\n"
    from pyspark.sql import functions as F

    pos = {i: p for p, i in enumerate(test_ids)}
    neigh: dict[str, tuple[list[str], list[float]]] = {}
    feat_uri = paths.table(storage.FEATURES)
    if storage.is_complete(spark, feat_uri):
        try:
            rows = (
                spark.read.parquet(feat_uri)
                .where((F.col(storage.VARIANT) == V.PINA) & F.col(storage.INSTANCE_ID).isin(chosen))
                .select(storage.INSTANCE_ID, storage.NEIGHBOR_IDS, storage.NEIGHBOR_WEIGHTS)
                .collect()
            )
            neigh = {r[0]: (list(r[1] or []), list(r[2] or [])) for r in rows}
        except Exception as e:  # a report detail must not fail the stage
            log.warning("report: could not read neighbours from %s: %s", feat_uri, e)
    # the texts the table shows: the instances, their true and top-5 labels, their neighbours
    shown = set(chosen)
    for i in chosen:
        shown.update(truths[pos[i]])
        shown.update(neigh.get(i, ([], []))[0])
        for v in ("baseline", "pina"):
            if v in preds:
                shown.update(preds[v][pos[i]][:5])
    inst_text, label_text = _node_texts(spark, paths, shown)
    any_text = {**inst_text, **label_text}

    def fmt_preds(v, i, truth):
        if v not in preds:
            return "_(variant not trained)_"
        out = []
        for lab in preds[v][pos[i]][:5]:
            mark = "✓ " if lab in truth else ""
            out.append(f"{mark}{_md(label_text.get(lab, lab), 60)}")
        return "<br>".join(out) or "_(none)_"

    lines = [
        "| instance | ground truth | baseline top-5 | g's predicted neighbours (weight) "
        "| PINA top-5 |",
        "|---|---|---|---|---|",
    ]
    for i, truth in zip(chosen, [truths[pos[i]] for i in chosen]):
        nb = neigh.get(i)
        nb_md = (
            "<br>".join(f"{_md(any_text.get(j, j), 60)} ({w:.3f})" for j, w in zip(*nb))
            if nb
            else "_(no pina features)_"
        )
        gt = "<br>".join(_md(label_text.get(t, t), 60) for t in sorted(truth))
        lines.append(
            f"| **{_md(i, 40)}**: {_md(inst_text.get(i), 160)} | {gt} | "
            f"{fmt_preds('baseline', i, truth)} | {nb_md} | "
            f"{fmt_preds('pina', i, truth)} |"
        )
    return "\n".join(lines) + "\n"


def _node_texts(spark, paths, node_ids) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(instance texts, label texts)`` by ``node_id`` of the nodes ``node_ids`` only (the
    driver never holds every node's text)."""
    from pyspark.sql import functions as F

    wanted = sorted(str(i) for i in node_ids)
    rows = (
        storage.read_table(spark, paths, storage.NODES)
        .where(F.col(storage.NODE_ID).isin(wanted))
        .select(storage.NODE_ID, storage.KIND, storage.TEXT)
        .collect()
        if wanted
        else []
    )
    inst = {r[0]: r[2] for r in rows if r[1] == storage.KIND_INSTANCE}
    lab = {r[0]: r[2] for r in rows if r[1] == storage.KIND_LABEL}
    return inst, lab


def _report_markdown(
    metrics: dict[str, Any], ks: Sequence[int], examples_md: str, selection_md: str = ""
) -> str:
    parts = [
        "# PINA downstream evaluation",
        "",
        *([selection_md] if selection_md else []),
        f"side_info: `{metrics['side_info']}` · train instances: {metrics['n_train']} · test "
        f"instances: {metrics['n_test']} (scored: {metrics['n_test_scored']}, without true "
        f"labels and excluded: {metrics['n_test_no_labels']}) · labels: {metrics['n_labels']}"
        + (
            f" · reciprocal pairs removed using `{metrics['filter_pairs']}`"
            if metrics.get("filter_pairs")
            else ""
        ),
        "",
        "## Metrics (percent)",
        "",
        "P@k = |top-k ∩ Y| / k, R@k = |top-k ∩ Y| / |Y|, averaged over scored test instances. "
        "Gain = relative change of P@1 against `baseline` (tf-idf only). p = instance-wise "
        "paired t-test against `baseline` on P@1 / P@3 / P@5.",
        "",
        metrics_table_markdown(metrics, ks),
        "",
        "![P@k per variant](pk.png)",
        "",
    ]
    skipped = metrics.get("skipped_variants") or {}
    if skipped:
        parts += ["Skipped variants: " + ", ".join(f"`{k}` ({v})" for k, v in skipped.items()), ""]
    parity = metrics.get("encoder_parity")
    if parity:
        rows = [
            f"| {sp} | {parity[sp]['rows']} | "
            + " | ".join(f"{parity[sp][m]:.4f}" for m in ("cos_true", "cos_margin", "P@1", "R@5"))
            + " |"
            for sp in ("train", "test")
        ]
        rows.append(
            "| gap (train - test) | | "
            + " | ".join(
                f"{parity['gap'][m]:+.4f}" for m in ("cos_true", "cos_margin", "P@1", "R@5")
            )
            + " |"
        )
        parts += [
            "## Vectorizer train/test parity",
            "",
            f"Dense Phi_pre (`{parity.get('encoder')}`) of sampled instances against "
            f"their true labels among {parity['candidate_labels']} candidate labels "
            "(`pina_spark/models/parity.py`). A gap well above zero means the vectorizer favours "
            "the rows it was fitted on.",
            "",
            "| split | rows | cos_true | cos_margin | P@1 | R@5 |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    if examples_md:
        parts += [
            "## Qualitative examples",
            "",
            "Ground-truth hits are marked ✓. Neighbours and weights come from "
            "`features` (variant `pina`).",
            "",
            examples_md,
        ]
    return "\n".join(parts)
