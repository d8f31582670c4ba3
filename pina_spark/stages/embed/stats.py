"""What the embed stage returns: :class:`EmbedStats`, recorded in the manifest."""

import dataclasses as dc

from pina_spark.stages import StageStats

__all__ = ["EmbedStats"]


@dc.dataclass(frozen=True, kw_only=True, eq=False)
class EmbedStats(StageStats):
    """Statistics of the embed stage (its manifest form: :meth:`StageStats.to_dict`).

    Attributes:
        rows: the nodes of ``nodes`` (of the selection, in an incremental run).
        rows_written: the rows the tasks wrote into ``embeddings``.
        encoded_rows: the rows put through the vectorizer (the only stage that encodes; with
            ``--incremental``, the new and changed nodes only).
        partitions: the tasks of the embed job.
        seconds: wall seconds of the job that wrote ``embeddings``.
        rows_per_s: ``rows / seconds`` (``None`` for a job of no measurable time).
        vectorizer: the vectorizer folder the rows were encoded with.
        model_loads, worker_processes, max_loads_per_worker_model, loads_per_worker: the
            vectorizer loads of the executors (:func:`pina_spark.runtime.summarize_loads`).
    """

    rows: int
    rows_written: int
    encoded_rows: int
    partitions: int
    seconds: float
    rows_per_s: float | None
    vectorizer: str
    model_loads: int
    worker_processes: int
    max_loads_per_worker_model: int
    loads_per_worker: dict[str, dict[str, int]]
