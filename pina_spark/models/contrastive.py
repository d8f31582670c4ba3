"""Phi_dnn fine-tuned on B_pre: text pairs, in-batch negatives (``pretrain.encoder: contrastive``).

The paper fine-tunes the dense encoder on B_pre so that instance text and label text share one
space. Here every B_pre edge from a train-instance row to another node gives one pair (instance
text, node text): label text, and with ``side_info: i2i|both`` the text of a co-purchased train
instance. Only train rows reach B_pre (``graph``), so no test row is ever part of a pair.

- **Choice of pairs**: self and twin edges are dropped, and so are pairs whose two texts are
  equal. When more than ``max_pairs`` remain, those with the smallest seeded hash of (anchor id,
  node kind, node id) are kept: the choice depends on ids only, never on row order or on rows
  outside B_pre.
- **Batches** never hold one text twice (as anchor or as positive): a repeated label would be a
  false negative for the other rows of its batch. Pairs that cannot be placed once fewer than two
  distinct pairs remain are counted (``pairs_unplaced``), not used.
- **Loss**: sentence-transformers ``MultipleNegativesRankingLoss`` (``symmetric``: its
  symmetric form, anchors also ranked against positives), cosine similarity times ``scale``.
- **Model**: the base encoder (the shipped MiniLM or ``pretrain.encoder_path``) loaded as a
  ``SentenceTransformer`` (mean pooling), saved with ``SentenceTransformer.save``: a Hugging Face
  folder that :class:`pina_spark.models.encoders.MeanPoolEncoder` loads offline on every executor.

Examples
--------
>>> choose_pairs(["a", "a", "b"], ["x", "x", "y"], ["label", "label", "label"],
...              ["l1", "l1", "l2"], ["t", "t", "u"], max_pairs=10, seed=0)["pairs"]
2
>>> plan_batches(["a", "b", "c"], ["x", "x", "y"], batch_size=2, seed=0)
[[2, 0], [1]]
"""

import hashlib
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["choose_pairs", "plan_batches", "fine_tune"]


def _pair_key(seed: int, anchor_id: str, kind: str, node_id: str) -> int:
    h = hashlib.sha1(f"pina-pair\x1f{seed}\x1f{anchor_id}\x1f{kind}\x1f{node_id}".encode()).digest()
    return int.from_bytes(h[:8], "big")


def choose_pairs(
    anchor_ids: Sequence[str],
    anchor_texts: Sequence[str],
    pos_kinds: Sequence[str],
    pos_ids: Sequence[str],
    pos_texts: Sequence[str],
    max_pairs: int,
    seed: int,
) -> dict[str, Any]:
    """Select the fine-tuning pairs from candidate B_pre edges, by id only.

    Parameters
    ----------
    anchor_ids, anchor_texts : sequences of str
        The train instance of every candidate edge (its row of B_pre).
    pos_kinds, pos_ids, pos_texts : sequences of str
        Kind (``label``/``instance``), id and text of the node the edge points at.
    max_pairs : int
        Pairs kept at most (smallest seeded hash first).
    seed : int
        Seed of the hash.

    Returns
    -------
    dict
        ``anchors``, ``positives`` (lists of str, in hash order), ``pairs``, ``candidates``,
        ``equal_text`` (dropped: both texts equal or one empty), ``duplicates`` (dropped: the
        same (anchor, node) twice), ``over_budget`` (dropped by ``max_pairs``).

    Examples
    --------
    >>> out = choose_pairs(["a", "b"], ["red shoe", "blue hat"], ["label", "label"],
    ...                    ["x", "y"], ["shoes", "blue hat"], max_pairs=5, seed=1)
    >>> out["anchors"], out["positives"], out["equal_text"]
    (['red shoe'], ['shoes'], 1)
    """
    n = len(anchor_ids)
    if not (len(anchor_texts) == len(pos_kinds) == len(pos_ids) == len(pos_texts) == n):
        raise ValueError("choose_pairs: the five sequences must have one entry per edge")
    keyed = {}
    equal = 0
    for a_id, a_t, k, p_id, p_t in zip(anchor_ids, anchor_texts, pos_kinds, pos_ids, pos_texts):
        a_t, p_t = (
            "" if a_t is None else str(a_t).strip(),
            "" if p_t is None else str(p_t).strip(),
        )
        if not a_t or not p_t or a_t == p_t:
            equal += 1
            continue
        keyed[(str(a_id), str(k), str(p_id))] = (a_t, p_t)
    dup = n - equal - len(keyed)
    order = sorted(keyed, key=lambda key: (_pair_key(seed, *key), key))
    kept = order[: int(max_pairs)]
    return {
        "anchors": [keyed[k][0] for k in kept],
        "positives": [keyed[k][1] for k in kept],
        "pairs": len(kept),
        "candidates": n,
        "equal_text": equal,
        "duplicates": dup,
        "over_budget": len(order) - len(kept),
    }


