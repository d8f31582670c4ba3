"""What a *label* neighbour contributes to V1 (``aggregate.label_features``).

``text`` (the default) aggregates ``Phi_pre(label text)``, the label's own ``embeddings`` row.
``pifa`` aggregates the label's PIFA feature instead, the normalised centroid of the
``Phi_pre`` rows of its train instances (the label features of the PECOS/PINA reference
scripts). ``text_pifa`` aggregates the normalised sum of the two.

A centroid computed over all train rows contains every train row it is a label of, so a train
instance would find its own vector inside its true labels' features, and a test instance never does:
the in-sample trap of g again. So the centroids are computed **out of fold**, with the folds of g
(F and the split of the models' ``folds.json``, which a ``run.models`` run takes from the models
run; ``neighbors.folds`` and ``fold_seed`` when g was trained in sample;
:func:`pina_spark.storage.folds.fold_of`): a train instance of fold f
aggregates the centroids computed without fold f's rows; test and new instances aggregate the
centroids of all train rows.

Mechanics (driver plans, executors compute; no vector is collected on the driver):

* every (label, version) gets a *virtual node index* ``base + version * n_labels + rank``
  (``version`` f < F: out of fold f; ``version`` F: all train rows; ``rank``: the label's
  position among the label nodes, ``base``: max node index + 1);
* one ``mapInArrow`` over the (label, member) rows, joined to their ``embeddings`` rows and
  sorted by label, writes those rows, with the label's ``node_id``, to a scratch table beside
  the stage's staging folder (:func:`build`); the aggregation reads it as extra embeddings and
  nodes rows;
* a second ``mapInArrow`` rewrites every label neighbour of the ``neighbors`` rows to the
  virtual index of its version for that instance (:func:`route_neighbors`). The published
  ``neighbor_ids`` are unchanged (a virtual row carries its label's ``node_id``).

Examples
--------
>>> import numpy as np
>>> t = CentroidTask(mode="pifa", folds=2, dense_dim=1, sparse_dim=2, base=10,
...                  labels=np.array([3, 7]))
>>> t.virtual(np.array([3, 7, 5]), np.array([0, 1, -1])).tolist()   # label 3 in fold 0, ...
[10, 13, 5]
"""

import dataclasses as dc
import logging
from collections.abc import Iterator
from typing import Any

from pina_spark import storage
from pina_spark.runtime import embstore
from pina_spark.runtime.arrowkit import arr, list_array

log = logging.getLogger(__name__)

__all__ = [
    "MODES",
    "CentroidTask",
    "build",
    "route_neighbors",
    "centroid_rows",
    "top_entries",
    "KIND_FEATURE",
]

#: the values of ``aggregate.label_features``
MODES = ("text", "pifa", "text_pifa")
#: ``kind`` of the virtual rows (neither an instance nor a label: no stage iterates them)
KIND_FEATURE = "label_feature"
#: internal columns
_MEMBER = "_member"  # the node whose row joins a label's group: a train instance or the label
_FOLD = "_fold"  # the member's fold; -1 = the label's own (text) row


@dc.dataclass(frozen=True, eq=False)
class CentroidTask:
    """What the executors need: the mode, F, the widths, and the virtual numbering.

    Attributes:
        mode: ``pifa`` or ``text_pifa``.
        folds: F, the folds of g (``neighbors.folds``).
        fold_seed: the split of g's folds (``neighbors.fold_seed``).
        dense_dim, sparse_dim: D and S of the embeddings.
        base: the first virtual node index (max node index + 1).
        labels: the label nodes' indices, sorted (a label's rank is its position).
        max_nnz: tf-idf entries a label feature keeps (:func:`top_entries`; 0 = all).
    """

    mode: str
    folds: int
    dense_dim: int
    sparse_dim: int
    base: int
    labels: Any
    max_nnz: int = 0
    fold_seed: int = 0

    def virtual(self, node, fold):
        """The node indices a neighbour row aggregates: a label node ``node[i]`` becomes the
        virtual index of version ``fold[i]`` (``-1``: all train rows); other nodes stay."""
        import numpy as np

        node = np.asarray(node, dtype=np.int64)
        fold = np.asarray(fold, dtype=np.int64)
        labels = self.labels
        n_lab = len(labels)
        rank = np.searchsorted(labels, node)
        is_label = rank < n_lab
        is_label[is_label] = labels[rank[is_label]] == node[is_label]
        version = np.where(fold >= 0, fold, self.folds)
        return np.where(is_label, self.base + version * n_lab + rank, node)


