"""The graph stage's entry point: :func:`run` validates the inputs, builds the co-purchase graphs
and publishes the stage's tables.

Driver side. ``run(ctx)`` validates the inputs (:mod:`pina_spark.validate`), publishes
``quarantine/<table>`` for every configured input (always, even when empty), then ``nodes``,
``graph/i2i_edges`` (when events are given), ``graph/instance_labels`` and
``graph/pretrain_edges`` (partitioned by ``variant``) exactly as ``docs/design.md`` describes.
The pair plan (:func:`~pina_spark.stages.graph.i2i.pair_plan`) and the path of the last three
tables (:mod:`.publish`: on the driver or by Spark) are decided once, here.
"""

import dataclasses as dc
import logging
import time
from typing import Any

from pina_spark import storage, validate
from pina_spark.runtime import faults
from pina_spark.stages.graph.baskets import basket_matrix, basket_stats, capped_baskets
from pina_spark.stages.graph.i2i import PairPlan, pair_plan
from pina_spark.stages.graph.labels import graph_labels
from pina_spark.stages.graph.pairs_broadcast import PairTask, _broadcast_edges
from pina_spark.stages.graph.pairs_shuffle import _shuffle_pairs
from pina_spark.stages.graph.publish import (
    DriverGraphPath,
    GraphPath,
    SparkGraphPath,
    builds_on_driver,
)
from pina_spark.stages.graph.scoring import _finish_pairs
from pina_spark.stages.graph.stats import GraphStats
from pina_spark.storage.manifest import StepTimer

log = logging.getLogger(__name__)


def _require_train_rows(instances, instances_arrow, in_stats) -> None:
    """Stop (``InputError``) when no clean instance row is ``train``: B_pre, g, the vectorizer
    and the downstream model all learn from train rows only, so there is nothing to learn.

    >>> import pyarrow as pa
    >>> _require_train_rows(None, pa.table({"split": ["test", "train"]}), {})
    >>> _require_train_rows(None, pa.table({"split": ["test"]}),
    ...     {"instances": {"rows_used": 1}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.storage.schemas.InputError: input.instances: none of the 1 rows used is a train ...
    """
    if instances_arrow is not None:
        import pyarrow.compute as pc

        split = instances_arrow.column(storage.SPLIT)
        has_train = bool(pc.any(pc.equal(split, storage.SPLIT_TRAIN)).as_py())
    else:
        from pyspark.sql import functions as F

        train = instances.filter(F.col(storage.SPLIT) == storage.SPLIT_TRAIN)
        has_train = train.limit(1).count() > 0
    if not has_train:
        n = in_stats.get("instances", {}).get("rows_used")
        raise storage.InputError(
            f"input.instances: none of the {n} rows used is a train instance (split is 'test' "
            f"on every row): g, the vectorizer and the downstream model learn from train rows "
            f"only. Mark the rows to learn from split=train (a row without a split is train)"
        )


def _require_train_labels(per: dict[str, dict[str, int]], labels: str, n_rows: int) -> None:
    """Stop (``InputError``) when B_pre has no train instance -> label edge (block ``B``) in
    any variant: no train instance has a label, so g and the downstream model have nothing
    to learn (the pretrain stage said B_pre lacked ``pina_naive`` and to rerun this stage).

    >>> _require_train_labels({"pina": {"B": 3}}, "given", 4)
    >>> _require_train_labels({"pina": {"I_inst": 3}}, "given", 4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.storage.schemas.InputError: no train instance has a label: every clean row ...
    """
    if any(b.get("B") for b in per.values()):
        return
    of = (
        "input.instance_labels is of a test instance"
        if labels == "given"
        else "the graph labels is of a test item"
    )
    raise storage.InputError(
        f"no train instance has a label: every clean row of {of} ({n_rows} instance-label "
        f"rows in all), so g and the downstream model have nothing to learn; see "
        f"graph/instance_labels"
    )


def _degree_stats(spark, uri: str) -> tuple[int, dict[str, float]]:
    """(directed edge rows, degree quantiles) of the published edges at ``uri``: degrees per
    ``src_id`` (:func:`pina_spark.storage.group_counts`), quantiles with linear interpolation (as
    Spark's ``percentile``)."""
    import numpy as np

    deg = storage.group_counts(spark, uri, [storage.SRC_ID]).column("count").to_numpy()
    if not len(deg):
        return 0, {"items_with_edges": 0}
    q = np.percentile(deg.astype(np.float64), [50, 90, 99, 100])
    return int(deg.sum()), {
        "items_with_edges": int(len(deg)),
        "p50": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": float(q[3]),
    }


