"""Node indices: the ``nodes`` table (:func:`assign_node_indices`).

Instances sorted by id get ``0..n-1``, then labels sorted by id. The global rank is computed
without a single-partition window: range-partition by id, number rows inside each partition, add
the partition's offset (sizes of the partitions before it, collected on the driver). Range
partitions hold consecutive key ranges, so the result is the same for any partitioning.
"""

from typing import Any

from pina_spark import storage

#: up to this many rows (when the caller knows the count) a table is ranked in one sorted
#: partition: no sampling job, no partition-size job (the rank is the same either way)
SINGLE_PARTITION_RANK_MAX = 2_000_000


def _global_rank(
    df,
    key: str,
    offset: int = 0,
    persisted: list[Any] | None = None,
    n_rows: int | None = None,
):
    """Add ``node_index`` = ``offset`` + rank of ``key`` (unique) in ascending order; returns
    (frame, n). With ``n_rows`` (the known row count) up to :data:`SINGLE_PARTITION_RANK_MAX`:
    a window over one sorted partition, no job here. Otherwise one small driver action
    (partition sizes): the ranked frame is persisted so the partition sizes and the rows come
    from the same evaluation (range bounds come from a sample); it is appended to
    ``persisted`` for the caller to unpersist."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if n_rows is not None and n_rows <= SINGLE_PARTITION_RANK_MAX:
        w = Window.orderBy(F.col(key))
        return df.withColumn(
            storage.NODE_INDEX, (F.row_number().over(w) - 1 + offset).cast("long")
        ), n_rows
    ranged = df.repartitionByRange(F.col(key)).withColumn("_pid", F.spark_partition_id())
    w = Window.partitionBy("_pid").orderBy(F.col(key))
    ranked = ranged.withColumn("_local", F.row_number().over(w) - 1).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    if persisted is not None:
        persisted.append(ranked)
    sizes = sorted(
        (int(r["_pid"]), int(r["n"]))
        for r in ranked.groupBy("_pid").agg(F.count(F.lit(1)).alias("n")).collect()
    )
    offsets, acc = [], offset
    for pid, n in sizes:
        offsets += [F.lit(pid), F.lit(acc)]
        acc += n
    if not offsets:
        return ranked.withColumn(storage.NODE_INDEX, F.lit(None).cast("long")).drop(
            "_pid", "_local"
        ), 0
    omap = F.create_map(*offsets)
    out = ranked.withColumn(
        storage.NODE_INDEX, (omap[F.col("_pid")] + F.col("_local")).cast("long")
    )
    return out.drop("_pid", "_local"), acc - offset


def assign_node_indices(
    instances,
    labels,
    persisted: list[Any] | None = None,
    n_rows: tuple[int | None, int | None] = (None, None),
):
    """The ``nodes`` table: instances sorted by id get ``0..n_inst-1``, then labels sorted by id.

    Parameters
    ----------
    instances : DataFrame
        ``instance_id, text, split`` with unique ids (validated).
    labels : DataFrame
        ``label_id, text`` with unique ids.
    persisted : list, optional
        receives the two persisted rank frames (unpersist them once the result is written).
    n_rows : (int or None, int or None)
        the row counts of ``instances`` and ``labels`` when known (small tables are then
        ranked without extra jobs).

    Returns
    -------
    DataFrame
        ``node_index, kind, node_id, text, split`` (split null for labels).

    Examples
    --------
    >>> inst = spark.createDataFrame([("b", "B", "train"), ("a", "A", "test")],
    ...                              "instance_id string, text string, split string")
    >>> lab = spark.createDataFrame([("x", "X")], "label_id string, text string")
    >>> assign_node_indices(inst, lab).orderBy("node_index").show()
    +----------+--------+-------+----+-----+
    |node_index|    kind|node_id|text|split|
    +----------+--------+-------+----+-----+
    |         0|instance|      a|   A| test|
    |         1|instance|      b|   B|train|
    |         2|   label|      x|   X| NULL|
    +----------+--------+-------+----+-----+
    <BLANKLINE>
    """
    from pyspark.sql import functions as F

    inst, n_inst = _global_rank(
        instances.select(storage.INSTANCE_ID, storage.TEXT, storage.SPLIT),
        storage.INSTANCE_ID,
        persisted=persisted,
        n_rows=n_rows[0],
    )
    lab, _ = _global_rank(
        labels.select(storage.LABEL_ID, storage.TEXT),
        storage.LABEL_ID,
        offset=n_inst,
        persisted=persisted,
        n_rows=n_rows[1],
    )
    inst = inst.select(
        storage.NODE_INDEX,
        F.lit(storage.KIND_INSTANCE).alias(storage.KIND),
        F.col(storage.INSTANCE_ID).alias(storage.NODE_ID),
        storage.TEXT,
        storage.SPLIT,
    )
    lab = lab.select(
        storage.NODE_INDEX,
        F.lit(storage.KIND_LABEL).alias(storage.KIND),
        F.col(storage.LABEL_ID).alias(storage.NODE_ID),
        storage.TEXT,
        F.lit(None).cast("string").alias(storage.SPLIT),
    )
    return inst.unionByName(lab)
