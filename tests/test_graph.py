"""The graph stage: I2I graph vs brute force (real Instacart), measures, caps, node indices, B_pre
blocks for every side_info, fault hook, the leak guard, and the whole stage end to end."""

import itertools
import math
import os
from collections import Counter, defaultdict

import pytest
from pyspark.testing import assertDataFrameEqual

from pina_spark import storage
from pina_spark.config import GraphConfig, config_from_dict
from pina_spark.runtime import faults
from pina_spark.stages import graph
from pina_spark.stages.graph import scoring

EV_SCHEMA = "basket_id string, item_id string"
STRATEGIES = ("broadcast", "shuffle")


def _plan(strategy):
    """A pair-counting plan of the given strategy (2 tasks: more than one item range)."""
    return graph.PairPlan(strategy, 2, "test")


def _undirected(edges_df):
    """{(a, b): (count, score)} for a < b, checking that the frame is symmetric."""
    rows = edges_df.collect()
    d = {(r.src_id, r.dst_id): (r["count"], r.score) for r in rows}
    assert len(d) == len(rows), "duplicate directed edges"
    for (a, b), v in d.items():
        assert a != b
        assert d[(b, a)] == v, f"edge {a}-{b} is not symmetric"
    return {k: v for k, v in d.items() if k[0] < k[1]}


# --------------------------------------------------------------------------- brute force
def brute_force_counts(baskets, max_basket_size=None):
    """Pure Python: distinct items per basket, the documented hash cap, itertools.combinations."""
    counts = Counter()
    for b, items in baskets.items():
        items = sorted(set(items))
        if max_basket_size is not None and len(items) > max_basket_size:
            items = sorted(
                sorted(items, key=lambda i: (graph.basket_hash(b, i), i))[:max_basket_size]
            )
        for a, c in itertools.combinations(items, 2):
            counts[(a, c)] += 1
    return counts


TINY = {
    "o1": ["a", "b", "c"],
    "o2": ["a", "b", "b"],
    "o3": ["a", "c", "d"],
    "o4": ["b", "d"],
    "o5": ["e"],
}


@pytest.fixture(scope="module")
def tiny_events(spark):
    rows = [(b, i) for b, items in TINY.items() for i in items]
    return spark.createDataFrame(rows, EV_SCHEMA)


def _llr_ref(k11, k12, k21, k22):
    """Mahout LogLikelihood.logLikelihoodRatio transcribed to Python."""

    def xlogx(x):
        return 0.0 if x == 0 else x * math.log(x)

    def entropy(*ks):
        return xlogx(sum(ks)) - sum(xlogx(k) for k in ks)

    row = entropy(k11 + k12, k21 + k22)
    col = entropy(k11 + k21, k12 + k22)
    mat = entropy(k11, k12, k21, k22)
    return 0.0 if row + col < mat else 2.0 * (row + col - mat)


@pytest.mark.slow
def test_measures_on_tiny_example(spark, tiny_events):
    # N = 4 baskets with >= 2 items (o5 has one); n_a = 3, n_b = 3, n_c = 2, n_d = 2
    counts = {
        ("a", "b"): 2,
        ("a", "c"): 2,
        ("b", "c"): 1,
        ("a", "d"): 1,
        ("b", "d"): 1,
        ("c", "d"): 1,
    }
    n = {"a": 3, "b": 3, "c": 2, "d": 2}
    big_n = 4
    assert brute_force_counts(TINY) == Counter(counts)
    expected = {  # (measure=count is checked on the real data below)
        "jaccard": {(a, b): c / (n[a] + n[b] - c) for (a, b), c in counts.items()},
        "pmi": {(a, b): math.log(c * big_n / (n[a] * n[b])) for (a, b), c in counts.items()},
        "llr": {
            (a, b): _llr_ref(c, n[a] - c, n[b] - c, big_n - n[a] - n[b] + c)
            for (a, b), c in counts.items()
        },
    }
    assert expected["jaccard"][("a", "b")] == pytest.approx(0.5)  # 2 / (3 + 3 - 2)
    assert expected["pmi"][("c", "d")] == pytest.approx(0.0)  # ln(1*4 / (2*2))
    capped = graph.capped_baskets(tiny_events, 100).persist()
    for kw in ({"capped": capped}, {"plan": _plan("shuffle")}, {"plan": _plan("broadcast")}):
        for measure, exp in expected.items():
            got = _undirected(
                graph.i2i_edges(tiny_events, GraphConfig(min_count=1, measure=measure), **kw)
            )
            assert {k: v[0] for k, v in got.items()} == counts
            for k, v in exp.items():
                assert got[k][1] == pytest.approx(v, rel=1e-12, abs=1e-12), (measure, k, kw)
        got = _undirected(
            graph.i2i_edges(
                tiny_events, GraphConfig(min_count=2, measure="jaccard", min_score=0.6), **kw
            )
        )
        assert got == {("a", "c"): (2, pytest.approx(2 / 3))}
    capped.unpersist()


