"""Metric functions against hand-computed cases, the t-test, and the evaluate stage on a hand-built
run (exact metrics.json keys and values, reciprocal-pair filtering)."""

import json
import math
import os

import numpy as np
import pytest

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.stages.evaluate.stage import (
    filter_pairs,
    paired_ttest,
    per_instance_precision_recall,
    precision_recall_at_k,
)


# --------------------------------------------------------------------------- pure functions
def test_precision_recall_hand_case():
    preds = [["a", "b", "c", "d"], ["x"], ["c", "c", "a"]]
    truth = [{"a", "c"}, {"x", "y", "z"}, {"a"}]
    m = precision_recall_at_k(preds, truth, ks=[1, 3, 5])
    # instance 1: hits at ranks 1,3 ; instance 2: hit at rank 1 (only 1 prediction);
    # instance 3: duplicate 'c' counts once, so 'a' is rank 2
    assert m["P@1"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["P@3"] == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert m["P@5"] == pytest.approx((2 / 5 + 1 / 5 + 1 / 5) / 3)
    assert m["R@1"] == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert m["R@3"] == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert m["n"] == 3


def test_fewer_than_k_predictions_and_empty_truth():
    P, R, mask = per_instance_precision_recall(
        [["a"], [], ["q"]], [{"a"}, {"b"}, set()], ks=[1, 10]
    )
    assert P[10].tolist() == [0.1, 0.0, 0.0]  # missing predictions are misses
    assert R[10][:2].tolist() == [1.0, 0.0] and math.isnan(R[10][2])
    assert mask.tolist() == [True, True, False]
    m = precision_recall_at_k([["a"], [], ["q"]], [{"a"}, {"b"}, set()], ks=[1, 10])
    # the empty-truth instance is excluded from P and R alike
    assert m["P@1"] == pytest.approx(0.5) and m["R@10"] == pytest.approx(0.5) and m["n"] == 2
    assert precision_recall_at_k([["a"]], [set()], ks=[1]) == {"P@1": 0.0, "R@1": 0.0, "n": 0}
    with pytest.raises(ValueError, match="aligned"):
        precision_recall_at_k([["a"]], [], ks=[1])


def test_paired_ttest_matches_hand_computation_and_scipy():
    from scipy import stats

    a = np.array([1.0, 0.0, 1.0, 1.0, 0.5, 1.0])
    b = np.array([0.0, 0.0, 1.0, 0.0, 0.5, 0.0])
    d = a - b
    t_hand = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    r = paired_ttest(a, b)
    assert r["t"] == pytest.approx(t_hand)
    assert r["p"] == pytest.approx(2 * stats.t.sf(abs(t_hand), df=len(d) - 1))
    assert r["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert paired_ttest(a, a) == {"t": 0.0, "p": 1.0}  # identical: 1.0, not NaN
    assert paired_ttest(a + 1, a)["p"] == 0.0  # constant shift
    assert paired_ttest([1.0], [0.0]) == {"t": None, "p": None}


def test_filter_pairs_removes_from_predictions_and_truth():
    p, t = filter_pairs(
        [["A", "B", "C"], ["A"]], [{"A", "B"}, {"A"}], ["t1", "t2"], [("t1", "A"), ("t9", "B")]
    )
    assert p == [["B", "C"], ["A"]] and t == [{"B"}, {"A"}]


# --------------------------------------------------------------------------- the stage
TRAIN = {"r1": {"A"}, "r2": {"B"}, "r3": {"C"}, "r4": {"D"}}
TEST = {"t1": {"A", "B"}, "t2": {"C"}, "t3": set()}
PREDS = {
    "baseline": {"t1": ["A", "C", "D"], "t2": ["A", "B", "C"], "t3": ["A"]},
    "pina": {"t1": ["B", "A"], "t2": ["C"], "t3": []},
}


def _hand_run(spark, root):
    from pyspark.sql import types as T

    paths = storage.RunPaths(root)
    inst = sorted(list(TRAIN) + list(TEST))
    rows = [
        (i, "instance", iid, f"text of {iid}", "train" if iid in TRAIN else "test")
        for i, iid in enumerate(inst)
    ]
    labels = ["A", "B", "C", "D"]
    rows += [(len(inst) + j, "label", lab, f"label {lab}", None) for j, lab in enumerate(labels)]
    storage.write_table(
        spark.createDataFrame(rows, storage.schema(storage.NODES)), paths, storage.NODES
    )
    idx = {r[2]: r[0] for r in rows}
    il = [(idx[i], idx[lab]) for i, ls in {**TRAIN, **TEST}.items() for lab in ls]
    storage.write_table(
        spark.createDataFrame(il, "instance_index long, label_index long"),
        paths,
        storage.INSTANCE_LABELS,
    )
    schema = T.StructType(
        [
            T.StructField(storage.INSTANCE_ID, T.StringType()),
            T.StructField(storage.LABEL_IDS, T.ArrayType(T.StringType())),
            T.StructField(storage.SCORES, T.ArrayType(T.FloatType())),
            T.StructField(storage.VARIANT, T.StringType()),
        ]
    )
    prow = [
        (i, p, [float(1 - 0.1 * r) for r in range(len(p))], v)
        for v, d in PREDS.items()
        for i, p in d.items()
    ]
    storage.write_table(
        spark.createDataFrame(prow, schema),
        paths,
        storage.PREDICTIONS,
        partition_by=(storage.VARIANT,),
    )
    storage.write_bytes(
        paths.table(storage.PREDICTIONS) + "/_train_stats.json",
        json.dumps(
            {"variants": {"baseline": {"train_s": 1.5}, "pina": {"train_s": 2.5}}, "skipped": {}}
        ).encode(),
    )
    fschema = T.StructType(
        [
            T.StructField(storage.INSTANCE_ID, T.StringType()),
            T.StructField(storage.NEIGHBOR_IDS, T.ArrayType(T.StringType())),
            T.StructField(storage.NEIGHBOR_WEIGHTS, T.ArrayType(T.FloatType())),
            T.StructField(storage.VARIANT, T.StringType()),
            T.StructField(storage.SPLIT, T.StringType()),
        ]
    )
    storage.write_table(
        spark.createDataFrame([("t1", ["A", "r1"], [0.75, 0.25], "pina", "test")], fschema),
        paths,
        storage.FEATURES,
        partition_by=(storage.VARIANT, storage.SPLIT),
    )
    return paths


def _evaluate(spark, root, **extra):
    from pina_spark.orchestration.pipeline import make_context
    from pina_spark.stages.evaluate.stage import run

    d = {"output": root, "evaluate": {"report_examples": 2}}
    d.update(extra)
    ctx = make_context(spark, config_from_dict(d))
    stats = run(ctx)
    ev = storage.local_path(ctx.paths.table(storage.EVAL))
    return stats, json.load(open(os.path.join(ev, "metrics.json"))), ev


@pytest.fixture(scope="module")
def hand_run(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ev") / "run")
    paths = _hand_run(spark, root)
    return root, paths, _evaluate(spark, root)


def test_metrics_json_exact_shape_and_values(hand_run):
    root, paths, (stats, m, ev) = hand_run
    metric_keys = {"P@1", "P@3", "P@5", "P@10", "R@1", "R@3", "R@5", "R@10", "train_s"}
    assert {"variants", "significance", "n_train", "n_test", "n_labels", "side_info"} <= set(m)
    assert set(m["variants"]) == {"baseline", "pina"}
    for v in m["variants"].values():
        assert metric_keys <= set(v)
    assert set(m["significance"]) == {"pina_vs_baseline"}
    assert set(m["significance"]["pina_vs_baseline"]) == {"P@1", "P@3", "P@5"}
    assert (m["n_train"], m["n_test"], m["n_labels"]) == (4, 3, 4)
    assert m["side_info"] == "label_text"
    # t3 has no true label: excluded; t1, t2 scored (hand computation in the module header)
    assert (m["n_test_scored"], m["n_test_no_labels"]) == (2, 1)
    b, p = m["variants"]["baseline"], m["variants"]["pina"]
    expect_b = {
        "P@1": 0.5,
        "P@3": 1 / 3,
        "P@5": 0.2,
        "P@10": 0.1,
        "R@1": 0.25,
        "R@3": 0.75,
        "R@5": 0.75,
        "R@10": 0.75,
        "train_s": 1.5,
    }
    expect_p = {
        "P@1": 1.0,
        "P@3": 0.5,
        "P@5": 0.3,
        "P@10": 0.15,
        "R@1": 0.75,
        "R@3": 1.0,
        "R@5": 1.0,
        "R@10": 1.0,
        "train_s": 2.5,
    }
    for k in expect_b:
        assert b[k] == pytest.approx(expect_b[k]), k
        assert p[k] == pytest.approx(expect_p[k]), k
    # P@1 differences d = [0, 1] -> t = 1, df = 1 -> p = 0.5; P@3: d = [1/3, 0] -> p = 0.5
    sig = m["significance"]["pina_vs_baseline"]
    assert sig["P@1"] == pytest.approx(0.5) and sig["P@3"] == pytest.approx(0.5)


def test_report_and_plot(hand_run):
    root, paths, (stats, m, ev) = hand_run
    report = open(os.path.join(ev, "report.md"), encoding="utf-8").read()
    assert "| baseline | 50.00 | 33.33 | 20.00 | 10.00 |" in report
    assert "+100.00%" in report  # pina P@1 gain vs baseline
    assert "![P@k per variant](pk.png)" in report
    # qualitative table: t1 with its neighbours (text + weight) from features
    assert "label A (0.750)" in report and "text of r1 (0.250)" in report
    assert "✓ label B" in report
    # the texts the table shows (read for its rows only): the instance's, a wrong prediction's
    assert "**t1**: text of t1 |" in report and "<br>label C<br>" in report
    with open(os.path.join(ev, "pk.png"), "rb") as fh:
        assert fh.read(4) == b"\x89PNG"
    assert os.path.exists(os.path.join(ev, "_SUCCESS"))


def test_reciprocal_pair_filtering_changes_scores(spark, hand_run, tmp_path):
    root, paths, _ = hand_run
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("instance_id,label_id\nt1,A\nr1,A\nt2,Z\n")
    _, m, _ = _evaluate(spark, root, input={"filter_pairs": str(pairs)})
    # t1: truth {B}; baseline t1 -> [C, D] (P@1 0), pina t1 -> [B] (P@1 1); t2 unchanged
    b, p = m["variants"]["baseline"], m["variants"]["pina"]
    assert b["P@1"] == pytest.approx(0.0) and p["P@1"] == pytest.approx(1.0)
    assert b["R@3"] == pytest.approx((0 + 1) / 2)  # t1: B not in [C, D]; t2: C found
    assert b["P@3"] == pytest.approx((0 + 1 / 3) / 2)
    assert m["n_filter_pairs_on_test"] == 2  # (t1, A) and (t2, Z); r1 is train
    assert m["n_test_scored"] == 2


@pytest.mark.slow
def test_promotion_gate_writes_the_pointer_only_when_passing(spark, hand_run, tmp_path):
    """evaluate.promote: the first run is promoted; a run worse than the promoted one by more
    than the tolerance leaves the pointer alone; --models latest resolves the pointer."""
    from pina_spark.config import ConfigError
    from pina_spark.orchestration import promotion

    root, paths, _ = hand_run
    out = os.path.dirname(root)  # <output> of a run at <output>/run
    # hand_run's output is `root` itself: promote into it
    assert promotion.read_promoted(root) is None
    stats, m, _ = _evaluate(spark, root, evaluate={"report_examples": 2, "promote": True})
    assert stats["promotion"]["promoted"] and m["variants"]["pina"]["P@1"] == 1.0
    ptr = promotion.read_promoted(root)
    assert ptr["run"] == paths.root.rstrip("/") and ptr["value"] == 1.0
    # someone better is promoted (P@1 1.2 is impossible, fine for the gate): 1.0 < 1.2 - 0.1
    better = dict(ptr, run="s3://b/runs/prod/run_date=2026-11-01", value=1.2)
    storage.write_bytes(promotion.pointer_uri(root), json.dumps(better).encode())
    stats, _, _ = _evaluate(
        spark, root, evaluate={"report_examples": 2, "promote": True, "gate_tolerance": 0.1}
    )
    assert not stats["promotion"]["promoted"] and "<" in stats["promotion"]["reason"]
    assert promotion.read_promoted(root)["run"] == better["run"]
    # within tolerance passes
    stats, _, _ = _evaluate(
        spark, root, evaluate={"report_examples": 2, "promote": True, "gate_tolerance": 0.25}
    )
    assert stats["promotion"]["promoted"]
    cfg = config_from_dict({"output": root, "run": {"models": "latest"}})
    assert promotion.resolve_models(cfg).run.models == paths.root.rstrip("/")
    with pytest.raises(ConfigError, match="no promoted run"):
        promotion.resolve_models(
            config_from_dict({"output": out + "/none", "run": {"models": "latest"}})
        )


def test_the_gate_compares_a_run_with_the_promoted_runs_value_of_the_same_variant(tmp_path):
    """A run that follows a ``vectorizer_only`` selection gates on ``vectorizer_only``; the
    promoted retraining run was gated on ``pina``. The gate compared the two variants' values;
    it now compares with the promoted run's own ``vectorizer_only`` value (its metrics), both
    ways: here the run beats the record's pina P@1 but not the promoted run's vectorizer_only."""
    from pina_spark.orchestration import promotion
    from pina_spark.stages.evaluate.stage import METRICS_FILE, eval_file, read_metrics

    out, promoted = str(tmp_path / "prod"), str(tmp_path / "prod" / "run_date=2026-11-01")
    record = {"run": promoted, "variant": "pina", "metric": "P@1", "value": 0.44}
    storage.write_bytes(promotion.pointer_uri(out), json.dumps(record).encode())
    theirs = {"variants": {"vectorizer_only": {"P@1": 0.50}, "pina": {"P@1": 0.44}}}
    storage.write_bytes(eval_file(promoted, METRICS_FILE), json.dumps(theirs).encode())
    cfg = config_from_dict(
        {"output": out, "evaluate": {"promote": True, "gate_variant": "vectorizer_only"}}
    )
    mine = {"variants": {"vectorizer_only": {"P@1": 0.45}}}
    d = promotion.consider(cfg, str(tmp_path / "prod" / "run_date=2026-12-01"), mine, read_metrics)
    assert not d["promoted"], d
    assert "0.4500 < promoted 0.5000" in d["reason"] and "promoted on pina P@1" in d["reason"]
    assert promotion.read_promoted(out)["run"] == promoted


def test_the_gate_falls_back_to_the_records_value_when_the_promoted_metrics_cannot_be_used():
    """The promoted run's metrics are another run's file: unreadable, malformed or NaN, they
    never fail this run's evaluate stage or block every later promotion; the record's value
    is compared, and the reason says why."""
    import math as _m

    from pina_spark.orchestration.promotion import comparable

    rec = {"run": "r1", "variant": "pina", "metric": "P@1", "value": 0.44}

    def broken(run):
        raise ValueError("Expecting value: line 1 column 15")

    for metrics_of, why in (
        (broken, "unreadable metrics"),
        (lambda run: {"variants": []}, "unreadable metrics"),
        (lambda run: {"variants": {"vectorizer_only": {"P@1": "n/a"}}}, "unreadable metrics"),
        (lambda run: {"variants": {"vectorizer_only": {"P@1": _m.nan}}}, "is nan"),
        (lambda run: None, "has none"),
    ):
        ref, note = comparable(rec, "vectorizer_only", "P@1", metrics_of)
        assert ref is rec and why in note, note
    assert comparable({"value": 0.4}, "vectorizer_only", "P@1", broken) == ({"value": 0.4}, "")
