"""g's fits: the independent XR-Linear models of the pretrain stage, and where they run.

Per variant, the pretrain stage fits F models on the same X and Y with ``neighbors.train_mode:
out_of_fold`` (one per fold: model f never sees fold f's instance rows, nor their twin label
rows), or one ``full`` model with ``in_sample`` (the paper's recipe). There is no separate
evaluation fit and, out of fold, no ``full`` fit: each fold model predicts its own fold's rows
right after training, which gives g's held-out report on every train row
(:func:`oof_metrics`), and test and new rows are predicted by all F fold models together
(cross-fitting, in the neighbours stage). The fits are independent of each other, so they are
:class:`Fit` s of one plan, decided once on the driver, and run either

- on the driver, one after another (``pretrain.train_on: driver``; what ``auto`` picks in local
  mode, where executors share the driver's cores), or
- as Spark tasks, one fit per task (``executors``; what ``auto`` picks on a cluster): the driver
  writes each variant's inputs once (:func:`save_bundle`: Y and the row facts, one ``.npz``)
  under the run's staging folder, every task loads its variant's bundle, takes its rows' X from
  its machine's memory-mapped ``embeddings`` (:class:`FitTask` ``store``; where pyarrow does not
  reach the table, X travels in the bundle instead), trains with PECOS on the task's cores
  (``spark.task.cpus``) and copies the model folder back next to the bundle; the driver then
  assembles and publishes the models folder as before.

Both paths run the same function, :func:`run_fit`, on the same inputs, so they save the same
models (test: ``test_pretrain.py::test_fits_on_executors_equal_fits_on_the_driver``).

Examples
--------
>>> [f.name for f in plan_fits("pina", folds=3)]
['pina/fold=0', 'pina/fold=1', 'pina/fold=2']
>>> [f.name for f in plan_fits("pina", folds=0)]
['pina/full']
"""

import dataclasses as dc
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pina_spark import runtime, storage
from pina_spark.models.artifacts import g_dir, g_name, load_g, save_g
from pina_spark.models.bpre import Problem
from pina_spark.runtime.embstore import StoreSpec
from pina_spark.runtime.progress import heartbeat
from pina_spark.storage import npz

log = logging.getLogger(__name__)

__all__ = [
    "Fit",
    "FitTask",
    "plan_fits",
    "make_bundle",
    "save_bundle",
    "load_bundle",
    "run_fit",
    "write_bundles",
    "fits_on_executors",
    "variant_card",
    "label_tree",
    "train_g",
    "predict_g",
    "exclude_self",
    "ranking_metrics",
    "combine_metrics",
]

P_KS = (1, 3, 5)
R_KS = (1, 3, 5, 10)


# --------------------------------------------------------------------------- training blocks
def exclude_self(
    pred, row_nodes: np.ndarray, output_nodes: np.ndarray, twin_nodes: np.ndarray | None = None
):
    """Drop, in every row ``r`` of ``pred``, the column whose node is ``row_nodes[r]`` (and the
    column of ``twin_nodes[r]`` when given and >= 0: the item's label node, task.labels: graph).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> P = sp.csr_matrix(np.array([[0.9, 0.5], [0.2, 0.8]]))
    >>> exclude_self(P, np.array([10, 11]), np.array([10, 12])).toarray().tolist()
    [[0.0, 0.5], [0.2, 0.8]]
    """
    import scipy.sparse as sp

    pred = sp.csr_matrix(pred, copy=True)
    entry_row = _entry_rows(pred)
    for nodes_r in (row_nodes, twin_nodes):
        if nodes_r is None or not len(output_nodes):
            continue
        nodes_r = np.asarray(nodes_r, dtype=np.int64)
        pos = np.searchsorted(output_nodes, nodes_r)
        pos = np.minimum(pos, len(output_nodes) - 1)
        hit = (output_nodes[pos] == nodes_r) & (nodes_r >= 0)
        col = np.where(hit, pos, -1)  # per row: the column to drop, -1 for none
        pred.data[pred.indices == col[entry_row]] = 0.0
    pred.eliminate_zeros()
    return pred


def _entry_rows(M) -> np.ndarray:
    """The row (int64) of every stored entry of csr ``M``, in storage order.

    >>> import scipy.sparse as sp
    >>> _entry_rows(sp.csr_matrix(np.array([[1, 2], [0, 0], [0, 3]]))).tolist()
    [0, 0, 2]
    """
    return np.repeat(np.arange(M.shape[0], dtype=np.int64), np.diff(M.indptr))