def test_llr_matches_known_values_and_scipy(spark):
    from pyspark.sql import functions as F
    from scipy.stats import chi2_contingency

    cases = [(1, 0, 0, 1), (10, 0, 0, 10), (5, 1195, 1195, 98790), (3, 7, 12, 78), (2, 1, 1, 0)]
    cols = [scoring._llr(*[F.lit(float(k)) for k in c]).alias(f"c{i}") for i, c in enumerate(cases)]
    got = list(spark.range(1).select(*cols).first())
    assert got[0] == pytest.approx(4 * math.log(2))  # Mahout's unit test: 2.772589
    assert got[1] == pytest.approx(40 * math.log(2))  # 27.72589
    for g, c in zip(got, cases):
        assert g == pytest.approx(_llr_ref(*c), rel=1e-9)
        table = [[c[0], c[1]], [c[2], c[3]]]
        if min(sum(r) for r in table) > 0 and min(c[0] + c[2], c[1] + c[3]) > 0:
            g2 = chi2_contingency(table, correction=False, lambda_="log-likelihood")[0]
            assert g == pytest.approx(g2, rel=1e-9)


def test_basket_cap_and_stats(spark):
    baskets = {f"o{j}": [f"p{(j * 7 + k * 3) % 23}" for k in range(2 + j % 9)] for j in range(40)}
    baskets["single"] = ["p1"]
    rows = [(b, i) for b, items in baskets.items() for i in items]
    ev = spark.createDataFrame(rows, EV_SCHEMA).repartition(3)
    capped = graph.capped_baskets(ev, 4)
    st = graph.basket_stats(capped, 4)
    sizes = {b: len(set(v)) for b, v in baskets.items()}
    assert st["baskets"] == 41
    assert st["baskets_one_item"] == 1
    assert st["baskets_capped"] == sum(s > 4 for s in sizes.values())
    assert st["baskets_used"] == 40
    kept = defaultdict(set)
    for r in capped.collect():
        kept[r.basket_id].add(r.item_id)
    for b, items in baskets.items():
        exp = sorted(set(items), key=lambda i: (graph.basket_hash(b, i), i))[:4]
        assert kept[b] == set(exp), b
    tbl = storage.collect_arrow(ev.select(storage.BASKET_ID, storage.ITEM_ID))
    m, st_b = graph.basket_matrix(tbl, 4)
    assert st_b == st  # the broadcast strategy's stats
    assert m["n_baskets"] == 40
    for strategy in STRATEGIES:
        got = _undirected(
            graph.i2i_edges(ev, GraphConfig(min_count=1, max_basket_size=4), plan=_plan(strategy))
        )
        assert {k: v[0] for k, v in got.items()} == dict(brute_force_counts(baskets, 4)), strategy


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_top_n_union_and_max_degree_mutual(spark, strategy):
    # star: hub h with 4 spokes (counts 4,3,2,1) plus x-y (count 5)
    baskets = []
    for item, c in (("s1", 4), ("s2", 3), ("s3", 2), ("s4", 1)):
        baskets += [[f"{item}-{k}", ["h", item]] for k in range(c)]
    baskets += [[f"xy-{k}", ["x", "y"]] for k in range(5)]
    baskets += [["s1y", ["s1", "y"]]]
    ev = spark.createDataFrame([(b, i) for b, items in baskets for i in items], EV_SCHEMA)
    # top_n=1: h keeps s1; each spoke keeps h (its best) -> union keeps all hub edges
    got = _undirected(graph.i2i_edges(ev, GraphConfig(min_count=1, top_n=1), plan=_plan(strategy)))
    assert set(got) == {("h", "s1"), ("h", "s2"), ("h", "s3"), ("h", "s4"), ("x", "y")}
    # max_degree=2: edge kept only when both ends rank each other within 2
    got = _undirected(
        graph.i2i_edges(ev, GraphConfig(min_count=1, max_degree=2), plan=_plan(strategy))
    )
    assert set(got) == {("h", "s1"), ("h", "s2"), ("s1", "y"), ("x", "y")}
    degree = Counter(a for e in got for a in e)
    assert max(degree.values()) <= 2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fault_hook_runs_in_executor_function(spark, tiny_events, tmp_path, strategy):
    cfg = config_from_dict({"output": str(tmp_path), "faults": {"fail_first_attempt": ["graph"]}})
    plan = faults.fault_plan(cfg, "graph")
    assert plan == ("graph", ())
    with pytest.raises(Exception, match="injected fault: stage graph"):
        graph.i2i_edges(
            tiny_events, GraphConfig(min_count=1), fault_plan=plan, plan=_plan(strategy)
        ).collect()


