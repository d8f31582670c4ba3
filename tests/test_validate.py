"""Input validation: one small case per quarantine reason and per error, counts that add up."""

import json

import pytest

from pina_spark import storage, validate
from pina_spark.config import config_from_dict


def _csv(path, header, rows, encoding="utf-8"):
    """Write a CSV file; rows are lists of str/None (None -> empty field)."""
    import csv
    import io as _io

    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    with open(path, "wb") as fh:
        fh.write(buf.getvalue().encode(encoding))
    return str(path)


def _cfg(tmp_path, **inputs):
    extra = inputs.pop("_extra", {})
    return config_from_dict({"output": str(tmp_path / "run"), "input": inputs, **extra})


def _reasons(quarantine, key):
    return sorted(((r[key] or "<null>"), r[storage.REASON]) for r in quarantine.collect())


def _check_adds_up(stats):
    for name, s in stats.items():
        assert s["rows_in"] == s["rows_used"] + s["rows_quarantined"], name
        assert s["rows_quarantined"] == sum(s["reasons"].values()), name


def _base_files(d):
    inst = _csv(
        d / "instances.csv",
        ["instance_id", "text", "split"],
        [
            ["i1", "red apple", "train"],
            ["i2", "green pear", "test"],
            ["i3", "blue plum", None],  # null split -> train
            ["i4", "", "train"],  # missing_text
            ["i5", None, "train"],  # missing_text (null)
            [None, "no id", "train"],  # missing_id
            ["  ", "blank id", "train"],  # missing_id (blank)
            ["i6", "kiwi", "validation"],  # invalid_split
            ["i1", "red apple b", "train"],  # duplicate_id (i1 'red apple' < 'red apple b')
            ["i7", "melon", "train"],
        ],
    )
    lab = _csv(
        d / "labels.csv",
        ["label_id", "text"],
        [["l1", "fruit"], ["l2", "red things"], ["l3", None], ["l2", "zzz"], ["", "x"]],
    )
    il = _csv(
        d / "il.csv",
        ["instance_id", "label_id"],
        [
            ["i1", "l1"],
            ["i1", "l2"],
            ["i2", "l1"],
            ["i1", "l1"],  # duplicate_pair
            ["i4", "l1"],  # unknown_instance (i4 was quarantined)
            ["i9", "l1"],  # unknown_instance
            ["i3", "l3"],  # unknown_label (l3 quarantined)
            ["i3", "l9"],  # unknown_label
            ["i3", None],  # missing_id
        ],
    )
    return {"instances": inst, "labels": lab, "instance_labels": il}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("validate_base")


@pytest.fixture(scope="module")
def base_files(base_dir):
    return _base_files(base_dir)


@pytest.fixture(scope="module")
def validated(spark, base_dir, base_files):
    """ONE validation run over every table (keeps the suite fast)."""
    ev = _csv(
        base_dir / "events.csv",
        ["basket_id", "item_id", "event_time", "weight"],
        [
            ["b1", "i1", "2024-01-02", "1.0"],
            ["b1", "i2", "2024-01-01", None],
            ["b1", "i1", "2024-01-01", "2.0"],  # earlier duplicate: THIS one is kept
            ["b2", "i3", "t", "1"],  # basket of one item: used, not quarantined
            [None, "i1", "t", "1"],  # missing_basket
            ["b3", "", "t", "1"],  # missing_item
            ["b3", "i1", "t", "NaN"],  # invalid_weight
            ["b3", "i2", "t", "Infinity"],  # invalid_weight
            ["b3", "i3", "t", "-1"],  # invalid_weight
            ["b3", "i9", "t", "1"],  # unknown_item (no instance row)
            ["b3", "i4", "t", "1"],  # unknown_item (instance quarantined)
            ["b3", "i7", "t", "0"],  # zero weight is fine
        ],
    )
    fp = _csv(
        base_dir / "fp.csv",
        ["instance_id", "label_id"],
        [["i1", "l2"], ["i1", "l2"], [None, "l1"], ["i8", "l8"]],
    )
    cfg = config_from_dict(
        {"output": str(base_dir / "run"), "input": {**base_files, "events": ev, "filter_pairs": fp}}
    )
    result = validate.validate_inputs(spark, cfg)
    _check_adds_up(result.counts)
    return result.tables, result.quarantine, result.counts