def ranking_metrics(
    pred, truth, p_ks: Sequence[int] = P_KS, r_ks: Sequence[int] = R_KS
) -> dict[str, float]:
    """Mean P@k and R@k of score matrix ``pred`` against binary ``truth`` (same shape), over
    rows with at least one positive. Ties: score desc, column asc.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> P = sp.csr_matrix(np.array([[0.9, 0.5, 0.0], [0.1, 0.2, 0.3]]))
    >>> T = sp.csr_matrix(np.array([[1, 0, 0], [1, 0, 0]]))
    >>> m = ranking_metrics(P, T, (1,), (1, 3))
    >>> m["P@1"], m["R@3"], m["rows"]
    (0.5, 1.0, 2)
    """
    import scipy.sparse as sp

    pred = sp.csr_matrix(pred)
    truth = sp.csr_matrix(truth, copy=True)
    truth.sum_duplicates()
    truth.eliminate_zeros()
    n, ncols = pred.shape
    kmax = max(list(p_ks) + list(r_ks))
    # every stored score, ordered by row, then score desc, then column asc; its rank in its row
    entry_row = _entry_rows(pred)
    order = np.lexsort((pred.indices, -pred.data, entry_row))
    rank = np.arange(len(order)) - pred.indptr[:-1][entry_row[order]]
    in_top = rank < kmax
    top, top_rank = order[in_top], rank[in_top]
    top_row = entry_row[top]
    # a top entry hits where (row, column) is a positive of truth
    keys = _entry_rows(truth) * ncols + truth.indices
    hit = np.isin(top_row * ncols + pred.indices[top], keys)
    npos_all = np.diff(truth.indptr)
    has_pos = npos_all > 0
    out: dict[str, float] = {"rows": int(has_pos.sum())}
    if not has_pos.any():
        return out
    npos = npos_all[has_pos].astype(np.float64)

    def hits_at(k: int) -> np.ndarray:
        return np.bincount(top_row[hit & (top_rank < k)], minlength=n)[has_pos].astype(float)

    for k in p_ks:
        out[f"P@{k}"] = round(float(np.mean(hits_at(k) / k)), 6)
    for k in r_ks:
        out[f"R@{k}"] = round(float(np.mean(hits_at(k) / npos)), 6)
    return out


