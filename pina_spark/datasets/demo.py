"""The built-in demo: a synthetic shop whose labels depend on co-purchase context (see
:func:`write_demo_data` for the generative story). Its vocabulary (departments, categories,
attributes, keyword labels, shopping missions) is package data, ``demo_vocabulary.json``."""

import logging
import os
from collections.abc import Sequence
from typing import Any

from pina_spark import storage
from pina_spark.datasets import vocabulary as vocab
from pina_spark.datasets.common import STATS_FILE, TEST_FRACTION, _write, _write_json
from pina_spark.storage.folds import in_sample_fraction

log = logging.getLogger(__name__)

DEMO_TEST_SALT = "pina-demo-test"
DEMO_SEED = 20230723  # ICML 2023: a constant, never time or rand()


_DEMO_PRODUCTS = 2500
_DEMO_BASKETS = 15000
_MAX_LABELS = 5
_MIN_BASKET, _MAX_BASKET = 3, 15


def demo_catalogue(seed: int = DEMO_SEED) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
    """Generate the demo catalogue in memory (no I/O).

    Parameters
    ----------
    seed : int
        Seed of the ``numpy.random.RandomState`` (a constant by default).

    Returns
    -------
    (products, labels, pairs)
        ``products``: dicts with ``instance_id``, ``text``, ``split``, ``department``,
        ``category``, ``noun`` (the product noun in the title), ``labels`` (label texts),
        ``missions`` (mission label texts it takes part in) and ``popularity``;
        ``labels``: dicts with ``label_id``, ``text``, ``kind`` (department, category,
        attribute, keyword, mission); ``pairs``: sorted ``(instance_id, label_id)``.

    Examples
    --------
    >>> products, labels, pairs = demo_catalogue()
    >>> len(products), len(labels) > 100
    (2500, True)
    """
    import numpy as np

    rng = np.random.RandomState(seed)

    # ---- labels, in a fixed order
    label_defs: list[tuple[str, str]] = []  # (text, kind)
    for _, dept_label, _, cats, attrs, _, _ in vocab.DEPARTMENTS:
        label_defs.append((dept_label, "department"))
        label_defs += [(c, "category") for c in cats]
        label_defs += [(a, "attribute") for a in attrs]
    label_defs += [(k, "keyword") for k in vocab.KEYWORD_LABELS]
    label_defs += [(m, "mission") for m, _ in vocab.MISSIONS]
    texts = [t for t, _ in label_defs]
    if len(set(texts)) != len(texts):  # pragma: no cover - guards edits of the vocabulary
        raise ValueError("demo label texts must be unique")
    label_id = {t: f"L{i:03d}" for i, (t, _) in enumerate(label_defs)}
    labels = [{"label_id": label_id[t], "text": t, "kind": k} for t, k in label_defs]

    # ---- products
    cat_list = [(dept, cat) for dept, _, _, cats, _, _, _ in vocab.DEPARTMENTS for cat in cats]
    dept_info = {d[0]: d for d in vocab.DEPARTMENTS}
    kw_of_noun: dict[str, list[str]] = {}
    for kw, nouns in vocab.KEYWORD_LABELS.items():
        for n in nouns:
            kw_of_noun.setdefault(n, []).append(kw)
    cat_weights = rng.uniform(0.6, 1.4, size=len(cat_list))
    cat_weights /= cat_weights.sum()
    cat_idx = rng.choice(len(cat_list), size=_DEMO_PRODUCTS, p=cat_weights)
    seen = set()
    products = []
    for i in range(_DEMO_PRODUCTS):
        dept, cat = cat_list[cat_idx[i]]
        _, dept_label, brands, cats, attrs, neutral, variants = dept_info[dept]
        triggers = [(a, w) for a, ws in attrs.items() for w in ws]
        for _attempt in range(50):
            noun = cats[cat][rng.randint(len(cats[cat]))]
            brand = brands[rng.randint(len(brands))]
            attr = None
            if rng.uniform() < 0.3:
                attr, adj = triggers[rng.randint(len(triggers))]
            else:
                adj = neutral[rng.randint(len(neutral))]
            vs = vocab.CATEGORY_VARIANTS.get(cat, variants)
            variant = vs[rng.randint(len(vs))]
            title = f"{brand} {vocab.title_case(adj)} {vocab.title_case(noun)}, {variant}"
            if title not in seen:
                break
        seen.add(title)
        # labels: category (title noun), attribute (title adjective), keyword (noun),
        # department (brand), missions filled in below
        labs = [cat]
        if attr is not None and rng.uniform() < 0.9:
            labs.append(attr)
        labs += [kw for kw in kw_of_noun.get(noun, []) if rng.uniform() < 0.9]
        dept_lab = [dept_label] if rng.uniform() < 0.6 else []
        products.append(
            {
                "instance_id": f"p{i:05d}",
                "text": title,
                "department": dept,
                "category": cat,
                "noun": noun,
                "labels": labs,
                "dept_label": dept_lab,
                "missions": [],
                "popularity": float(rng.lognormal(0.0, 1.0)),
            }
        )

    # ---- missions: a random ~35 % of each listed category's items (at most 2 missions per item)
    by_cat: dict[str, list[int]] = {}
    for j, p in enumerate(products):
        by_cat.setdefault(p["category"], []).append(j)
    for mission, m_cats in vocab.MISSIONS:
        for c in m_cats:
            members = by_cat[c]
            take = rng.uniform(size=len(members)) < 0.35
            for j, t in zip(members, take):
                if t and len(products[j]["missions"]) < 2:
                    products[j]["missions"].append(mission)

    pairs = []
    for p in products:
        mission_labs = [m for m in p["missions"] if rng.uniform() < 0.9]
        labs = [p["labels"][0]] + mission_labs + p["labels"][1:] + p["dept_label"]
        labs = list(dict.fromkeys(labs))[:_MAX_LABELS]
        p["labels"] = labs
        del p["dept_label"]
        iid = p["instance_id"]
        p["split"] = (
            storage.SPLIT_TEST
            if in_sample_fraction(iid, TEST_FRACTION, DEMO_TEST_SALT)
            else storage.SPLIT_TRAIN
        )
        pairs += [(iid, label_id[t]) for t in labs]
    pairs.sort()
    return products, labels, pairs