def build(spark, nodes, embeddings, instance_labels, task_args, scratch: str) -> CentroidTask:
    """Driver side: compute the virtual rows and write them to ``scratch`` (Parquet: ``node_index,
    node_id, kind, dense, sparse_indices, sparse_values``). Returns the task that numbers them.

    ``task_args``: ``dict(mode=..., folds=..., dense_dim=..., sparse_dim=..., max_nnz=...)``.
    Members of a label: its train instances (``graph/instance_labels`` rows whose instance is a
    ``train`` node) and the label's own row (used by ``text_pifa`` only).
    """
    import numpy as np
    from pyspark.sql import functions as F

    lab = nodes.where(F.col(storage.KIND) == storage.KIND_LABEL).select(
        F.col(storage.NODE_INDEX).cast("long").alias(storage.LABEL_INDEX),
        F.col(storage.NODE_ID).alias("_label_id"),
    )
    labels = storage.collect_arrow(lab.select(storage.LABEL_INDEX).orderBy(storage.LABEL_INDEX))
    labels = labels.column(0).to_numpy().astype(np.int64)
    mx = nodes.select(F.max(F.col(storage.NODE_INDEX).cast("long"))).first()[0]
    task = CentroidTask(base=int(mx if mx is not None else -1) + 1, labels=labels, **task_args)
    folds = int(task.folds)
    train = instance_folds(nodes, folds, task.fold_seed).where(F.col(_FOLD) >= 0)
    members = instance_labels.select(
        F.col(storage.INSTANCE_INDEX).cast("long"), F.col(storage.LABEL_INDEX).cast("long")
    ).join(train, storage.INSTANCE_INDEX)
    members = members.select(
        storage.LABEL_INDEX, F.col(storage.INSTANCE_INDEX).alias(_MEMBER), F.col(_FOLD).cast("int")
    )
    # every label's own row joins its group (slot 0): text_pifa adds it, and it makes every
    # label get its rows (zero for pifa where no train row has the label), so the virtual
    # rows always carry the label's node_id
    own = lab.select(
        storage.LABEL_INDEX, F.col(storage.LABEL_INDEX).alias(_MEMBER), F.lit(-1).alias(_FOLD)
    )
    members = members.unionByName(own)
    vecs = embeddings.select(
        F.col(storage.NODE_INDEX).cast("long").alias(_MEMBER),
        storage.DENSE,
        storage.SPARSE_INDICES,
        storage.SPARSE_VALUES,
    )
    # left: a node without an embeddings row reads as zeros (its label still gets its rows)
    rows = members.join(vecs, _MEMBER, "left").join(lab, storage.LABEL_INDEX)
    n_parts = max(spark.sparkContext.defaultParallelism, 1)
    rows = rows.repartition(n_parts, storage.LABEL_INDEX).sortWithinPartitions(
        storage.LABEL_INDEX, _FOLD, _MEMBER
    )
    rows = rows.select(
        storage.LABEL_INDEX,
        "_label_id",
        _FOLD,
        storage.DENSE,
        storage.SPARSE_INDICES,
        storage.SPARSE_VALUES,
    )
    out = rows.mapInArrow(_centroid_fn(task), _schema())
    out.write.mode("overwrite").parquet(scratch)
    log.info(
        "aggregate: %s label features for %d labels x %d versions in %s",
        task.mode,
        len(labels),
        folds + 1,
        scratch,
    )
    return task


def instance_folds(nodes, folds: int, seed: int = 0):
    """``instance_index, _fold`` of every instance node: its fold of g (split ``seed``)
    (:func:`pina_spark.storage.folds.fold_expr`) for a ``train`` instance, -1 for the others (they
    aggregate the centroids of all train rows)."""
    from pyspark.sql import functions as F

    from pina_spark.storage.folds import fold_expr

    return nodes.where(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
        F.col(storage.NODE_INDEX).cast("long").alias(storage.INSTANCE_INDEX),
        F.when(
            F.col(storage.SPLIT) == storage.SPLIT_TRAIN,
            fold_expr(F.col(storage.NODE_ID), folds, seed),
        )
        .otherwise(F.lit(-1))
        .cast("int")
        .alias(_FOLD),
    )


