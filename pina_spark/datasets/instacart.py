"""``prepare-data --source instacart``: products as instances, orders as baskets (rules in the
package docstring)."""

import logging
import os
from typing import Any

from pina_spark import storage
from pina_spark.datasets.common import (
    STATS_FILE,
    TEST_FRACTION,
    TEST_SALT,
    _need,
    _split_of,
    _write,
    _write_json,
)

log = logging.getLogger(__name__)


def prepare_instacart(input_dir: str | None, output_dir: str) -> tuple[dict[str, str], dict]:
    """Convert the shared instacart sample to ``instances`` and ``events`` (no labels: use
    ``task.labels: graph``).

    Instances are the distinct products of ``order_products_sample.csv`` (``instance_id`` =
    ``product_id``, text = ``product_name``). Events: ``basket_id`` = ``order_id``,
    ``item_id`` = ``product_id``, ``event_time`` = a synthetic ISO timestamp
    ``2017-01-01 + (cumulative days_since_prior_order of the user)`` at ``order_hour_of_day``
    (Instacart gives relative times only). Repeated (order, product) lines are dropped and counted.

    Parameters
    ----------
    input_dir : str or None
        Folder with ``order_products_sample.csv`` and ``products.csv`` (``None`` or a folder
        lacking one: :class:`pina_spark.storage.InputError`).
    output_dir : str
        Where the Parquet files and ``prepare_stats.json`` go.

    Returns
    -------
    (paths, stats)
        Absolute paths of ``instances`` and ``events``, and the statistics.

    Example::

        paths, stats = prepare_instacart("../shared/data/instacart", "/tmp/ic")
        stats["instances"]["rows"]  # 14190
    """
    import numpy as np
    import pandas as pd

    d = _need(input_dir, "instacart", ["order_products_sample.csv", "products.csv"])
    out = os.path.abspath(output_dir)
    os.makedirs(out, exist_ok=True)
    op = pd.read_csv(
        os.path.join(d, "order_products_sample.csv"),
        usecols=[
            "order_id",
            "user_id",
            "order_number",
            "order_hour_of_day",
            "days_since_prior_order",
            "product_id",
        ],
    )
    prod = pd.read_csv(
        os.path.join(d, "products.csv"),
        usecols=["product_id", "product_name"],
        keep_default_na=False,
        dtype={"product_name": str},
    )
    n_raw = len(op)
    op = op.dropna(subset=["order_id", "product_id"])
    n_null = n_raw - len(op)
    op = op.astype({"order_id": np.int64, "product_id": np.int64})
    n_before = len(op)
    op = op.drop_duplicates(subset=["order_id", "product_id"], keep="first")
    n_dup = n_before - len(op)

    # synthetic timestamps: per user, cumulative days since the first order, at the order's hour
    orders = op.drop_duplicates("order_id")[
        ["order_id", "user_id", "order_number", "order_hour_of_day", "days_since_prior_order"]
    ]
    orders = orders.sort_values(["user_id", "order_number"], kind="mergesort")
    days = orders["days_since_prior_order"].fillna(0).astype(np.int64)
    orders = orders.assign(day=days.groupby(orders["user_id"]).cumsum())
    base = pd.Timestamp("2017-01-01")
    ts = (
        base
        + pd.to_timedelta(orders["day"], unit="D")
        + pd.to_timedelta(orders["order_hour_of_day"].astype(np.int64), unit="h")
    )
    order_time = dict(zip(orders["order_id"].tolist(), ts.dt.strftime("%Y-%m-%dT%H:%M:%S")))

    names = dict(zip(prod["product_id"].astype(np.int64).tolist(), prod["product_name"]))
    pids = sorted(set(op["product_id"].tolist()))
    missing = [p for p in pids if p not in names]
    ids = [str(p) for p in pids]
    texts = [names.get(p, "") for p in pids]
    splits = [_split_of(a) for a in ids]
    op = op.sort_values(["order_id", "product_id"], kind="mergesort")
    paths = {
        "instances": _write(
            out, "instances", {storage.INSTANCE_ID: ids, storage.TEXT: texts, storage.SPLIT: splits}
        ),
        "events": _write(
            out,
            "events",
            {
                storage.BASKET_ID: op["order_id"].astype(str).tolist(),
                storage.ITEM_ID: op["product_id"].astype(str).tolist(),
                storage.EVENT_TIME: [order_time[o] for o in op["order_id"].tolist()],
            },
        ),
    }
    n_test = sum(s == storage.SPLIT_TEST for s in splits)
    stats: dict[str, Any] = {
        "source": "instacart",
        "rules": {
            "instance_id": "product_id of every product in order_products_sample.csv",
            "text": "product_name from products.csv",
            "split": f"test when in_sample_fraction(instance_id, {TEST_FRACTION}, "
            f"'{TEST_SALT}')",
            "basket_id": "order_id",
            "item_id": "product_id",
            "event_time": "2017-01-01 + cumulative days_since_prior_order per user, at "
            "order_hour_of_day (synthetic absolute time)",
            "labels": "none: use task.labels=graph",
        },
        "instances": {
            "rows": len(ids),
            "train": len(ids) - n_test,
            "test": n_test,
            "missing_in_products_csv_empty_text": len(missing),
            "dropped": 0,
        },
        "events": {
            "raw_rows": n_raw,
            "null_ids_dropped": n_null,
            "duplicate_order_product_dropped": n_dup,
            "rows": len(op),
            "orders": int(op["order_id"].nunique()),
            "users": int(op["user_id"].nunique()),
        },
    }
    _write_json(os.path.join(out, STATS_FILE), stats)
    log.info(
        "instacart -> %s: %d products (%d test), %d events in %d orders",
        out,
        len(ids),
        n_test,
        len(op),
        stats["events"]["orders"],
    )
    return paths, stats