def _build_graphs(
    spark,
    events,
    instances,
    graph_cfg,
    gplan: PairPlan,
    fault_plan,
    need_train: bool,
    persisted: list[Any],
    timer,
    tasks: list[PairTask],
):
    """(all-items edges, their basket stats, train-only edges or None when every instance is a
    train instance, their basket stats); ``None, None`` for the last two without
    ``need_train``. Frames are lazy except what the steps materialise. With ``broadcast`` the
    (basket, item) rows are collected once and both graphs come from them; ``tasks`` receives
    their :class:`PairTask` (all items first). ``events``: with ``broadcast`` the clean rows
    already on the driver (a pyarrow Table, :mod:`pina_spark.validate.events`), else a
    DataFrame."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    train_only = False
    if need_train:
        with timer.step("train.items"):
            train_only = (
                instances.filter(F.col(storage.SPLIT) != storage.SPLIT_TRAIN).limit(1).count() > 0
            )
    train_ids = (
        instances.filter(F.col(storage.SPLIT) == storage.SPLIT_TRAIN).select(
            F.col(storage.INSTANCE_ID).alias(storage.ITEM_ID)
        )
        if train_only
        else None
    )
    out: list[Any] = []
    if gplan.strategy == "broadcast":
        tbl = events.select([storage.BASKET_ID, storage.ITEM_ID])
        with timer.step("train.collect_ids"):
            keep = storage.collect_arrow(train_ids).column(0) if train_only else None
        for prefix, k in [("", None)] + ([("train.", keep)] if train_only else []):
            with timer.step(prefix + "i2i.basket_matrix"):
                m, st = basket_matrix(tbl, graph_cfg.max_basket_size, keep_items=k)
            edges, task = _broadcast_edges(spark, m, graph_cfg, fault_plan, gplan.tasks)
            persisted.append(task.matrix)
            tasks.append(task)
            out += [edges, st]
    else:
        parts = [("", events)]
        if train_only:
            parts.append(("train.", events.join(train_ids, storage.ITEM_ID, "left_semi")))
        for prefix, ev in parts:
            with timer.step(prefix + "i2i.capped_baskets"):
                capped = capped_baskets(ev, graph_cfg.max_basket_size).persist(
                    StorageLevel.MEMORY_AND_DISK
                )
                persisted.append(capped)
                st = basket_stats(capped, graph_cfg.max_basket_size)
            out += [_finish_pairs(_shuffle_pairs(ev, graph_cfg, fault_plan, capped), graph_cfg), st]
    if not need_train:
        return out[0], out[1], None, None
    if not train_only:
        return out[0], out[1], None, out[1]
    return tuple(out)


def run(ctx) -> GraphStats:
    """Validate inputs, publish quarantine, nodes, i2i_edges, instance_labels, pretrain_edges.

    Returns the statistics recorded in the manifest, a :class:`GraphStats`: ``inputs`` (rows
    in/used/quarantined and reasons per table), ``baskets`` (+ ``baskets_train``), ``i2i_edges``
    (directed rows) and ``degree``, ``nodes``, ``instance_labels``, ``pretrain_edges`` (per
    variant and block), ``steps_s`` (wall seconds per step, in run order here; the manifest
    stores its keys sorted) and ``time_s``.

    Example::

        from pina_spark.orchestration.pipeline import make_context
        run(make_context(spark, cfg))["nodes"]  # {'instances': 120, 'labels': 40}
    """
    t0 = time.time()
    timer = StepTimer("graph")
    spark, cfg, paths = ctx.spark, ctx.cfg, ctx.paths
    persisted: list[Any] = []
    with timer.step("inputs.read"):  # paths, columns and types of every input (no rows)
        raw = validate.read_inputs(spark, cfg)
    rows_in: dict[str, int] = {}
    gplan: PairPlan | None = None
    if "events" in raw:  # the pair plan decides how the events are validated, too
        with timer.step("events.rows_in"):
            rows_in["events"] = validate.count_input(raw["events"], cfg.input.events)
        gplan = pair_plan(spark, cfg.graph, rows_in["events"])
        log.info("graph stage: pair counting %s", gplan)
    with timer.step("driver_tables.rows_in"):
        on_driver = validate.driver_tables(spark, cfg, raw, rows_in)
    if gplan is not None and gplan.strategy == "broadcast":
        on_driver += ("events",)
    checked = validate.validate_inputs(
        spark,
        cfg,
        timer=timer,
        raw=raw,
        rows_in=rows_in,
        on_driver=on_driver,
        driver_frames=False,
    )
    persisted += checked.persisted
    in_stats, clean_arrow = checked.counts, checked.clean_arrow
    tables = dict(checked.tables)  # frame() adds the frames it makes from clean_arrow
    validate.publish_quarantine(spark, checked, paths, cfg.quality, timer)
    _require_train_rows(tables.get("instances"), clean_arrow.get("instances"), in_stats)

    def frame(name: str):
        """The clean rows of an input table as a DataFrame (made from the driver's rows on
        first use: the driver path of the graph tables needs none)."""
        if name not in tables:
            tables[name] = storage.frame_from_arrow(spark, clean_arrow[name], name)
        return tables[name]

    plan = faults.fault_plan(cfg, "graph")
    events = tables.get("events")
    i2i_all = i2i_train = None
    # the co-purchase graphs' statistics (events only)
    baskets: dict[str, int] | None = None
    baskets_train: dict[str, int] | None = None
    n_edges: int | None = None
    n_edges_train: int | None = None
    degree: dict[str, float] | None = None
    pair_tasks_s: dict[str, float] | None = None
    if events is not None:
        assert gplan is not None
        need_train = cfg.side_info in ("i2i", "both") or cfg.task.labels == "graph"
        pair_tasks: list[PairTask] = []
        built = _build_graphs(
            spark,
            events,
            frame("instances") if need_train or gplan.strategy != "broadcast" else None,
            cfg.graph,
            gplan,
            plan,
            need_train,
            persisted,
            timer,
            pair_tasks,
        )
        edges, baskets = built[0], built[1]
        with timer.step("i2i.publish"):
            storage.write_table(edges, paths, storage.I2I_EDGES)
        i2i_all = storage.read_table(spark, paths, storage.I2I_EDGES)
        with timer.step("i2i.degree_stats"):
            n_edges, degree = _degree_stats(spark, paths.table(storage.I2I_EDGES))
        if need_train:
            tr, baskets_train = built[2], built[3]
            if tr is None:
                i2i_train = i2i_all
            else:
                with timer.step("train.i2i.edges"):
                    i2i_train = tr.persist()
                    persisted.append(i2i_train)
                    n_edges_train = i2i_train.count()
        if pair_tasks:  # executor seconds inside the steps above, summed over tasks
            pair_tasks_s = dict(
                zip(("all", "train"), (round(t.seconds.value, 3) for t in pair_tasks))
            )
    if cfg.task.labels == "graph":
        with timer.step("graph_labels"):
            labels, il = graph_labels(frame("instances"), i2i_all, i2i_train)
            if labels.limit(1).count() == 0:
                g = cfg.graph
                raise storage.InputError(
                    f"task.labels=graph: no graph labels: no edge of the co-purchase graph "
                    f"reaches a train item (graph.min_count={g.min_count}, measure={g.measure}, "
                    f"min_score={g.min_score}, top_n={g.top_n}, max_degree={g.max_degree}; "
                    f"{n_edges or 0} directed i2i edges over all items). Lower "
                    f"graph.min_count / min_score or give more events; nothing to learn "
                    f"otherwise"
                )
    else:
        labels = il = None  # the given tables: frame("labels"), frame("instance_labels")
    # labels given and every table on the driver: nodes, instance_labels and (without the i2i
    # graph) B_pre are built there too, else by Spark
    path: GraphPath
    if builds_on_driver(cfg, clean_arrow):
        path = DriverGraphPath(spark, cfg, paths, clean_arrow)
    else:
        n_lab = in_stats["labels"]["rows_used"] if cfg.task.labels == "given" else None
        n_rows = (in_stats["instances"]["rows_used"], n_lab)
        path = SparkGraphPath(cfg, paths, frame, n_rows, persisted, labels, il)
    with timer.step("nodes.publish"):
        path.publish_nodes()
    nodes = storage.read_table(spark, paths, storage.NODES)
    with timer.step("nodes.count"):
        kinds = {
            r[storage.KIND]: int(r["count"])
            for r in storage.group_counts(
                spark, paths.table(storage.NODES), [storage.KIND]
            ).to_pylist()
        }
    node_counts = {
        "instances": kinds.get(storage.KIND_INSTANCE, 0),
        "labels": kinds.get(storage.KIND_LABEL, 0),
    }
    if not node_counts["labels"]:
        log.warning(
            "graph stage: no label nodes (task.labels=%s); B_pre has no B block", cfg.task.labels
        )
    with timer.step("instance_labels.publish"):
        path.publish_instance_labels(nodes)
    il_idx = storage.read_table(spark, paths, storage.INSTANCE_LABELS)
    with timer.step("pretrain_edges.publish"):
        path.publish_pretrain_edges(nodes, il_idx, i2i_train)
    with timer.step("counts"):
        n_il = storage.count_rows_arrow(paths.table(storage.INSTANCE_LABELS))
        n_instance_labels = il_idx.count() if n_il is None else n_il
        per: dict[str, dict[str, int]] = {}
        for r in storage.group_counts(
            spark, paths.table(storage.PRETRAIN_EDGES), [storage.VARIANT, storage.BLOCK]
        ).to_pylist():
            per.setdefault(r[storage.VARIANT], {})[r[storage.BLOCK]] = int(r["count"])
    for df in persisted:
        df.unpersist()
    _require_train_labels(per, cfg.task.labels, n_instance_labels)
    stats = GraphStats(
        pair_plan=dc.asdict(gplan) if gplan is not None else None,
        validated_on_driver=list(on_driver),
        inputs=in_stats,
        baskets=baskets,
        i2i_edges=n_edges,
        degree=degree,
        baskets_train=baskets_train,
        i2i_edges_train=n_edges_train,
        pair_tasks_s=pair_tasks_s,
        built_on_driver=path.built_on_driver,
        nodes=node_counts,
        instance_labels=n_instance_labels,
        pretrain_edges={v: dict(sorted(b.items())) for v, b in sorted(per.items())},
        steps_s=timer.as_dict(),
        time_s=round(time.time() - t0, 3),
    )
    log.info("graph stage: %s", {k: v for k, v in stats.to_dict().items() if k != "inputs"})
    return stats
