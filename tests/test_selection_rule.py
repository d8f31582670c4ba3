"""The variant selection's choice rule (pina_spark/selection/rule.py) on constructed validation
tables, and the ``select`` config section (no Spark)."""

import numpy as np
import pytest

from pina_spark.config import ConfigError, config_from_dict
from pina_spark.selection.rule import Candidate, choose, holm_adjusted
from pina_spark.stages import STAGES


def _pair(n, wins, losses):
    """Per-instance P@1 of a cheap and a dear candidate on ``n`` rows: the dear one is right on
    ``wins`` rows where the cheap one is wrong, and wrong on ``losses`` rows where it is right."""
    cheap, dear = np.zeros(n), np.zeros(n)
    dear[:wins] = 1
    cheap[wins : wins + losses] = 1
    return cheap, dear


def test_a_tie_keeps_the_cheap_candidate():
    scores = np.array([1, 0, 1, 1, 0] * 40, dtype=float)
    d = choose(
        [Candidate("pina/text", 9.0, scores), Candidate("vectorizer_only", 1.0, scores.copy())],
        alpha=0.05,
        min_gain_points=0.0,  # even with no margin asked, a tie is no gain
    )
    assert d.chosen == "vectorizer_only"
    assert [c.name for c in d.rule] == ["vectorizer_only", "pina/text"]
    assert d.rule[1].gain_points == 0.0 and d.rule[1].p == 1.0 and not d.rule[1].pays


def test_a_significant_win_above_the_margin_takes_the_dear_candidate():
    cheap, dear = _pair(200, 40, 0)  # +20 points
    d = choose(
        [Candidate("vectorizer_only", 1.0, cheap), Candidate("pina/pifa", 5.0, dear)],
        alpha=0.05,
        min_gain_points=0.5,
    )
    assert d.chosen == "pina/pifa"
    assert d.rule[1].pays and d.rule[1].gain_points == pytest.approx(20.0)
    assert d.vs_cheapest[1].against == "vectorizer_only"


def test_a_significant_win_below_the_margin_keeps_the_cheap_candidate():
    cheap, dear = _pair(4000, 16, 0)  # +0.4 points, p ~ 6e-5
    d = choose(
        [Candidate("vectorizer_only", 1.0, cheap), Candidate("pina/text", 5.0, dear)],
        alpha=0.05,
        min_gain_points=0.5,
    )
    assert d.rule[1].p_adjusted < 1e-3 and d.rule[1].gain_points == pytest.approx(0.4)
    assert d.chosen == "vectorizer_only"


def test_a_p_that_passes_alone_fails_after_the_correction():
    cheap, dear = _pair(200, 11, 3)  # +4 points, paired p ~ 0.032
    alone = choose(
        [Candidate("vectorizer_only", 1.0, cheap), Candidate("pina/text", 5.0, dear)],
        alpha=0.05,
        min_gain_points=0.5,
    )
    assert alone.chosen == "pina/text" and 0.025 < alone.rule[1].p < 0.05
    # a third, dearer candidate scoring as pina/text: two comparisons, Holm doubles the
    # smallest p (0.032 -> 0.064 > alpha), so nothing pays and the cheapest is kept
    both = choose(
        [
            Candidate("vectorizer_only", 1.0, cheap),
            Candidate("pina/text", 5.0, dear),
            Candidate("pina/pifa", 6.0, dear.copy()),
        ],
        alpha=0.05,
        min_gain_points=0.5,
    )
    assert both.rule[1].p == alone.rule[1].p
    assert both.rule[1].p_adjusted == pytest.approx(2 * alone.rule[1].p)
    assert both.chosen == "vectorizer_only"


def test_the_dearest_paying_candidate_is_compared_with_the_best_cheaper_one():
    cheap, mid = _pair(200, 40, 0)
    dear = mid.copy()
    dear[100:140] = 1  # +20 points over mid
    worse = np.zeros(200)
    d = choose(
        [
            Candidate("a", 1.0, cheap),
            Candidate("b", 2.0, mid),
            Candidate("c", 3.0, worse),
            Candidate("d", 4.0, dear),
        ],
        alpha=0.05,
        min_gain_points=0.5,
    )
    assert [c.against for c in d.rule] == [None, "a", "b", "b"]
    assert d.chosen == "d"
    assert d.vs_cheapest[3].gain_points == pytest.approx(40.0)


