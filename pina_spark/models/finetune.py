"""Fine-tuning the dense encoder Phi_dnn on B_pre (the ``vectorizer`` stage's heavy step).

``pretrain.encoder: contrastive``: the base encoder (shipped MiniLM or ``encoder_path``) is tuned
on text pairs taken from B_pre edges with in-batch negatives (:mod:`pina_spark.models.contrastive`);
:func:`contrastive_candidates` decides which edges may become pairs (never a test row, never an
item of g's held-out report, never a row with itself or its twin). ``pretrain.encoder:
xtransformer``: a PECOS XR-Transformer is fine-tuned on B_pre of variant ``pina`` and only its
text encoder is kept. Both return ``(encoder, folder, statistics)``; the stage saves the folder
inside the vectorizer.

Example::

    enc, folder, stats = fine_tune_contrastive(problems, nodes, cfg.pretrain, "/tmp/ct",
                                               twins=False)
"""

import logging

import numpy as np

from pina_spark import storage
from pina_spark.models.bpre import Nodes, Problem
from pina_spark.runtime.progress import heartbeat
from pina_spark.storage.folds import is_heldout

log = logging.getLogger(__name__)

__all__ = ["contrastive_candidates", "fine_tune_contrastive", "fine_tune_xtransformer"]


def fine_tune_xtransformer(pre, problems, nodes: Nodes, pcfg, out_dir: str):
    """Fine-tune the XR-Transformer encoder on B_pre of variant ``pina`` (or the only variant)."""
    from pina_spark.models.encoders import XTransformerEncoder, train_xtransformer_encoder

    v = "pina" if "pina" in problems else sorted(problems)[0]
    pb = problems[v]
    texts = ["" if t is None else str(t) for t in nodes.text[nodes.pos(pb.rows)]]
    X_tfidf = pre.predict(texts)
    with heartbeat(f"xtransformer fine-tuning on {v} ({len(texts)} rows)"):
        stats = train_xtransformer_encoder(
            texts,
            pb.Y,
            X_tfidf,
            out_dir,
            init_path=pcfg.encoder_path,
            max_length=pcfg.max_length,
            params=pcfg.xtransformer,
            xlinear=pcfg.xlinear,
        )
    stats["variant"] = v
    return XTransformerEncoder(out_dir, pcfg.max_length), out_dir, stats


def contrastive_candidates(
    problems: dict[str, Problem],
    nodes: "Nodes",
    which: str,
    holdout_fraction: float = 0.0,
    twins: bool = False,
) -> dict[str, np.ndarray]:
    """Candidate fine-tuning pairs: every B_pre edge from a train-instance row to another node
    (self and the row's twin label excluded), over all variants; ``which`` keeps ``labels``,
    ``instances`` or ``both`` kinds of target node. Arrays of node indices ``anchor``, ``node``.

    Pairs that touch an item kept out of fine-tuning (``holdout_fraction``,
    ``pretrain.finetune_holdout_fraction``: the anchor, an instance node, or with ``twins`` --
    ``task.labels: graph`` -- a label node that is the item) are left out, so the encoder never
    saw what g's report on those rows (``finetune_heldout``) asks g to predict.

    Example::

        contrastive_candidates(problems, nodes, "both")["anchor"][:3]  # array([0, 0, 1])
    """
    anchors, targets = [], []
    for pb in problems.values():
        Y = pb.Y.tocoo()
        r, c = Y.row, Y.col
        keep = pb.is_inst[r] & (pb.rows[r] != pb.cols[c]) & (pb.twin_col[r] != pb.cols[c])
        anchors.append(pb.rows[r[keep]])
        targets.append(pb.cols[c[keep]])
    anchor = np.concatenate(anchors) if anchors else np.zeros(0, np.int64)
    node = np.concatenate(targets) if targets else np.zeros(0, np.int64)
    kind = nodes.kind[nodes.pos(node)]
    keep = np.ones(len(anchor), dtype=bool)
    if which != "both":
        keep &= kind == (storage.KIND_LABEL if which == "labels" else storage.KIND_INSTANCE)
    if holdout_fraction > 0:
        held = {
            i
            for i in nodes.node_id[nodes.kind == storage.KIND_INSTANCE]
            if is_heldout(i, holdout_fraction)
        }
        node_is_item = (kind == storage.KIND_INSTANCE) | (twins & (kind == storage.KIND_LABEL))
        keep &= ~np.isin(nodes.node_id[nodes.pos(anchor)], list(held))
        keep &= ~(node_is_item & np.isin(nodes.node_id[nodes.pos(node)], list(held)))
    return {"anchor": anchor[keep], "node": node[keep]}


def fine_tune_contrastive(problems, nodes: Nodes, pcfg, out_dir: str, twins: bool):
    """``encoder: contrastive``: fine-tune the base encoder on B_pre text pairs
    (:mod:`pina_spark.models.contrastive`) and return it as the dense part of Phi_pre."""
    from pina_spark.models import contrastive
    from pina_spark.models.encoders import load_encoder, minilm_path, resolve_local

    ccfg = pcfg.contrastive
    cand = contrastive_candidates(
        problems, nodes, ccfg.pairs, pcfg.finetune_holdout_fraction, twins
    )
    a, n = nodes.pos(cand["anchor"]), nodes.pos(cand["node"])
    chosen = contrastive.choose_pairs(
        nodes.node_id[a],
        nodes.text[a],
        nodes.kind[n],
        nodes.node_id[n],
        nodes.text[n],
        ccfg.max_pairs,
        ccfg.seed,
    )
    base = resolve_local(pcfg.encoder_path) if pcfg.encoder_path else minilm_path()
    log.info(
        "contrastive: %d pairs chosen of %d candidate B_pre edges (%d with equal or empty "
        "texts, %d over max_pairs)",
        chosen["pairs"],
        chosen["candidates"],
        chosen["equal_text"],
        chosen["over_budget"],
    )
    with heartbeat(f"contrastive fine-tuning on {chosen['pairs']} pairs"):
        stats = contrastive.fine_tune(chosen["anchors"], chosen["positives"], base, out_dir, ccfg)
    stats.update({k: chosen[k] for k in ("candidates", "equal_text", "duplicates", "over_budget")})
    stats["base"] = pcfg.encoder_path or "minilm"
    enc = load_encoder({"kind": "contrastive", "path": out_dir, "max_length": pcfg.max_length})
    return enc, out_dir, stats