def _schema() -> str:
    return (
        f"{storage.NODE_INDEX} long, {storage.NODE_ID} string, {storage.KIND} string, "
        f"{storage.DENSE} array<float>, {storage.SPARSE_INDICES} array<int>, "
        f"{storage.SPARSE_VALUES} array<float>"
    )


def _centroid_fn(task: CentroidTask):
    """Driver side: the executor function of :func:`build` (rows sorted by label within the
    partition; a label's rows that straddle two Arrow batches are carried over)."""

    def run(batches: Iterator) -> Iterator:
        import pyarrow as pa

        carry = None
        for batch in batches:
            t = pa.Table.from_batches([batch])
            if carry is not None:
                t = pa.concat_tables([carry, t])
            if not t.num_rows:
                continue
            lab = t.column(0).to_numpy()
            last = lab[-1]
            cut = int((lab != last).sum())  # sorted: the last label's rows are the tail
            if cut:
                yield centroid_rows(t.slice(0, cut), task)
            carry = t.slice(cut)
        if carry is not None and carry.num_rows:
            yield centroid_rows(carry, task)

    return run


def _norm_rows(M):
    """Rows of a CSR matrix scaled to unit L2 norm (zero rows stay zero)."""
    import numpy as np
    import scipy.sparse as sp

    sq = np.asarray(M.multiply(M).sum(axis=1)).ravel()
    s = np.divide(1.0, np.sqrt(sq), out=np.zeros_like(sq), where=sq > 0)
    return (sp.diags(s) @ M).tocsr()


def centroid_rows(tbl, task: CentroidTask):
    """Executor side: the virtual rows of the whole labels of ``tbl`` (columns label index,
    label id, fold, dense, sparse_indices, sparse_values; sorted by label) as an Arrow batch.

    Version f < F of a label: the normalised sum of its members outside fold f; version F: of
    all of them (``text_pifa``: plus the label's own normalised row, then normalised again).
    A label none of whose train rows is outside fold f gets a zero row there (``text_pifa``:
    its text row), which contributes nothing to V1. The tf-idf part keeps its ``max_nnz``
    largest entries, then the row is scaled to unit norm again.
    """
    import numpy as np
    import pyarrow as pa
    import scipy.sparse as sp

    D, S, Fn = task.dense_dim, task.sparse_dim, task.folds
    tbl = tbl.combine_chunks()
    lab = tbl.column(0).to_numpy().astype(np.int64)
    ids = arr(tbl.column(1))
    fold = tbl.column(2).to_numpy().astype(np.int64)
    dense, _ = embstore.dense_block(tbl.column(3).chunk(0), D)
    ptr, idx, val = embstore.sparse_parts(tbl.column(4).chunk(0), tbl.column(5).chunk(0))
    embstore.check_sparse_range(idx, S)
    n = lab.size
    X = sp.hstack(
        [sp.csr_matrix(dense.astype(np.float64)), sp.csr_matrix((val, idx, ptr), shape=(n, S))]
    ).tocsr()
    uniq, first, inv = np.unique(lab, return_index=True, return_inverse=True)
    nl = uniq.size
    # sums per (label, slot): slot 0 = the label's own row, slot 1 + f = members of fold f
    G = sp.csr_matrix(
        (np.ones(n), (inv * (Fn + 1) + (fold + 1), np.arange(n))), shape=(nl * (Fn + 1), n)
    )
    sums = (G @ X).tocsr()
    pick = lambda slot: sums[np.arange(nl) * (Fn + 1) + slot]  # noqa: E731
    total = sum((pick(1 + f) for f in range(Fn)), sp.csr_matrix((nl, D + S)))
    own = _norm_rows(pick(0)) if task.mode == "text_pifa" else None
    blocks = []
    for v in range(Fn + 1):
        c = _norm_rows(total - pick(1 + v) if v < Fn else total)
        if own is not None:
            c = _norm_rows(c + own)
        blocks.append(c)
    out = sp.vstack(blocks).tocsr()  # version-major: row v * nl + i
    out.sum_duplicates()
    out.sort_indices()
    rank = np.searchsorted(task.labels, uniq)
    node = task.base + np.repeat(np.arange(Fn + 1), nl) * len(task.labels) + np.tile(rank, Fn + 1)
    dense64 = out[:, :D].toarray()
    spm = top_entries(out[:, D:].tocsr(), task.max_nnz)
    # unit norm again over [dense ; kept tf-idf entries] (zero rows stay zero)
    sq = (dense64 * dense64).sum(axis=1) + np.asarray(spm.multiply(spm).sum(axis=1)).ravel()
    scale = np.divide(1.0, np.sqrt(sq), out=np.zeros_like(sq), where=sq > 0)
    dense_out = (dense64 * scale[:, None]).astype(np.float32)
    spm = (sp.diags(scale) @ spm).tocsr()
    spm.eliminate_zeros()
    label_ids = ids.take(pa.array(np.tile(first, Fn + 1)))
    m = out.shape[0]
    return pa.RecordBatch.from_arrays(
        [
            arr(node.astype(np.int64)),
            label_ids.cast(pa.string()),
            pa.array([KIND_FEATURE] * m, pa.string()),
            list_array(np.arange(m + 1, dtype=np.int64) * D, dense_out.reshape(-1), pa.float32()),
            list_array(spm.indptr, spm.indices.astype(np.int32), pa.int32()),
            list_array(spm.indptr, spm.data.astype(np.float32), pa.float32()),
        ],
        [
            storage.NODE_INDEX,
            storage.NODE_ID,
            storage.KIND,
            storage.DENSE,
            storage.SPARSE_INDICES,
            storage.SPARSE_VALUES,
        ],
    )


