"""Input files as Spark reads them: the pre-flight (:func:`inspect_input`, no Spark) and the
reader (:func:`storage.read_input`) agree on which files make a table, on its columns and on
its rows, for the layouts and headers users' tools write (partition folders, subfolders, a
byte-order mark with quoted names, spaces after the commas, long texts, header-only files)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pina_spark import storage
from pina_spark.storage.preflight import inspect_input


def _rows(spark, uri, table):
    df = storage.read_input(spark, uri, table)
    return sorted(tuple(r) for r in df.drop(storage.inputs.CORRUPT).collect())


@pytest.mark.parametrize("column", ["split", "Split"])
def test_a_csv_folder_partitioned_by_split_keeps_the_split(spark, tmp_path, column):
    """Spark's ``partitionBy("split")`` writes ``split=test/`` folders and no split column in
    the files: the split comes from the folder names (it used to be read as null: every test
    instance became a train one). The reader matches folder names to the contract in any
    case, and so does the pre-flight (``Split=test/``; a ``Split`` column inside the files is
    refused: test_check.py)."""
    d = tmp_path / "instances.csv"
    for split, ids in (("train", ["i1", "i2"]), ("test", ["i3"])):
        (d / f"{column}={split}").mkdir(parents=True)
        body = "".join(f"{i},title {i}\n" for i in ids)
        (d / f"{column}={split}" / "part-0.csv").write_text("instance_id,text\n" + body)
    r = inspect_input(str(d), "instances")
    assert (r.status, r.rows, r.columns) == ("ok", 3, ("instance_id", "text", "split"))
    assert _rows(spark, str(d), "instances") == [
        ("i1", "title i1", "train"),
        ("i2", "title i2", "train"),
        ("i3", "title i3", "test"),
    ]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("layout", ["top_and_subfolder", "subfolder_only", "top_and_partition"])
def test_files_spark_would_not_read_stop_the_check(spark, tmp_path, fmt, layout):
    """Spark reads a folder's top-level files, or its ``<column>=<value>`` folders; the
    pre-flight refuses any other file (it counted them as rows the run then left out, or read
    them with pyarrow where Spark did not)."""
    d = tmp_path / f"labels.{fmt}"
    where = {
        "top_and_subfolder": ["", "old/"],
        "subfolder_only": ["old/", "new/"],
        "top_and_partition": ["", "region=eu/"],
    }[layout]
    for n, sub in enumerate(where):
        (d / sub).mkdir(parents=True, exist_ok=True)
        f = d / sub / f"part-{n}.{fmt}"
        if fmt == "csv":
            f.write_text(f"label_id,text\nl{n},label {n}\n")
        else:
            pq.write_table(pa.table({"label_id": [f"l{n}"], "text": [f"label {n}"]}), str(f))
    r = inspect_input(str(d), "labels")
    assert r.blocks_run, r
    if layout == "top_and_partition":
        assert "both directly in it" in r.problem
    else:
        assert "which Spark does not read as part of the table" in r.problem
        assert "old" in r.problem


def test_a_text_longer_than_the_csv_modules_default_field_limit(tmp_path):
    """A 200,000-character title: the pre-flight counts the row (the run quarantines it as
    ``text_too_long``), where Python's csv module stopped at 131,072 characters."""
    p = tmp_path / "instances.csv"
    p.write_text("instance_id,text,split\ni1," + "x" * 200_000 + ",train\ni2,short,test\n")
    r = inspect_input(str(p), "instances")
    assert (r.status, r.rows) == ("ok", 2)


