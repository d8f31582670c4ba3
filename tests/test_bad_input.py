"""End-to-end bad-input catalogue through the graph stage
(``pipeline.run_pipeline(spark, cfg, ["graph"])``): every defect gives either a clear error or
quarantined rows with a reason, and every input row is accounted for:
rows in = rows used + rows quarantined, checked from the manifest stats, the published
``quarantine/<table>`` tables and the published outputs (``nodes``, ``graph/*``).

One module-scoped "dirty" run carries all the row-level defects (each test checks one of them);
the cases that must stop the run (missing column, wrong type, missing path, empty table, a
stray non-Parquet file in a Parquet folder, all rows bad, an empty graph with graph labels) are
separate, cheap runs that fail before the heavy work.
"""

import hashlib
import itertools
from collections import Counter, defaultdict

import pytest

from pina_spark import storage
from pina_spark.config import STAGE_NAMES, config_from_dict
from pina_spark.orchestration import pipeline
from pina_spark.storage.manifest import Manifest

MAX_BASKET = 50
N_BULK = 3000


# --------------------------------------------------------------------------- data
def _csv(path, header, lines):
    data = (header + "\n").encode() + b"".join(
        (ln if isinstance(ln, bytes) else ln.encode("utf-8")) + b"\n" for ln in lines
    )
    with open(path, "wb") as fh:
        fh.write(data)
    return str(path)


GOOD_INSTANCES = [
    f"i{n:02d},good product {n},{'test' if n > 10 else 'train'}" for n in range(1, 13)
]
BAD_INSTANCES = {  # line -> expected reason
    "i03,zzz later duplicate,train": "duplicate_id",
    ",null id,train": "missing_id",
    '"",quoted empty id,train': "missing_id",
    '"   ",blank id,train': "missing_id",
    b"i13,caf\xe9 latin-1 bytes,train": "invalid_utf8",
    "i14,,train": "missing_text",
    'i15,"   ",train': "missing_text",
    "i16,some text,validation": "invalid_split",
    'i17,"text",train,extra field': "unparseable",
}
BULK_INSTANCES = [f"bulk{n:04d},bulk item {n},train" for n in range(N_BULK)]

GOOD_LABELS = [f"L{n},label text {n}" for n in range(1, 5)]
BAD_LABELS = {
    "L5,": "missing_text",
    'L6,"  "': "missing_text",
    "L2,zzz duplicate label": "duplicate_id",
}

GOOD_PAIRS = [f"i{n:02d},L{1 + n % 4}" for n in range(1, 13)] + ["i01,L1", "bulk0001,L3"]
BAD_PAIRS = {
    "i01,L2": "duplicate_pair",  # i01 -> L2 is already in GOOD_PAIRS
    "i01,L9": "unknown_label",
    "i02,L5": "unknown_label",  # L5 has no text
    "i99,L1": "unknown_instance",
    "i13,L1": "unknown_instance",  # i13: bad UTF-8
    "i14,L1": "unknown_instance",
    ",L1": "missing_id",
}

NAN, INF = float("nan"), float("inf")
GOOD_EVENTS = [
    ("b1", "i01", None, 1.0),
    ("b1", "i02", None, 1.0),
    ("b1", "i03", None, None),
    ("b2", "i01", None, 1.0),
    ("b2", "i02", None, 2.0),
    ("b2", "i04", None, 1.0),
    ("b3", "i02", None, 1.0),
    ("b3", "i03", None, 1.0),
    ("b4", "i05", None, 1.0),  # basket of one item
    ("b5", "i06", "2026-01-01", 1.0),
    ("b6", "i07", None, 1.0),
    ("b8", "i01", None, 1.0),
]
BAD_EVENTS = [
    (("b5", "i06", "2026-01-02", 1.0), "duplicate_event"),  # later duplicate
    (("b6", "i08", None, NAN), "invalid_weight"),
    (("b7", "i09", None, INF), "invalid_weight"),
    (("b7", "i10", None, -INF), "invalid_weight"),
    (("b7", "i11", None, -1.0), "invalid_weight"),
    (("b8", "ghost-1", None, 1.0), "unknown_item"),
    ((None, "i01", None, 1.0), "missing_basket"),
    (("b9", None, None, 1.0), "missing_item"),
    (("  ", "i02", None, 1.0), "missing_basket"),
]
BIG_EVENTS = [(b, f"bulk{n:04d}", None, 1.0) for b in ("big1", "big2") for n in range(N_BULK)]


