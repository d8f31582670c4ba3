"""The layout of the ``features`` table, owned here: its partition folders
(``variant=<v>/split=<s>``, Spark's escaping), the widths file :data:`FEATURES_META` next to
the Parquet files, and the rows per partition read back from the footers.

Examples
--------
>>> widths(4, 10, ["pina", "vectorizer_only"])
{'pina': {'dense': 8, 'sparse': 20}, 'vectorizer_only': {'dense': 4, 'sparse': 10}}
>>> partition_dir("/s", "pina", "a/b")
'/s/variant=pina/split=a%2Fb'
"""

import json
import logging
from collections.abc import Iterable
from typing import Any

from pina_spark import storage
from pina_spark.config import variants as V

log = logging.getLogger(__name__)

__all__ = [
    "FEATURES_META",
    "PARTITION_BY",
    "widths",
    "write_meta",
    "read_sparse_width",
    "variant_dir",
    "partition_dir",
    "partition_counts",
]

#: small JSON written into the published features folder: dense/sparse widths per variant
FEATURES_META = "_pina_features.json"
#: the partition columns of ``features``, outermost first
PARTITION_BY = (storage.VARIANT, storage.SPLIT)
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def widths(dense_dim: int, sparse_dim: int, variants: Iterable[str]) -> dict[str, dict[str, int]]:
    """Dense and sparse width of every variant: ``D``/``S`` for ``vectorizer_only`` (V0 alone),
    ``2D``/``2S`` for the neighbour variants (V0 and V1)."""
    return {
        v: {
            "dense": dense_dim if v == V.VECTORIZER_ONLY else 2 * dense_dim,
            "sparse": sparse_dim if v == V.VECTORIZER_ONLY else 2 * sparse_dim,
        }
        for v in variants
    }


def write_meta(features_uri: str, dense_dim: int, sparse_dim: int, variants) -> dict[str, Any]:
    """Write :data:`FEATURES_META` into the published folder; returns what was written."""
    meta = {
        "dense_dim": dense_dim,
        "sparse_dim": sparse_dim,
        "widths": widths(dense_dim, sparse_dim, variants),
    }
    storage.write_bytes(
        storage.join(features_uri, FEATURES_META),
        json.dumps(meta, indent=1, sort_keys=True).encode(),
    )
    return meta


def read_sparse_width(features_uri: str, variant: str) -> int | None:
    """The sparse width of ``variant`` from :data:`FEATURES_META`, ``None`` when unknown."""
    raw = storage.read_bytes(storage.join(features_uri, FEATURES_META))
    if raw is None:
        return None
    w = json.loads(raw.decode()).get("widths", {}).get(variant)
    return int(w["sparse"]) if w else None


def escape_partition_value(v: str | None) -> str:
    """Spark's escaping of a partition value in a folder name (``%XX`` for special chars)."""
    if v is None:
        return _HIVE_NULL
    special = set("\"#%'*/:=?\\\x7f{[]^")
    return "".join(f"%{ord(c):02X}" if (c in special or ord(c) < 0x20) else c for c in v)


def variant_dir(base: str, variant: str) -> str:
    """The folder of one variant under ``base`` (the published features or the staging)."""
    return storage.join(base, f"{storage.VARIANT}={escape_partition_value(variant)}")


def partition_dir(base: str, variant: str, split: str | None) -> str:
    """The folder of one ``(variant, split)`` under ``base`` (executor and driver side)."""
    return f"{variant_dir(base, variant)}/{storage.SPLIT}={escape_partition_value(split)}"


def partition_counts(spark, uri: str) -> dict[str, dict[str, int]]:
    """Rows per (variant, split) of the published features: Parquet footers, else Spark."""
    from pyspark.sql import functions as F

    counts: dict[str, dict[str, int]] = {}
    dset = storage.parquet_dataset(uri)
    if dset is not None:
        try:
            import pyarrow.dataset as pds

            for frag in dset.get_fragments():
                keys = pds.get_partition_keys(frag.partition_expression)
                v, s = str(keys.get(storage.VARIANT)), str(keys.get(storage.SPLIT))
                counts.setdefault(v, {})
                counts[v][s] = counts[v].get(s, 0) + frag.metadata.num_rows
            return counts
        except Exception as e:
            log.info("aggregate: counting from footers failed (%s); counting with Spark", e)
            counts = {}
    for r in (
        spark.read.parquet(uri)
        .groupBy(storage.VARIANT, storage.SPLIT)
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    ):
        counts.setdefault(r[storage.VARIANT], {})[str(r[storage.SPLIT])] = int(r["n"])
    return counts