@pytest.mark.parametrize(
    "header",
    [
        '\ufeff"instance_id","text","split"',  # pandas utf-8-sig with QUOTE_ALL, R write.csv
        "instance_id, text, split",  # spaces after the commas
    ],
)
def test_headers_as_tools_write_them(spark, tmp_path, header):
    p = tmp_path / "instances.csv"
    p.write_text(header + '\ni1,"milk, 1 l",train\ni2,bread,test\n', encoding="utf-8")
    r = inspect_input(str(p), "instances")
    assert (r.status, r.rows, r.columns) == ("ok", 2, ("instance_id", "text", "split"))
    assert _rows(spark, str(p), "instances") == [
        ("i1", "milk, 1 l", "train"),
        ("i2", "bread", "test"),
    ]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_columns_differing_only_in_case_are_refused_by_both(spark, tmp_path, fmt):
    p = tmp_path / f"labels.{fmt}"
    if fmt == "csv":
        p.write_text("label_id,text,Text\nl1,a,b\n")
    elif fmt == "jsonl":
        p.write_text('{"label_id": "l1", "text": "a", "Text": "b"}\n')
    else:
        pq.write_table(pa.table({"label_id": ["l1"], "text": ["a"], "Text": ["b"]}), str(p))
    r = inspect_input(str(p), "labels")
    assert r.blocks_run and "differ only in case: 'text', 'Text'" in r.problem
    if fmt != "parquet":  # Spark refuses such a Parquet file itself, before the columns
        with pytest.raises(storage.InputError) as e:
            storage.read_input(spark, str(p), "labels")
        assert str(e.value) == r.problem


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_table_with_a_header_and_no_rows_stops_the_check(tmp_path, fmt):
    """A header and no rows: the graph stage refuses it before any work, so the pre-flight
    of a run that builds the graph does too (a daily run of another run's models takes empty
    instances as a day without new products: tests/test_incremental.py)."""
    p = tmp_path / f"labels.{fmt}"
    if fmt == "csv":
        p.write_text("label_id,text\n")
    else:
        pq.write_table(
            pa.table({"label_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}),
            str(p),
        )
    r = inspect_input(str(p), "labels")
    want = f"input.labels: {p} has no rows (an empty input table is an error)"
    assert (r.status, r.rows, r.empty_problem()) == ("ok", 0, want)


def test_emrfs_folder_markers_and_a_column_in_both_places(tmp_path):
    """EMRFS leaves an empty ``<dir>_$folder$`` object beside each S3 folder; Spark skips it,
    and so does the pre-flight (it counted as a top-level file beside partition folders). A
    column both in the files and in the partition folders' names is refused."""
    d = tmp_path / "instances.csv"
    (d / "split=test").mkdir(parents=True)
    (d / "split=test" / "part-0.csv").write_text("instance_id,text\ni1,a\n")
    (d / "split=test_$folder$").write_text("")
    r = inspect_input(str(d), "instances")
    assert (r.status, r.rows, r.columns) == ("ok", 1, ("instance_id", "text", "split"))
    (d / "split=test" / "part-0.csv").write_text("instance_id,text,Split\ni1,a,test\n")
    r = inspect_input(str(d), "instances")
    assert r.blocks_run and "both in its files and in its partition folders" in r.problem


def test_a_csv_quote_that_runs_on_over_lines_stops_the_check(spark, tmp_path):
    """A quote left open runs the field on over the lines after it, to the end of the file or
    to the next quote that can close it (here another quoted field, ``"red"``): Spark's reader
    gives one row holding those lines as its text, and no corrupt record (the record parses),
    so the validation cannot see it. The pre-flight parses every record that spans lines
    strictly and refuses the file, naming the lines; a folder names the file too."""
    lab = tmp_path / "labels.csv"
    lab.write_text('label_id,text\nl1,red\nl2,"never closed\nl3,blue\nl4,green\n')
    assert _rows(spark, str(lab), "labels") == [
        ("l1", "red"),
        ("l2", "never closed\nl3,blue\nl4,green\n"),  # what Spark reads: no sign of a problem
    ]
    r = inspect_input(str(lab), "labels")
    assert r.blocks_run, r
    assert "starts on line 3 " in r.problem and "rows on lines 4-5 lost" in r.problem
    mid = tmp_path / "mid.csv"
    mid.write_text('label_id,text\nl1,"left open\nl2,swallowed\nl3,"red"\nl4,after\n')
    assert _rows(spark, str(mid), "labels") == [
        ("l1", '"left open\nl2,swallowed\nl3,"red"'),
        ("l4", "after"),
    ]
    r = inspect_input(str(mid), "labels")
    assert r.blocks_run and "lines 2-4 as one record" in r.problem, r
    d = tmp_path / "folder.csv"
    d.mkdir()
    (d / "part-0.csv").write_text("label_id,text\nl1,red\n")
    (d / "part-1.csv").write_text('label_id,text\nl2,"open\nl3,x\n')
    r = inspect_input(str(d), "labels")
    assert r.blocks_run and "part-1.csv: the quoted field of the record that starts on line 2" in (
        r.problem
    )


@pytest.mark.parametrize(
    "body",
    [
        'l1,red\nl2,"two\nlines"\n',  # a closed multi-line field, last in the file
        'l1,"two\r\nlines"\r\nl2,x\r\n',  # CRLF, as Excel and pandas on Windows write it
        'l1,"Best" pizza\n',  # a quote Spark reads as text: not an open field
        'l1,"Best" pizza,"two\nlines"\n',  # beside a closed multi-line field (a cell extra)
        'l1,"""Hi"" she\nsaid"\n',  # a doubled quote first, then a line break
        'l1,Samsung 55" TV\n',
        'l1,"12"" pan"',  # no final line break
        'l1,red\nl2,"open\n\n\n',  # open on the last line: nothing after it is lost
        'l1,""\n\n',
    ],
)
def test_csv_files_with_well_formed_or_lenient_quotes_pass(tmp_path, body):
    lab = tmp_path / "labels.csv"
    lab.write_text("label_id,text\n" + body)
    r = inspect_input(str(lab), "labels")
    assert r.status == "ok", r
