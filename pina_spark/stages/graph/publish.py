"""Where ``nodes``, ``graph/instance_labels`` and ``graph/pretrain_edges`` are built: on the
driver or by Spark, decided once per run.

Small inputs on the driver
--------------------------
``instances``, ``labels`` and ``instance_labels`` of at most
:data:`pina_spark.validate.spark.DRIVER_MAX_ROWS` rows (and ``DRIVER_MAX_BYTES``) are validated on
the driver in one pyarrow pass (:mod:`pina_spark.validate.tables`); with labels given
(:func:`builds_on_driver`), :class:`DriverGraphPath` builds ``nodes``, ``graph/instance_labels`` and
(``side_info`` ``label_text`` / ``naive``) ``graph/pretrain_edges`` there with numpy
(:mod:`pina_spark.stages.graph.driver`) and writes them by pyarrow: no Spark job per table.
Otherwise :class:`SparkGraphPath` builds them with Spark
(:func:`~pina_spark.stages.graph.nodes.assign_node_indices`,
:func:`~pina_spark.stages.graph.labels.index_instance_labels`,
:func:`~pina_spark.stages.graph.bpre.pretrain_edges`). Both objects have the same three steps, and
both give the same tables (tests/test_graph.py).
"""

from collections.abc import Callable
from typing import Any, Protocol

from pina_spark import storage, validate
from pina_spark.stages.graph import driver
from pina_spark.stages.graph.bpre import pretrain_edges
from pina_spark.stages.graph.labels import index_instance_labels
from pina_spark.stages.graph.nodes import assign_node_indices


class GraphPath(Protocol):
    """The three publish steps of the graph stage, in this order; ``nodes`` and
    ``instance_labels`` are the published tables read back as DataFrames."""

    built_on_driver: bool

    def publish_nodes(self) -> None: ...

    def publish_instance_labels(self, nodes) -> None: ...

    def publish_pretrain_edges(self, nodes, instance_labels, i2i_train) -> None: ...


def builds_on_driver(cfg, clean_arrow: dict[str, Any]) -> bool:
    """Whether the driver builds the three tables: labels given and every table of
    :data:`pina_spark.validate.DRIVER_TABLES` validated on the driver (in ``clean_arrow``)."""
    return cfg.task.labels == "given" and set(validate.DRIVER_TABLES) <= set(clean_arrow)


def _publish_spark_pretrain_edges(cfg, paths, nodes, instance_labels, i2i_train) -> None:
    """B_pre by Spark, written partitioned by ``variant``."""
    pe = pretrain_edges(nodes, instance_labels, i2i_train, cfg.side_info, cfg.task.labels)
    storage.write_table(pe, paths, storage.PRETRAIN_EDGES, partition_by=[storage.VARIANT])


class SparkGraphPath:
    """The three tables built by Spark jobs and written by Spark.

    Parameters
    ----------
    cfg : pina_spark.config.PinaConfig
    paths : pina_spark.storage.RunPaths
    frame : callable
        table name -> the clean rows of that input table as a DataFrame.
    n_rows : (int or None, int or None)
        the row counts of the instances and the labels when known (see
        :func:`~pina_spark.stages.graph.nodes.assign_node_indices`).
    persisted : list
        receives the frames persisted on the way (the stage unpersists them).
    labels, instance_labels : DataFrame, optional
        the graph labels (``task.labels: graph``); by default the given input tables.
    """

    built_on_driver = False

    def __init__(
        self,
        cfg,
        paths,
        frame: Callable[[str], Any],
        n_rows: tuple[int | None, int | None],
        persisted: list[Any],
        labels=None,
        instance_labels=None,
    ):
        self.cfg, self.paths, self.frame = cfg, paths, frame
        self.n_rows, self.persisted = n_rows, persisted
        self.labels, self.instance_labels = labels, instance_labels

    def publish_nodes(self) -> None:
        instances = self.frame("instances")
        labels = self.frame("labels") if self.labels is None else self.labels
        nodes = assign_node_indices(instances, labels, self.persisted, self.n_rows)
        storage.write_table(nodes, self.paths, storage.NODES)

    def publish_instance_labels(self, nodes) -> None:
        il = self.instance_labels
        il = self.frame("instance_labels") if il is None else il
        storage.write_table(index_instance_labels(nodes, il), self.paths, storage.INSTANCE_LABELS)

    def publish_pretrain_edges(self, nodes, instance_labels, i2i_train) -> None:
        _publish_spark_pretrain_edges(self.cfg, self.paths, nodes, instance_labels, i2i_train)


class DriverGraphPath:
    """The three tables built on the driver from the validated pyarrow tables and written by
    pyarrow; B_pre of ``side_info`` ``i2i`` / ``both`` needs the train-only co-purchase graph (a
    Spark frame) and stays with Spark.

    Parameters
    ----------
    spark : SparkSession
    cfg : pina_spark.config.PinaConfig
    paths : pina_spark.storage.RunPaths
    clean_arrow : dict
        table name -> the clean rows validated on the driver (pyarrow Tables).
    """

    built_on_driver = True

    def __init__(self, spark, cfg, paths, clean_arrow: dict[str, Any]):
        self.spark, self.cfg, self.paths, self.clean = spark, cfg, paths, clean_arrow
        self.nodes: Any = None  # the pyarrow tables written by the steps, for the next ones
        self.instance_labels: Any = None

    def publish_nodes(self) -> None:
        self.nodes = driver.nodes_table(self.clean["instances"], self.clean["labels"])
        storage.write_arrow(self.spark, self.nodes, self.paths, storage.NODES)

    def publish_instance_labels(self, nodes) -> None:
        il = driver.index_instance_labels(self.nodes, self.clean["instance_labels"])
        self.instance_labels = il
        storage.write_arrow(self.spark, il, self.paths, storage.INSTANCE_LABELS)

    def publish_pretrain_edges(self, nodes, instance_labels, i2i_train) -> None:
        if self.cfg.side_info not in driver.SIDE_INFO:
            _publish_spark_pretrain_edges(self.cfg, self.paths, nodes, instance_labels, i2i_train)
            return
        pe = driver.pretrain_edges(self.nodes, self.instance_labels, self.cfg.side_info)
        storage.write_arrow(
            self.spark, pe, self.paths, storage.PRETRAIN_EDGES, partition_by=storage.VARIANT
        )