def combine_metrics(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """One :func:`ranking_metrics` result from those of disjoint row sets (each fold's rows):
    every mean weighted by its ``rows``, so the result is the mean over all rows.

    Examples
    --------
    >>> combine_metrics([{"rows": 1, "P@1": 1.0}, {"rows": 3, "P@1": 0.0}, {"rows": 0}])
    {'rows': 4, 'P@1': 0.25}
    """
    parts = [p for p in parts if p.get("rows")]
    n = int(sum(p["rows"] for p in parts))
    out: dict[str, float] = {"rows": n}
    if not n:
        return out
    for key in parts[0]:
        if key != "rows":
            out[key] = round(sum(p[key] * p["rows"] for p in parts) / n, 6)
    return out


def label_tree(X, Y, xcfg, times: dict | None = None):
    """g's label tree: hierarchical k-means (``nr_splits``, ``max_leaf_size``, ``seed`` of
    ``xcfg``) on the PIFA label embeddings of csr ``X`` and ``Y`` (the sum of the X rows that
    carry each output). ``times`` gets the seconds of ``pifa`` and ``tree``."""
    from pecos.xmc import Indexer, LabelEmbeddingFactory

    t0 = time.time()
    label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
    t1 = time.time()
    chain = Indexer.gen(
        label_feat,
        indexer_type="hierarchicalkmeans",
        nr_splits=int(xcfg.nr_splits),
        max_leaf_size=int(xcfg.max_leaf_size),
        seed=int(xcfg.seed),
    )
    if times is not None:
        times.update({"pifa": round(t1 - t0, 2), "tree": round(time.time() - t1, 2)})
    return chain


def train_g(
    X,
    Y,
    xcfg,
    what: str = "g",
    threads: int = -1,
    times: dict | None = None,
    chain=None,
    solver: dict[str, Any] | None = None,
):
    """Train XR-Linear g: hierarchical k-means on PIFA(Y, X) (:func:`label_tree`), then the
    linear rankers.

    Parameters
    ----------
    X : csr_matrix float32
        Phi_pre features of the training rows (sorted indices).
    Y : csr_matrix float32
        Training rows x output nodes.
    xcfg : config.XLinearConfig
        nr_splits, max_leaf_size, seed, Cp, Cn, threshold, solver_type, beam_size, topk,
        post_processor.
    what : str
        Name used in the progress log.
    threads : int
        PECOS threads (-1: every core of the machine; a Spark task passes its own cores).
    times : dict, optional
        Filled with the wall seconds of the three steps: ``pifa`` (label features),
        ``tree`` (hierarchical k-means), ``rankers`` (the linear models of every level);
        ``layers``, the seconds of each level of the rankers, top first (from PECOS' own
        "Training Layer" log records), and ``widths``, the nodes of each level.
    chain : pecos ClusterChain, optional
        A label tree made beforehand (:func:`label_tree`; ``pifa`` and ``tree`` are then 0);
        the stage always makes g's own (benchmarks compare others).
    solver : dict, optional
        More of PECOS' solver parameters (``max_iter``, ``eps``) for the rankers; the stage
        passes none, so PECOS' defaults apply (benchmarks compare others).

    Example::

        model = train_g(X, Y, cfg.pretrain.xlinear)
    """
    import scipy.sparse as sp
    from pecos.xmc.xlinear.model import XLinearModel

    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    Y = sp.csr_matrix(Y, dtype=np.float32)
    Y.sort_indices()
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"train_g: X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    with heartbeat(
        f"{what}: XR-Linear on {X.shape[0]} rows x {Y.shape[1]} outputs "
        f"({Y.nnz} positives, {X.shape[1]} features)"
    ):
        steps: dict[str, float] = {"pifa": 0.0, "tree": 0.0}
        if chain is None:
            chain = label_tree(X, Y, xcfg, steps)
        t2 = time.time()
        clock = _LayerClock()
        with clock:
            model = XLinearModel.train(
                X,
                Y.tocsc(),
                C=chain,
                Cp=float(xcfg.Cp),
                Cn=float(xcfg.Cn),
                threshold=float(xcfg.threshold),
                solver_type=str(xcfg.solver_type),
                beam_size=int(xcfg.beam_size),
                only_topk=int(xcfg.topk),
                post_processor=str(xcfg.post_processor),
                threads=int(threads),
                **(solver or {}),
            )
    if times is not None:
        end = time.time()
        times.update(
            {
                **steps,
                "rankers": round(end - t2, 2),
                "layers": clock.layers(end),
                # nodes of each level of the label tree, top first (the last: the outputs)
                "widths": [int(c.shape[0]) for c in chain],
            }
        )
    return model


class _LayerClock(logging.Handler):
    """Times PECOS' levels from its "Training Layer i of n" log records, while in a ``with``
    block (the PECOS logger is set to INFO there, and restored after).

    >>> c = _LayerClock()
    >>> c.starts = [10.0, 10.5, 12.0]
    >>> c.layers(15.0)
    [0.5, 1.5, 3.0]
    """

    LOGGER = "pecos.xmc.base"

    def __init__(self):
        super().__init__(logging.INFO)
        self.starts: list[float] = []
        self._level = logging.NOTSET
        self._propagate = True

    def emit(self, record: logging.LogRecord) -> None:
        if "Training Layer" in record.getMessage():
            self.starts.append(record.created)

    def __enter__(self) -> "_LayerClock":
        lg = logging.getLogger(self.LOGGER)
        self._level, self._propagate = lg.level, lg.propagate
        if lg.getEffectiveLevel() > logging.INFO:
            # heard here only: INFO records must not reach handlers the user set above INFO
            lg.setLevel(logging.INFO)
            lg.propagate = False
        lg.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        lg = logging.getLogger(self.LOGGER)
        lg.removeHandler(self)
        lg.setLevel(self._level)
        lg.propagate = self._propagate

    def layers(self, end: float) -> list[float]:
        """Seconds of each level, given the end of the last one."""
        ts = self.starts + [end]
        return [round(b - a, 2) for a, b in zip(ts, ts[1:])]


def predict_g(model, X, xcfg, topk: int | None = None):
    """Scores of g on X (csr rows x outputs) with the configured beam/post-processor.

    Example::

        P = predict_g(model, X, cfg.pretrain.xlinear, topk=11)
    """
    import scipy.sparse as sp

    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    return model.predict(
        X,
        beam_size=int(xcfg.beam_size),
        only_topk=int(topk if topk is not None else xcfg.topk),
        post_processor=str(xcfg.post_processor),
    )


