"""Baskets: the distinct (basket, item) rows of the events and the basket cap.

Events are reduced to distinct (basket, item). Baskets with fewer than 2 items contribute nothing
to the co-purchase graph (counted in the stats, never quarantined). Baskets with more than
``graph.max_basket_size`` distinct items are down-sampled deterministically: items are ranked by
``sha1(basket_id + "\\x1f" + item_id)`` (:func:`basket_hash`, hex string, ascending; ties by
item id) and the first ``max_basket_size`` are kept. No ``rand()``: the same ids give the same
sample on any partitioning and on task retries.

Two forms of the same rows and statistics: a Spark frame (:func:`capped_baskets`,
:func:`basket_stats`; the ``shuffle`` strategy) and, on the driver, the basket x item incidence
matrix of a pyarrow table (:func:`basket_matrix`; the ``broadcast`` strategy). tests/test_graph.py
checks that they agree.
"""

from pina_spark import storage

HASH_SEP = "\x1f"

#: internal column of :func:`capped_baskets` (never published): distinct items of the basket
#: before the cap
_SIZE = "_basket_size"


def basket_hash(basket_id: str, item_id: str) -> str:
    """The down-sampling key of an item in a basket (the same as the Spark expression used by
    :func:`capped_baskets`), for reference implementations and tests.

    Examples
    --------
    >>> basket_hash("o1", "a")
    '4ab133fe21657ecf9d16e820d757edfd57b2f0e0'
    """
    import hashlib

    return hashlib.sha1(f"{basket_id}{HASH_SEP}{item_id}".encode()).hexdigest()


