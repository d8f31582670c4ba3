"""The downstream targets: graph labels (``task.labels: graph``) and ``graph/instance_labels``.

Graph labels follow the leak policy of :mod:`pina_spark.stages.graph`: TRAIN instances get their
neighbours in the train-only graph, TEST instances their neighbours in the all-items graph that
are TRAIN items; test items are never labels. :func:`index_instance_labels` turns the
``instance_id, label_id`` pairs into node indices.
"""

from pina_spark import storage


def graph_labels(instances, i2i_all, i2i_train=None):
    """Graph labels (``task.labels: graph``), leak-guarded (see the module docstring).

    Parameters
    ----------
    instances : DataFrame
        clean ``instance_id, text, split``.
    i2i_all : DataFrame
        :func:`i2i_edges` over all items (gives the labels of TEST instances).
    i2i_train : DataFrame, optional
        :func:`i2i_edges` over train items only (gives the labels of TRAIN instances); defaults
        to ``i2i_all`` restricted to train items.

    Returns
    -------
    (labels, instance_labels) : (DataFrame, DataFrame)
        ``label_id, text`` (train items that label at least one instance; label text = item
        text) and ``instance_id, label_id``.

    Example::

        labels, il = graph_labels(instances, edges_all, edges_train)
    """
    from pyspark.sql import functions as F

    split = instances.select(
        F.col(storage.INSTANCE_ID).alias("_id"), F.col(storage.SPLIT).alias("_split")
    )
    train = split.filter(F.col("_split") == storage.SPLIT_TRAIN).select("_id")
    test = split.filter(F.col("_split") == storage.SPLIT_TEST).select("_id")
    if i2i_train is None:
        i2i_train = i2i_all

    def restrict(edges, src_ids):
        e = edges.select(
            F.col(storage.SRC_ID).alias(storage.INSTANCE_ID),
            F.col(storage.DST_ID).alias(storage.LABEL_ID),
        )
        e = e.join(
            src_ids.withColumnRenamed("_id", storage.INSTANCE_ID), storage.INSTANCE_ID, "left_semi"
        )
        return e.join(
            train.withColumnRenamed("_id", storage.LABEL_ID), storage.LABEL_ID, "left_semi"
        ).select(storage.INSTANCE_ID, storage.LABEL_ID)

    il = restrict(i2i_train, train).unionByName(restrict(i2i_all, test)).distinct()
    labels = (
        il.select(storage.LABEL_ID)
        .distinct()
        .join(
            instances.select(F.col(storage.INSTANCE_ID).alias(storage.LABEL_ID), storage.TEXT),
            storage.LABEL_ID,
        )
    )
    return labels, il


def index_instance_labels(nodes, instance_labels):
    """``instance_id, label_id`` -> ``instance_index, label_index`` through the ``nodes`` table.

    Example::

        index_instance_labels(nodes, il).columns  # ['instance_index', 'label_index']
    """
    from pyspark.sql import functions as F

    inst = nodes.filter(F.col(storage.KIND) == storage.KIND_INSTANCE).select(
        F.col(storage.NODE_ID).alias(storage.INSTANCE_ID),
        F.col(storage.NODE_INDEX).alias(storage.INSTANCE_INDEX),
    )
    lab = nodes.filter(F.col(storage.KIND) == storage.KIND_LABEL).select(
        F.col(storage.NODE_ID).alias(storage.LABEL_ID),
        F.col(storage.NODE_INDEX).alias(storage.LABEL_INDEX),
    )
    return (
        instance_labels.join(inst, storage.INSTANCE_ID)
        .join(lab, storage.LABEL_ID)
        .select(storage.INSTANCE_INDEX, storage.LABEL_INDEX)
    )