# --------------------------------------------------------------------------- the plan
@dc.dataclass(frozen=True)
class Fit:
    """One model of g: ``kind`` is ``full`` (``in_sample``: every row) or ``fold`` (``fold`` =
    f of ``folds``: every row but fold f's instance rows and their twin label rows)."""

    variant: str
    kind: str
    fold: int | None = None
    folds: int = 0

    @property
    def name(self) -> str:
        return g_name(self.variant, self.fold)


def plan_fits(variant: str, folds: int) -> list[Fit]:
    """The fits of one variant, in the order the driver runs them: F fold models
    (``folds`` > 0, ``out_of_fold``), else the one ``full`` model (``in_sample``)."""
    if folds:
        return [Fit(variant, "fold", f, folds) for f in range(folds)]
    return [Fit(variant, "full")]


def make_bundle(pb: Problem, X, fold, out) -> dict[str, Any]:
    """A variant's training inputs as arrays: X, Y and, per row, its node, kind, twin column,
    fold (``-1``: in every fold model) and whether its item was kept out of the encoder's
    fine-tuning pairs (``out``: ``pretrain.finetune_holdout_fraction``; g's report gives
    those rows' metrics apart). ``X`` is ``None`` when the fit tasks read it themselves
    (:class:`FitTask` ``store``): row ``r`` is node ``rows[r]``."""
    return {
        "X": X,
        "Y": pb.Y,
        "rows": np.asarray(pb.rows, dtype=np.int64),
        "cols": np.asarray(pb.cols, dtype=np.int64),
        "is_inst": np.asarray(pb.is_inst, dtype=bool),
        "twin": np.asarray(pb.twin_col, dtype=np.int64),
        "fold": np.asarray(fold, dtype=np.int64),
        "out": np.asarray(out, dtype=bool),
    }


