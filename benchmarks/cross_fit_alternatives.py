"""Test rows' neighbours under another cross-fitting rule than the mean of the fold models
(issue #34 evidence; RESULTS.md, "A set never run before").

Out of fold, a train row of fold f is predicted by fold model f, the one model that never saw
it; test and new rows by the mean of the F fold models' top-k scores
(``pina_spark.stages.neighbors.stage.cross_fit_scores``). This script reruns the neighbours,
aggregate, train and evaluate stages of a finished run on a copy of its root, with test rows
predicted by one of two alternatives, so that ``paired_ci.py`` can pair them with the run:

* ``one_fold``: each test row by ONE fold model (``instance_index % F``): exactly what a train
  row gets (a model that never saw the row, whose own fold's instance outputs are weak), so the
  train and test neighbours have the same distribution, at the price of the ensemble;
* ``covered``: the mean over the models that trained on each output's own row: an instance
  output of fold f is left out of model f's scores and divided by F - 1, labels by F (model f
  never saw fold f's instance rows, so it scores those outputs low, and the plain mean gives
  instance outputs about (F-1)/F of a label's score).

The rule is patched into a ``git worktree`` of HEAD (the script stops if the line it replaces
is gone) and run there with ``PYTHONPATH``; the main tree is not touched. Local paths only
(``covered`` reads each fold model's ``train_rows.npy`` from its folder).

Usage::

    python benchmarks/cross_fit_alternatives.py --config my.yaml --root RUN --mode one_fold \\
        --out RUN-one_fold
    python benchmarks/paired_ci.py RUN RUN-one_fold
    python benchmarks/neighbor_parity.py RUN-one_fold
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

MARK = "cross_fit_alternatives: test rows scored by the rule %r"
ANCHOR = "        Y = cross_fit_scores(grp.models, X, spec.topk, threads)\n"

RULES = '''

def _held_outputs(specs, _cache={}):
    """Per output column, the fold whose model never trained on the output's own row (-1);
    read once per variant through the g folder's owner (``artifacts``)."""
    import numpy as np

    key = tuple(m.uri for m in specs)
    if key not in _cache:
        rows = [np.load(storage.join(m.uri, artifacts.TRAIN_ROWS)) for m in specs]
        cols = artifacts.read_output_nodes(specs[0].uri)
        seen = np.isin(cols, np.concatenate(rows))
        held = np.full(len(cols), -1, dtype=np.int64)
        for f, r in enumerate(rows):
            held[seen & ~np.isin(cols, r)] = f
        _cache[key] = held
    return _cache[key]


def _alternative_scores(mode, grp, X, idx, topk, threads):
    import numpy as np
    import scipy.sparse as sp

    preds = [g.predict(X, only_topk=topk, threads=threads).tocsr() for g in grp.models]
    if len(preds) == 1:
        return preds[0]
    if mode == "one_fold":
        pick = np.asarray(idx) % len(preds)
        Y = sp.vstack([preds[int(pick[r])][r] for r in range(len(idx))]).tocsr()
    else:  # covered
        held = _held_outputs(grp.specs)
        total = None
        for f, p in enumerate(preds):
            p = p.astype(np.float32)
            p.data[held[p.indices] == f] = 0
            p.eliminate_zeros()
            total = p if total is None else total + p
        den = len(preds) - (held >= 0).astype(np.float32)
        Y = (total @ sp.diags(1.0 / den)).tocsr()
    Y.sort_indices()
    return Y
'''


def patched_tree(mode: str) -> str:
    """A worktree of HEAD whose neighbours stage scores test rows with ``mode``."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wt = tempfile.mkdtemp(prefix=f"pina-xfit-{mode}-")
    os.rmdir(wt)
    subprocess.check_call(["git", "-C", repo, "worktree", "add", "--detach", wt, "HEAD"])
    path = os.path.join(wt, "pina_spark", "stages", "neighbors", "stage.py")
    src = open(path).read()
    if src.count(ANCHOR) != 1:
        raise SystemExit(f"{path}: the line to replace is not there once; update this script")
    src = src.replace(
        ANCHOR, f"        Y = _alternative_scores({mode!r}, grp, X, idx, spec.topk, threads)\n"
    )
    with open(path, "w") as fh:
        fh.write(src + RULES + f"\nlog.warning({MARK!r}, {mode!r})\n")
    return wt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the run's YAML")
    ap.add_argument("--root", required=True, help="the finished run's root")
    ap.add_argument("--mode", required=True, choices=["one_fold", "covered"])
    ap.add_argument("--out", required=True, help="where the copy of the root goes")
    a = ap.parse_args(argv)
    if os.path.exists(a.out):
        raise SystemExit(f"{a.out} exists: give a new folder")
    shutil.copytree(a.root, a.out, symlinks=True)
    wt = patched_tree(a.mode)
    try:
        # PYTHONSAFEPATH: the working directory (this repository, when run from its root) is
        # not put before PYTHONPATH, in the driver nor in Spark's Python workers
        env = dict(os.environ, PYTHONPATH=wt, PYTHONSAFEPATH="1")
        cmd = [sys.executable, "-m", "pina_spark.cli", "run", "--config", a.config]
        cmd += ["--set", f"output={os.path.abspath(a.out)}", "--force"]
        cmd += ["--stages", "neighbors,aggregate,train,evaluate"]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.decode(errors="replace")
        sys.stdout.write(out)
        rc = proc.returncode
        if rc == 0 and MARK % a.mode not in out:
            raise SystemExit("the run did not import the patched code: its rows are the mean's")
    finally:
        subprocess.call(["git", "worktree", "remove", "--force", wt])
    if rc == 0:
        print(f"compare: python benchmarks/paired_ci.py {a.root} {a.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
