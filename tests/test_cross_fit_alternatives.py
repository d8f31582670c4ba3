"""``benchmarks/cross_fit_alternatives.py``: the two rules it patches into the neighbours stage
score what its docstring says, on hand-made fold models, and the line it replaces is still in
the stage (else the benchmark would stop at run time; this fails first)."""

import os
import sys
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import cross_fit_alternatives as cfa  # noqa: E402

from pina_spark.stages.neighbors import stage  # noqa: E402


class _G:
    """A fold model of g that returns fixed scores for every row."""

    def __init__(self, rows):
        self.scores = sp.csr_matrix(np.array(rows, dtype=np.float32))

    def predict(self, X, only_topk=None, threads=-1):
        return self.scores


def _group(tmp_path):
    """Two fold models over outputs (nodes) 10, 11, 12: node 10 (a label) is a training row of
    both, node 11 of model 1 only, node 12 of model 0 only."""
    specs = []
    for f, rows in enumerate(([10, 12, 20], [10, 11, 21])):
        d = tmp_path / f"fold={f}"
        d.mkdir()
        np.save(d / "output_nodes.npy", np.array([10, 11, 12]))
        np.save(d / "train_rows.npy", np.array(rows))
        specs.append(SimpleNamespace(uri=str(d)))
    models = (_G([[0.8, 0.1, 0.4], [0.2, 0.0, 0.0]]), _G([[0.6, 0.5, 0.0], [0.4, 0.9, 0.0]]))
    return SimpleNamespace(specs=tuple(specs), models=models)


def _rules():
    """The rules as the script appends them to the neighbours stage: in that module's names."""
    ns: dict = dict(vars(stage))
    exec(compile(cfa.RULES, "RULES", "exec"), ns)
    return ns


def test_the_replaced_line_is_in_the_neighbours_stage_once():
    with open(stage.__file__) as fh:
        assert fh.read().count(cfa.ANCHOR) == 1


def test_covered_mean_leaves_out_the_model_that_never_saw_the_output(tmp_path):
    grp = _group(tmp_path)
    rules = _rules()
    assert rules["_held_outputs"](grp.specs).tolist() == [-1, 0, 1]
    Y = rules["_alternative_scores"]("covered", grp, None, np.array([0, 1]), 3, 1)
    # node 10: (0.8 + 0.6) / 2; node 11: model 1 alone; node 12: model 0 alone
    assert np.allclose(Y.toarray(), [[0.7, 0.5, 0.4], [0.3, 0.9, 0.0]])
    # the stage's own mean divides every output by both models
    mean = stage.cross_fit_scores(grp.models, None, 3)
    assert np.allclose(mean.toarray(), [[0.7, 0.3, 0.2], [0.3, 0.45, 0.0]])


def test_one_fold_scores_each_row_by_one_model(tmp_path):
    grp = _group(tmp_path)
    Y = _rules()["_alternative_scores"]("one_fold", grp, None, np.array([4, 7]), 3, 1)
    # row index 4 -> model 0, 7 -> model 1
    assert np.allclose(Y.toarray(), [[0.8, 0.1, 0.4], [0.4, 0.9, 0.0]])
