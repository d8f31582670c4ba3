"""``nodes``, ``graph/instance_labels`` and B_pre built on the driver from the collected tables.

Driver side. When the graph stage validated ``instances``, ``labels`` and ``instance_labels`` on
the driver (:mod:`pina_spark.validate.tables`) and the labels are given (``task.labels:
given``), the three tables these rows make are built here with pyarrow and numpy and written by
:func:`pina_spark.storage.write_arrow` (:class:`pina_spark.stages.graph.publish.DriverGraphPath`),
instead of a Spark job each (a window over the ids, two joins, the unions and ``distinct`` of
B_pre's blocks). Definitions are those of
:func:`pina_spark.stages.graph.nodes.assign_node_indices`,
:func:`pina_spark.stages.graph.labels.index_instance_labels` and
:func:`pina_spark.stages.graph.bpre.pretrain_edges` (for ``side_info`` ``label_text`` and
``naive``; ``i2i`` and ``both`` need the train-only co-purchase graph, which stays a Spark frame,
so their B_pre stays with Spark): ids in ascending order of their UTF-8 bytes (Spark's string
order), instances first. ``tests/test_graph.py`` checks that both give the same tables.

Examples
--------
>>> import pyarrow as pa
>>> inst = pa.table({"instance_id": ["b", "a"], "text": ["B", "A"], "split": ["train", "test"]})
>>> lab = pa.table({"label_id": ["x"], "text": ["X"]})
>>> nodes = nodes_table(inst, lab)
>>> nodes.column("node_id").to_pylist(), nodes.column("node_index").to_pylist()
(['a', 'b', 'x'], [0, 1, 2])
>>> il = index_instance_labels(nodes, pa.table({"instance_id": ["b", "a"], "label_id": ["x", "x"]}))
>>> il.to_pylist()
[{'instance_index': 1, 'label_index': 2}, {'instance_index': 0, 'label_index': 2}]
>>> pe = pretrain_edges(nodes, il, "label_text")
>>> sorted(zip(pe.column("variant").to_pylist(), pe.column("block").to_pylist(),
...            pe.column("src_index").to_pylist(), pe.column("dst_index").to_pylist()))
... # doctest: +NORMALIZE_WHITESPACE
[('pina', 'B', 1, 2), ('pina', 'BT', 2, 1), ('pina', 'I_inst', 1, 1), ('pina', 'I_label', 2, 2),
 ('pina_naive', 'B', 1, 2)]
"""

from pina_spark import storage
from pina_spark.config import variants as V

__all__ = ["nodes_table", "index_instance_labels", "pretrain_edges", "SIDE_INFO"]

#: the ``side_info`` values whose B_pre is built here (the others need the i2i graph)
SIDE_INFO = ("label_text", "naive")


def _schema(name: str):
    """The Arrow schema Spark writes for ``name`` (non-null where Spark's expressions are)."""
    import pyarrow as pa

    long, string = pa.int64(), pa.string()
    return {
        storage.NODES: pa.schema(
            [
                pa.field(storage.NODE_INDEX, long, nullable=False),
                pa.field(storage.KIND, string, nullable=False),
                pa.field(storage.NODE_ID, string),
                pa.field(storage.TEXT, string),
                pa.field(storage.SPLIT, string),
            ]
        ),
        storage.INSTANCE_LABELS: pa.schema(
            [(storage.INSTANCE_INDEX, long), (storage.LABEL_INDEX, long)]
        ),
        storage.PRETRAIN_EDGES: pa.schema(
            [
                (storage.SRC_INDEX, long),
                (storage.DST_INDEX, long),
                pa.field(storage.WEIGHT, pa.float32(), nullable=False),
                pa.field(storage.BLOCK, string, nullable=False),
                pa.field(storage.VARIANT, string, nullable=False),
            ]
        ),
    }[name]


def nodes_table(instances, labels):
    """The ``nodes`` table: instances by ascending id get ``0..n_inst-1``, then labels by
    ascending id (``split`` null for labels)."""
    import numpy as np
    import pyarrow as pa

    inst = instances.sort_by([(storage.INSTANCE_ID, "ascending")])
    lab = labels.sort_by([(storage.LABEL_ID, "ascending")])
    n_i, n_l = inst.num_rows, lab.num_rows

    def cat(a, b):
        return pa.concat_arrays([a.combine_chunks(), b.combine_chunks()])

    kinds = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.array([0, 1], dtype=np.int8), [n_i, n_l])),
        pa.array([storage.KIND_INSTANCE, storage.KIND_LABEL]),
    ).cast(pa.string())
    return pa.table(
        [
            pa.array(np.arange(n_i + n_l, dtype=np.int64)),
            kinds,
            cat(inst.column(storage.INSTANCE_ID), lab.column(storage.LABEL_ID)),
            cat(inst.column(storage.TEXT), lab.column(storage.TEXT)),
            cat(inst.column(storage.SPLIT), pa.chunked_array([pa.nulls(n_l, pa.string())])),
        ],
        schema=_schema(storage.NODES),
    )