def _demo_baskets(products: list[dict], seed: int = DEMO_SEED) -> list[tuple[str, str, str]]:
    """``(basket_id, item_id, event_time)`` rows of the demo's co-purchase log.

    Baskets (3-15 items) are of three kinds: *mission* baskets (45 %: mostly items of one
    shopping mission, which spans departments), *complement* baskets (40 %: items of one category,
    sometimes with a second category of the same department: tent + sleeping bag + stove) and
    *random* baskets (15 %, by popularity). About 40 % of baskets also get one or two popular
    everyday *hub* items (milk, bananas, batteries, paper towels ...).
    """
    import datetime

    import numpy as np

    rng = np.random.RandomState(seed + 1)
    n = len(products)
    pop = np.array([p["popularity"] for p in products])
    by_cat: dict[str, list[int]] = {}
    by_mission: dict[str, list[int]] = {}
    dept_cats: dict[str, list[str]] = {}
    for j, p in enumerate(products):
        by_cat.setdefault(p["category"], []).append(j)
        for m in p["missions"]:
            by_mission.setdefault(m, []).append(j)
        dept_cats.setdefault(p["department"], [])
        if p["category"] not in dept_cats[p["department"]]:
            dept_cats[p["department"]].append(p["category"])
    missions = [m for m, _ in vocab.MISSIONS if m in by_mission]
    mission_cats = {m: cs for m, cs in vocab.MISSIONS}
    hub_pool = sorted(
        (j for c in vocab.HUB_CATEGORIES for j in by_cat.get(c, [])), key=lambda j: (-pop[j], j)
    )[:30]
    glob_p = pop / pop.sum()

    glob_cdf = np.cumsum(glob_p)

    def draw(pool: Sequence[int] | np.ndarray, k: int) -> list[int]:
        """k distinct items of ``pool``, weighted by popularity (Efraimidis-Spirakis keys)."""
        items = np.asarray(pool)
        k = min(k, len(items))
        if k <= 0:
            return []
        keys = rng.exponential(size=len(items)) / pop[items]
        return [int(x) for x in items[np.argsort(keys, kind="stable")[:k]]]

    def one() -> int:
        return min(int(np.searchsorted(glob_cdf, rng.uniform())), n - 1)

    start = datetime.datetime(2026, 1, 1)
    rows = []
    for b in range(_DEMO_BASKETS):
        size = int(min(_MAX_BASKET, _MIN_BASKET + rng.poisson(3.5)))
        n_hub = 0
        if rng.uniform() < 0.4:
            n_hub = 1 + int(rng.uniform() < 0.3)
        size_core = size - n_hub
        r = rng.uniform()
        if r < 0.45:
            m = missions[rng.randint(len(missions))]
            items = draw(by_mission[m], int(round(size_core * 0.8)))
            extra_pool = [j for c in mission_cats[m] for j in by_cat.get(c, [])]
            items += draw(extra_pool, size_core - len(items))
        elif r < 0.85:
            dept = products[one()]["department"]
            cs = dept_cats[dept]
            c1 = cs[rng.randint(len(cs))]
            pool = list(by_cat[c1])
            if rng.uniform() < 0.4:
                c2 = cs[rng.randint(len(cs))]
                if c2 != c1:
                    pool += by_cat[c2]
            items = draw(pool, size_core)
        else:
            items = draw(np.arange(n), size_core)
        if n_hub:
            items += draw(hub_pool, n_hub)
        items = list(dict.fromkeys(items))[:size]
        while len(items) < size:  # small pools or duplicate hubs: top up by popularity
            j = one()
            if j not in items:
                items.append(j)
        basket_id = f"b{b:05d}"
        t = start + datetime.timedelta(minutes=int(b * 35 + rng.randint(30)))
        ts = t.strftime("%Y-%m-%dT%H:%M:%S")
        rows += [(basket_id, products[j]["instance_id"], ts) for j in items]
    return rows


