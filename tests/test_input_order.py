"""The same input rows, in another order and split over other files, publish the same results.

Logs are exported again, compacted or re-partitioned between two runs of a scheduled job; a
result that moves with the order of the rows would be a result of the export, not of the data.
The pipeline sorts by ids wherever order matters (node indices, B_pre, folds, tf-idf, g's
inputs), and these tests hold it to that. The demo's inputs (those of ``demo_submit_run``), as
written and shuffled with a fixed seed over three Parquet files, each run in this session: the
whole pipeline must publish the same tables bit for bit, and the same metrics. The i2i path
(``side_info: both``, which the demo does not use) is held to the same on the graph stage, on
the driver's path and on Spark's: the co-purchase edges and B_pre of the shuffled events equal
those of the originals. What it covers is the demo's size; larger inputs go through Spark's
paths, which only the graph test runs.
"""

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.orchestration import pipeline
from pina_spark.storage.manifest import Manifest

from demo_run import require_finished

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import tables_equal  # noqa: E402

TABLES = ("instances", "labels", "instance_labels", "events")


def _shuffled_inputs(base_inputs: dict, out_dir: str, seed: int = 11) -> dict:
    """Every input table of ``base_inputs`` with its rows permuted (``seed``), as a folder of
    three Parquet files named like the original."""
    rng = np.random.default_rng(seed)
    out = dict(base_inputs)
    for name in TABLES:
        src = base_inputs.get(name)
        if not src:
            continue
        t = pq.read_table(src)
        t = t.take(rng.permutation(t.num_rows))
        folder = os.path.join(out_dir, f"{name}.parquet")
        os.makedirs(folder)
        cuts = np.linspace(0, t.num_rows, 4).astype(int)
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            pq.write_table(t.slice(a, b - a), os.path.join(folder, f"part-{i}.parquet"))
        out[name] = folder
    return out


def _cfg(base: dict, output: str, inputs: dict, **extra):
    d = {k: v for k, v in base.items() if k not in ("output", "input")}
    d["output"], d["input"] = output, inputs
    d["spark"] = {k: v for k, v in d.get("spark", {}).items() if k != "master"}
    d.update(extra)
    return config_from_dict(d)


#: the published tables compared row for row (``downstream_models``: through ``predictions``)
RESULT_TABLES = (
    storage.NODES,
    storage.I2I_EDGES,
    storage.PRETRAIN_EDGES,
    storage.EMBEDDINGS,
    storage.NEIGHBORS,
    storage.FEATURES,
    storage.PREDICTIONS,
)
#: what the graph stage publishes
GRAPH_TABLES = (storage.NODES, storage.I2I_EDGES, storage.PRETRAIN_EDGES)


@pytest.mark.slow
def test_row_order_and_files_of_the_inputs_change_no_result(spark, tmp_path, demo_submit_run):
    """The demo's inputs as written and the same rows shuffled over three files, each run
    through the whole pipeline in this session (same Spark settings): every result table is
    equal bit for bit, node indices included, and so are the metrics (seconds aside)."""
    run = require_finished(demo_submit_run)
    with open(run["config"]) as fh:
        base = yaml.safe_load(fh)
    shuffled = _shuffled_inputs(base["input"], str(tmp_path / "input"))
    roots = []
    for name, inputs in (("orig", base["input"]), ("shuffled", shuffled)):
        cfg = _cfg(base, str(tmp_path / name), inputs)
        assert set(pipeline.run_pipeline(spark, cfg).values()) == {"ran"}
        roots.append(storage.RunPaths(cfg.output))
    a, b = roots
    a_dir, b_dir = storage.local_path(a.root), storage.local_path(b.root)
    # every result table (benchmarks/tables_equal.py: sorted by key, every column, exactly)
    diffs = tables_equal.table_diffs(a_dir, b_dir, tables=RESULT_TABLES)
    for rel, (rows, differ) in diffs.items():
        assert rows > 0 or rel == storage.I2I_EDGES, rel  # the demo's side_info: no i2i
        assert differ == {}, (rel, differ)

    def metrics(p):
        """Every variant's metrics but its seconds (``train_s``, ``predict_s``)."""
        with open(storage.local_path(p.table(storage.EVAL) + "/metrics.json")) as fh:
            variants = json.load(fh)["variants"]
        return {
            v: {k: x for k, x in m.items() if not k.endswith("_s")} for v, m in variants.items()
        }

    assert metrics(b) == metrics(a)

    # and the comparison tells one changed score apart (the command's exit code too)
    assert tables_equal.main(a_dir, b_dir) == 0
    pred_dir = storage.local_path(b.table(storage.PREDICTIONS))
    part = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(pred_dir) for f in fs if f.endswith(".parquet")
    )[0]
    t = pq.read_table(part)
    scores = t.column(storage.SCORES).to_pylist()
    row = next(i for i, x in enumerate(scores) if x)
    scores[row] = [scores[row][0] + 0.5, *scores[row][1:]]
    i = t.schema.get_field_index(storage.SCORES)
    pq.write_table(
        t.set_column(i, t.schema.field(i), pa.array(scores, t.schema.field(i).type)), part
    )
    assert tables_equal.main(a_dir, b_dir) == 1


@pytest.mark.slow
@pytest.mark.parametrize("built_by", ["driver", "spark"])
def test_shuffled_events_build_the_same_i2i_graph(
    spark, tmp_path, demo_submit_run, monkeypatch, built_by
):
    """``side_info: both`` (co-purchase edges from ``events`` beside the label text): the graph
    stage on the shuffled inputs publishes the nodes, edges and B_pre of the originals, whether
    the small tables are validated and indexed on the driver (the demo's size) or, as tables
    over ``DRIVER_MAX_ROWS`` are, by Spark (with the pairs counted by a shuffle,
    ``graph.strategy: shuffle``); and with baskets down-sampled
    (``graph.max_basket_size``), which keeps the same items whatever the order."""
    if built_by == "spark":
        monkeypatch.setattr("pina_spark.validate.spark.DRIVER_MAX_ROWS", 0)
    run = require_finished(demo_submit_run)
    with open(run["config"]) as fh:
        base = yaml.safe_load(fh)
    assert base["input"].get("events"), "the demo run has no events to shuffle"
    shuffled = _shuffled_inputs(base["input"], str(tmp_path / "input"))
    roots = []
    for name, inputs in (("orig", base["input"]), ("shuffled", shuffled)):
        # baskets over 8 items are down-sampled: the kept items must not turn on row order
        graph = {**base.get("graph", {}), "max_basket_size": 8}
        if built_by == "spark":  # the events too: pairs counted by a shuffle, not on the driver
            graph["strategy"] = "shuffle"
        cfg = _cfg(base, str(tmp_path / name), inputs, side_info="both", graph=graph)
        assert pipeline.run_pipeline(spark, cfg, ["graph"]) == {"graph": "ran"}
        paths = storage.RunPaths(cfg.output)
        stats = Manifest(paths.manifest).stage("graph")["stats"]
        on_driver = stats["validated_on_driver"]
        assert ("instances" in on_driver) == ("events" in on_driver) == (built_by == "driver")
        assert stats["baskets"]["baskets_capped"] > 0, stats["baskets"]
        roots.append(storage.local_path(paths.root))
    diffs = tables_equal.table_diffs(*roots, tables=GRAPH_TABLES)
    assert diffs[storage.I2I_EDGES][0] > 0, "no co-purchase edge: the test would hold for any"
    assert all(rows > 0 and differ == {} for rows, differ in diffs.values()), diffs