def _positions(values, ids_sorted, offset: int):
    """``offset`` + the position of each of ``values`` in ``ids_sorted`` (null where absent)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pos = pc.index_in(values, value_set=ids_sorted)
    return pc.add(pos.cast(pa.int64()), pa.scalar(offset, pa.int64()))


def index_instance_labels(nodes, instance_labels):
    """``instance_id, label_id`` -> ``instance_index, label_index`` through ``nodes`` (rows whose
    ids are not nodes are left out, as the Spark path's inner joins leave them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n_i = _n_instances(nodes)
    ids = nodes.column(storage.NODE_ID).combine_chunks()
    src = _positions(instance_labels.column(storage.INSTANCE_ID), ids.slice(0, n_i), 0)
    dst = _positions(instance_labels.column(storage.LABEL_ID), ids.slice(n_i), n_i)
    out = pa.table([src, dst], schema=_schema(storage.INSTANCE_LABELS))
    return out.filter(pc.and_(pc.is_valid(src), pc.is_valid(dst)))


def _n_instances(nodes) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.equal(nodes.column(storage.KIND), storage.KIND_INSTANCE)).as_py() or 0)


def pretrain_edges(nodes, instance_labels, side_info: str):
    """B_pre of both variants (``pina``: the blocks of ``side_info``; ``pina_naive``: B), the
    table :func:`pina_spark.stages.graph.bpre.pretrain_edges` gives for labels given and
    ``side_info`` in :data:`SIDE_INFO`: B = (train instance, label) pairs, once each;
    ``label_text`` adds I_inst (every train instance to itself), I_label (every label of B to
    itself) and BT (B reversed)."""
    import numpy as np
    import pyarrow as pa

    if side_info not in SIDE_INFO:
        raise ValueError(f"graph.driver.pretrain_edges: side_info {side_info!r} needs Spark")
    n_i = _n_instances(nodes)
    split = nodes.column(storage.SPLIT).combine_chunks().slice(0, n_i)
    train = np.asarray(
        (split.to_numpy(zero_copy_only=False) == storage.SPLIT_TRAIN), dtype=bool
    )  # node index = position for instance nodes
    src = instance_labels.column(storage.INSTANCE_INDEX).to_numpy()
    dst = instance_labels.column(storage.LABEL_INDEX).to_numpy()
    keep = (src >= 0) & (src < n_i) & (dst >= n_i) & (dst < nodes.num_rows)
    keep[keep] = train[src[keep]]
    pairs = np.unique(np.stack([src[keep], dst[keep]], axis=1), axis=0).reshape(-1, 2)
    b_src, b_dst = pairs[:, 0], pairs[:, 1]
    blocks: dict[str, tuple] = {"B": (b_src, b_dst)}
    if side_info == "label_text":
        t = np.flatnonzero(train).astype(np.int64)
        lab = np.unique(b_dst)
        blocks.update({"BT": (b_dst, b_src), "I_inst": (t, t), "I_label": (lab, lab)})

    def rows(parts, variant):
        s = np.concatenate([parts[k][0] for k in parts]).astype(np.int64)
        d = np.concatenate([parts[k][1] for k in parts]).astype(np.int64)
        names = np.repeat(np.arange(len(parts)), [len(parts[k][0]) for k in parts])
        block = pa.DictionaryArray.from_arrays(
            pa.array(names.astype(np.int32)), pa.array(list(parts))
        )
        return pa.table(
            [
                pa.array(s),
                pa.array(d),
                pa.array(np.ones(len(s), dtype=np.float32)),
                block.cast(pa.string()),
                pa.array(np.full(len(s), variant, dtype=object), pa.string()),
            ],
            schema=_schema(storage.PRETRAIN_EDGES),
        )

    return pa.concat_tables([rows(blocks, V.PINA), rows({"B": blocks["B"]}, V.PINA_NAIVE)])