def _expected_reasons(bad):
    return dict(Counter(bad.values()))


def _reference_edges(events):
    """Python reference of graph.i2i_edges with min_count=1, measure=count: clean events ->
    distinct items per basket -> cap by sha1(basket \\x1f item) then item -> pair counts."""
    baskets = defaultdict(set)
    for b, i, _, _ in events:
        baskets[b].add(i)
    counts = Counter()
    capped = 0
    for b, items in baskets.items():
        if len(items) > MAX_BASKET:
            capped += 1
        kept = sorted(items, key=lambda i: (hashlib.sha1(f"{b}\x1f{i}".encode()).hexdigest(), i))[
            :MAX_BASKET
        ]
        for a, c in itertools.combinations(sorted(kept), 2):
            counts[(a, c)] += 1
    edges = {}
    for (a, c), n in counts.items():
        edges[(a, c)] = n
        edges[(c, a)] = n
    return edges, baskets, capped


def _cfg(tmp_path, inputs, **extra):
    d = {
        "output": str(tmp_path / "run"),
        "input": inputs,
        "side_info": "both",
        "graph": {"min_count": 1, "max_basket_size": MAX_BASKET},
    }
    for k, v in extra.items():
        d[k] = v if not isinstance(v, dict) else {**d.get(k, {}), **v}
    return config_from_dict(d)


def _graph_entry(cfg):
    return Manifest(storage.RunPaths(cfg.output, cfg.run.run_date).manifest).stage("graph")