@pytest.mark.slow
def test_instances_labels_pairs_reasons(validated):
    tables, quarantine, stats = validated
    assert sorted((r.instance_id, r.split) for r in tables["instances"].collect()) == [
        ("i1", "train"),
        ("i2", "test"),
        ("i3", "train"),
        ("i7", "train"),
    ]
    assert tables["instances"].filter("instance_id = 'i1'").first().text == "red apple"
    assert stats["instances"]["reasons"] == {
        "duplicate_id": 1,
        "invalid_split": 1,
        "missing_id": 2,
        "missing_text": 2,
    }
    assert stats["instances"]["rows_in"] == 10
    assert _reasons(quarantine["instances"], storage.INSTANCE_ID) == [
        ("  ", "missing_id"),
        ("<null>", "missing_id"),
        ("i1", "duplicate_id"),
        ("i4", "missing_text"),
        ("i5", "missing_text"),
        ("i6", "invalid_split"),
    ]
    assert stats["labels"]["reasons"] == {"duplicate_id": 1, "missing_id": 1, "missing_text": 1}
    assert sorted((r.label_id, r.text) for r in tables["labels"].collect()) == [
        ("l1", "fruit"),
        ("l2", "red things"),
    ]
    assert stats["instance_labels"]["reasons"] == {
        "duplicate_pair": 1,
        "missing_id": 1,
        "unknown_instance": 2,
        "unknown_label": 2,
    }
    assert sorted((r.instance_id, r.label_id) for r in tables["instance_labels"].collect()) == [
        ("i1", "l1"),
        ("i1", "l2"),
        ("i2", "l1"),
    ]
    assert set(quarantine["instances"].columns) >= {storage.REASON, storage.CORRUPT}


@pytest.mark.slow
def test_events_reasons(validated):
    tables, quarantine, stats = validated
    assert stats["events"]["rows_in"] == 12
    assert stats["events"]["reasons"] == {
        "duplicate_event": 1,
        "invalid_weight": 3,
        "missing_basket": 1,
        "missing_item": 1,
        "unknown_item": 2,
    }
    kept = sorted((r.basket_id, r.item_id, r.event_time) for r in tables["events"].collect())
    assert kept == [
        ("b1", "i1", "2024-01-01"),
        ("b1", "i2", "2024-01-01"),
        ("b2", "i3", "t"),
        ("b3", "i7", "t"),
    ]
    dup = quarantine["events"].filter("reason = 'duplicate_event'").first()
    assert dup.event_time == "2024-01-02"


def _event_rows(tbl_or_df):
    cols = ["basket_id", "item_id", "event_time", "weight", storage.CORRUPT, storage.REASON]
    if hasattr(tbl_or_df, "to_pylist"):
        rows = tbl_or_df.to_pylist()
    else:
        rows = [r.asDict() for r in tbl_or_df.collect()]
    return sorted(tuple(repr(r.get(c)) for c in cols) for r in rows)


@pytest.mark.slow
def test_events_validated_on_collection_equal_the_spark_path(spark, tmp_path, base_files):
    """The broadcast plan's one pass (collected_events) keeps and quarantines exactly the rows
    of the Spark path, with the same reasons: every rule, and duplicates ordered by event_time
    (nulls last) then weight (nulls last), on the fixed cases and on 600 seeded random rows."""
    import random

    rnd = random.Random(7)
    rows = [
        ["f1", "i1", None, "1"],  # null time loses to any time
        ["f1", "i1", "2024-05-01", "3"],
        ["f1", "i1", "2024-05-01", "2"],  # same time: smaller weight kept
        ["f1", "i2", "t", None],  # null weight loses to 0
        ["f1", "i2", "t", "0"],
        ["f1", "i3", "t", "1"],  # identical rows: one kept
        ["f1", "i3", "t", "1"],
        ["f1", "i3", "t", "1"],
        ["b2", "i9", "t", "1"],  # unknown
        ["b2", "i1", "t", "-2"],  # invalid weight, not a duplicate candidate
        ["b2", "i1", "t", "heavy"],  # unparseable
        [" ", "i1", "t", "1"],
    ]
    items = ["i1", "i2", "i3", "i7", "i9", "", None]
    for _ in range(600):
        rows.append(
            [
                rnd.choice(["b1", "b2", "b3", "b4", None]),
                rnd.choice(items),
                rnd.choice(["2024-01-01", "2024-01-02", "t", None]),
                rnd.choice(["1", "2", "0.5", None, "NaN", "-1"]),
            ]
        )
    ev = _csv(tmp_path / "events.csv", ["basket_id", "item_id", "event_time", "weight"], rows)
    cfg = _cfg(tmp_path, **base_files, events=ev)
    raw = validate.read_inputs(spark, cfg)
    by_spark = validate.validate_inputs(spark, cfg, raw=raw)
    by_arrow = validate.validate_inputs(
        spark, cfg, raw=raw, rows_in={"events": len(rows)}, on_driver=("events",)
    )
    t_spark, q_spark, st_spark = by_spark.tables, by_spark.quarantine, by_spark.counts
    t_arrow, q_arrow, st_arrow = by_arrow.tables, by_arrow.quarantine, by_arrow.counts
    _check_adds_up(st_arrow)
    assert st_arrow == st_spark
    reasons = st_arrow["events"]["reasons"]
    assert reasons["duplicate_event"] > 100 and reasons["unknown_item"] > 10, reasons
    assert {"unparseable", "invalid_weight", "missing_basket", "missing_item"} <= set(reasons)
    assert _event_rows(q_arrow["events"]) == _event_rows(q_spark["events"])
    clean_a = sorted(tuple(repr(v) for v in r.values()) for r in t_arrow["events"].to_pylist())
    clean_s = sorted(
        tuple(repr(v) for v in r.asDict().values()) for r in t_spark["events"].collect()
    )
    assert clean_a == clean_s
    kept = {(r["basket_id"], r["item_id"]): r for r in t_arrow["events"].to_pylist()}
    assert (kept["f1", "i1"]["event_time"], kept["f1", "i1"]["weight"]) == ("2024-05-01", 2.0)
    assert kept["f1", "i2"]["weight"] == 0.0