def test_holm_adjusted_is_monotone_in_the_sorted_order():
    assert holm_adjusted([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_adjusted([0.5, None, 0.001]) == pytest.approx([1.0, 1.0, 0.003])


def test_candidates_must_score_the_same_rows():
    with pytest.raises(ValueError, match="different numbers of rows"):
        choose([Candidate("a", 1, [1, 0]), Candidate("b", 2, [1])], alpha=0.05, min_gain_points=0)


def test_select_section_defaults_and_strict_keys():
    sel = config_from_dict({"output": "/r"}).select
    assert sel.candidates[0] == "vectorizer_only" and "pina/pifa" in sel.candidates
    assert sel.grid and all(sel.grid.values())
    assert (sel.alpha, sel.min_gain_points, sel.follow) == (0.05, 0.5, "auto")
    for bad, msg in [
        ({"candidates": ["pina"]}, "needs its aggregate.label_features"),
        ({"candidates": ["vectorizer_only/pifa"]}, "reads no label features"),
        ({"grid": {"neighbors.folds": [2]}}, "not a searchable key"),
        ({"grid": {"train.topk": [1]}}, "only neighbors"),
        ({"grid": {"neighbors.k": []}}, "non-empty"),
        ({"alpha": 1.0}, "out of range"),
        ({"typo": 1}, "unknown key 'select.typo'"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            config_from_dict({"output": "/r", "select": bad})


def test_the_select_section_changes_no_stage_fingerprint():
    base = config_from_dict({"output": "/r"})
    other = config_from_dict(
        {
            "output": "/r",
            "select": {"candidates": ["pina/text"], "grid": {}, "alpha": 0.01, "follow": "off"},
        }
    )
    for spec in STAGES.values():
        secs = spec.fingerprint_sections(base)
        assert base.fingerprint(*secs) == other.fingerprint(*secs), spec.name


def test_the_default_select_section_expands_to_unique_candidates():
    from pina_spark.orchestration.select import expand_candidates

    cs = expand_candidates(config_from_dict({"output": "/r"}).select)
    assert len(cs) == 1 + 4 * 4  # vectorizer_only once; 4 entries x the 2x2 grid
    assert len({c.name for c in cs}) == len(cs)
    assert cs[0].variant == "vectorizer_only" and cs[0].settings == {}
    assert {c.settings["aggregate.label_features"] for c in cs[1:]} == {"text", "pifa"}
    assert {(c.settings["neighbors.k"], c.settings["aggregate.v1_weight"]) for c in cs[1:]} == {
        (5, 0.5),
        (5, 1.0),
        (10, 0.5),
        (10, 1.0),
    }


def test_the_record_of_a_decision_is_a_followable_selection():
    from pina_spark.config import SelectConfig
    from pina_spark.orchestration.select import expand_candidates, selection_record
    from pina_spark.selection.artifact import FORMAT, validate_record
    from pina_spark.selection.follow import followed_settings

    cs = expand_candidates(
        SelectConfig(candidates=["vectorizer_only", "pina/pifa"], grid={"neighbors.k": [10]})
    )
    cheap, dear = _pair(200, 40, 0)
    d = choose(
        [Candidate(cs[0].name, 2.0, cheap), Candidate(cs[1].name, 7.5, dear)],
        alpha=0.05,
        min_gain_points=0.5,
    )
    rec = selection_record(d, cs, {"n_valid": 200})
    assert rec["variant"] == "pina" and rec["candidate"] == "pina/pifa neighbors.k=10"
    assert rec["settings"] == {"aggregate.label_features": "pifa", "neighbors.k": 10}
    v = {r["candidate"]: r for r in rec["validation"]}
    assert v["pina/pifa neighbors.k=10"]["gain_points_vs_cheapest"] == pytest.approx(20.0)
    assert v["pina/pifa neighbors.k=10"]["stage_seconds"] == 7.5
    assert v["vectorizer_only"]["p_vs_cheapest"] is None and rec["n_valid"] == 200
    full = validate_record({"format": FORMAT, **rec, "models": {}}, "s.json")
    assert followed_settings(full)["neighbors.k"] == 10