def _small_inputs(tmp_path, spark, **replace):
    """A small clean data set (CSV); ``replace`` overrides single inputs."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    inputs = {
        "instances": _csv(d / "instances.csv", "instance_id,text,split", GOOD_INSTANCES),
        "labels": _csv(d / "labels.csv", "label_id,text", GOOD_LABELS),
        "instance_labels": _csv(
            d / "il.csv", "instance_id,label_id", [f"i{n:02d},L{1 + n % 4}" for n in range(1, 13)]
        ),
        "events": _csv(
            d / "events.csv", "basket_id,item_id", [f"{b},{i}" for b, i, _, _ in GOOD_EVENTS]
        ),
    }
    inputs.update(replace)
    return inputs


# --------------------------------------------------------------------------- the dirty run
@pytest.fixture(scope="module")
def dirty(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dirty")
    inst_lines = GOOD_INSTANCES + list(BAD_INSTANCES) + BULK_INSTANCES
    inputs = {
        "instances": _csv(tmp / "instances.csv", "instance_id,text,split", inst_lines),
        "labels": _csv(tmp / "labels.csv", "label_id,text", GOOD_LABELS + list(BAD_LABELS)),
        "instance_labels": _csv(
            tmp / "il.csv", "instance_id,label_id", GOOD_PAIRS + list(BAD_PAIRS)
        ),
    }
    ev_rows = GOOD_EVENTS + [r for r, _ in BAD_EVENTS] + BIG_EVENTS
    ev_uri = str(tmp / "events.parquet")
    spark.createDataFrame(ev_rows, storage.schema("events")).repartition(3).write.parquet(ev_uri)
    inputs["events"] = ev_uri
    cfg = _cfg(tmp, inputs)
    result = pipeline.run_pipeline(spark, cfg, ["graph"])
    paths = storage.RunPaths(cfg.output)
    entry = _graph_entry(cfg)
    return {
        "cfg": cfg,
        "paths": paths,
        "entry": entry,
        "result": result,
        "stats": entry["stats"],
        "rows_in": {
            "instances": len(inst_lines),
            "labels": len(GOOD_LABELS) + len(BAD_LABELS),
            "instance_labels": len(GOOD_PAIRS) + len(BAD_PAIRS),
            "events": len(ev_rows),
        },
    }


def _quarantine(spark, dirty, table):
    return storage.read_table(spark, dirty["paths"], f"{storage.QUARANTINE}/{table}")


def _reasons_of(spark, dirty, table):
    q = _quarantine(spark, dirty, table)
    return dict(Counter(r[storage.REASON] for r in q.select(storage.REASON).collect()))


@pytest.mark.slow
def test_dirty_run_completes(dirty):
    assert dirty["result"]["graph"] == "ran"
    assert dirty["entry"]["status"] == "complete"


@pytest.mark.slow
@pytest.mark.parametrize("table", ["instances", "labels", "instance_labels", "events"])
def test_every_row_accounted_for(spark, dirty, table):
    st = dirty["stats"]["inputs"][table]
    # rows in: the number of rows we wrote, independently of the stage's own count
    assert st["rows_in"] == dirty["rows_in"][table]
    assert st["rows_in"] == st["rows_used"] + st["rows_quarantined"]
    q = _quarantine(spark, dirty, table)
    assert q.count() == st["rows_quarantined"]
    assert _reasons_of(spark, dirty, table) == st["reasons"]
    assert q.filter(q[storage.REASON].isNull()).count() == 0


@pytest.mark.slow
def test_used_rows_match_published_outputs(spark, dirty):
    st = dirty["stats"]["inputs"]
    nodes = storage.read_table(spark, dirty["paths"], storage.NODES)
    kinds = Counter(r[storage.KIND] for r in nodes.select(storage.KIND).collect())
    assert kinds[storage.KIND_INSTANCE] == st["instances"]["rows_used"]
    assert kinds[storage.KIND_LABEL] == st["labels"]["rows_used"]
    il = storage.read_table(spark, dirty["paths"], storage.INSTANCE_LABELS)
    assert il.count() == st["instance_labels"]["rows_used"]
    # node indices are 0..n-1 without gaps or repeats
    idx = sorted(r[0] for r in nodes.select(storage.NODE_INDEX).collect())
    assert idx == list(range(len(idx)))


@pytest.mark.slow
def test_null_empty_blank_and_duplicate_ids(spark, dirty):
    reasons = _reasons_of(spark, dirty, "instances")
    assert reasons.get("missing_id") == 3
    assert reasons.get("duplicate_id") == 1
    assert _reasons_of(spark, dirty, "labels").get("duplicate_id") == 1
    nodes = storage.read_table(spark, dirty["paths"], storage.NODES)
    by_id = {(r[storage.KIND], r[storage.NODE_ID]): r[storage.TEXT] for r in nodes.collect()}
    # the duplicate is resolved deterministically: the smallest text wins
    assert by_id[(storage.KIND_INSTANCE, "i03")] == "good product 3"
    assert by_id[(storage.KIND_LABEL, "L2")] == "label text 2"
    assert not any(nid is None or not nid.strip() for _, nid in by_id)


@pytest.mark.slow
def test_non_utf8_and_empty_text(spark, dirty):
    reasons = _reasons_of(spark, dirty, "instances")
    assert reasons.get("invalid_utf8") == 1
    assert reasons.get("missing_text") == 2
    q = _quarantine(spark, dirty, "instances")
    assert {
        r[storage.INSTANCE_ID] for r in q.filter(q[storage.REASON] == "missing_text").collect()
    } == {
        "i14",
        "i15",
    }


@pytest.mark.slow
def test_unparseable_and_invalid_split_rows(spark, dirty):
    reasons = _reasons_of(spark, dirty, "instances")
    assert reasons.get("unparseable") == 1 and reasons.get("invalid_split") == 1
    q = _quarantine(spark, dirty, "instances")
    raw = [r[storage.CORRUPT] for r in q.filter(q[storage.REASON] == "unparseable").collect()]
    assert raw == ['i17,"text",train,extra field']


@pytest.mark.slow
def test_instance_reasons_exact(spark, dirty):
    assert _reasons_of(spark, dirty, "instances") == _expected_reasons(BAD_INSTANCES)


@pytest.mark.slow
def test_labels_with_no_text(spark, dirty):
    assert _reasons_of(spark, dirty, "labels") == _expected_reasons(BAD_LABELS)


@pytest.mark.slow
def test_instance_labels_pointing_at_unknown_labels_or_instances(spark, dirty):
    expected = _expected_reasons(BAD_PAIRS)
    assert _reasons_of(spark, dirty, "instance_labels") == expected


@pytest.mark.slow
def test_duplicate_events_and_nan_inf_weights_and_unknown_items(spark, dirty):
    expected = dict(Counter(reason for _, reason in BAD_EVENTS))
    assert _reasons_of(spark, dirty, "events") == expected
    q = _quarantine(spark, dirty, "events")
    dup = q.filter(q[storage.REASON] == "duplicate_event").collect()
    # the earliest event_time is kept, the later duplicate quarantined
    assert [(r[storage.BASKET_ID], r[storage.EVENT_TIME]) for r in dup] == [("b5", "2026-01-02")]
    w = sorted(
        str(r[storage.WEIGHT]) for r in q.filter(q[storage.REASON] == "invalid_weight").collect()
    )
    assert w == sorted(["nan", "inf", "-inf", "-1.0"])


@pytest.mark.slow
def test_i2i_edges_match_reference_with_big_baskets_capped(spark, dirty):
    """Baskets of one item contribute nothing; baskets of 3000 items are capped to
    max_basket_size by the documented hash rule (deterministic: equal to a Python reference
    that knows nothing about partitions); duplicates and bad rows do not inflate counts."""
    edges, baskets, capped = _reference_edges(GOOD_EVENTS + BIG_EVENTS)
    got = {
        (r[storage.SRC_ID], r[storage.DST_ID]): r[storage.COUNT]
        for r in storage.read_table(spark, dirty["paths"], storage.I2I_EDGES).collect()
    }
    assert got == edges
    st = dirty["stats"]["baskets"]
    assert st["baskets_capped"] == capped == 2
    assert st["baskets_one_item"] == sum(1 for s in baskets.values() if len(s) == 1) == 4
    assert st["baskets_used"] == sum(1 for s in baskets.values() if len(s) >= 2)
    assert dirty["stats"]["i2i_edges"] == len(edges)


@pytest.mark.slow
def test_quarantine_tables_written_for_every_input(spark, dirty):
    for t in ("instances", "labels", "instance_labels", "events"):
        assert storage.is_complete(spark, dirty["paths"].table(f"{storage.QUARANTINE}/{t}"))
        cols = _quarantine(spark, dirty, t).columns
        assert storage.REASON in cols and storage.CORRUPT in cols


# --------------------------------------------------------------------------- clear errors
def _assert_failed(spark, cfg, exc, *needles):
    with pytest.raises(exc) as e:
        pipeline.run_pipeline(spark, cfg, ["graph"])
    msg = str(e.value)
    for n in needles:
        assert n in msg, f"{n!r} not in error message: {msg}"
    entry = _graph_entry(cfg)
    if entry is not None:  # a failed stage is recorded as failed, never complete
        assert entry["status"] == "failed"
    assert not storage.is_complete(spark, storage.RunPaths(cfg.output).table(storage.NODES))
    return msg


def test_missing_column_is_a_clear_error(spark, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    ev = _csv(d / "ev.csv", "basket_id,product", ["b1,i01"])
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, events=ev))
    _assert_failed(spark, cfg, storage.InputError, "'item_id'", ev)


def test_wrong_type_is_a_clear_error(spark, tmp_path):
    uri = str(tmp_path / "labels.parquet")
    spark.createDataFrame([(1, "a")], "label_id int, text string").write.parquet(uri)
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, labels=uri))
    _assert_failed(spark, cfg, storage.InputError, "'label_id'", uri)


def test_missing_input_path_is_a_clear_error(spark, tmp_path):
    missing = str(tmp_path / "no-such-dir" / "events.parquet")
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, events=missing))
    _assert_failed(spark, cfg, storage.InputError, missing, "does not exist")


def test_empty_input_table_is_a_clear_error(spark, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    empty = _csv(d / "empty_labels.csv", "label_id,text", [])
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, labels=empty))
    _assert_failed(spark, cfg, storage.InputError, "no rows", empty)


def test_empty_parquet_input_table_is_a_clear_error(spark, tmp_path):
    uri = str(tmp_path / "inst.parquet")
    spark.createDataFrame([], storage.schema("instances")).write.parquet(uri)
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, instances=uri))
    _assert_failed(spark, cfg, storage.InputError, "no rows", uri)


def test_parquet_folder_with_a_stray_file_is_a_clear_error_naming_it(spark, tmp_path):
    """A Parquet input folder that also holds a ``README.txt``: the error names that file (not
    "is empty or not a Parquet table")."""
    folder = tmp_path / "labels.parquet"
    rows = [(f"L{n}", f"label text {n}") for n in range(1, 5)]
    spark.createDataFrame(rows, storage.schema("labels")).write.parquet(str(folder))
    (folder / "README.txt").write_text("the labels of the catalogue\n")
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, labels=str(folder)))
    msg = _assert_failed(
        spark, cfg, storage.InputError, "README.txt", "is not a Parquet file", str(folder)
    )
    assert "is empty or not a Parquet table" not in msg


def test_all_instances_quarantined_is_a_clear_error(spark, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    bad = _csv(d / "inst.csv", "instance_id,text,split", ["i01,,train", ",x,train"])
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, instances=bad))
    _assert_failed(spark, cfg, storage.InputError, "quarantined")
    # the quarantine that explains it is published
    q = storage.read_table(spark, storage.RunPaths(cfg.output), f"{storage.QUARANTINE}/instances")
    assert q.count() == 2


# --------------------------------------------------------------------------- empty graph
@pytest.mark.slow
def test_threshold_leaving_empty_graph_gives_documented_valid_output(spark, tmp_path):
    """side_info=i2i and a min_count no pair reaches: i2i_edges is published empty (with its
    schema), there is no A block, and every train instance is still a row of B_pre through its
    I_inst edge (the documented fallback)."""
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark), side_info="i2i", graph={"min_count": 100})
    assert pipeline.run_pipeline(spark, cfg, ["graph"])["graph"] == "ran"
    paths = storage.RunPaths(cfg.output)
    edges = storage.read_table(spark, paths, storage.I2I_EDGES)
    assert edges.count() == 0 and edges.columns == [
        storage.SRC_ID,
        storage.DST_ID,
        storage.COUNT,
        storage.SCORE,
    ]
    assert _graph_entry(cfg)["stats"]["i2i_edges"] == 0
    pe = storage.read_table(spark, paths, storage.PRETRAIN_EDGES)
    pina = pe.filter(pe[storage.VARIANT] == "pina").collect()
    assert {r[storage.BLOCK] for r in pina} == {"I_inst"}
    nodes = storage.read_table(spark, paths, storage.NODES)
    train = {
        r[storage.NODE_INDEX]
        for r in nodes.filter("kind = 'instance' and split = 'train'").collect()
    }
    assert {r[storage.SRC_INDEX] for r in pina} == train
    assert all(r[storage.SRC_INDEX] == r[storage.DST_INDEX] for r in pina)


@pytest.mark.slow
def test_threshold_leaving_no_graph_labels_is_a_clear_error(spark, tmp_path):
    """task.labels=graph with a threshold that removes every edge leaves no labels at all:
    nothing can be learnt, so the graph stage must stop with an error that says so (instead of
    publishing a nodes table without labels that fails later in pretrain)."""
    cfg = _cfg(
        tmp_path,
        _small_inputs(tmp_path, spark),
        side_info="label_text",
        task={"labels": "graph"},
        graph={"min_count": 100},
    )
    msg = _assert_failed(spark, cfg, (storage.InputError, ValueError), "label")
    assert "min_count" in msg or "empty" in msg.lower() or "no edge" in msg.lower()


# --------------------------------------------------------------------------- quality gates
@pytest.mark.slow
def test_item_ids_matching_no_instance_raise_citing_the_unknown_item_rate(spark, tmp_path):
    """The most common real failure: event item ids zero-padded differently from the instance
    ids (``i1`` vs ``i01``). Every event is ``unknown_item``; instead of publishing an empty
    graph as valid, the graph stage stops with an error citing the rate (and what to check)."""
    d = tmp_path / "in"
    d.mkdir()
    ev = _csv(
        d / "padded_events.csv",
        "basket_id,item_id",
        [f"{b},i{int(i[1:])}" for b, i, _, _ in GOOD_EVENTS],
    )
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, events=ev))
    msg = _assert_failed(
        spark,
        cfg,
        storage.InputError,
        "unknown_item 100.0%",
        "quality.max_quarantined_fraction",
        "zero padding",
    )
    assert "events:" in msg
    q = storage.read_table(spark, storage.RunPaths(cfg.output), f"{storage.QUARANTINE}/events")
    assert q.count() == len(GOOD_EVENTS)  # the quarantine that explains it is published
    # a per-reason limit tighter than the table-wide one
    few = _csv(
        d / "few.csv",
        "basket_id,item_id",
        [f"{b},{i}" for b, i, _, _ in GOOD_EVENTS] + ["b9,ghost"],
    )
    cfg = _cfg(
        tmp_path,
        _small_inputs(tmp_path, spark, events=few),
        quality={"max_reason_fraction": {"events.unknown_item": 0.01}},
    )
    _assert_failed(spark, cfg, storage.InputError, "events.unknown_item: 1 of 13 rows")


def _jsonl(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.slow
def test_ids_with_control_characters_or_unicode_spaces_are_quarantined(spark, tmp_path):
    """``\\r``, ``\\n``, a tab, a non-breaking space or a zero-width space inside an id make it
    ``invalid_id`` (one-id-per-line exports would break, and the id never matches its plain
    twin); ids made only of such characters are ``missing_id`` (F.trim strips ASCII spaces
    only). Texts longer than quality.max_text_chars are ``text_too_long``."""
    d = tmp_path / "in"
    d.mkdir()
    bad_ids = {
        "i20\r": "invalid_id",
        "i21\n": "invalid_id",
        "i\t22": "invalid_id",
        "i23\u00a0": "invalid_id",
        "i\u200b24": "invalid_id",
        "\u00a0": "missing_id",
        "\t \u3000": "missing_id",
    }
    rows = [
        {"instance_id": f"i{n:02d}", "text": f"good product {n}", "split": "train"}
        for n in range(1, 13)
    ]
    rows += [{"instance_id": i, "text": "some text", "split": "train"} for i in bad_ids]
    rows += [{"instance_id": "i30", "text": "x" * 101, "split": "train"}]
    inst = _jsonl(d / "instances.jsonl", rows)
    labels = _jsonl(
        d / "labels.jsonl",
        [{"label_id": f"L{n}", "text": f"label {n}"} for n in range(1, 5)]
        + [{"label_id": "L\u00a05", "text": "nbsp label"}],
    )
    ev = _jsonl(
        d / "events.jsonl",
        [{"basket_id": b, "item_id": i} for b, i, _, _ in GOOD_EVENTS]
        + [{"basket_id": "b9", "item_id": "i01\r"}],
    )
    cfg = _cfg(
        tmp_path,
        _small_inputs(tmp_path, spark, instances=inst, labels=labels, events=ev),
        quality={"max_text_chars": 100},
    )
    assert pipeline.run_pipeline(spark, cfg, ["graph"])["graph"] == "ran"
    paths = storage.RunPaths(cfg.output)
    got = {
        r[storage.INSTANCE_ID]: r[storage.REASON]
        for r in storage.read_table(spark, paths, f"{storage.QUARANTINE}/instances").collect()
    }
    assert got == {**bad_ids, "i30": "text_too_long"}
    labels_q = {
        r[storage.LABEL_ID]: r[storage.REASON]
        for r in storage.read_table(spark, paths, f"{storage.QUARANTINE}/labels").collect()
    }
    assert labels_q == {"L\u00a05": "invalid_id"}
    ev_q = [
        (r[storage.ITEM_ID], r[storage.REASON])
        for r in storage.read_table(spark, paths, f"{storage.QUARANTINE}/events").collect()
    ]
    assert ev_q == [("i01\r", "invalid_id")]
    stats = _graph_entry(cfg)["stats"]["inputs"]["instances"]
    assert stats["reasons"] == {"invalid_id": 5, "missing_id": 2, "text_too_long": 1}
    node_ids = {
        r[storage.NODE_ID] for r in storage.read_table(spark, paths, storage.NODES).collect()
    }
    assert not any(c in i for i in node_ids for c in "\r\n\t\u00a0\u200b")


@pytest.mark.slow
def test_bytes_that_are_not_utf8_reach_the_quarantine_escaped_and_readable(spark, tmp_path):
    """A JSONL line holding bytes that are not UTF-8 (Spark's JSON parser refuses the line) and
    Parquet strings holding such bytes (never decoded on read) are quarantined as
    ``invalid_utf8``; the published ``quarantine/<table>`` reads with pandas and with pyarrow
    (``to_pandas``) and holds each such value escaped as Python's backslashreplace writes it
    (``b"i13\\xff"`` -> ``"i13\\\\xff"``); the clean rows go on to ``nodes``."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "in"
    d.mkdir()
    good = [ln.split(",") for ln in GOOD_INSTANCES]
    ids = [i.encode() for i, _, _ in good] + [b"i13\xff", b"i14"]
    texts = [t.encode() for _, t, _ in good] + [b"fine", b"caf\xe9 au lait"]
    inst = str(d / "instances.parquet")
    pq.write_table(
        pa.table(
            {
                n: pa.array(v, pa.binary()).view(pa.string())
                for n, v in (("instance_id", ids), ("text", texts))
            }
        ),
        inst,
    )
    labels = d / "labels.jsonl"
    labels.write_bytes(
        b"".join(
            f'{{"label_id": "{i}", "text": "{t}"}}\n'.encode()
            for i, t in (ln.split(",") for ln in GOOD_LABELS)
        )
        + b'{"label_id": "L5\xff", "text": "bad bytes"}\n'
    )
    events = d / "events.jsonl"
    events.write_bytes(
        b"".join(
            f'{{"basket_id": "{b}", "item_id": "{i}"}}\n'.encode() for b, i, _, _ in GOOD_EVENTS
        )
        + b'{"basket_id": "b\xfe", "item_id": "i01"}\n'
    )
    cfg = _cfg(
        tmp_path,
        _small_inputs(tmp_path, spark, instances=inst, labels=str(labels), events=str(events)),
    )
    assert pipeline.run_pipeline(spark, cfg, ["graph"])["graph"] == "ran"
    paths = storage.RunPaths(cfg.output)
    want = {
        "instances": {(storage.INSTANCE_ID, "i13\\xff"), (storage.TEXT, "caf\\xe9 au lait")},
        "labels": {(storage.CORRUPT, '{"label_id": "L5\\xff", "text": "bad bytes"}')},
        "events": {(storage.CORRUPT, '{"basket_id": "b\\xfe", "item_id": "i01"}')},
    }
    for table, values in want.items():
        path = paths.table(f"{storage.QUARANTINE}/{table}")
        by_arrow = pq.read_table(path).to_pandas()
        assert pd.read_parquet(path).equals(by_arrow)
        assert set(by_arrow[storage.REASON]) == {"invalid_utf8"}, table
        assert values <= {(c, v) for c in by_arrow.columns for v in by_arrow[c] if v is not None}
        stats = _graph_entry(cfg)["stats"]["inputs"][table]
        assert stats["reasons"] == {"invalid_utf8": len(values)}, table
    nodes = storage.read_table(spark, paths, storage.NODES)
    assert nodes.filter(nodes[storage.KIND] == storage.KIND_INSTANCE).count() == len(good)


# --------------------------------------------------------------------------- nothing to learn
def _instances_all(tmp_path, split):
    rows = [r.rsplit(",", 1)[0] + f",{split}" for r in GOOD_INSTANCES]
    return _csv(tmp_path / f"inst_{split}.csv", "instance_id,text,split", rows)


def test_no_train_instance_is_a_clear_error_before_any_table(spark, tmp_path):
    """Every instance ``test``: the graph stage stops with exit 2's error after the quarantine,
    publishing nothing (it failed on an empty B_pre with Spark's raw schema error)."""
    inst = _instances_all(tmp_path, "test")
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, instances=inst))
    _assert_failed(spark, cfg, storage.InputError, "none of the", "rows used is a train instance")


