"""``benchmarks/results_table.py --selection``: the selection table of RESULTS.md and the
README, on constructed run roots (a selection record, a manifest and the per-instance test
P@1 the evaluate stage writes), so its arithmetic is checked without Spark."""

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import results_table  # noqa: E402

#: the cheapest candidate's row of a selection record's validation table
VECTORIZER_ONLY_ROW = {
    "candidate": "vectorizer_only",
    "variant": "vectorizer_only",
    "settings": {},
    "metric": 0.5,
    "gain_points_vs_cheapest": 0.0,
    "p_vs_cheapest": None,
}


def _root(tmp_path, name, scores, chosen, settings, config=None, validation=None):
    """A run root with ``eval/per_instance.parquet`` (``scores``: variant -> P@1 list), a
    manifest (config and two stage durations) and ``selection/selection.json``."""
    root = tmp_path / name
    (root / "eval").mkdir(parents=True)
    (root / "selection").mkdir()
    rows = [
        {"variant": v, "instance_id": f"i{i}", "P@1": float(x), "P@3": 0.0, "P@5": 0.0}
        for v, xs in scores.items()
        for i, x in enumerate(xs)
    ]
    pd.DataFrame(rows).to_parquet(root / "eval" / "per_instance.parquet")
    manifest = {
        "config": config or {"aggregate": {"label_features": "text"}, "neighbors": {"k": 5}},
        "stages": {"graph": {"duration_s": 10.0}, "pretrain": {"duration_s": 30.0}},
    }
    (root / "_manifest.json").write_text(json.dumps(manifest))
    validation = validation or [
        VECTORIZER_ONLY_ROW,
        {
            "candidate": "pina/text neighbors.k=5",
            "variant": "pina",
            "settings": {"aggregate.label_features": "text", "neighbors.k": 5},
            "metric": 0.52,
            "gain_points_vs_cheapest": 2.0,
            "p_vs_cheapest": 0.2,
        },
    ]
    cand = next(r["candidate"] for r in validation if r["settings"] == settings)
    rec = {
        "variant": chosen,
        "candidate": cand,
        "settings": settings,
        "validation": validation,
        "n_valid_scored": 10,
        "seconds": 12.5,
    }
    (root / "selection" / "selection.json").write_text(json.dumps(rec))
    return str(root)


def test_selection_row_against_the_best_fixed_variant(tmp_path):
    scores = {
        "baseline": [0, 0, 1, 0],
        "vectorizer_only": [1, 0, 1, 0],
        "pina": [1, 1, 1, 0],
    }
    root = _root(tmp_path, "a", scores, "vectorizer_only", {})
    row, d = results_table.selection_row("a", root)
    assert row["best_fixed"] == "pina" and row["best_fixed_test_P@1"] == 75.0
    assert row["test_P@1"] == 50.0 and row["validation_P@1"] == 50.0
    assert row["selected_minus_best"]["diff"] == -25.0
    assert d.tolist() == [0.0, -100.0, 0.0, 0.0]
    assert row["pina_minus_vectorizer_only_test"]["diff"] == 25.0
    assert row["best_pina_on_validation"]["gain_points"] == 2.0
    assert row["full_run_stage_s"] == 40.0 and row["selection_s"] == 12.5
    # a resumed selection's wall time is not its cost: steps_seconds, else nothing
    sel = os.path.join(root, "selection", "selection.json")
    rec = json.load(open(sel))
    with open(sel, "w") as fh:
        json.dump({**rec, "seconds": 0.5, "resumed_steps": ["s1"]}, fh)
    assert results_table.selection_row("a", root)[0]["selection_s"] is None
    with open(sel, "w") as fh:
        json.dump({**rec, "seconds": 0.5, "resumed_steps": ["s1"], "steps_seconds": 30.0}, fh)
    assert results_table.selection_row("a", root)[0]["selection_s"] == 30.0


def test_pooled_row_concatenates_the_sets(tmp_path, capsys):
    a = _root(tmp_path, "a", {"vectorizer_only": [1, 0], "pina": [1, 1]}, "vectorizer_only", {})
    b = _root(tmp_path, "b", {"vectorizer_only": [1, 1], "pina": [0, 1]}, "vectorizer_only", {})
    out = tmp_path / "t.json"
    results_table.selection_table([f"a={a}", f"b={b}"], str(out))
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith("| pooled | 4 |")
    pooled = json.loads(out.read_text())["pooled_selected_minus_best"]
    # a: best is pina (-50 on row 2); b: best is vectorizer_only (0): mean of [0, -100, 0, 0]
    assert pooled["diff"] == -25.0
    assert np.isclose(pooled["p"], 0.391, atol=1e-3)


def test_settings_not_the_roots_own_need_the_production_run(tmp_path):
    val = [
        VECTORIZER_ONLY_ROW,
        {
            "candidate": "pina/text neighbors.k=10",
            "variant": "pina",
            "settings": {"aggregate.label_features": "text", "neighbors.k": 10},
            "metric": 0.6,
            "gain_points_vs_cheapest": 10.0,
            "p_vs_cheapest": 0.001,
        },
    ]
    scores = {"vectorizer_only": [1, 0], "pina": [1, 0]}
    root = _root(tmp_path, "a", scores, "pina", val[1]["settings"], validation=val)
    with pytest.raises(SystemExit, match="not .*'s own: give the production run"):
        results_table.selection_row("a", root)
    prod = _root(tmp_path, "prod", {"pina": [1, 1]}, "pina", val[1]["settings"], validation=val)
    row, _ = results_table.selection_row("a", root, prod)
    assert row["test_P@1"] == 100.0 and row["test_from"] == prod
    assert row["selected_minus_best"]["diff"] == 50.0
