"""Data sets in the input contract: the built-in demo generator and converters of the shared data.

Modules: :mod:`.demo` (the generator), :mod:`.synthetic` (the scale generator),
:mod:`.vocabulary` (their shared shop vocabulary, package data), :mod:`.citeulike` and
:mod:`.instacart` (the converters), :mod:`.common` (split rule, constants, writers).

Every function here writes single Parquet files with pyarrow (no Spark needed) whose columns are
exactly the input contract of :data:`pina_spark.storage.INPUT_COLUMNS` (all strings except
``weight``):

- ``instances``: ``instance_id, text, split`` (``split`` in ``train``/``test``)
- ``labels``: ``label_id, text``
- ``instance_labels``: ``instance_id, label_id``
- ``events``: ``basket_id, item_id[, event_time]``

Test splits are id-seeded (:func:`pina_spark.storage.folds.in_sample_fraction`, 20 %), never random,
so a rerun gives the same split. Every writer is idempotent: rerunning writes byte-identical files.

Sources (``prepare_data``):

``demo``
    :func:`write_demo_data`: a synthetic shop (see its docstring for the generative story).
``synthetic``
    :func:`write_synthetic_data` (``--instances N [--seed S]``): a shop of ``N`` products for
    benchmarking at 10k to 1M+ products, streamed to Parquet in chunks; titles of 2-8 words
    ("Harvest Valley Organic Granola, 12 oz"), log-normal (long-tailed) popularity, about
    ``N / 10`` keyword labels (the demo's plus noun, adjective + noun, brand + noun and
    brand + adjective + noun ones, ranked by expected product count), 1-5 labels per product
    from its title or from the shopping missions it takes part in, and baskets of 3-20 items
    (missions, complementary categories, hub items) until ``50 N`` events. ``instance_id`` =
    ``p<row>`` zero-padded, ``label_id`` = ``L<index>``, ``basket_id`` = ``b<index>``; split
    ``in_sample_fraction(instance_id, 0.2, "pina-test")``. Byte-identical for the same
    ``(N, seed)``, whatever the chunk size (see :mod:`.synthetic`).
``citeulike-t``
    Articles are instances, ``instance_id`` = the article's 0-based line number in ``mult.dat`` as
    a decimal string (``"0"``, ``"17"``; the same ids ``tag-item.dat`` and ``users.dat`` use).
    Text rule: the article's bag of words from ``mult.dat`` over ``vocabulary.dat``, words ordered
    by count descending (ties by vocabulary index ascending), each word repeated by its count and
    joined by single spaces. This keeps term frequencies for tf-idf and puts the salient words
    first for a truncated transformer. Split: test when
    ``in_sample_fraction(instance_id, 0.2, "pina-test")``. Labels are tags: ``label_id`` = the
    tag's 0-based line number in ``tags.dat`` as a string, text = the tag name with ``-`` and ``_``
    replaced by spaces. ``instance_labels`` come from ``tag-item.dat`` (line number = tag id),
    restricted to tags on at least ``min_tag_articles`` (5) distinct articles; the labels table
    holds exactly those tags. Articles are all kept, also those with no words (empty text) or no
    kept tag: the pipeline's validation quarantines what it must, and the counts are in
    ``prepare_stats.json``. Events: ``basket_id`` = ``"u<user line>"``, ``item_id`` = article id
    from ``users.dat``.
``instacart``
    Products of ``order_products_sample.csv`` are instances (``instance_id`` = ``product_id``
    string, text = ``product_name`` from ``products.csv``), split by
    ``in_sample_fraction(instance_id, 0.2, "pina-test")``. Events: ``basket_id`` = ``order_id``,
    ``item_id`` = ``product_id``, ``event_time`` = ``"<user_id>:<order_number>"`` zero-padded so
    that it sorts in order. No labels: use ``task.labels: graph``.

Each ``prepare_data`` run also writes ``<output>/prepare_stats.json``: row counts and what was
dropped and why.

Examples
--------
>>> import tempfile
>>> paths = write_demo_data(tempfile.mkdtemp())
>>> sorted(paths)
['events', 'instance_labels', 'instances', 'labels']
"""

from pina_spark.datasets.citeulike import citeulike_text, prepare_citeulike
from pina_spark.datasets.common import SOURCES, STATS_FILE, TEST_FRACTION, TEST_SALT
from pina_spark.datasets.demo import DEMO_TEST_SALT, demo_catalogue, prepare_demo, write_demo_data
from pina_spark.datasets.instacart import prepare_instacart
from pina_spark.datasets.synthetic import (
    SyntheticSpec,
    prepare_synthetic,
    synthetic_catalogue,
    write_synthetic_data,
)
from pina_spark.storage import InputError

__all__ = [
    "write_demo_data",
    "demo_catalogue",
    "prepare_data",
    "prepare_citeulike",
    "prepare_instacart",
    "prepare_synthetic",
    "write_synthetic_data",
    "synthetic_catalogue",
    "SyntheticSpec",
    "citeulike_text",
    "SOURCES",
    "DEMO_TEST_SALT",
    "TEST_SALT",
    "TEST_FRACTION",
    "STATS_FILE",
]


def prepare_data(
    source: str,
    input_dir: str | None,
    output_dir: str,
    instances: int | None = None,
    seed: int | None = None,
) -> dict[str, str]:
    """Write a data set in the input contract under ``output_dir`` (``pina-spark prepare-data``).

    Parameters
    ----------
    source : str
        ``demo``, ``instacart``, ``citeulike-t`` or ``synthetic`` (rules in the module
        docstring).
    input_dir : str or None
        Folder of the raw data set (not used for ``demo`` and ``synthetic``).
    output_dir : str
        Output folder: Parquet files plus ``prepare_stats.json`` (row counts, what was dropped
        and why).
    instances : int or None
        ``synthetic`` only, and required there: the number of products.
    seed : int or None
        ``synthetic`` only: the seed (default :data:`.synthetic.SYNTHETIC_SEED`).

    Returns
    -------
    dict
        Table name -> absolute Parquet path; usable as the config's ``input`` section as is
        (instacart has ``instances`` and ``events`` only).

    Examples
    --------
    >>> import tempfile
    >>> sorted(prepare_data("demo", None, tempfile.mkdtemp()))
    ['events', 'instance_labels', 'instances', 'labels']
    >>> from pina_spark.storage import InputError
    >>> try:
    ...     prepare_data("demo", None, tempfile.mkdtemp(), instances=10)
    ... except InputError as e:
    ...     print(str(e)[:58])
    prepare-data --source demo: --instances and --seed are for
    """
    if source not in SOURCES:
        raise ValueError(f"prepare_data: unknown source {source!r} (known: {', '.join(SOURCES)})")
    if source == "synthetic":
        if instances is None:
            raise InputError("prepare-data --source synthetic: --instances N is required")
        try:
            spec = SyntheticSpec(instances) if seed is None else SyntheticSpec(instances, seed)
        except ValueError as e:
            raise InputError(f"prepare-data --source synthetic: {e}") from None
        return prepare_synthetic(output_dir, spec.instances, spec.seed)
    if instances is not None or seed is not None:
        raise InputError(
            f"prepare-data --source {source}: --instances and --seed are for --source "
            f"synthetic only"
        )
    if source == "demo":
        return prepare_demo(output_dir)
    if source == "citeulike-t":
        return prepare_citeulike(input_dir, output_dir)[0]
    if source == "instacart":
        return prepare_instacart(input_dir, output_dir)[0]
    raise ValueError(f"prepare_data: unknown source {source!r} (known: {', '.join(SOURCES)})")
