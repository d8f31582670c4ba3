"""B_pre (:func:`pretrain_edges`), all weights 1.0 (binary B_pre, the paper's setting).

``label_text``: B (train inst -> label), I_inst (every train inst -> itself), I_label (label in B
-> itself), BT (label -> train inst). ``i2i``: A (train inst <-> train inst, both directions, no
self loops) plus I_inst for the train instances without any A edge (so every train instance is a
row of B_pre). ``both``: label_text union A. ``naive``: B only. ``variant=pina_naive`` (B only)
is always written as well.

Only train instances and the labels carried by train instances are used (``I_label``/``BT``
exist only for labels in ``B``; ``A`` comes from the train-only graph), so removing every test
row from the inputs leaves ``graph/pretrain_edges`` unchanged as (node_id, node_id) pairs
(tests/test_graph.py proves it).
"""

from pina_spark import storage
from pina_spark.config import variants as V

#: the blocks of B_pre, in the order they are unioned
BLOCKS = ("B", "BT", "I_inst", "I_label", "A")


def pretrain_edges(nodes, instance_labels, i2i, side_info: str, task_labels: str = "given"):
    """B_pre as an edge list for both variants (see the module docstring and docs/design.md).

    Parameters
    ----------
    nodes : DataFrame
        the ``nodes`` table.
    instance_labels : DataFrame
        ``instance_index, label_index`` (train and test rows; only train rows are used).
    i2i : DataFrame or None
        ``src_id, dst_id`` edges over train items (the train-only graph); needed for i2i/both.
    side_info : str
        ``label_text`` | ``i2i`` | ``both`` | ``naive``.
    task_labels : str
        ``given`` | ``graph``; with ``graph`` label nodes whose item is a test instance are
        refused (defence in depth: :func:`graph_labels` never makes them).

    Returns
    -------
    DataFrame
        ``src_index, dst_index, weight (float), block, variant`` with variant ``pina`` (the
        configured side_info) and ``pina_naive`` (B only).

    Example::

        edges = pretrain_edges(nodes, il_idx, None, "label_text")
        edges.groupBy("variant", "block").count()
    """
    from pyspark.sql import functions as F

    if side_info not in ("label_text", "i2i", "both", "naive"):
        raise ValueError(f"side_info: unknown value {side_info!r}")
    if side_info in ("i2i", "both") and i2i is None:
        raise ValueError(f"side_info={side_info} needs the i2i edges (input.events)")
    train = nodes.filter(
        (F.col(storage.KIND) == storage.KIND_INSTANCE)
        & (F.col(storage.SPLIT) == storage.SPLIT_TRAIN)
    )
    train_idx = train.select(F.col(storage.NODE_INDEX).alias(storage.SRC_INDEX))
    labels = nodes.filter(F.col(storage.KIND) == storage.KIND_LABEL)
    if task_labels == "graph":
        test_ids = nodes.filter(
            (F.col(storage.KIND) == storage.KIND_INSTANCE)
            & (F.col(storage.SPLIT) != storage.SPLIT_TRAIN)
        ).select(storage.NODE_ID)
        labels = labels.join(test_ids, storage.NODE_ID, "left_anti")
    label_idx = labels.select(F.col(storage.NODE_INDEX).alias(storage.DST_INDEX))

    def block(df, name):
        return df.select(
            F.col(storage.SRC_INDEX).cast("long"),
            F.col(storage.DST_INDEX).cast("long"),
            F.lit(1.0).cast("float").alias(storage.WEIGHT),
            F.lit(name).alias(storage.BLOCK),
        )

    b = (
        instance_labels.select(
            F.col(storage.INSTANCE_INDEX).alias(storage.SRC_INDEX),
            F.col(storage.LABEL_INDEX).alias(storage.DST_INDEX),
        )
        .join(train_idx, storage.SRC_INDEX, "left_semi")
        .join(label_idx, storage.DST_INDEX, "left_semi")
        .distinct()
    )
    blk_b = block(b, "B")
    parts = {"B": blk_b}
    if side_info in ("label_text", "both"):
        in_b = b.select(storage.DST_INDEX).distinct()
        parts["I_inst"] = block(
            train_idx.withColumn(storage.DST_INDEX, F.col(storage.SRC_INDEX)), "I_inst"
        )
        parts["I_label"] = block(
            in_b.withColumn(storage.SRC_INDEX, F.col(storage.DST_INDEX)), "I_label"
        )
        parts["BT"] = block(
            b.select(
                F.col(storage.DST_INDEX).alias(storage.SRC_INDEX),
                F.col(storage.SRC_INDEX).alias(storage.DST_INDEX),
            ),
            "BT",
        )
    if side_info in ("i2i", "both"):
        ids = train.select(F.col(storage.NODE_ID), F.col(storage.NODE_INDEX))
        a = (
            i2i.select(storage.SRC_ID, storage.DST_ID)
            .join(
                ids.select(
                    F.col(storage.NODE_ID).alias(storage.SRC_ID),
                    F.col(storage.NODE_INDEX).alias(storage.SRC_INDEX),
                ),
                storage.SRC_ID,
            )
            .join(
                ids.select(
                    F.col(storage.NODE_ID).alias(storage.DST_ID),
                    F.col(storage.NODE_INDEX).alias(storage.DST_INDEX),
                ),
                storage.DST_ID,
            )
            .filter(F.col(storage.SRC_INDEX) != F.col(storage.DST_INDEX))
            .select(storage.SRC_INDEX, storage.DST_INDEX)
            .distinct()
        )
        parts["A"] = block(a, "A")
        if side_info == "i2i":
            lonely = train_idx.join(
                a.select(storage.SRC_INDEX).distinct(), storage.SRC_INDEX, "left_anti"
            )
            parts["I_inst"] = block(
                lonely.withColumn(storage.DST_INDEX, F.col(storage.SRC_INDEX)), "I_inst"
            )
            del parts["B"]
    pina = None
    for name in BLOCKS:
        if name in parts:
            pina = parts[name] if pina is None else pina.unionByName(parts[name])
    if pina is None:  # B, or A with I_inst, is always there
        raise ValueError(f"pretrain_edges: no block for side_info={side_info!r}")
    return pina.withColumn(storage.VARIANT, F.lit(V.PINA)).unionByName(
        blk_b.withColumn(storage.VARIANT, F.lit(V.PINA_NAIVE))
    )