# --------------------------------------------------------------------------- nodes and B_pre
@pytest.fixture(scope="module")
def small_tables(spark):
    inst = spark.createDataFrame(
        [
            ("i4", "four", "train"),
            ("i2", "two", "train"),
            ("i3", "three", "test"),
            ("i1", "one", "train"),
        ],
        "instance_id string, text string, split string",
    )
    lab = spark.createDataFrame(
        [("l3", "L3"), ("l1", "L1"), ("l2", "L2")], "label_id string, text string"
    )
    il = spark.createDataFrame(
        [("i1", "l1"), ("i1", "l2"), ("i2", "l1"), ("i3", "l3"), ("i3", "l1")],
        "instance_id string, label_id string",
    )
    # train-only graph edges, plus one touching test item i3 that must be ignored
    i2i = spark.createDataFrame(
        [("i1", "i2"), ("i2", "i1"), ("i1", "i3"), ("i3", "i1")], "src_id string, dst_id string"
    )
    return inst, lab, il, i2i


@pytest.mark.slow
def test_node_indices_deterministic(spark, small_tables):
    inst, lab, _, _ = small_tables
    expected = spark.createDataFrame(
        [
            (0, "instance", "i1", "one", "train"),
            (1, "instance", "i2", "two", "train"),
            (2, "instance", "i3", "three", "test"),
            (3, "instance", "i4", "four", "train"),
            (4, "label", "l1", "L1", None),
            (5, "label", "l2", "L2", None),
            (6, "label", "l3", "L3", None),
        ],
        "node_index long, kind string, node_id string, text string, split string",
    )
    for parts in (1, 3):
        for n_rows in ((None, None), (4, 3), (4, None)):  # range-partitioned / one partition
            nodes = graph.assign_node_indices(
                inst.repartition(parts), lab.repartition(parts), n_rows=n_rows
            )
            assertDataFrameEqual(nodes, expected)


BLOCK_EDGES = {
    "B": {(0, 4), (0, 5), (1, 4)},
    "BT": {(4, 0), (5, 0), (4, 1)},
    "I_inst": {(0, 0), (1, 1), (3, 3)},  # every train instance (i3 is test)
    "I_label": {(4, 4), (5, 5)},  # labels in B only (l3 is only on test i3)
    "A": {(0, 1), (1, 0)},  # i1-i3 touches a test item: dropped
}


@pytest.fixture(scope="module")
def small_graph(small_tables):
    inst, lab, il, i2i = small_tables
    nodes = graph.assign_node_indices(inst, lab).persist()
    il_idx = graph.index_instance_labels(nodes, il).persist()
    yield nodes, il_idx, i2i
    nodes.unpersist()
    il_idx.unpersist()