def top_entries(M, k: int):
    """The ``k`` entries of largest magnitude of every row of CSR ``M`` (ties: the lower column
    first), indices sorted; ``k <= 0`` keeps all. A centroid of many tf-idf rows holds most of
    the vocabulary its members use: the cap keeps V1 as sparse as a few instances' rows.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> top_entries(sp.csr_matrix([[0.1, -0.5, 0.3, 0.3]]), 2).toarray().tolist()
    [[0.0, -0.5, 0.3, 0.0]]
    """
    import numpy as np
    import scipy.sparse as sp

    M = M.tocsr()
    M.sort_indices()
    if k <= 0 or not M.nnz or np.diff(M.indptr).max() <= k:
        return M
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    order = np.lexsort((M.indices, -np.abs(M.data), rows))
    rank = np.arange(order.size) - M.indptr[rows[order]]
    keep = np.sort(order[rank < k])
    out = sp.csr_matrix((M.data[keep], (rows[keep], M.indices[keep])), shape=M.shape)
    out.sort_indices()
    return out


def route_neighbors(nodes, neighbors, task: CentroidTask):
    """Driver side: ``neighbors`` (``variant, instance_index, neighbor, score``) with every
    label neighbour replaced by the virtual index of its version for the instance (out of the
    instance's fold for a train instance, all train rows otherwise)."""
    from pyspark.sql import functions as F

    inst = instance_folds(nodes, task.folds, task.fold_seed)
    nb = neighbors.select(
        storage.VARIANT, F.col(storage.INSTANCE_INDEX).cast("long"), storage.NEIGHBOR, storage.SCORE
    ).join(inst, storage.INSTANCE_INDEX, "left")
    nb = nb.select(storage.VARIANT, storage.INSTANCE_INDEX, storage.NEIGHBOR, storage.SCORE, _FOLD)

    def run(batches: Iterator) -> Iterator:
        import numpy as np
        import pyarrow as pa

        for b in batches:
            nb_col = b.column(2)
            ln = embstore.lengths(nb_col)
            flat = embstore.flat(nb_col, np.int64, fill=-1)
            fold = b.column(4).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            ptr = np.zeros(ln.size + 1, dtype=np.int64)
            np.cumsum(ln, out=ptr[1:])
            routed = task.virtual(flat, np.repeat(fold, ln))
            col = list_array(ptr, routed, pa.int64())  # a null list reads as empty
            yield pa.RecordBatch.from_arrays(
                [b.column(0), b.column(1), col, b.column(3)],
                [storage.VARIANT, storage.INSTANCE_INDEX, storage.NEIGHBOR, storage.SCORE],
            )

    schema = (
        f"{storage.VARIANT} string, {storage.INSTANCE_INDEX} long, {storage.NEIGHBOR} array<long>, "
        + (f"{storage.SCORE} array<float>")
    )
    return nb.mapInArrow(run, schema)
