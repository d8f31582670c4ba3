"""B_pre as driver-side XMC problems: the inputs both halves of pretraining read.

The ``vectorizer`` stage (tf-idf fit, encoder fine-tuning) and the ``pretrain`` stage (g) both
start from the published ``graph/pretrain_edges`` (B_pre, partitioned by ``variant``) and
``nodes``: :func:`load_problems` reads them on the driver (:func:`load_inputs`) and turns each
variant into an XMC problem (rows = input nodes, columns = output nodes, Y = edge weights) with
the leave-self-out rule, the twins of ``task.labels: graph`` and every row's fold
(:func:`row_folds`). Stage modules share this code; they never import each other.

Example::

    nodes, problems, all_rows = load_problems(spark, paths, cfg)
    sorted(problems)  # ['pina', 'pina_naive']
"""

import dataclasses as dc
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pina_spark import storage
from pina_spark.storage.folds import fold_of

log = logging.getLogger(__name__)

__all__ = [
    "Nodes",
    "build_y",
    "load_inputs",
    "load_problems",
    "problem_variants",
    "row_folds",
    "twin_columns",
    "variant_problem",
]


def build_y(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, rows: np.ndarray, cols: np.ndarray
):
    """Y (csr float32, sorted indices, duplicates summed) with ``Y[r, c]`` = weight of edge
    ``rows[r] -> cols[c]``; ``rows``/``cols`` sorted unique node indices covering the edges.

    Examples
    --------
    >>> Y = build_y(np.array([5, 5, 7]), np.array([1, 9, 9]), np.ones(3), np.array([5, 7]),
    ...             np.array([1, 9]))
    >>> Y.toarray().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    import scipy.sparse as sp

    r = np.searchsorted(rows, src)
    c = np.searchsorted(cols, dst)
    if len(src) and (
        np.any(r >= len(rows))
        or np.any(rows[np.minimum(r, len(rows) - 1)] != src)
        or np.any(c >= len(cols))
        or np.any(cols[np.minimum(c, len(cols) - 1)] != dst)
    ):
        raise ValueError("build_y: an edge endpoint is not in rows/cols")
    Y = sp.coo_matrix(
        (np.asarray(weight, dtype=np.float32), (r, c)), shape=(len(rows), len(cols))
    ).tocsr()
    Y.sum_duplicates()
    Y.sort_indices()
    return Y


def load_inputs(spark, paths):
    """``(edges, nodes)`` as pandas on the driver: every edge of ``graph/pretrain_edges``
    (src_index, dst_index int64, weight float32, block, variant) and the ``nodes`` rows of
    their endpoints, sorted by node_index (:func:`pina_spark.storage.collect_table`: pyarrow
    where it reaches the tables, else a Spark collect through Arrow).

    Raises
    ------
    pina_spark.storage.InputError
        When B_pre has no edges.
    """
    t0 = time.time()
    cols = [storage.SRC_INDEX, storage.DST_INDEX, storage.WEIGHT, storage.BLOCK, storage.VARIANT]
    edges = storage.collect_table(spark, paths, storage.PRETRAIN_EDGES, cols)
    epdf = edges.to_pandas().astype(
        {
            storage.SRC_INDEX: "int64",
            storage.DST_INDEX: "int64",
            storage.WEIGHT: "float32",
            storage.BLOCK: object,
            storage.VARIANT: object,
        }
    )
    if len(epdf) == 0:
        raise storage.InputError(f"{paths.table(storage.PRETRAIN_EDGES)} has no edges")
    used = np.unique(
        np.concatenate([epdf[storage.SRC_INDEX].to_numpy(), epdf[storage.DST_INDEX].to_numpy()])
    )
    npdf = (
        storage.collect_table(
            spark,
            paths,
            storage.NODES,
            [storage.NODE_INDEX, storage.KIND, storage.NODE_ID, storage.TEXT],
            keep=(storage.NODE_INDEX, used),
            what="pretrain-nodes",
        )
        .to_pandas()
        .sort_values(storage.NODE_INDEX)
        .reset_index(drop=True)
    )
    log.info(
        "pretrain inputs read in %.1fs: %d edges, %d nodes", time.time() - t0, len(epdf), len(npdf)
    )
    return epdf, npdf


class Nodes:
    """Driver-side lookup of the collected nodes by node_index."""

    def __init__(self, npdf):
        self.index = npdf[storage.NODE_INDEX].to_numpy(dtype=np.int64)
        self.kind = npdf[storage.KIND].astype(str).to_numpy()
        self.node_id = npdf[storage.NODE_ID].astype(str).to_numpy()
        self.text = npdf[storage.TEXT].to_numpy(dtype=object)

    def pos(self, idx: np.ndarray) -> np.ndarray:
        p = np.searchsorted(self.index, idx)
        bad = (p >= len(self.index)) | (self.index[np.minimum(p, len(self.index) - 1)] != idx)
        if np.any(bad):
            raise storage.InputError(
                f"pretrain_edges reference node indices missing from nodes: "
                f"{np.asarray(idx)[bad][:5].tolist()}"
            )
        return p


def twin_columns(row_ids: np.ndarray, cols: np.ndarray, nodes: Nodes, is_inst: np.ndarray):
    """``task.labels: graph``: items are instances AND labels (same ``node_id``). Returns
    ``(twin_col_node, entity)``: for every row, the node index of the LABEL node with the row's
    id when that node is an output column (else -1), and the id of the train instance the row
    stands for (its own id for instance rows; for a label row, its id when that item is also an
    instance row, else ``None``)."""
    col_kind = nodes.kind[nodes.pos(cols)]
    col_ids = nodes.node_id[nodes.pos(cols)]
    label_col = {i: int(n) for i, n, k in zip(col_ids, cols, col_kind) if k == storage.KIND_LABEL}
    twin = np.array(
        [label_col.get(i, -1) if inst else -1 for i, inst in zip(row_ids, is_inst)], dtype=np.int64
    )
    inst_ids = set(row_ids[is_inst].tolist())
    entity = np.array(
        [i if (inst or i in inst_ids) else None for i, inst in zip(row_ids, is_inst)], dtype=object
    )
    return twin, entity


def row_folds(entity: np.ndarray, folds: int, seed: int = 0) -> np.ndarray:
    """Fold of every input row (``-1``: in every fold model): ``folds.fold_of(entity, F, seed)``
    for rows that stand for a train instance (instance rows; with ``task.labels: graph`` also
    the label rows of those items, see :func:`twin_columns`), ``-1`` for the other label rows.

    Examples
    --------
    >>> from pina_spark.storage.folds import fold_of
    >>> f = row_folds(np.array(["a", None, "a"], dtype=object), 5)
    >>> f[1], f[0] == f[2] == fold_of("a", 5)
    (-1, True)
    """
    out = np.full(len(entity), -1, dtype=np.int64)
    has = np.array([e is not None for e in entity], dtype=bool)
    out[has] = [fold_of(e, folds, seed) for e in entity[has]]
    return out


@dc.dataclass(frozen=True)
class Problem:
    """One variant's XMC problem on B_pre: what g is trained on and the encoder fine-tuned on.

    Attributes:
        variant: ``pina`` | ``pina_naive``.
        rows: input node indices, sorted (row ``r`` of ``Y``).
        cols: output node indices, sorted (column ``c`` of ``Y``).
        Y: sparse ``rows x cols`` targets (self entries of instance rows dropped with
            ``leave_self_out``).
        is_inst: per row, whether it is an instance node.
        twin_col: per row, the column of its label twin (``task.labels: graph``), else ``-1``.
        entity: per row, the id its folds and hold-out go by (``None``: a label row in no fold).
        stats: plain counts for the logs and the model card.
    """

    variant: str
    rows: np.ndarray
    cols: np.ndarray
    Y: Any
    is_inst: np.ndarray
    twin_col: np.ndarray
    entity: np.ndarray
    stats: dict[str, Any]


def variant_problem(
    epdf, variant: str, nodes: Nodes, leave_self_out: bool, twins: bool = False
) -> Problem:
    """One variant's XMC problem. ``twins`` (``task.labels: graph``): an item's label node is the
    same item as its instance node; held-out and fold exclusions then drop both rows, and the
    twin is excluded from predictions like self (see :func:`twin_columns`)."""
    e = epdf[epdf[storage.VARIANT] == variant]
    src = e[storage.SRC_INDEX].to_numpy(dtype=np.int64)
    dst = e[storage.DST_INDEX].to_numpy(dtype=np.int64)
    w = e[storage.WEIGHT].to_numpy(dtype=np.float32)
    rows = np.unique(src)
    cols = np.unique(dst)
    row_kind = nodes.kind[nodes.pos(rows)]
    blocks = e[storage.BLOCK].value_counts().to_dict()
    keep = np.ones(len(src), dtype=bool)
    if leave_self_out:
        src_is_inst = nodes.kind[nodes.pos(src)] == storage.KIND_INSTANCE
        keep = ~((src == dst) & src_is_inst)
    Y = build_y(src[keep], dst[keep], w[keep], rows, cols)
    is_inst = row_kind == storage.KIND_INSTANCE
    row_ids = nodes.node_id[nodes.pos(rows)]
    if twins:
        twin_col, entity = twin_columns(row_ids, cols, nodes, is_inst)
    else:
        twin_col = np.full(len(rows), -1, dtype=np.int64)
        entity = np.where(is_inst, row_ids, np.array(None, dtype=object)).astype(object)
    return Problem(
        variant=variant,
        rows=rows,
        cols=cols,
        Y=Y,
        is_inst=is_inst,
        twin_col=twin_col,
        entity=entity,
        stats={
            "input_rows": int(len(rows)),
            "instance_rows": int(is_inst.sum()),
            "label_rows": int((~is_inst).sum()),
            "output_nodes": int(len(cols)),
            "output_instance_nodes": int(
                (nodes.kind[nodes.pos(cols)] == storage.KIND_INSTANCE).sum()
            ),
            "edges": int(len(src)),
            "edges_by_block": {str(k): int(v) for k, v in blocks.items()},
            "self_edges_dropped": int((~keep).sum()),
            "twin_label_rows": int(sum(e is not None for e in entity[~is_inst])),
            "positives": int(Y.nnz),
            "rows_without_positive": int((np.diff(Y.indptr) == 0).sum()),
        },
    )


def problem_variants(present, variants: Sequence[str] | None) -> list[str]:
    """The variants to build problems of (sorted): ``variants`` (default: every variant
    ``present`` in B_pre), each of which B_pre must have.

    Examples
    --------
    >>> both = ["pina_naive", "pina"]
    >>> problem_variants(both, None), problem_variants(both, ["pina"])
    (['pina', 'pina_naive'], ['pina'])
    >>> problem_variants(["pina"], ["pina_naive"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.storage.schemas.InputError: train.variants trains pina_naive, but ...
    """
    present = sorted(present)
    wanted = present if variants is None else sorted(variants)
    missing = [v for v in wanted if v not in present]
    if missing:
        raise storage.InputError(
            f"train.variants trains {', '.join(missing)}, but graph/pretrain_edges has no edges "
            f"of {'it' if len(missing) == 1 else 'them'} (it has {present}): rerun the graph stage"
        )
    if len(wanted) < len(present):
        log.info("B_pre: the problems of %s only (of %s)", ", ".join(wanted), ", ".join(present))
    return wanted


def load_problems(
    spark, paths, cfg, variants: Sequence[str] | None = None
) -> tuple[Nodes, dict[str, Problem], np.ndarray]:
    """``(nodes, problems, all_rows)``: the collected nodes, one :func:`variant_problem` per
    variant of B_pre (``variants``: those alone; default every one), and the sorted union of
    their input rows (the rows Phi_pre is fitted on and g reads its X for).

    Raises
    ------
    pina_spark.storage.InputError
        When B_pre has no edges of a variant of ``variants``.
    """
    epdf, npdf = load_inputs(spark, paths)
    nodes = Nodes(npdf)
    wanted = problem_variants(epdf[storage.VARIANT].unique().tolist(), variants)
    problems = {
        v: variant_problem(epdf, v, nodes, cfg.neighbors.leave_self_out, cfg.task.labels_are_items)
        for v in wanted
    }
    all_rows = np.unique(np.concatenate([pb.rows for pb in problems.values()]))
    return nodes, problems, all_rows
