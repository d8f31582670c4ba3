"""Train/test parity of the text vectorizer: does it favour the rows it was fitted on?

A vectorizer learned from train rows (the tf-idf, and with ``pretrain.encoder: contrastive`` or
``xtransformer`` the dense encoder, fine-tuned on the train rows' B_pre edges) embeds test rows it
never saw. If it placed train instances closer to their own labels than test instances, the
downstream model would learn to trust a signal that is weaker at test time: the in-sample trap
that out-of-fold g fixed for the neighbours. This module measures it on the published
``embeddings`` with the true labels of both splits (read only to measure, never to fit).

For every sampled instance with at least one label, using the dense part of Phi_pre (its
direction is Phi_dnn's):

- ``cos_true``: mean cosine between the instance and its true label nodes;
- ``cos_margin``: ``cos_true`` minus the instance's mean cosine to all candidate labels;
- ``P@1``, ``R@5``: label retrieval by cosine among the candidate labels.

The ``gap`` entries are train minus test. A frozen encoder has no reason to favour either split,
so its gaps show the noise level; a fine-tuned encoder whose gaps are well above it favours the
rows it saw.

Examples
--------
>>> import numpy as np
>>> lab = np.eye(3, dtype=np.float32)
>>> inst = np.array([[1, 0, 0], [0, 1, 0], [0, .6, .8], [.8, .6, 0]], dtype=np.float32)
>>> r = encoder_parity(inst, np.array(["train", "train", "test", "test"]),
...                    [np.array([0]), np.array([1]), np.array([1]), np.array([0])], lab)
>>> r["train"]["P@1"], r["test"]["P@1"], r["gap"]["P@1"]
(1.0, 0.5, 0.5)
"""

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark import storage
from pina_spark.models.encoders import _l2_rows

log = logging.getLogger(__name__)

__all__ = ["encoder_parity", "measure_run", "PARITY_JSON"]

PARITY_JSON = "encoder_parity.json"
SPLITS = (storage.SPLIT_TRAIN, storage.SPLIT_TEST)
METRICS = ("cos_true", "cos_margin", "P@1", "R@5")