def test_labels_of_test_instances_only_is_a_clear_error_at_the_graph_stage(spark, tmp_path):
    """instance_labels of test instances only: the graph stage says so (the pretrain stage
    said B_pre had no edges of pina_naive and to rerun the graph stage, which cannot help)."""
    test_ids = [r.split(",", 1)[0] for r in GOOD_INSTANCES if r.endswith(",test")]
    il = _csv(tmp_path / "il_test.csv", "instance_id,label_id", [f"{i},L1" for i in test_ids])
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, instance_labels=il), side_info="label_text")
    with pytest.raises(storage.InputError) as e:
        pipeline.run_pipeline(spark, cfg, ["graph"])
    assert "no train instance has a label" in str(e.value)
    assert _graph_entry(cfg)["status"] == "failed"


def test_no_test_instance_stops_a_run_that_trains_before_the_vectorizer(spark, tmp_path):
    """No split column: every instance is train. The stages through aggregate can run (the
    features of every product); a run naming train or evaluate stops after the graph stage
    instead of failing at train after five stages."""
    inst = _csv(
        tmp_path / "inst_nosplit.csv",
        "instance_id,text",
        [r.rsplit(",", 1)[0] for r in GOOD_INSTANCES],
    )
    cfg = _cfg(tmp_path, _small_inputs(tmp_path, spark, instances=inst), side_info="label_text")
    through_train = list(STAGE_NAMES[: STAGE_NAMES.index("train") + 1])
    # the pre-flight of `check` and `run` sees the header: nothing starts
    from pina_spark.cli.check import require_inputs

    with pytest.raises(storage.InputError) as e:
        require_inputs(cfg, through_train)
    assert f"{inst}: it has no split column, so every instance is train" in str(e.value)
    require_inputs(cfg, list(STAGE_NAMES[: STAGE_NAMES.index("aggregate") + 1]))  # features
    # past the pre-flight (a run that calls the pipeline itself), the graph stage's nodes say it
    with pytest.raises(storage.InputError) as e:
        pipeline.run_pipeline(spark, cfg, through_train)
    assert "no instance kept by the graph stage has split='test'" in str(e.value)
    m = Manifest(storage.RunPaths(cfg.output).manifest)
    assert m.stage("graph")["status"] == "complete" and m.stage("vectorizer") is None
    assert pipeline.run_pipeline(spark, cfg, ["graph"]) == {"graph": "skipped"}
    # a step of its own (the EMR step lists run one stage per command): stopped before it starts
    for step in (["train"], ["evaluate"]):
        with pytest.raises(storage.InputError, match="has split='test'"):
            pipeline.run_pipeline(spark, cfg, step)
        assert Manifest(storage.RunPaths(cfg.output).manifest).stage(step[0]) is None
