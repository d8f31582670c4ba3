"""A production run that follows a ``vectorizer_only`` selection, with the REAL stages on the
demo run that spark-submit produced (``demo_submit_run``) as ``run.models``: no g fit (no
pretrain stage), no neighbours stage, features of ``vectorizer_only`` alone with the documented
empty neighbour columns, and the promotion gate on the chosen variant.

The selection's settings are applied with :func:`followed_settings` (what ``pina-spark run``
applies through :func:`pina_spark.selection.follow.follow_selection`), so nothing is written
into the shared demo run root.
"""

import pyarrow.dataset as ds
import yaml

from pina_spark import storage
from pina_spark.config import config_from_dict
from pina_spark.config.load import set_dotted
from pina_spark.orchestration import pipeline
from pina_spark.selection.follow import followed_settings
from pina_spark.stages import STAGES
from pina_spark.storage.manifest import Manifest

from demo_run import require_finished


def test_aggregate_fingerprint_reads_train_variants_only_without_neighbours():
    default = config_from_dict({"output": "/r"})
    assert STAGES["aggregate"].fingerprint_sections(default) == ("aggregate", "neighbors.folds")
    vo = config_from_dict({"output": "/r", "train": {"variants": ["vectorizer_only"]}})
    assert "train.variants" in STAGES["aggregate"].fingerprint_sections(vo)


def test_production_run_following_vectorizer_only(spark, tmp_path, demo_submit_run):
    run = require_finished(demo_submit_run)
    with open(run["config"]) as fh:
        data = yaml.safe_load(fh)
    data["output"] = str(tmp_path / "prod")
    # the demo run is not promoted: nothing else vouches for its models
    data["run"] = {"models": run["output"], "trust_models": True}
    data.setdefault("evaluate", {}).update({"promote": True, "report_examples": 0})
    data = config_from_dict(data).to_dict()
    for key, value in followed_settings({"variant": "vectorizer_only", "settings": {}}).items():
        set_dotted(data, key, value, "selection setting")
    cfg = config_from_dict(data)

    result = pipeline.run_pipeline(spark, cfg)
    assert "pretrain" not in result and "neighbors" not in result, result
    assert result["aggregate"] == "ran" and result["evaluate"] == "ran"
    paths = storage.RunPaths(cfg.output)
    assert not storage.path_exists(spark, paths.table(storage.NEIGHBORS))

    t = ds.dataset(paths.table(storage.FEATURES), format="parquet", partitioning="hive").to_table()
    assert set(t.column(storage.VARIANT).to_pylist()) == {"vectorizer_only"}
    for col in (storage.NEIGHBOR_IDS, storage.NEIGHBOR_WEIGHTS):
        assert all(not x for x in t.column(col).to_pylist()), col

    ev = Manifest(paths.manifest).stage("evaluate")
    promotion = ev["stats"]["promotion"]
    assert promotion["variant"] == "vectorizer_only" and promotion["promoted"], promotion
