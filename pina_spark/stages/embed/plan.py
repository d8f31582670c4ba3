"""Driver side: decide once what the embed stage does, from config plus facts.

:func:`plan_embed` sizes the tasks and orders the nodes by text length (so a batch pads to
texts of nearly one length) into a frozen :class:`EmbedPlan`; the stage logs it and the
executor kernel only follows it.

Examples
--------
>>> text_length(None), text_length("shoe")
(0, 4)
"""

import dataclasses as dc
from collections.abc import Mapping

from pina_spark import storage
from pina_spark.runtime.sizing import n_partitions

__all__ = [
    "EmbedPlan",
    "plan_embed",
    "LENGTH_CAP",
    "LENGTH_SQL",
    "RANK_CHUNK",
    "text_length",
    "length_offsets",
]


@dc.dataclass(frozen=True)
class EmbedPlan:
    """What the embed stage does.

    Attributes:
        vectorizer: the ``PhiPre`` folder.
        version: its fingerprint (executor cache key).
        rows: nodes to embed.
        partitions: tasks (:func:`n_partitions`).
        batch_size: rows per encoder batch.
        length_offsets: ``(text length, chunk, rank of its first node)`` per text length and
            chunk of node indices (:func:`length_offsets`): with the nodes sorted by (text
            length, node index), a batch is ``batch_size`` consecutive ranks, so it pads to
            texts of nearly one length.
        digest: the vectorizer folder's checksums digest the driver vouched for
            (:func:`pina_spark.models.trust.anchor`); every executor's copy must have it
            (``""``: no check beyond the folder's own checksums).
    """

    vectorizer: str
    version: str
    rows: int
    partitions: int
    batch_size: int
    length_offsets: tuple[tuple[int, int, int], ...] = dc.field(default=(), repr=False)
    digest: str = ""


#: texts longer than this many characters are ordered as if this long (the encoder truncates
#: them to its ``max_length`` tokens anyway)
LENGTH_CAP = 4096


#: the length by which the embed stage orders a node's text (Spark SQL over ``text``)
LENGTH_SQL = f"least(coalesce(char_length({storage.TEXT}), 0), {LENGTH_CAP})"


#: nodes of one text length are ranked within chunks of this many consecutive node indices (one
#: window partition each), so no task sorts more than this many rows of one length
RANK_CHUNK = 1 << 20


def text_length(text: str | None) -> int:
    """:data:`LENGTH_SQL` in Python (characters, i.e. code points; the tests check they agree).

    >>> text_length(None), text_length("shoe"), text_length("x" * 5000)
    (0, 4, 4096)
    """
    return min(len(text or ""), LENGTH_CAP)


def length_offsets(counts: Mapping[tuple[int, int], int]) -> tuple[tuple[int, int, int], ...]:
    """``(length, chunk, rank of its first node)`` for every text length and chunk of node
    indices (``node_index div RANK_CHUNK``), in that order: the nodes sorted by (text length,
    node index) are ranked 0 .. n-1, and the embed stage's batch ``b`` holds ranks
    ``b * batch_size`` to ``(b + 1) * batch_size - 1``.

    >>> length_offsets({(5, 0): 3, (2, 1): 1, (2, 0): 1, (9, 0): 1})
    ((2, 0, 0), (2, 1, 1), (5, 0, 2), (9, 0, 5))
    """
    out, start = [], 0
    for length, chunk in sorted(counts):
        out.append((int(length), int(chunk), start))
        start += int(counts[(length, chunk)])
    return tuple(out)


def plan_embed(
    vectorizer_uri: str,
    inference_cfg,
    n_rows: int,
    version: str = "",
    slots: int = 1,
    length_counts: Mapping[tuple[int, int], int] | None = None,
    digest: str = "",
) -> EmbedPlan:
    """The :class:`EmbedPlan` of ``n_rows`` nodes (``inference_cfg``: the ``inference``
    section; ``slots``: task slots of the application; ``length_counts``: nodes per (text
    length, chunk of node indices), :func:`pina_spark.stages.embed.stage.length_counts`, whose sum
    must be ``n_rows``; without it the plan sizes the tasks only, and the embed stage refuses
    it; ``digest``: what the driver vouched for, :attr:`EmbedPlan.digest`).

    Examples
    --------
    >>> from pina_spark.config import InferenceConfig
    >>> plan_embed("/r/models/vectorizer", InferenceConfig(rows_per_task=100), 250).partitions
    3
    """
    if length_counts is not None and sum(length_counts.values()) != int(n_rows):
        raise ValueError(
            f"plan_embed: {sum(length_counts.values())} nodes by length, {n_rows} in all"
        )
    return EmbedPlan(
        vectorizer=vectorizer_uri,
        version=version,
        rows=int(n_rows),
        partitions=n_partitions(n_rows, inference_cfg.rows_per_task, slots),
        batch_size=int(inference_cfg.batch_size),
        length_offsets=length_offsets(length_counts or {}),
        digest=digest,
    )