@pytest.mark.slow
@pytest.mark.parametrize(
    "side_info,blocks",
    [
        (
            "label_text",
            {
                "B": BLOCK_EDGES["B"],
                "BT": BLOCK_EDGES["BT"],
                "I_inst": BLOCK_EDGES["I_inst"],
                "I_label": BLOCK_EDGES["I_label"],
            },
        ),
        ("i2i", {"A": BLOCK_EDGES["A"], "I_inst": {(3, 3)}}),  # I_inst only for i4 (no A edge)
        ("both", dict(BLOCK_EDGES)),
        ("naive", {"B": BLOCK_EDGES["B"]}),
    ],
)
def test_pretrain_edges_blocks(spark, small_graph, side_info, blocks):
    nodes, il_idx, i2i = small_graph
    pe = graph.pretrain_edges(nodes, il_idx, i2i, side_info, "given")
    rows = [
        (s, d, w, b, v)
        for b, edges in blocks.items()
        for s, d in sorted(edges)
        for w, v in [(1.0, "pina")]
    ]
    rows += [(s, d, 1.0, "B", "pina_naive") for s, d in sorted(BLOCK_EDGES["B"])]
    expected = spark.createDataFrame(
        rows, "src_index long, dst_index long, weight float, block string, variant string"
    )
    assertDataFrameEqual(pe, expected)


# --------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def instacart_events(spark, instacart_dir, tmp_path_factory):
    """Events of the real sample: via datasets.prepare_data, or the CSV directly."""
    import pandas as pd

    from pina_spark import datasets

    if hasattr(datasets, "prepare_data"):
        out = str(tmp_path_factory.mktemp("instacart"))
        paths = datasets.prepare_data("instacart", instacart_dir, out)
        pdf = pd.read_parquet(paths["events"], columns=[storage.BASKET_ID, storage.ITEM_ID])
    else:  # pragma: no cover
        raw = pd.read_csv(
            os.path.join(instacart_dir, "order_products_sample.csv"),
            usecols=["order_id", "product_id"],
            dtype=str,
        )
        pdf = raw.rename(columns={"order_id": storage.BASKET_ID, "product_id": storage.ITEM_ID})
    baskets = pdf.groupby(storage.BASKET_ID)[storage.ITEM_ID].apply(list).to_dict()
    ev = spark.createDataFrame(pdf).persist()
    yield pdf, ev, baskets
    ev.unpersist()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("cap", [None, 5])
def test_i2i_equals_brute_force_on_instacart(spark, instacart_events, cap, strategy):
    pdf, ev, baskets = instacart_events
    assert len(pdf) > 100_000
    max_size = cap if cap is not None else 10_000
    bf = brute_force_counts(baskets, cap)
    if cap is None:
        assert len(bf) == 607_786  # figure quoted in shared/data/README.md
    capped = graph.capped_baskets(ev, max_size).persist() if strategy == "shuffle" else None
    try:
        for min_count in (1, 2, 3):
            cfg = GraphConfig(min_count=min_count, max_basket_size=max_size)
            edges = graph.i2i_edges(ev, cfg, capped=capped, plan=_plan(strategy))
            und = edges.filter(f"{storage.SRC_ID} < {storage.DST_ID}").toPandas()
            got = dict(zip(zip(und[storage.SRC_ID], und[storage.DST_ID]), und[storage.COUNT]))
            exp = {(min(a, b), max(a, b)): c for (a, b), c in bf.items() if c >= min_count}
            assert got == exp, (cap, min_count)
            assert (und[storage.SCORE] == und[storage.COUNT]).all()
        if cap is None:
            assert sum(1 for c in bf.values() if c >= 2) == 163_112
    finally:
        if capped is not None:
            capped.unpersist()


# --------------------------------------------------------------------------- whole stage
def _write_csv(path, header, rows):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def _run(spark, cfg):
    from pina_spark.orchestration.pipeline import make_context

    ctx = make_context(spark, cfg)
    return ctx, graph.run(ctx)


