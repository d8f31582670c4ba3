"""``benchmarks/selection_cost_replay.py``: the selection rule replayed from kept steps under the
root's whole pretrain stage and under each g variant's own fits, on a constructed root (kept
steps written by :func:`pina_spark.orchestration.select.save_step`, a model card, a selection
record), without Spark.

The constructed case is citeulike-t's: on the selection half ``pina`` leads ``pina_naive`` by
less than the margin, and on the confirmation half only ``pina`` gains; ``pina`` trains faster
downstream, so under the whole-stage cost it is the cheaper and the tier's pick, while under
per-variant g costs ``pina_naive`` is the pick, does not pay, and ``pina`` as the rival does:
both bases choose ``pina/text``.
"""

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from pina_spark import storage
from pina_spark.config import load_config
from pina_spark.models.card import ModelCard, write_model_card
from pina_spark.orchestration import select as S
from pina_spark.selection.artifact import selection_uri
from pina_spark.selection.rule import confirm_half

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import selection_cost_replay  # noqa: E402

SELECT = {"candidates": ["vectorizer_only", "pina_naive/text", "pina/text"], "grid": {}}


def _root(tmp_path, recorded, basis="per_variant"):
    root = str(tmp_path / "run")
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({"output": root, "select": {**SELECT, "cv_folds": 0}}))
    cfg = load_config(str(cfg_path))
    steps = S.work_plan(S.expand_candidates(cfg.select, {}))
    ids = [f"i{i}" for i in range(2000)]
    conf = confirm_half(ids)
    rng = np.random.default_rng(7)
    vo = (rng.random(len(ids)) < 0.5).astype(float)
    lift = (vo == 0) & (rng.random(len(ids)) < 0.2)  # about +10 points where it applies
    naive = np.where(~conf & lift, 1.0, vo)  # gains on the selection half only
    pina = np.where(lift, 1.0, vo)  # on both halves
    extra = np.flatnonzero(~conf & ~lift & (vo == 0))[:2]
    pina[extra] = 1.0  # +0.2 points over pina_naive on the selection half: within the margin
    series = {
        "vectorizer_only": vo,
        "pina_naive": naive,
        "pina": pina,
    }
    work = storage.RunPaths(storage.RunPaths(root).table(S.SELECT_WORK))
    for st in steps:
        m = {"aggregate_s": 1.0, "train_s": 3.0, "neighbors_s": 2.0}
        m["train_s_by_variant"] = {"pina_naive": 2.0, "pina": 1.0, "vectorizer_only": 3.0}
        scores = {v: pd.Series(series[v], index=ids) for v in st.variants}
        S.save_step(work, st, "k", m, scores)
    models = storage.local_path(storage.RunPaths(root).table(storage.MODELS))
    os.makedirs(models)
    card = ModelCard(
        created_at="t",
        versions={},
        config={},
        g="g",
        leave_self_out_rule="r",
        times_s={"stage": 115.0},
        variants={"pina": {"fits_train_s": 100.0}, "pina_naive": {"fits_train_s": 10.0}},
    )
    write_model_card(card, models)
    rec = {"cv_folds": 0, "base_point": {}, "candidate": recorded, "pretrain_s": 115.0}
    rec["validation"] = [{"candidate": c} for c in SELECT["candidates"]]
    if basis is not None:
        rec["g_cost"] = basis
    storage.write_bytes(selection_uri(root), json.dumps(rec).encode())
    return root, str(cfg_path)


def test_replay_reproduces_the_record_and_prices_g_per_variant(tmp_path, capsys):
    root, cfg = _root(tmp_path, "pina/text")
    out = tmp_path / "replay.json"
    rc = selection_cost_replay.main(["--config", cfg, "--root", root, "--json", str(out)])
    assert rc == 0, capsys.readouterr()
    got = json.loads(out.read_text())
    assert got["recorded_basis"] == "per_variant"
    whole, per = got["bases"]["whole_stage"], got["bases"]["per_variant"]
    assert whole["chosen"] == per["chosen"] == "pina/text"
    # whole stage: pina is the cheaper and the best, so the g tier has one contender
    assert [(s["tier"], s["candidate"]) for s in whole["steps"]] == [
        ("no_g", "vectorizer_only"),
        ("g", "pina/text"),
    ]
    # per variant: pina_naive is the pick and does not pay; pina, the rival, does and decides
    pick, rival = per["steps"][1:]
    assert (pick["role"], pick["candidate"], pick["pays"]) == ("pick", "pina_naive/text", False)
    assert (rival["role"], rival["candidate"], rival["pays"], rival["decides"]) == (
        "rival",
        "pina/text",
        True,
        True,
    )
    assert got["g_seconds_per_variant"] == {"pina": 105.0, "pina_naive": 15.0}
    conf = got["confirmation"]
    assert conf["pina/text"]["gain_points"] > 5 and conf["pina/text"]["p"] < 1e-6
    assert abs(conf["pina_naive/text"]["gain_points"]) < 1e-9


def test_replay_that_does_not_reproduce_the_record_exits_1(tmp_path, capsys):
    # a record from before the per-variant price (no g_cost) is replayed at the whole stage
    root, cfg = _root(tmp_path, "pina_naive/text", basis=None)
    assert selection_cost_replay.main(["--config", cfg, "--root", root]) == 1
    assert "whole_stage replay does not reproduce the record" in capsys.readouterr().err


def test_replay_with_other_candidates_than_the_record_names_the_fix(tmp_path):
    root, cfg = _root(tmp_path, "pina/text")
    with pytest.raises(SystemExit, match="pass the --set overrides the selection ran with"):
        selection_cost_replay.main(
            ["--config", cfg, "--root", root, "--set", "select.grid={neighbors.k: [5, 10]}"]
        )