def write_demo_data(out_dir: str) -> dict[str, str]:
    """Write the built-in demo data set (a synthetic shop) as input-contract Parquet files.

    2,500 products over 12 departments with titles "brand adjective noun, variant"; ~150 keyword
    labels (department, category, attribute, cross-department keyword, and shopping-*mission*
    labels); 15,000 baskets of 3-15 items with complementary co-purchase structure and popular
    hub items. Category/attribute/keyword/department labels are predictable from title words;
    mission labels ("weekend camping trip", "new baby arrival") are given to a random subset of
    items and are only visible through the baskets they are bought in, so neighbour aggregation
    has something to add. Deterministic (constant seed): rerunning writes identical bytes.
    Test split: ``folds.in_sample_fraction(instance_id, 0.2, "pina-demo-test")``.

    Parameters
    ----------
    out_dir : str
        Local folder (created when missing).

    Returns
    -------
    dict
        ``{"instances", "labels", "instance_labels", "events"}`` -> absolute file paths.

    Examples
    --------
    >>> import tempfile
    >>> p = write_demo_data(tempfile.mkdtemp())
    >>> import pyarrow.parquet as pq
    >>> pq.read_table(p["instances"]).column_names
    ['instance_id', 'text', 'split']
    """
    out = os.path.abspath(out_dir)
    os.makedirs(out, exist_ok=True)
    products, labels, pairs = demo_catalogue()
    events = _demo_baskets(products)
    paths = {
        "instances": _write(
            out,
            "instances",
            {
                storage.INSTANCE_ID: [p["instance_id"] for p in products],
                storage.TEXT: [p["text"] for p in products],
                storage.SPLIT: [p["split"] for p in products],
            },
        ),
        "labels": _write(
            out,
            "labels",
            {
                storage.LABEL_ID: [lab["label_id"] for lab in labels],
                storage.TEXT: [lab["text"] for lab in labels],
            },
        ),
        "instance_labels": _write(
            out,
            "instance_labels",
            {storage.INSTANCE_ID: [a for a, _ in pairs], storage.LABEL_ID: [b for _, b in pairs]},
        ),
        "events": _write(
            out,
            "events",
            {
                storage.BASKET_ID: [r[0] for r in events],
                storage.ITEM_ID: [r[1] for r in events],
                storage.EVENT_TIME: [r[2] for r in events],
            },
        ),
    }
    n_test = sum(p["split"] == storage.SPLIT_TEST for p in products)
    log.info(
        "demo data in %s: %d products (%d test), %d labels, %d pairs, %d events in %d " "baskets",
        out,
        len(products),
        n_test,
        len(labels),
        len(pairs),
        len(events),
        len({r[0] for r in events}),
    )
    return paths


def prepare_demo(output_dir: str) -> dict[str, str]:
    """``prepare-data --source demo``: the demo tables plus ``prepare_stats.json``."""
    paths = write_demo_data(output_dir)
    import pyarrow.parquet as pq

    stats: dict[str, Any] = {
        "source": "demo",
        "rules": {
            "generator": "pina_spark.datasets.write_demo_data",
            "seed": DEMO_SEED,
            "split": f"test when in_sample_fraction(instance_id, {TEST_FRACTION},"
            f" '{DEMO_TEST_SALT}')",
        },
        "dropped": 0,
    }
    for k, p in paths.items():
        stats[k] = {"rows": pq.ParquetFile(p).metadata.num_rows}
    _write_json(os.path.join(os.path.abspath(output_dir), STATS_FILE), stats)
    return paths