@pytest.mark.slow
def test_run_stage_given_labels(spark, tmp_path):
    d = tmp_path
    inst = _write_csv(
        d / "i.csv",
        ["instance_id", "text", "split"],
        [
            ["i1", "one", "train"],
            ["i2", "two", "train"],
            ["i3", "three", "test"],
            ["i4", "four", "train"],
            ["i5", "", "train"],
        ],
    )
    lab = _write_csv(d / "l.csv", ["label_id", "text"], [["l1", "L1"], ["l2", "L2"], ["l3", "L3"]])
    il = _write_csv(
        d / "il.csv",
        ["instance_id", "label_id"],
        [["i1", "l1"], ["i1", "l2"], ["i2", "l1"], ["i3", "l3"], ["i3", "l1"], ["i5", "l1"]],
    )
    ev = _write_csv(
        d / "ev.csv",
        ["basket_id", "item_id"],
        [
            ["b1", "i1"],
            ["b1", "i2"],
            ["b2", "i1"],
            ["b2", "i2"],
            ["b3", "i1"],
            ["b3", "i3"],
            ["b4", "i1"],
            ["b4", "i3"],
            ["b5", "i4"],
            ["b6", "zz"],
        ],
    )
    cfg = config_from_dict(
        {
            "output": str(d / "run"),
            "side_info": "both",
            "graph": {"min_count": 2},
            "input": {"instances": inst, "labels": lab, "instance_labels": il, "events": ev},
        }
    )
    from pina_spark.orchestration.pipeline import make_context, run_pipeline
    from pina_spark.storage.manifest import Manifest

    assert run_pipeline(spark, cfg, ["graph"]) == {"graph": "ran"}
    paths = make_context(spark, cfg).paths
    stats = Manifest(paths.manifest).stage("graph")["stats"]  # what the manifest recorded
    steps = stats["steps_s"]  # per-step wall seconds (the manifest sorts keys)
    assert {
        "validate.instances",
        "validate.labels",
        "validate.instance_labels",
        "validate.events",
    } <= set(steps)
    for step in (
        "events.rows_in",
        "quarantine.events",
        "train.collect_ids",
        "i2i.basket_matrix",
        "i2i.publish",
        "nodes.publish",
        "instance_labels.publish",
        "pretrain_edges.publish",
    ):
        assert isinstance(steps[step], float) and steps[step] >= 0, step
    assert stats["pair_plan"]["strategy"] == "broadcast"
    assert set(stats["pair_tasks_s"]) == {"all", "train"}  # side_info both: train-only graph
    assert stats["i2i_edges"] == 4 and stats["degree"]["max"] == 2.0
    # rows_out counts the optional i2i table too, as a count of the published table
    rows_out = Manifest(paths.manifest).stage("graph")["rows_out"]
    assert rows_out[storage.I2I_EDGES] == spark.read.parquet(paths.table(storage.I2I_EDGES)).count()
    assert rows_out[storage.I2I_EDGES] == 4 and storage.NODES in rows_out
    assert stats["instance_labels"] == 5
    assert stats["inputs"]["instances"]["reasons"] == {"missing_text": 1}
    assert stats["inputs"]["instance_labels"]["reasons"] == {"unknown_instance": 1}
    assert stats["inputs"]["events"]["reasons"] == {"unknown_item": 1}
    assert stats["inputs"]["labels"]["rows_quarantined"] == 0
    assert stats["baskets"]["baskets_one_item"] == 1
    assert stats["nodes"] == {"instances": 4, "labels": 3}
    # every configured table has a quarantine table, even when empty
    for t in ("instances", "labels", "instance_labels", "events"):
        assert storage.is_complete(spark, paths.table(f"{storage.QUARANTINE}/{t}"))
    assert storage.read_table(spark, paths, f"{storage.QUARANTINE}/labels").count() == 0
    # raw i2i graph over all items (i1-i3 is a train-test edge, kept here)
    assert _undirected(storage.read_table(spark, paths, storage.I2I_EDGES)) == {
        ("i1", "i2"): (2, 2.0),
        ("i1", "i3"): (2, 2.0),
    }
    il_idx = storage.read_table(spark, paths, storage.INSTANCE_LABELS)
    assert sorted(tuple(r) for r in il_idx.collect()) == [(0, 4), (0, 5), (1, 4), (2, 4), (2, 6)]
    pe = storage.read_table(spark, paths, storage.PRETRAIN_EDGES)
    got = {(r.variant, r.block, r.src_index, r.dst_index) for r in pe.collect()}
    exp = {("pina", b, s, t) for b, edges in BLOCK_EDGES.items() for s, t in edges}
    exp |= {("pina_naive", "B", s, t) for s, t in BLOCK_EDGES["B"]}
    assert got == exp
    assert stats["pretrain_edges"]["pina"]["A"] == 2
    assert os.path.isdir(paths.table(storage.PRETRAIN_EDGES) + "/variant=pina_naive")