def plan_batches(
    anchors: Sequence[str], positives: Sequence[str], batch_size: int, seed: int
) -> list[list[int]]:
    """Seeded batches of pair indices in which no text appears twice.

    Pairs are visited in a seeded permutation; a pair whose anchor or positive text is already in
    the batch being filled waits for the next batch (first in line). The last batches may be
    smaller; a batch of one pair carries no negative and is still returned (the caller skips it).

    Examples
    --------
    >>> plan_batches(["a", "b", "c", "d"], ["x", "x", "x", "y"], batch_size=3, seed=0)
    [[2, 3], [0], [1]]
    """
    order = np.random.default_rng(int(seed)).permutation(len(anchors)).tolist()
    pending = deque(order)
    batches: list[list[int]] = []
    while pending:
        batch: list[int] = []
        seen = set()
        waiting = []
        while pending and len(batch) < batch_size:
            i = pending.popleft()
            if anchors[i] in seen or positives[i] in seen:
                waiting.append(i)
                continue
            batch.append(i)
            seen.add(anchors[i])
            seen.add(positives[i])
        pending.extendleft(reversed(waiting))
        batches.append(batch)
    return batches


def fine_tune(
    anchors: Sequence[str], positives: Sequence[str], base_dir: str, out_dir: str, ccfg
) -> dict[str, Any]:
    """Fine-tune the encoder at ``base_dir`` on (anchor, positive) pairs and save it to ``out_dir``.

    Parameters
    ----------
    anchors, positives : sequences of str
        The pairs (from :func:`choose_pairs`).
    base_dir : str
        Local folder of the starting model (Hugging Face or sentence-transformers layout).
    out_dir : str
        Local folder written (sentence-transformers layout; loads with ``AutoModel`` too).
    ccfg : config.ContrastiveConfig
        Budget, loss and seed.

    Returns
    -------
    dict
        Pairs, batches, steps, loss (first and last 10% of steps), seconds, device, settings.

    Example::

        fine_tune(["red shoe"], ["shoes"], minilm_path(), "/tmp/enc",
                  ContrastiveConfig())
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # where sentence-transformers 5.x keeps the losses
        from sentence_transformers.sentence_transformer import losses
    except ImportError:  # older releases
        from sentence_transformers import losses  # type: ignore[attr-defined,no-redef]
    from transformers import get_linear_schedule_with_warmup

    from pina_spark.runtime import process_device

    if len(anchors) != len(positives):
        raise ValueError("fine_tune: anchors and positives differ in length")
    if len(anchors) < 2:
        raise ValueError(
            f"pretrain.encoder contrastive: {len(anchors)} text pair(s) in B_pre; "
            f"in-batch negatives need at least 2 (check the graph stage's "
            f"pretrain_edges, or use pretrain.encoder: minilm)"
        )
    device = process_device(ccfg.device)
    torch.manual_seed(int(ccfg.seed))
    model = SentenceTransformer(base_dir, device=device)
    model.max_seq_length = int(ccfg.max_length)
    loss_fn: torch.nn.Module
    if ccfg.symmetric:
        loss_fn = losses.MultipleNegativesSymmetricRankingLoss(model, scale=float(ccfg.scale))
    else:
        loss_fn = losses.MultipleNegativesRankingLoss(model, scale=float(ccfg.scale))
    plans = [
        plan_batches(anchors, positives, int(ccfg.batch_size), int(ccfg.seed) + e)
        for e in range(int(ccfg.epochs))
    ]
    plans = [[b for b in plan if len(b) >= 2] for plan in plans]
    unplaced = sum(len(anchors) - sum(len(b) for b in plan) for plan in plans)
    steps = sum(len(plan) for plan in plans)
    if steps == 0:
        raise ValueError(
            "pretrain.encoder contrastive: no batch of two distinct pairs could be "
            "formed (every pair shares a text)"
        )
    opt = torch.optim.AdamW(model.parameters(), lr=float(ccfg.learning_rate))
    sched = get_linear_schedule_with_warmup(opt, int(round(ccfg.warmup_ratio * steps)), steps)
    model.train()
    t0 = last = time.time()
    losses_seen: list[float] = []
    step = done = 0
    for e, plan in enumerate(plans):
        for batch in plan:
            feats = [
                model.preprocess([anchors[i] for i in batch]),
                model.preprocess([positives[i] for i in batch]),
            ]
            feats = [
                {k: v.to(device) if hasattr(v, "to") else v for k, v in f.items()} for f in feats
            ]
            loss = loss_fn(feats, None)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses_seen.append(float(loss.detach()))
            step += 1
            done += len(batch)
            if time.time() - last >= 30 or step == steps:
                last = time.time()
                log.info(
                    "contrastive fine-tuning: epoch %d/%d, step %d/%d, loss %.4f (mean of "
                    "the last 50 steps), %.0f pairs/s",
                    e + 1,
                    ccfg.epochs,
                    step,
                    steps,
                    float(np.mean(losses_seen[-50:])),
                    done / max(last - t0, 1e-9),
                )
    model.eval()
    secs = time.time() - t0
    model.save(out_dir)
    tenth = max(1, steps // 10)
    stats = {
        "pairs": len(anchors),
        "pairs_unplaced": int(unplaced),
        "steps": steps,
        "batches_per_epoch": [len(p) for p in plans],
        "device": device,
        "loss_first": round(float(np.mean(losses_seen[:tenth])), 4),
        "loss_last": round(float(np.mean(losses_seen[-tenth:])), 4),
        "seconds": round(secs, 2),
        "settings": ccfg.to_dict(),
    }
    log.info(
        "contrastive fine-tuning done in %.1fs: %d pairs, %d steps, loss %.3f -> %.3f, "
        "saved to %s",
        secs,
        len(anchors),
        steps,
        stats["loss_first"],
        stats["loss_last"],
        out_dir,
    )
    return stats