def encoder_parity(
    inst: np.ndarray,
    split: Sequence[str],
    truth: Sequence[np.ndarray],
    labels: np.ndarray,
    chunk: int = 2048,
    exclude: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Per-split vectorizer metrics (see the module docstring) and their train - test gaps.

    Parameters
    ----------
    inst : np.ndarray
        ``(n, D)`` instance vectors (any norm).
    split : sequence of str
        ``train`` / ``test`` per instance (others are ignored).
    truth : sequence of int arrays
        Row positions in ``labels`` of each instance's true labels (empty: instance skipped).
    labels : np.ndarray
        ``(L, D)`` candidate label vectors.
    chunk : int
        Instances scored per matrix product.
    exclude : sequence of int, optional
        Per instance, the row position in ``labels`` of a candidate it must not be scored
        against (its twin: with ``task.labels: graph`` a train item is also a label node with
        the same text, which only train items have), or -1. Left out of the ranking and of the
        mean over all labels, as the neighbours stage leaves twins out.

    Returns
    -------
    dict
        ``{"train": {metric: value, "rows": n}, "test": {...}, "gap": {metric: train - test}}``.
    """
    inst, labels = _l2_rows(inst), _l2_rows(labels)
    splits = np.asarray(split)
    has = np.array([len(t) > 0 for t in truth], dtype=bool)
    excl = (
        np.full(len(truth), -1, dtype=np.int64)
        if exclude is None
        else np.asarray(exclude, dtype=np.int64)
    )
    out: dict[str, Any] = {}
    for sp in SPLITS:
        rows = np.flatnonzero((splits == sp) & has)
        acc = {m: 0.0 for m in METRICS}
        for s in range(0, len(rows), chunk):
            r = rows[s : s + chunk]
            sim = inst[r] @ labels.T
            ex = excl[r]
            has_ex = np.flatnonzero(ex >= 0)
            n_cand = np.full(len(r), labels.shape[0], dtype=np.float64)
            sums = sim.sum(axis=1)
            sums[has_ex] -= sim[has_ex, ex[has_ex]]
            n_cand[has_ex] -= 1
            sim[has_ex, ex[has_ex]] = -np.inf
            top = np.argsort(-sim, axis=1, kind="stable")[:, :5]
            for j, i in enumerate(r):
                t = np.asarray(truth[i], dtype=np.int64)
                ct = float(sim[j, t].mean())
                acc["cos_true"] += ct
                acc["cos_margin"] += ct - float(sums[j] / max(n_cand[j], 1.0))
                acc["P@1"] += float(top[j, 0] in set(t.tolist()))
                acc["R@5"] += len(set(top[j].tolist()) & set(t.tolist())) / len(t)
        n = max(len(rows), 1)
        out[sp] = {m: round(v / n, 6) for m, v in acc.items()}
        out[sp]["rows"] = int(len(rows))
    out["gap"] = {m: round(out[SPLITS[0]][m] - out[SPLITS[1]][m], 6) for m in METRICS}
    return out


def _sampled(node_id: str, fraction: float) -> bool:
    h = hashlib.sha1(f"pina-parity\x1f{node_id}".encode()).hexdigest()
    return int(h[:12], 16) / 16**12 < fraction


def measure_run(
    spark,
    paths,
    max_per_split: int = 5000,
    max_labels: int = 50000,
    encoder=None,
    exclude_twins: bool = False,
) -> dict[str, Any] | None:
    """:func:`encoder_parity` on a finished run's ``embeddings``, ``nodes`` and
    ``graph/instance_labels``; ``None`` when the run has no test instance or no embeddings.

    At most ``max_per_split`` instances per split (by a hash of the id, so the sample is the same in
    every run of the same data) and ``max_labels`` candidate labels (every sampled instance's true
    labels, then others by hash) are read to the driver. With ``encoder`` (an object with
    ``encode(texts) -> (n, D) array``, e.g. :func:`pina_spark.models.encoders.load_encoder`'s), the
    same sample's texts are encoded with it instead of reading the run's ``embeddings``: the parity
    of another encoder (the frozen one, for the noise level) on exactly the same rows. With
    ``exclude_twins`` (``task.labels: graph``, where labels are items), an instance's own label node
    (same ``node_id``) is no candidate for it: only train items have one, and its text is the
    instance's own.

    Example::

        measure_run(spark, RunPaths("/tmp/run"))["gap"]
        # {'cos_true': 0.004, 'cos_margin': 0.002, 'P@1': 0.01, 'R@5': 0.003}
    """
    if not storage.is_complete(spark, paths.table(storage.EMBEDDINGS)):
        log.info(
            "encoder parity: no complete %s table, not measured", paths.table(storage.EMBEDDINGS)
        )
        return None
    nodes = storage.collect_arrow(
        storage.read_table(spark, paths, storage.NODES).select(
            storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.SPLIT
        )
    ).to_pandas()
    inst = nodes[
        (nodes[storage.KIND] == storage.KIND_INSTANCE) & nodes[storage.SPLIT].isin(list(SPLITS))
    ]
    counts = inst[storage.SPLIT].value_counts().to_dict()
    if not counts.get(storage.SPLIT_TEST):
        return None
    frac = {sp: min(1.0, max_per_split / max(counts.get(sp, 0), 1)) for sp in SPLITS}
    keep = [_sampled(i, frac[s]) for i, s in zip(inst[storage.NODE_ID], inst[storage.SPLIT])]
    inst = inst[keep]
    il = storage.collect_arrow(
        storage.read_table(spark, paths, storage.INSTANCE_LABELS).join(
            spark.createDataFrame(
                inst[[storage.NODE_INDEX]].rename(
                    columns={storage.NODE_INDEX: storage.INSTANCE_INDEX}
                )
            ),
            storage.INSTANCE_INDEX,
            "left_semi",
        )
    ).to_pandas()
    labels = nodes[nodes[storage.KIND] == storage.KIND_LABEL]
    needed = set(il[storage.LABEL_INDEX].tolist())
    if len(labels) > max_labels:
        rest = labels[~labels[storage.NODE_INDEX].isin(needed)]
        fr = max(0.0, (max_labels - len(needed)) / max(len(rest), 1))
        labels = labels[
            labels[storage.NODE_INDEX].isin(needed)
            | labels[storage.NODE_ID].map(lambda i: _sampled(i, fr))
        ]
    want = np.concatenate(
        [inst[storage.NODE_INDEX].to_numpy(), labels[storage.NODE_INDEX].to_numpy()]
    )
    idx, vecs = (
        _run_dense(spark, paths, want)
        if encoder is None
        else _encoded_dense(spark, paths, want, encoder)
    )
    row_of = {int(i): r for r, i in enumerate(idx)}
    lab_idx = [int(i) for i in labels[storage.NODE_INDEX] if int(i) in row_of]
    lab_pos = {i: p for p, i in enumerate(lab_idx)}
    by_inst: dict[int, list[int]] = {}
    for i, lab in zip(il[storage.INSTANCE_INDEX].tolist(), il[storage.LABEL_INDEX].tolist()):
        if lab in lab_pos:
            by_inst.setdefault(int(i), []).append(lab_pos[lab])
    inst_idx = [int(i) for i in inst[storage.NODE_INDEX] if int(i) in row_of]
    split_of = dict(zip(inst[storage.NODE_INDEX].astype(int), inst[storage.SPLIT]))
    twin_pos: dict[int, int] = {}
    if exclude_twins:
        lab_of_id = dict(zip(labels[storage.NODE_ID], labels[storage.NODE_INDEX].astype(int)))
        for i, nid in zip(inst[storage.NODE_INDEX].astype(int), inst[storage.NODE_ID]):
            lab = lab_of_id.get(nid)
            if lab is not None and lab in lab_pos and lab_pos[lab] not in by_inst.get(int(i), []):
                twin_pos[int(i)] = lab_pos[lab]
    lab_vecs = vecs[[row_of[i] for i in lab_idx]] if lab_idx else np.zeros((0, vecs.shape[1]))
    res = encoder_parity(
        vecs[[row_of[i] for i in inst_idx]],
        [split_of[i] for i in inst_idx],
        [np.array(by_inst.get(i, []), dtype=np.int64) for i in inst_idx],
        lab_vecs,
        exclude=[twin_pos.get(i, -1) for i in inst_idx],
    )
    res["candidate_labels"] = len(lab_idx)
    res["vectors"] = "embeddings (dense part)" if encoder is None else "encoder given"
    res["twins_excluded"] = len(twin_pos)
    res["sample"] = {
        "max_per_split": max_per_split,
        "max_labels": max_labels,
        "rule": "sha1('pina-parity' + '\\x1f' + node_id) below the split's fraction",
    }
    log.info("encoder parity (train - test): %s", res["gap"])
    return res


def _wanted(spark, paths, table: str, want: np.ndarray, columns: list[str]):
    """The rows of ``table`` whose node_index is in ``want``, as Arrow on the driver."""
    return storage.collect_arrow(
        storage.read_table(spark, paths, table)
        .select(*columns)
        .join(
            spark.createDataFrame([(int(i),) for i in want], [storage.NODE_INDEX]),
            storage.NODE_INDEX,
            "left_semi",
        )
    )


def _run_dense(spark, paths, want: np.ndarray):
    """(node indices, dense vectors) of ``want`` from the run's ``embeddings``."""
    emb = _wanted(spark, paths, storage.EMBEDDINGS, want, [storage.NODE_INDEX, storage.DENSE])
    idx = emb.column(storage.NODE_INDEX).to_numpy()
    dense = emb.column(storage.DENSE).combine_chunks()
    dim = len(dense[0]) if len(dense) else 0
    return idx, dense.flatten().to_numpy(zero_copy_only=False).reshape(len(idx), dim)


def _encoded_dense(spark, paths, want: np.ndarray, encoder):
    """(node indices, vectors) of ``want``: their ``nodes`` texts encoded with ``encoder``."""
    tbl = _wanted(spark, paths, storage.NODES, want, [storage.NODE_INDEX, storage.TEXT])
    vecs = np.asarray(encoder.encode(tbl.column(storage.TEXT).to_pylist()), dtype=np.float32)
    return tbl.column(storage.NODE_INDEX).to_numpy(), vecs