def capped_baskets(events, max_basket_size: int):
    """Distinct (basket, item) with baskets down-sampled to ``max_basket_size`` items.

    Parameters
    ----------
    events : DataFrame
        validated events (``basket_id``, ``item_id`` non-null); duplicates are allowed.
    max_basket_size : int
        items kept per basket: the first ones by ``basket_hash`` (then item id).

    Returns
    -------
    DataFrame
        ``basket_id, item_id, _basket_size`` (distinct items of the basket BEFORE the cap),
        hash-partitioned by ``basket_id`` (what :func:`co_counts` relies on).

    Example::

        capped_baskets(events, 100).filter("_basket_size >= 2")
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    b, i = F.col(storage.BASKET_ID), F.col(storage.ITEM_ID)
    df = (
        events.select(storage.BASKET_ID, storage.ITEM_ID)
        .repartition(storage.BASKET_ID)
        .withColumn("_h", F.sha1(F.concat_ws(HASH_SEP, b, i)))
    )
    w = Window.partitionBy(storage.BASKET_ID).orderBy(F.col("_h"), i)
    # duplicates of (basket, item) share the hash, hence are adjacent in the window order
    df = df.withColumn("_prev", F.lag(i).over(w)).filter(
        F.col("_prev").isNull() | (F.col("_prev") != i)
    )
    df = df.withColumn("_rank", F.row_number().over(w)).withColumn(
        _SIZE, F.count(F.lit(1)).over(Window.partitionBy(storage.BASKET_ID))
    )
    return df.filter(F.col("_rank") <= max_basket_size).select(
        storage.BASKET_ID, storage.ITEM_ID, _SIZE
    )


def basket_stats(capped, max_basket_size: int) -> dict[str, int]:
    """Basket counts of a :func:`capped_baskets` frame (one driver action).

    Returns ``baskets``, ``baskets_one_item`` (contribute nothing), ``baskets_capped`` (had more
    than ``max_basket_size`` items), ``baskets_used`` (N: >= 2 items), ``events_distinct_kept``.

    Example::

        basket_stats(capped_baskets(events, 100), 100)["baskets_used"]
    """
    from pyspark.sql import functions as F

    per_basket = capped.groupBy(storage.BASKET_ID).agg(
        F.first(_SIZE).alias("s"), F.count(F.lit(1)).alias("k")
    )
    r = per_basket.agg(
        F.count(F.lit(1)).alias("baskets"),
        F.sum(F.when(F.col("s") == 1, 1).otherwise(0)).alias("baskets_one_item"),
        F.sum(F.when(F.col("s") > max_basket_size, 1).otherwise(0)).alias("baskets_capped"),
        F.sum(F.when(F.col("s") >= 2, 1).otherwise(0)).alias("baskets_used"),
        F.sum("k").alias("events_distinct_kept"),
    ).collect()[0]
    return {k: int(r[k] or 0) for k in r.asDict()}


def basket_matrix(tbl, max_basket_size: int, keep_items=None):
    """Driver side: the capped basket x item incidence matrix of a (basket_id, item_id) Arrow
    table, with the same distinct rows, the same cap and the same statistics as
    :func:`capped_baskets` + :func:`basket_stats`.

    Parameters
    ----------
    tbl : pyarrow.Table
        ``basket_id, item_id`` strings (duplicates allowed).
    max_basket_size : int
    keep_items : pyarrow.Array, optional
        only rows whose item is in it are used (the train-only graph), before the cap.

    Returns
    -------
    (matrix, stats) : (dict, dict)
        ``matrix``: ``indptr`` (int64), ``indices`` (int32 item codes, ascending in each
        basket) of the baskets with >= 2 items, ``items`` (pyarrow string array, sorted: code ->
        id), ``n_a`` (baskets per item code), ``n_baskets`` (N); ``stats`` as
        :func:`basket_stats`.
    """
    import numpy as np
    import pyarrow.compute as pc

    b = tbl.column(storage.BASKET_ID).combine_chunks()
    i = tbl.column(storage.ITEM_ID).combine_chunks()
    if keep_items is not None:
        m = pc.is_in(i, value_set=keep_items)
        b, i = b.filter(m), i.filter(m)
    items = pc.unique(i)
    items = items.take(pc.sort_indices(items))  # code order == string (UTF-8 byte) order
    n_items = len(items)
    icode = pc.index_in(i, value_set=items).to_numpy(zero_copy_only=False).astype(np.int64)
    enc = pc.dictionary_encode(b)
    bcode = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = np.unique(bcode * max(n_items, 1) + icode)  # distinct (basket, item), basket-major
    bc, ic = key // max(n_items, 1), key % max(n_items, 1)
    sizes = np.bincount(bc, minlength=len(enc.dictionary)).astype(np.int64)
    keep = np.ones(len(key), dtype=bool)
    big = np.flatnonzero(sizes > max_basket_size)
    if len(big):  # the documented cap: first max_basket_size items by (sha1, item id)
        names, ids = enc.dictionary.to_pylist(), items.to_pylist()
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        for bb in big:
            lo, hi = int(starts[bb]), int(starts[bb] + sizes[bb])
            codes = ic[lo:hi].tolist()
            ranked = sorted(codes, key=lambda c: (basket_hash(names[bb], ids[c]), c))
            keep[lo:hi] = np.isin(ic[lo:hi], ranked[:max_basket_size])
    kept = np.minimum(sizes, max_basket_size)
    stats = {
        "baskets": int(len(sizes)),
        "baskets_one_item": int((sizes == 1).sum()),
        "baskets_capped": int((sizes > max_basket_size).sum()),
        "baskets_used": int((sizes >= 2).sum()),
        "events_distinct_kept": int(kept.sum()),
    }
    used = keep & (sizes[bc] >= 2)
    indptr = np.r_[0, np.cumsum(kept[sizes >= 2])].astype(np.int64)
    indices = ic[used].astype(np.int32)
    matrix = {
        "indptr": indptr,
        "indices": indices,
        "items": items,
        "n_a": np.bincount(indices, minlength=n_items).astype(np.int64),
        "n_baskets": stats["baskets_used"],
    }
    return matrix, stats