@pytest.mark.slow
def test_event_row_rules_in_pyarrow_equal_the_spark_sql_rules(spark):
    """collected_events.tag_rows (RE2, pyarrow) gives the reason Spark SQL's rules (Java regex)
    give, for ids made of every kind of character the rules name."""
    import pyarrow as pa

    from pina_spark.validate import events as collected_events

    odd = [
        "",
        " ",
        "  ",
        "\t",
        "\n",
        "\r",
        "\x00",
        "\x7f",
        "\x85",
        "\xa0",
        "\u1680",
        "\u2000",
        "\u2007",
        "\u200a",
        "\u200b",
        "\u200e",
        "\u2028",
        "\u2029",
        "\u202f",
        "\u205f",
        "\u3000",
        "\ufeff",
        "\u00ad",
        "\u061c",
        "\u180e",
        "\ufffd",
        "\u00e9",
        "\u4e2d",
        "\U0001f600",
    ]
    ids = [None] + odd + [f"a{c}b" for c in odd] + [f"{c}x" for c in odd] + ["a b", "ok"]
    rows = []
    for k, v in enumerate(ids):
        rows.append((v, "i1", None, 1.0, None))  # basket id
        rows.append(("b", v, "t" if k % 2 else None, None, None))  # item id
    rows += [
        ("b", "i", "\ufffd", 1.0, None),
        ("b", "i", None, float("nan"), None),
        ("b", "i", None, float("inf"), None),
        ("b", "i", None, float("-inf"), None),
        ("b", "i", None, -0.5, None),
        ("b", "i", None, 0.0, None),
        ("b", "i", None, 1.0, "raw,line"),
        ("", "", None, -1.0, "raw"),
    ]
    schema = "basket_id string, item_id string, event_time string, weight double, " + (
        "_corrupt_record string"
    )
    df = spark.createDataFrame(rows, schema)
    want = [r[storage.REASON] for r in validate.tag_event_rows(df).collect()]
    tbl = pa.table(
        {
            n: pa.array([r[k] for r in rows], t)
            for k, (n, t) in enumerate(
                [
                    ("basket_id", pa.string()),
                    ("item_id", pa.string()),
                    ("event_time", pa.string()),
                    ("weight", pa.float64()),
                    ("_corrupt_record", pa.string()),
                ]
            )
        }
    )
    got = collected_events.tag_rows(tbl).column(storage.REASON).to_pylist()
    diff = [(rows[k], want[k], got[k]) for k in range(len(rows)) if want[k] != got[k]]
    assert not diff, diff
    assert {"missing_basket", "missing_item", "invalid_id", "invalid_utf8"} <= set(want)
    assert {"invalid_weight", "unparseable", None} <= set(want)


#: ids and texts made of every kind of character the rules name (blank, bad id, U+FFFD)
_ODD = ["", " ", "\t", "\x00", "\x85", "\xa0", "\u2007", "\u200b", "\u2028", "\u3000", "\ufeff"]
_ODD += ["\u00ad", "\ufffd", "\u00e9", "\u4e2d", "\U0001f600"]


def _small_table_rows(rnd):
    """Seeded rows for instances, labels and instance_labels: every rule, repeated ids with
    texts and splits that order differently (bytes: 'Z' < 'a' < 'é'), odd characters."""
    odd_ids = [None] + [f"x{c}" for c in _ODD] + [c for c in _ODD]
    ids = [f"i{k}" for k in range(40)]
    texts = ["a", "Z", "b c", "\u00e9t\u00e9", "x" * 30, "", " ", None, "t\ufffd", "\u200b"]
    inst = [
        [rnd.choice(ids), rnd.choice(texts), rnd.choice(["train", "test", None, " ", "dev"])]
        for _ in range(300)
    ]
    inst += [[v, "text", "train"] for v in odd_ids] + [["i0", "t", "tr\ufffd"]]
    labs = [[rnd.choice([f"l{k}" for k in range(15)]), rnd.choice(texts)] for _ in range(80)]
    labs += [[v, "label"] for v in odd_ids]
    pairs = [
        [rnd.choice(ids + ["i99", None]), rnd.choice([f"l{k}" for k in range(16)] + [" "])]
        for _ in range(400)
    ]
    pairs += [[v, "l1"] for v in odd_ids] + [["i1", v] for v in odd_ids]
    return inst, labs, pairs