def _leak_inputs(tmp_path, drop_test: bool):
    import random

    rng = random.Random(7)
    items = [f"p{k:02d}" for k in range(30)]
    test = {i for k, i in enumerate(items) if k % 4 == 0}
    baskets = []
    for j in range(400):
        size = rng.choice([1, 2, 3, 4, 5, 6, 8])
        chosen = rng.sample(items[: 10 + (j % 20)], min(size, 10 + (j % 20)))
        baskets += [[f"b{j}", i] for i in chosen]
    inst_rows = [
        [i, f"product {i}", "test" if i in test else "train"]
        for i in items
        if not (drop_test and i in test)
    ]
    d = tmp_path / ("dropped" if drop_test else "full")
    d.mkdir()
    return (
        _write_csv(d / "i.csv", ["instance_id", "text", "split"], inst_rows),
        _write_csv(d / "e.csv", ["basket_id", "item_id"], baskets),
        test,
        d,
    )


def _pe_by_id(spark, paths):
    nodes = storage.read_table(spark, paths, storage.NODES)
    ids = {r.node_index: (r.kind, r.node_id) for r in nodes.collect()}
    pe = storage.read_table(spark, paths, storage.PRETRAIN_EDGES)
    return {(r.variant, r.block, ids[r.src_index], ids[r.dst_index]) for r in pe.collect()}


def _pretrain_texts_by_id(spark, paths):
    """(kind, node_id) -> text of every node that B_pre touches: with the edges, everything the
    pretrain stage trains g and the tf-idf of Phi_pre from."""
    from pyspark.sql import functions as F

    pe = storage.read_table(spark, paths, storage.PRETRAIN_EDGES)
    used = {
        r[0]
        for r in pe.select(F.col(storage.SRC_INDEX))
        .union(pe.select(storage.DST_INDEX))
        .distinct()
        .collect()
    }
    return {
        (r.kind, r.node_id): r.text
        for r in storage.read_table(spark, paths, storage.NODES).collect()
        if r.node_index in used
    }


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_graph_labels_leak_guard(spark, tmp_path, strategy):
    """task.labels=graph: removing every test row leaves pretrain_edges unchanged (as node_id
    pairs), even with a binding basket cap and a count-dependent measure, and so g's training
    data: the same edges between the same nodes with the same texts."""
    runs = {}
    texts = {}
    for drop in (False, True):
        inst, ev, test, d = _leak_inputs(tmp_path, drop)
        cfg = config_from_dict(
            {
                "output": str(d / "run"),
                "side_info": "both",
                "task": {"labels": "graph"},
                "graph": {
                    "min_count": 2,
                    "max_basket_size": 4,
                    "measure": "jaccard",
                    "min_score": 0.05,
                    "strategy": strategy,
                },
                "input": {"instances": inst, "events": ev},
            }
        )
        ctx, stats = _run(spark, cfg)
        assert stats["pair_plan"]["strategy"] == strategy
        runs[drop] = (_pe_by_id(spark, ctx.paths), ctx, stats)
        texts[drop] = _pretrain_texts_by_id(spark, ctx.paths)
    full, ctx, stats = runs[False]
    assert full == runs[True][0]
    assert texts[False] == texts[True] and len(texts[False]) > 0
    assert runs[True][2]["inputs"]["events"]["reasons"]["unknown_item"] > 0
    assert {b for _, b, _, _ in full} == {"B", "BT", "I_inst", "I_label", "A"}
    touched = {nid for _, _, s, t in full for _, nid in (s, t)}
    assert not touched & test, "an edge touches a test item"
    # the guard matters here: the all-items graph restricted to train items differs from A
    i2i_all = _undirected(storage.read_table(spark, ctx.paths, storage.I2I_EDGES))
    naive_a = {(a, b) for a, b in i2i_all if a not in test and b not in test}
    a_block = {tuple(sorted((s[1], t[1]))) for v, b, s, t in full if v == "pina" and b == "A"}
    assert naive_a != a_block
    # test instances do get graph labels (train items only) in the downstream target
    nodes = {r.node_index: r for r in storage.read_table(spark, ctx.paths, storage.NODES).collect()}
    y = [
        (nodes[r.instance_index], nodes[r.label_index])
        for r in storage.read_table(spark, ctx.paths, storage.INSTANCE_LABELS).collect()
    ]
    assert any(i.split == "test" for i, _ in y)
    assert all(lab.node_id not in test and lab.kind == "label" for _, lab in y)