def save_bundle(b: dict[str, Any]) -> bytes:
    """One ``.npz`` (no pickles) of a bundle.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> b = {"X": sp.csr_matrix(np.eye(2, dtype=np.float32)), "Y": sp.csr_matrix(np.eye(2)),
    ...      "rows": np.arange(2), "cols": np.arange(2), "is_inst": np.ones(2, bool),
    ...      "twin": -np.ones(2, np.int64), "fold": np.zeros(2, np.int64),
    ...      "out": np.zeros(2, bool)}
    >>> load_bundle(save_bundle(b))["X"].toarray().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    arrays = {k: v for k, v in b.items() if k not in ("X", "Y")}
    mats = {"Y": b["Y"]} if b.get("X") is None else {"X": b["X"], "Y": b["Y"]}
    return npz.dumps(mats, arrays)


def load_bundle(raw: bytes) -> dict[str, Any]:
    """The bundle :func:`save_bundle` wrote (``X`` absent when it was written without)."""
    mats, arrays = npz.loads(raw, ["Y"], optional=["X"])
    b: dict[str, Any] = {k: arrays[k] for k in ("rows", "cols", "is_inst", "twin", "fold", "out")}
    b.update(mats)
    return b


# --------------------------------------------------------------------------- one fit
def oof_metrics(model, b: dict[str, Any], held: np.ndarray, xcfg) -> dict[str, Any]:
    """g's held-out report of one fold model: P@k / R@k of ``model`` on the rows ``held``
    (its own fold's instance rows: rows it never saw), self and twin label excluded from the
    predictions and from the truth (:func:`exclude_self`); ``finetune_heldout``: the same over
    the rows whose item was also kept out of the encoder's fine-tuning pairs (``out``)."""
    X, Y, rows, cols, twin = b["X"], b["Y"], b["rows"], b["cols"], b["twin"]
    kmax = max(max(P_KS), max(R_KS)) + 1  # +1: room for self, removed below
    idx = np.flatnonzero(held)
    pred = exclude_self(
        predict_g(model, X[idx], xcfg, topk=max(kmax, xcfg.topk)), rows[idx], cols, twin[idx]
    )
    truth = exclude_self(Y[idx], rows[idx], cols, twin[idx])
    ev: dict[str, Any] = ranking_metrics(pred, truth)
    unseen = b["out"][idx]
    if unseen.any():
        ev["finetune_heldout"] = ranking_metrics(pred[unseen], truth[unseen])
    return ev


def run_fit(
    fit: Fit, b: dict[str, Any], xcfg, models_dir: str, threads: int = -1
) -> dict[str, Any]:
    """Train ``fit`` on bundle ``b`` and save it under ``models_dir`` (its :func:`g_dir`).
    A fold model then predicts its own fold's instance rows, which it never saw: its card's
    ``oof_eval`` (:func:`oof_metrics`) is its share of g's held-out report. Returns the fit's
    card."""
    X, Y, rows, cols = b["X"], b["Y"], b["rows"], b["cols"]
    is_inst, v = b["is_inst"], fit.variant
    keep = np.ones(len(rows), dtype=bool) if fit.kind == "full" else b["fold"] != fit.fold
    t0 = time.time()
    steps: dict[str, Any] = {}
    m = train_g(X[keep], Y[keep], xcfg, what=f"g[{fit.name}]", threads=threads, times=steps)
    secs = round(time.time() - t0, 2)
    info: dict[str, Any] = {"variant": v, "fold": fit.fold, "rows": int(keep.sum())}
    if fit.kind == "fold":
        info.update(
            {
                "folds": fit.folds,
                "excluded_instance_rows": int((~keep & is_inst).sum()),
                "excluded_twin_label_rows": int((~keep & ~is_inst).sum()),
            }
        )
    info["output_nodes"] = int(len(cols))
    info["positives"] = int(Y[keep].nnz)
    info["train_s"] = secs
    info["steps_s"] = steps
    where = g_dir(models_dir, v, fit.fold)
    size = save_g(m, cols, where, train_rows=rows[keep], info=info)
    oof: dict[str, Any] | None = None
    if fit.kind == "fold":
        # the saved model in PECOS' predict-only form, as the neighbours stage loads it: it
        # predicts several times faster than the training form the fit returned
        t1 = time.time()
        del m
        oof = oof_metrics(load_g(where, predict_only=True), b, ~keep & is_inst, xcfg)
        oof["predict_s"] = round(time.time() - t1, 2)
    card = {
        "fit": fit.name,
        **{k: x for k, x in info.items() if k not in ("variant",)},
        "size_bytes": size,
    }
    if oof is not None:
        card["oof_eval"] = oof
    return card


def heldout_report(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """g's held-out report of a variant from its fold models' ``oof_eval`` (every train
    instance row, each predicted by the fold model that never saw it); ``None`` with
    ``in_sample`` (one model saw every row: nothing is held out)."""
    parts = [r["oof_eval"] for r in results if "oof_eval" in r]
    if not parts:
        return None
    ev: dict[str, Any] = combine_metrics(
        [{k: x for k, x in p.items() if k not in ("finetune_heldout", "predict_s")} for p in parts]
    )
    ev["heldout_rows"] = int(ev.pop("rows"))
    ev["rows"] = ev["heldout_rows"]
    fh = [p["finetune_heldout"] for p in parts if "finetune_heldout" in p]
    if fh:
        ev["finetune_heldout"] = combine_metrics(fh)
    ev["predict_s"] = round(sum(p.get("predict_s", 0.0) for p in parts), 2)
    return ev


def variant_card(
    stats: dict[str, Any], results: Sequence[dict[str, Any]], F: int
) -> dict[str, Any]:
    """The model card entry of a variant from its fits' cards: the problem's statistics,
    ``heldout_eval`` (:func:`heldout_report`, out of fold only), ``full`` (``in_sample``),
    ``folds``, ``folds_train_s``, ``folds_size_bytes``, ``fits_train_s`` (every fit)."""
    vcard: dict[str, Any] = dict(stats)
    ev = heldout_report(results)
    if ev is not None:
        vcard["heldout_eval"] = ev
    folds = []
    for r in results:
        if r.get("fold") is None:
            vcard["full"] = {
                "train_s": r["train_s"],
                "size_bytes": r["size_bytes"],
                "rows": r["rows"],
                "steps_s": r.get("steps_s", {}),
            }
        else:
            folds.append(
                {
                    k: r[k]
                    for k in (
                        "fold",
                        "rows",
                        "excluded_instance_rows",
                        "excluded_twin_label_rows",
                        "train_s",
                        "size_bytes",
                        "steps_s",
                    )
                }
            )
    if F:
        folds.sort(key=lambda c: c["fold"])
        vcard["folds"] = folds
        vcard["folds_train_s"] = round(sum(c["train_s"] for c in folds), 2)
        vcard["folds_size_bytes"] = int(sum(c["size_bytes"] for c in folds))
    vcard["fits_train_s"] = round(sum(float(r["train_s"]) for r in results), 2)
    return vcard


# --------------------------------------------------------------------------- fits as Spark tasks
@dc.dataclass(frozen=True)
class FitTask:
    """What a fit task needs (the executor function closes over one tuple of these).

    Attributes:
        fit: the model to train.
        bundle: URI of its variant's :func:`save_bundle` file.
        out: URI the task copies its model folder to (``<scratch>/models``: same layout as the
            models folder).
        xlinear: its variant's g settings (``pretrain.xlinear_of``) as a plain dict (rebuilt into
            the config on the executor).
        store: ``None`` (X is in the bundle) or the :class:`~pina_spark.runtime.embstore.StoreSpec`
            of its machine's memory-mapped ``embeddings``: the task takes its rows' X from there
            (the bundle then holds no X, and the driver never builds one).
    """

    fit: Fit
    bundle: str
    out: str
    xlinear: dict[str, Any]
    store: StoreSpec | None = None


def _fit_work(tasks: Sequence[FitTask]):
    """Driver side: the executor function of the fit tasks (``i`` -> ``tasks[i]``)."""

    def work(i: int, threads: int) -> dict[str, Any]:
        from pina_spark.config import XLinearConfig

        t = tasks[i]
        b = load_bundle(storage.read_inputs_of(t.bundle, f"fit {t.fit.name}"))
        if t.store is not None:
            from pina_spark.runtime import embstore

            E = embstore.open_store(t.store)
            width = t.store.width
            b["X"] = embstore.features_of_nodes(E, b["rows"], width, f"g[{t.fit.name}]")
        xcfg = XLinearConfig.from_dict(t.xlinear, prefix="pretrain.xlinear.")
        with tempfile.TemporaryDirectory(prefix="pina-fit-") as d:
            card = run_fit(t.fit, b, xcfg, d, threads=threads)
            src = g_dir(d, t.fit.variant, t.fit.fold)
            storage.copy_dir(src, g_dir(t.out, t.fit.variant, t.fit.fold))
        return {"card": json.dumps(card, sort_keys=True)}

    return work


def bundle_uri(scratch: str, variant: str) -> str:
    """Where :func:`write_bundles` puts a variant's bundle under ``scratch``."""
    return f"{scratch}/inputs/{variant}.npz"


def write_bundles(
    bundle_of: Callable[[str], dict[str, Any]], variants: Sequence[str], scratch: str
) -> None:
    """Write each variant's bundle (``bundle_of(variant)``, called once per variant and
    dropped once written: one variant's matrices at a time) for :func:`fits_on_executors`."""
    for v in variants:
        b = bundle_of(v)
        storage.write_bytes(bundle_uri(scratch, v), save_bundle(b))
        del b


def fits_on_executors(
    spark,
    fits: Sequence[Fit],
    xcfgs: dict[str, Any],
    scratch: str,
    models_dir: str,
    store: StoreSpec | None = None,
) -> list[dict[str, Any]]:
    """Run ``fits`` as Spark tasks, one each, on the bundles :func:`write_bundles` wrote under
    ``scratch`` (a staging URI every executor reaches; the caller deletes it), each with its
    variant's settings (``xcfgs``: variant -> ``XLinearConfig``); their models end up
    in the local ``models_dir`` (the folder the driver publishes). With ``store`` (the spec of
    :func:`pina_spark.runtime.embstore.open_store`) the bundles hold no X: each task takes its rows
    from its machine's memory-mapped ``embeddings``. Returns the fits' cards in the order of
    ``fits``."""
    with heartbeat(f"{len(fits)} fits of g as Spark tasks"):
        tasks = [
            FitTask(
                f,
                bundle_uri(scratch, f.variant),
                f"{scratch}/models",
                xcfgs[f.variant].to_dict(),
                store,
            )
            for f in fits
        ]
        rows = runtime.one_task_each(spark, len(tasks), _fit_work(tasks), "card string")
    cards = {i: json.loads(r["card"]) for i, r in rows.items()}
    for f in fits:
        dst = g_dir(models_dir, f.variant, f.fold)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        storage.copy_dir(g_dir(f"{scratch}/models", f.variant, f.fold), dst)
    return [cards[i] for i in range(len(tasks))]