def _rows(tbl_or_df, cols):
    rows = (
        tbl_or_df.to_pylist()
        if hasattr(tbl_or_df, "to_pylist")
        else [r.asDict() for r in tbl_or_df.collect()]
    )
    return sorted(tuple(repr(r.get(c)) for c in cols) for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_small_tables_validated_on_the_driver_equal_the_spark_path(spark, tmp_path, fmt):
    """collected_tables (instances, labels, instance_labels in one pyarrow pass on the driver)
    keeps and quarantines exactly the rows of the Spark path, with the same reasons and counts:
    every rule, duplicates kept by text then split (bytes order, nulls last), odd characters,
    read by a Spark collect (CSV) or by pyarrow (Parquet)."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    inst, labs, pairs = _small_table_rows(random.Random(11))
    heads = {
        "instances": ["instance_id", "text", "split"],
        "labels": ["label_id", "text"],
        "instance_labels": ["instance_id", "label_id"],
    }
    files = {}
    for name, rows in zip(heads, (inst, labs, pairs)):
        if fmt == "csv":
            files[name] = _csv(tmp_path / f"{name}.csv", heads[name], rows)
        else:
            files[name] = str(tmp_path / f"{name}.parquet")
            cols = list(zip(*rows))
            pq.write_table(
                pa.table({h: pa.array(c, pa.string()) for h, c in zip(heads[name], cols)}),
                files[name],
            )
    cfg = _cfg(tmp_path, **files, _extra={"quality": {"max_text_chars": 20}})
    raw = validate.read_inputs(spark, cfg)
    rows_in = {}
    on_driver = validate.driver_tables(spark, cfg, raw, rows_in)
    assert on_driver == validate.DRIVER_TABLES
    assert rows_in == {"instances": len(inst), "labels": len(labs), "instance_labels": len(pairs)}
    by_spark = validate.validate_inputs(spark, cfg, raw=raw)
    by_arrow = validate.validate_inputs(spark, cfg, raw=raw, rows_in=rows_in, on_driver=on_driver)
    t_spark, q_spark, st_spark = by_spark.tables, by_spark.quarantine, by_spark.counts
    t_arrow, q_arrow, st_arrow = by_arrow.tables, by_arrow.quarantine, by_arrow.counts
    _check_adds_up(st_arrow)
    assert st_arrow == st_spark
    seen = set().union(*(st_arrow[n]["reasons"] for n in heads))
    assert {"missing_id", "invalid_id", "invalid_utf8", "missing_text", "text_too_long"} <= seen
    assert {"invalid_split", "duplicate_id", "unknown_instance", "unknown_label"} <= seen
    assert st_arrow["instance_labels"]["reasons"]["duplicate_pair"] > 20
    assert st_arrow["instances"]["reasons"]["duplicate_id"] > 40
    for name in heads:
        cols = [f.name for f in storage.schema(name).fields]
        assert _rows(t_arrow[name], cols) == _rows(t_spark[name], cols), name
        qcols = cols + [storage.CORRUPT, storage.REASON]
        assert _rows(q_arrow[name], qcols) == _rows(q_spark[name], qcols), name
        assert t_arrow[name].schema == t_spark[name].schema, name


@pytest.mark.slow
def test_driver_tables_leaves_large_tables_to_spark(spark, tmp_path, base_files, monkeypatch):
    """A table over DRIVER_MAX_ROWS rows or DRIVER_MAX_BYTES bytes stays with the Spark path;
    rows and bytes from one Spark job (CSV) or from the Parquet footers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cfg = _cfg(tmp_path, **base_files)
    raw = validate.read_inputs(spark, cfg)
    monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_ROWS", 6)
    rows_in = {}
    assert validate.driver_tables(spark, cfg, raw, rows_in) == ("labels",)
    assert rows_in == {"instances": 10, "labels": 5, "instance_labels": 9}
    monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_ROWS", 100)
    # labels 27 characters, pairs 34
    monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_BYTES", 30)
    assert validate.driver_tables(spark, cfg, raw, {}) == ("labels",)
    lab = str(tmp_path / "labels.parquet")
    pq.write_table(pa.table({"label_id": ["l1", "l2"], "text": ["x" * 30, "y" * 30]}), lab)
    cfg = _cfg(tmp_path, **{**base_files, "labels": lab})
    raw = validate.read_inputs(spark, cfg)
    rows, size = storage.parquet_size(lab)
    assert rows == 2 and size > 60
    monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_BYTES", size)
    assert "labels" in validate.driver_tables(spark, cfg, raw, {})
    monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_BYTES", size - 1)
    assert "labels" not in validate.driver_tables(spark, cfg, raw, {})


def test_parquet_events_read_by_pyarrow_equal_the_spark_read(spark, tmp_path):
    """storage.read_input_arrow (the driver's pyarrow read of the collected path) gives the rows and
    types storage.read_input gives: absent optional column as nulls, an integer weight as double, a
    null _corrupt_record; a folder of part files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "events"
    d.mkdir()
    for k in range(2):
        pq.write_table(
            pa.table(
                {
                    "basket_id": [f"b{k}", f"b{k}", None],
                    "item_id": ["i1", "i2\u00a0", "i3"],
                    "weight": pa.array([1, None, 3], pa.int64()),
                    "extra": [1, 2, 3],
                }
            ),
            str(d / f"part-{k}.parquet"),
        )
    (d / "_SUCCESS").write_text("")
    raw = storage.read_input(spark, str(d), "events")
    by_spark = storage.collect_arrow(raw)
    by_arrow = storage.read_input_arrow(str(d), "events")
    assert by_arrow.schema.names == by_spark.schema.names
    assert by_arrow.schema.types == by_spark.schema.types
    key = [(c, "ascending") for c in ("basket_id", "item_id")]
    assert by_arrow.sort_by(key).to_pylist() == by_spark.sort_by(key).to_pylist()
    assert by_arrow.num_rows == 6 and by_arrow.column("event_time").null_count == 6


@pytest.mark.slow
def test_filter_pairs(validated):
    tables, _, stats = validated
    assert stats["filter_pairs"]["reasons"] == {"duplicate_pair": 1, "missing_id": 1}
    assert sorted(tuple(r) for r in tables["filter_pairs"].collect()) == [
        ("i1", "l2"),
        ("i8", "l8"),
    ]


@pytest.mark.slow
def test_invalid_utf8_and_unparseable(spark, tmp_path):
    path = tmp_path / "instances.csv"
    with open(path, "wb") as fh:
        fh.write(b"instance_id,text,split\n")
        fh.write(b"i1,caf\xe9 latte,train\n")  # latin-1 byte: not UTF-8
        fh.write("i2,caf\u00e9 ok,train\n".encode())
        fh.write(b"i3,plain,train\n")
    lab = tmp_path / "labels.jsonl"
    lab.write_text(
        json.dumps({"label_id": "l1", "text": "a"})
        + "\n"
        + '{"label_id": "l2", "text": \n'
        + json.dumps({"label_id": "l3", "text": "c"})
        + "\n"
    )
    ev = _csv(
        tmp_path / "events.csv",
        ["basket_id", "item_id", "weight"],
        [["b1", "i2", "1.5"], ["b1", "i3", "heavy"]],
    )
    cfg = _cfg(
        tmp_path,
        instances=str(path),
        labels=str(lab),
        events=ev,
        _extra={"side_info": "i2i", "task": {"labels": "graph"}},
    )
    result = validate.validate_inputs(spark, cfg)
    tables, quarantine, stats = result.tables, result.quarantine, result.counts
    _check_adds_up(stats)
    assert stats["instances"]["reasons"] == {"invalid_utf8": 1}
    q = quarantine["instances"].collect()
    assert [r.instance_id for r in q] == ["i1"] and "\ufffd" in q[0].text
    assert sorted(r.text for r in tables["instances"].collect()) == ["caf\u00e9 ok", "plain"]
    assert stats["labels"]["reasons"] == {"unparseable": 1}
    assert stats["events"]["reasons"] == {"unparseable": 1}
    bad = quarantine["events"].first()
    assert bad[storage.CORRUPT] is not None and "heavy" in bad[storage.CORRUPT]


@pytest.mark.slow
def test_a_quote_left_open_is_quarantined_as_unbalanced_quote_and_stops_the_run(spark, tmp_path):
    """A CSV field whose quote is not closed runs on over the lines after it (Spark's
    multi-line reader): the record is ``unbalanced_quote``, not ``unparseable``, and the gate
    stops the run by default, since the rows it swallowed are counted nowhere. A quoted field
    that holds a line break legitimately is read as one row, and a quote inside an unquoted
    field (``55" TV``) is text. (A quote left open in a file's last column up to its end parses
    without error: the pre-flight refuses that file, ``test_input_files.py``.)"""
    from pina_spark.config import QualityConfig

    inst = tmp_path / "instances.csv"
    inst.write_text(
        "instance_id,text,split\n"
        'i1,Samsung 55" TV,train\n'
        'i2,"two\nlines",train\n'
        'i3,"left open,train\n'  # runs on to the quote of i5
        "i4,swallowed,train\n"
        'i5,"quoted, fine",test\n'
        "i6,after,train\n"
        'i7,"also left open,train\n'  # runs on to the quote of i9: the record parses
        "i8,swallowed,train\n"
        'i9,"fine",train\n'
        'i10,"two\nlines",train,extra\n'  # a cell too many, quotes closed: unparseable
    )
    lab = _csv(tmp_path / "labels.csv", ["label_id", "text"], [["l1", "red"]])
    il = _csv(tmp_path / "il.csv", ["instance_id", "label_id"], [["i1", "l1"]])
    cfg = _cfg(tmp_path, instances=str(inst), labels=lab, instance_labels=il)
    result = validate.validate_inputs(spark, cfg)
    stats = result.counts
    _check_adds_up(stats)
    assert stats["instances"]["reasons"] == {"unbalanced_quote": 2, "unparseable": 1}
    assert sorted(r.instance_id for r in result.tables["instances"].collect()) == [
        "i1",
        "i2",
        "i6",
    ]
    texts = {r.instance_id: r.text for r in result.tables["instances"].collect()}
    assert texts["i1"] == 'Samsung 55" TV' and texts["i2"] == "two\nlines"
    q = {r[storage.CORRUPT]: r[storage.REASON] for r in result.quarantine["instances"].collect()}
    ran_on = sorted(raw for raw, reason in q.items() if reason == "unbalanced_quote")
    # the swallowed rows are in the quarantined records
    assert "i4,swallowed" in ran_on[0] and "i8,swallowed" in ran_on[1], ran_on
    # ten rows read as six records; 2 of 6 is under the table-wide 50%: the reason's own
    # gate (0 by default) stops it
    with pytest.raises(storage.InputError, match=r"instances\.unbalanced_quote: 2 of 6 rows") as e:
        validate.check_quality(stats, cfg.quality)
    assert "escape" in str(e.value) and "max_reason_fraction.unbalanced_quote: 1" in str(e.value)
    # a user who accepts the loss says so
    validate.check_quality(stats, QualityConfig(max_reason_fraction={"unbalanced_quote": 1.0}))


def test_spans_lines_check_agrees_on_both_engines(spark):
    import pyarrow as pa
    import pyarrow.compute as pc

    from pina_spark.validate.rules import CHECKS

    values = {
        None: False,
        "a,b": False,
        'a,"b\nc': True,  # open to the end
        'l1,"left open\nl2,x\nl3,"red"': True,  # ran on to another field's quote
        "x\r\ny": True,
        'l6,"two\nlines",extra': False,  # corrupt for a cell too many, quotes closed
        '"a\nb","c\nd","e\nf","g\nh"': False,  # adjacent quoted fields
        "l2,blue,x\r": False,  # Spark 3.5 keeps a CR-only file's line end
        'l7,"12"" pan\nx",y': False,
        "": False,
    }
    chk = CHECKS["spans_lines"]
    arrow = pc.fill_null(chk.arrow(pa.array(list(values), pa.string()), 0), chk.if_null)
    df = spark.createDataFrame([(v,) for v in values], "c string")
    got = [r[0] for r in df.select(chk.spark("c", 0)).collect()]
    assert arrow.to_pylist() == got == list(values.values())


def _bad_utf8(values):
    """A pyarrow string array holding the given bytes as they are (no UTF-8 check)."""
    import pyarrow as pa

    return pa.array(values, pa.binary()).view(pa.string())


@pytest.mark.slow
def test_invalid_utf8_in_parquet_is_quarantined_on_both_paths(spark, tmp_path):
    """Parquet strings are never decoded on read, so invalid UTF-8 (b"p00000\\xff") arrives
    as it is, with no U+FFFD: it is quarantined as invalid_utf8 in every table and every
    column, by the Spark rules and by the driver's pyarrow pass alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {}
    tables = {
        "instances": {
            "instance_id": _bad_utf8([b"p00000\xff", b"p1", b"p2", b"p3"]),
            "text": _bad_utf8([b"a", b"b\xc3(", b"c", b"d"]),
            "split": _bad_utf8([b"train", b"train", b"test", b"train"]),
        },
        "labels": {
            "label_id": _bad_utf8([b"l1", b"l2\x80"]),
            "text": _bad_utf8([b"x", b"y"]),
        },
        "instance_labels": {
            "instance_id": _bad_utf8([b"p2", b"p3\xed\xa0\x80"]),
            "label_id": _bad_utf8([b"l1", b"l1"]),
        },
        "events": {
            "basket_id": _bad_utf8([b"b1", b"b1", b"b2\xfe"]),
            "item_id": _bad_utf8([b"p2", b"p3", b"p2"]),
            "weight": pa.array([1.0, 1.0, 1.0]),
        },
    }
    for name, cols in tables.items():
        files[name] = str(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table(cols), files[name])
    cfg = _cfg(tmp_path, **files)
    raw = validate.read_inputs(spark, cfg)
    on_driver = validate.driver_tables(spark, cfg, raw, rows_in := {})
    assert on_driver == validate.DRIVER_TABLES
    want = {
        "instances": {"invalid_utf8": 2},
        "labels": {"invalid_utf8": 1},
        "instance_labels": {"invalid_utf8": 1},
        "events": {"invalid_utf8": 1},
    }
    by_spark = validate.validate_inputs(spark, cfg, raw=raw)
    rows_in["events"] = 3
    by_arrow = validate.validate_inputs(
        spark, cfg, raw=raw, rows_in=rows_in, on_driver=(*on_driver, "events")
    )
    for result in (by_spark, by_arrow):
        _check_adds_up(result.counts)
        assert {n: result.counts[n]["reasons"] for n in want} == want
    for result in (by_spark, by_arrow):
        assert sorted(r.instance_id for r in result.tables["instances"].collect()) == ["p2", "p3"]


def _published_quarantine(path):
    """A published ``quarantine/<table>`` read by pandas and by pyarrow (both must decode
    every string): its rows as (reason, strings) pairs, sorted; strings: the raw line of an
    unparseable row (the fields Spark's parser gave before it failed vary with the version),
    else the row's non-null strings."""
    import pandas as pd
    import pyarrow.parquet as pq

    by_pandas = pd.read_parquet(path)
    by_arrow = pq.read_table(path).to_pandas()
    assert by_pandas.equals(by_arrow)

    def strings(row):
        if isinstance(row[storage.CORRUPT], str):
            return (row[storage.CORRUPT],)
        return tuple(v for k, v in row.items() if k != storage.REASON and isinstance(v, str))

    return sorted((r[storage.REASON], strings(r)) for r in by_arrow.to_dict("records"))


@pytest.mark.slow
def test_values_that_are_not_utf8_are_quarantined_escaped_on_both_paths(spark, tmp_path):
    """Bytes that are not UTF-8 never reach a quarantine table as they are (they break pandas
    and pyarrow readers of ``quarantine/``): a JSON line holding them, which Spark's parser
    refuses, is ``invalid_utf8`` (not ``unparseable``) and its ``_corrupt_record`` is escaped;
    so are the values of a Parquet string column (b"p\\xff" -> "p\\\\xff", Python's
    backslashreplace). The Spark path and the driver's pyarrow path publish the same rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    inst = str(tmp_path / "instances.parquet")
    pq.write_table(
        pa.table(
            {
                "instance_id": _bad_utf8([b"p\xff", b"p1", b"p2", b"p3"]),
                "text": _bad_utf8([b"a", b"caf\xe9 \xed\xa0\x80 \xf0\x9f\x98\x80", b"c", b"d"]),
            }
        ),
        inst,
    )
    lab = tmp_path / "labels.jsonl"
    lab.write_bytes(
        b'{"label_id": "l1", "text": "a"}\n'
        b'{"label_id": "l2\xff", "text": "b"}\n'
        b'{"label_id": "l3", "text": \n'
        b'{"label_id": "l4 \xef\xbf\xbd kept \xe2\x82", "text": "d"}\n'
    )
    il = _csv(tmp_path / "il.csv", ["instance_id", "label_id"], [["p2", "l1"], ["p3", "l1"]])
    ev = tmp_path / "events.jsonl"
    ev.write_bytes(
        b'{"basket_id": "b1", "item_id": "p2"}\n{"basket_id": "b\xfe", "item_id": "p3"}\n'
    )
    cfg = _cfg(tmp_path, instances=inst, labels=str(lab), instance_labels=il, events=str(ev))
    raw = validate.read_inputs(spark, cfg)
    want = {
        "instances": [
            ("invalid_utf8", ("p1", "caf\\xe9 \\xed\\xa0\\x80 \U0001f600", "train")),
            ("invalid_utf8", ("p\\xff", "a", "train")),
        ],
        "labels": [
            ("invalid_utf8", ('{"label_id": "l2\\xff", "text": "b"}',)),
            ("invalid_utf8", ('{"label_id": "l4 \ufffd kept \\xe2\\x82", "text": "d"}',)),
            ("unparseable", ('{"label_id": "l3", "text": ',)),
        ],
        "instance_labels": [],
        "events": [("invalid_utf8", ('{"basket_id": "b\\xfe", "item_id": "p3"}',))],
    }
    for where, on_driver in (("spark", ()), ("driver", (*validate.DRIVER_TABLES, "events"))):
        result = validate.validate_inputs(spark, cfg, raw=raw, on_driver=on_driver)
        _check_adds_up(result.counts)
        paths = storage.RunPaths(str(tmp_path / f"run-{where}"))
        got = {}
        for name, q in result.quarantine.items():
            storage.write_quarantine(q, paths, name, spark=spark)
            got[name] = _published_quarantine(paths.table(f"{storage.QUARANTINE}/{name}"))
        assert got == want, where


@pytest.mark.slow
def test_escape_spark_writes_what_python_backslashreplace_writes(spark):
    """The Spark SQL escape (hex tokens, no UDF) gives, byte string by byte string, the text
    of ``bytes.decode("utf-8", "backslashreplace")``: seeded random bytes biased towards
    UTF-8 lead and continuation bytes, plus edge cases (overlong forms, surrogates, above
    U+10FFFF, truncated sequences, U+FFFD itself)."""
    import random

    import pyarrow as pa
    from pyspark.sql import functions as F

    from pina_spark.validate import utf8

    rnd = random.Random(36)
    pool = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0]
    pool += [0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    values = [bytes(rnd.choice(pool) for _ in range(rnd.randint(0, 12))) for _ in range(400)]
    values += [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]
    values += [b"\xef\xbf\xbd", "\U0001f600 é 中".encode(), b"plain", b"\\xff"]
    # a binary column cast to string keeps the bytes as they are (pyspark 3.5 and 4.x)
    df = spark.createDataFrame(
        [(k, bytearray(v)) for k, v in enumerate(values)], "k int, b binary"
    ).select("k", F.col("b").cast("string").alias("v"))
    got = {r.k: r.e for r in df.select("k", utf8.escape_spark("v").alias("e")).collect()}
    want = [v.decode("utf-8", "backslashreplace") for v in values]
    assert [got[k] for k in range(len(values))] == want
    strings = pa.array(values, pa.binary()).view(pa.string())
    assert utf8.escape_arrow(strings).to_pylist() == want
    assert utf8.escape_arrow(pa.chunked_array([strings[:9], strings[9:]])).to_pylist() == want
    assert utf8.invalid_utf8_mask(strings) == [v != w.encode() for v, w in zip(values, want)]


# --------------------------------------------------------------------------- errors
def test_missing_column_names_column_and_file(spark, tmp_path, base_files):
    bad = _csv(tmp_path / "inst_nocol.csv", ["instance_id", "title"], [["i1", "x"]])
    cfg = _cfg(tmp_path, **{**base_files, "instances": bad})
    with pytest.raises(storage.InputError, match=r"inst_nocol\.csv.*text"):
        validate.validate_inputs(spark, cfg)


def test_wrong_type_names_column_and_file(spark, tmp_path, base_files):
    import pandas as pd

    p = str(tmp_path / "inst_int.parquet")
    pd.DataFrame({"instance_id": [1, 2], "text": ["a", "b"]}).to_parquet(p)
    cfg = _cfg(tmp_path, **{**base_files, "instances": p})
    with pytest.raises(
        storage.InputError,
        match=r"inst_int\.parquet.*'instance_id'.*bigint.*F\.col\('instance_id'\)\.cast\('string'\)",
    ):
        validate.validate_inputs(spark, cfg)


def test_missing_path(spark, tmp_path, base_files):
    cfg = _cfg(tmp_path, **{**base_files, "labels": str(tmp_path / "nope.csv")})
    with pytest.raises(storage.InputError, match=r"input\.labels: .*nope\.csv does not exist"):
        validate.validate_inputs(spark, cfg)


def test_required_input_not_configured(spark, tmp_path, base_files):
    cfg = _cfg(tmp_path, instances=base_files["instances"])
    with pytest.raises(storage.InputError, match=r"input\.labels: required \(task\.labels=given\)"):
        validate.validate_inputs(spark, cfg)


def test_empty_table_is_an_error(spark, tmp_path, base_files):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = str(tmp_path / "empty.parquet")
    pq.write_table(
        pa.table({"label_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), p
    )
    cfg = _cfg(tmp_path, **{**base_files, "labels": p})
    with pytest.raises(storage.InputError, match=r"input\.labels: .*empty\.parquet has no rows"):
        validate.validate_inputs(spark, cfg)
    header_only = _csv(tmp_path / "hdr.csv", ["label_id", "text"], [])
    cfg = _cfg(tmp_path, **{**base_files, "labels": header_only})
    with pytest.raises(storage.InputError, match=r"hdr\.csv has no rows"):
        validate.validate_inputs(spark, cfg)


def test_invariant_violation_raises(spark):
    from pyspark.sql import functions as F

    raw = spark.createDataFrame(
        [("a", "t", "train", None)],
        "instance_id string, text string, split string, " "_corrupt_record string",
    )

    def by_reason(df):
        return {
            r[storage.REASON]: r["n"]
            for r in df.groupBy(storage.REASON).count().toDF(storage.REASON, "n").collect()
        }

    tagged = validate.validate_instances(raw)
    n_in = raw.count()
    assert validate.reason_counts("instances", "mem", n_in, by_reason(tagged))["rows_used"] == 1
    doubled = tagged.unionByName(tagged.withColumn(storage.REASON, F.lit("missing_text")))
    with pytest.raises(validate.ValidationInvariantError, match="1 rows in but 1 used"):
        validate.reason_counts("instances", "mem", n_in, by_reason(doubled))


def test_dedup_is_order_independent(spark):
    rows = [("x", "b", "train", None), ("x", "a", "test", None), ("x", "a", "train", None)]
    schema = "instance_id string, text string, split string, _corrupt_record string"
    firsts = set()
    for perm in (rows, [rows[1], rows[2], rows[0]]):
        df = spark.createDataFrame(perm, schema).repartition(3)
        kept = validate.validate_instances(df).filter("reason is null").collect()
        firsts.add(tuple(kept[0][:3]))
        assert len(kept) == 1
    assert firsts == {("x", "a", "test")}
