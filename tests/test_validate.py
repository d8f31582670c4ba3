"""Input validation: one small case per quarantine reason and per error, counts that add up."""

import json

import pytest

from pina_spark import io, validate
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
    return sorted(((r[key] or "<null>"), r[io.REASON]) for r in quarantine.collect())


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
    stats = {}
    tables, quarantine = validate.validate_inputs(spark, cfg, stats)
    _check_adds_up(stats)
    return tables, quarantine, stats


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
    assert _reasons(quarantine["instances"], io.INSTANCE_ID) == [
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
    assert set(quarantine["instances"].columns) >= {io.REASON, io.CORRUPT}


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


def test_filter_pairs(validated):
    tables, _, stats = validated
    assert stats["filter_pairs"]["reasons"] == {"duplicate_pair": 1, "missing_id": 1}
    assert sorted(tuple(r) for r in tables["filter_pairs"].collect()) == [
        ("i1", "l2"),
        ("i8", "l8"),
    ]


def test_invalid_utf8_and_unparseable(spark, tmp_path):
    path = tmp_path / "instances.csv"
    with open(path, "wb") as fh:
        fh.write(b"instance_id,text,split\n")
        fh.write(b"i1,caf\xe9 latte,train\n")  # latin-1 byte: not UTF-8
        fh.write("i2,caf\u00e9 ok,train\n".encode("utf-8"))
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
    stats = {}
    tables, quarantine = validate.validate_inputs(spark, cfg, stats)
    _check_adds_up(stats)
    assert stats["instances"]["reasons"] == {"invalid_utf8": 1}
    q = quarantine["instances"].collect()
    assert [r.instance_id for r in q] == ["i1"] and "\ufffd" in q[0].text
    assert sorted(r.text for r in tables["instances"].collect()) == ["caf\u00e9 ok", "plain"]
    assert stats["labels"]["reasons"] == {"unparseable": 1}
    assert stats["events"]["reasons"] == {"unparseable": 1}
    bad = quarantine["events"].first()
    assert bad[io.CORRUPT] is not None and "heavy" in bad[io.CORRUPT]


# --------------------------------------------------------------------------- errors
def test_missing_column_names_column_and_file(spark, tmp_path, base_files):
    bad = _csv(tmp_path / "inst_nocol.csv", ["instance_id", "title"], [["i1", "x"]])
    cfg = _cfg(tmp_path, **{**base_files, "instances": bad})
    with pytest.raises(io.InputError, match=r"inst_nocol\.csv.*text"):
        validate.validate_inputs(spark, cfg)


def test_wrong_type_names_column_and_file(spark, tmp_path, base_files):
    import pandas as pd

    p = str(tmp_path / "inst_int.parquet")
    pd.DataFrame({"instance_id": [1, 2], "text": ["a", "b"]}).to_parquet(p)
    cfg = _cfg(tmp_path, **{**base_files, "instances": p})
    with pytest.raises(io.InputError, match=r"inst_int\.parquet.*'instance_id'.*bigint"):
        validate.validate_inputs(spark, cfg)


def test_missing_path(spark, tmp_path, base_files):
    cfg = _cfg(tmp_path, **{**base_files, "labels": str(tmp_path / "nope.csv")})
    with pytest.raises(io.InputError, match=r"input\.labels: .*nope\.csv does not exist"):
        validate.validate_inputs(spark, cfg)


def test_required_input_not_configured(spark, tmp_path, base_files):
    cfg = _cfg(tmp_path, instances=base_files["instances"])
    with pytest.raises(io.InputError, match=r"input\.labels: required \(task\.labels=given\)"):
        validate.validate_inputs(spark, cfg)


def test_empty_table_is_an_error(spark, tmp_path, base_files):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = str(tmp_path / "empty.parquet")
    pq.write_table(
        pa.table({"label_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), p
    )
    cfg = _cfg(tmp_path, **{**base_files, "labels": p})
    with pytest.raises(io.InputError, match=r"input\.labels: .*empty\.parquet has no rows"):
        validate.validate_inputs(spark, cfg)
    header_only = _csv(tmp_path / "hdr.csv", ["label_id", "text"], [])
    cfg = _cfg(tmp_path, **{**base_files, "labels": header_only})
    with pytest.raises(io.InputError, match=r"hdr\.csv has no rows"):
        validate.validate_inputs(spark, cfg)


def test_invariant_violation_raises(spark):
    from pyspark.sql import functions as F

    raw = spark.createDataFrame(
        [("a", "t", "train", None)],
        "instance_id string, text string, split string, " "_corrupt_record string",
    )
    tagged = validate.validate_instances(raw)
    assert validate._count(raw, tagged, "instances", "mem")["rows_used"] == 1
    doubled = tagged.unionByName(tagged.withColumn(io.REASON, F.lit("missing_text")))
    with pytest.raises(validate.ValidationInvariantError, match="1 rows in but 1 used"):
        validate._count(raw, doubled, "instances", "mem")


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