def test_graph_labels_empty_graph_is_a_clear_error(spark, tmp_path):
    inst = _write_csv(
        tmp_path / "i.csv",
        ["instance_id", "text", "split"],
        [["a", "A", "train"], ["b", "B", "train"]],
    )
    ev = _write_csv(tmp_path / "e.csv", ["basket_id", "item_id"], [["o1", "a"], ["o1", "b"]])
    cfg = config_from_dict(
        {
            "output": str(tmp_path / "run"),
            "task": {"labels": "graph"},
            "graph": {"min_count": 2},
            "input": {"instances": inst, "events": ev},
        }
    )
    with pytest.raises(storage.InputError, match=r"no graph labels.*graph\.min_count=2"):
        _run(spark, cfg)
    paths = storage.RunPaths(cfg.output)
    assert storage.is_complete(spark, paths.table(f"{storage.QUARANTINE}/events"))
    assert not storage.is_complete(spark, paths.table(storage.NODES))


def _table_rows(spark, paths, rel):
    df = storage.read_table(spark, paths, rel)
    cols = sorted(df.columns)
    types = [f"{c}:{df.schema[c].dataType.simpleString()}" for c in cols]
    return types, sorted(tuple(r[c] for c in cols) for r in df.collect())


@pytest.mark.slow
@pytest.mark.parametrize("side_info", ["label_text", "naive", "both"])
def test_tables_built_on_the_driver_equal_the_spark_path(spark, tmp_path, monkeypatch, side_info):
    """With the inputs validated on the driver (collected_tables) and labels given, nodes,
    graph/instance_labels and B_pre (label_text, naive; both keeps Spark's B_pre, with the
    driver's nodes) are built by collected_graph; the published tables equal the Spark path's
    row for row, ids ordered by their UTF-8 bytes ('Z' < 'a' < 'é' < '中')."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rnd = random.Random(5)
    ids = [f"{p}{k}" for p in ("Z", "a", "\u00e9", "\u4e2d", "i") for k in range(12)]
    inst = [(i, f"text {i}", rnd.choice(["train", "train", "test", None])) for i in ids]
    inst.append(("bad", "", "train"))  # quarantined
    labs = [(f"L{k}", f"label {k}") for k in range(9)] + [("\u00e9l", "accent"), ("Al", "A")]
    pairs = {(rnd.choice(ids + ["nope"]), rnd.choice([lab for lab, _ in labs])) for _ in range(150)}
    events = [(f"b{rnd.randrange(40)}", rnd.choice(ids)) for _ in range(400)]
    d = tmp_path / "in"
    d.mkdir()
    files = {}
    for name, cols, rows in (
        ("instances", ["instance_id", "text", "split"], inst),
        ("labels", ["label_id", "text"], labs),
        ("instance_labels", ["instance_id", "label_id"], sorted(pairs)),
        ("events", ["basket_id", "item_id"], events),
    ):
        files[name] = str(d / f"{name}.parquet")
        pq.write_table(pa.table({c: [r[k] for r in rows] for k, c in enumerate(cols)}), files[name])
    got = {}
    for mode in ("driver", "spark"):
        if mode == "spark":
            monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_ROWS", 0)
        cfg = config_from_dict(
            {
                "output": str(tmp_path / mode),
                "side_info": side_info,
                "graph": {"min_count": 2},
                "input": files,
            }
        )
        ctx, stats = _run(spark, cfg)
        assert stats["built_on_driver"] is (mode == "driver")
        got[mode] = {
            rel: _table_rows(spark, ctx.paths, rel)
            for rel in (storage.NODES, storage.INSTANCE_LABELS, storage.PRETRAIN_EDGES)
        }
        got[mode]["stats"] = {k: stats[k] for k in ("nodes", "instance_labels", "pretrain_edges")}
    assert got["driver"] == got["spark"]
    nodes = got["driver"][storage.NODES][1]
    assert [r[1] for r in sorted(nodes, key=lambda r: r[2])][:3] == ["Z0", "Z1", "Z10"]
    assert got["driver"]["stats"]["pretrain_edges"]["pina"]["B"] > 20
