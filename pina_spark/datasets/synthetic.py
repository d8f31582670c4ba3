"""``prepare-data --source synthetic``: a synthetic shop of any size (10k to 1M+ products) for
benchmarking, in the input contract, streamed to Parquet chunk by chunk.

The shop vocabulary is the demo's (:mod:`.vocabulary`); what scales with the number of products
``N`` is built from it:

- **Products**: a category (weighted), a noun of it, a brand of its department (10 % none; the
  vocabulary's brands plus ``first word x last word`` recombinations, Zipf-weighted), an
  adjective (85 %: 30 % an attribute trigger such as "organic", else a neutral one such as
  "honey") and a variant (80 %, "12 oz"): titles of 2-8 words such as
  ``"Harvest Valley Organic Granola, 12 oz"``. Popularity is log-normal (sigma 1.8): long-tailed.
- **Labels** (about ``N / 10``): the demo's department, category, attribute, keyword and mission
  labels, then keyword labels ranked by their expected number of products: the noun
  (``"granola"``), adjective + noun (``"organic granola"``), brand + noun
  (``"harvest valley granola"``), brand + adjective + noun. Each product gets 1-5 of those its
  title carries (category always), plus the *missions* it takes part in (a random ~35 % of the
  items of each mission's categories): those only co-purchase reveals.
- **Baskets** (until ``50 N`` events; 3-20 items): mission baskets (45 %: mostly the mission's
  members, the rest from its categories), complement baskets (40 %: one category, half of them
  with a complementary one, i.e. of the same department or sharing a mission) and random ones
  (15 %); 40 % also get one or two popular *hub* items (milk, batteries ...). Items are drawn
  by popularity.

Determinism: every random draw comes from ``numpy.random.RandomState([seed, stream, block])``
over fixed blocks of 1,024 products or baskets, and every table is written in row groups of a
fixed size, so the files depend on ``(N, seed)`` only, never on the chunk size, time or process.
Memory: numeric arrays of ``N`` (category, popularity, ...) plus one chunk of strings and events.
"""

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pina_spark import storage
from pina_spark.datasets.common import (
    STATS_FILE,
    TEST_FRACTION,
    TEST_SALT,
    ParquetStream,
    _split_of,
    _write_json,
)
from pina_spark.datasets.vocabulary import (
    CATEGORY_VARIANTS,
    DEPARTMENTS,
    HUB_CATEGORIES,
    KEYWORD_LABELS,
    MISSIONS,
    title_case,
)

log = logging.getLogger(__name__)

SYNTHETIC_SEED = 0
MIN_INSTANCES = 100
MAX_LABELS = 5
_BLOCK = 1024  # products or baskets per random block: the unit of determinism
_POP_SIGMA = 1.8
_BRAND_ZIPF = 0.6  # brand weight ~ rank ** -0.6: flat enough for distinct titles at 1M products
_P_NO_BRAND, _P_ADJ, _P_TRIGGER, _P_VARIANT = 0.1, 0.85, 0.3, 0.8
_P_MISSION = 0.35
_MAX_TITLE_WORDS = 8
_MIN_BASKET, _MAX_BASKET, _BASKET_POISSON = 3, 20, 7.0
_P_MISSION_BASKET, _P_COMPLEMENT_BASKET = 0.45, 0.40
_P_HUB, _P_SECOND_HUB = 0.4, 0.3
_OVERDRAW, _FILLERS = 1.5, 3
# label slots of a product, in priority order (the first MAX_LABELS present and kept are its
# labels) and the chance that each is kept: category, 2 missions, attribute, brand+adjective+noun,
# brand+noun, adjective+noun, noun, 2 keywords, department
_KEEP = (1.0, 0.9, 0.9, 0.9, 0.7, 0.7, 0.7, 0.7, 0.9, 0.9, 0.5)
# fine keyword label kinds (key = kind, brand, adjective, noun) and their names
_NOUN, _ADJ_NOUN, _BRAND_NOUN, _BRAND_ADJ_NOUN = 1, 2, 3, 4
_FINE_KINDS = ("", "noun", "adjective noun", "brand noun", "brand adjective noun")


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate (``prepare-data --source synthetic``).

    Attributes
    ----------
    instances : int
        Number of products ``N`` (at least 100).
    seed : int
        Seed of every random draw (``0 <= seed < 2**32``); the files depend on
        ``(instances, seed)`` only.
    events_per_instance : float
        Baskets are generated until ``round(events_per_instance * N)`` events (50).
    instances_per_label : int
        About ``N / instances_per_label`` labels (10), at least the vocabulary's ~150.
    chunk_size : int
        Products per chunk (baskets per chunk: twice that): bounds memory, does not change a
        byte of the output (50,000).

    Examples
    --------
    >>> SyntheticSpec(10_000, seed=3).n_labels
    1000
    >>> SyntheticSpec(10)
    Traceback (most recent call last):
    ...
    ValueError: SyntheticSpec.instances must be an integer >= 100, got 10
    """

    instances: int
    seed: int = SYNTHETIC_SEED
    events_per_instance: float = 50.0
    instances_per_label: int = 10
    chunk_size: int = 50_000

    def __post_init__(self):
        checks = (
            (
                "instances",
                _is_int(self.instances) and self.instances >= MIN_INSTANCES,
                f"an integer >= {MIN_INSTANCES}",
            ),
            ("seed", _is_int(self.seed) and 0 <= self.seed < 2**32, "an integer in [0, 2**32)"),
            ("events_per_instance", self.events_per_instance > 0, "> 0"),
            (
                "instances_per_label",
                _is_int(self.instances_per_label) and self.instances_per_label >= 1,
                "an integer >= 1",
            ),
            ("chunk_size", _is_int(self.chunk_size) and self.chunk_size >= 1, "an integer >= 1"),
        )
        for name, ok, what in checks:
            if not ok:
                raise ValueError(
                    f"SyntheticSpec.{name} must be {what}, got {getattr(self, name)!r}"
                )

    @property
    def n_labels(self) -> int:
        """Target number of labels: ``round(N / instances_per_label)``, at least the base ones."""
        return max(len(_base_labels()), round(self.instances / self.instances_per_label))

    @property
    def n_events(self) -> int:
        """Target number of events (the last basket may overshoot it by < 20)."""
        return max(1, round(self.events_per_instance * self.instances))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# --------------------------------------------------------------------------- vocabulary tables
def _base_labels() -> list[tuple[str, str]]:
    """The vocabulary's labels ``(text, kind)`` in the demo's order."""
    out: list[tuple[str, str]] = []
    for _, dept_label, _, cats, attrs, _, _ in DEPARTMENTS:
        out.append((dept_label, "department"))
        out += [(c, "category") for c in cats]
        out += [(a, "attribute") for a in attrs]
    out += [(k, "keyword") for k in KEYWORD_LABELS]
    out += [(m, "mission") for m, _ in MISSIONS]
    return out


class _Shop:
    """Index tables of the vocabulary for one spec: categories, nouns, brands, adjectives,
    variants and missions as integer arrays, and the label set (base + ranked keyword labels).
    Built on the driver from the seed's stream 0 (brand order, category weights)."""

    def __init__(self, spec: SyntheticSpec):
        import numpy as np

        rng = np.random.RandomState([spec.seed, 0, 0])
        self.spec = spec
        base = _base_labels()
        label_of = {t: i for i, (t, _) in enumerate(base)}
        self.dept_label = np.array([label_of[d[1]] for d in DEPARTMENTS])

        cats: list[str] = []
        nouns: list[str] = []
        variants: list[str] = []
        noun_cat: list[int] = []
        cat_dept: list[int] = []
        cat_noun_off: list[int] = []
        cat_var_off: list[int] = []
        cat_n_var: list[int] = []
        for di, (_, _, _, dcats, _, _, dvariants) in enumerate(DEPARTMENTS):
            for c, cnouns in dcats.items():
                cat_dept.append(di)
                cat_noun_off.append(len(nouns))
                noun_cat += [len(cats)] * len(cnouns)
                nouns += cnouns
                vs = CATEGORY_VARIANTS.get(c, dvariants)
                cat_var_off.append(len(variants))
                cat_n_var.append(len(vs))
                variants += vs
                cats.append(c)
        self.cat_dept = np.array(cat_dept)
        self.cat_label = np.array([label_of[c] for c in cats])
        self.cat_noun_off = np.array(cat_noun_off)
        self.cat_n_nouns = np.bincount(noun_cat, minlength=len(cats))
        self.noun_cat = np.array(noun_cat)
        self.cat_var_off, self.cat_n_var = np.array(cat_var_off), np.array(cat_n_var)
        w = rng.uniform(0.6, 1.4, size=len(cats))
        self.cat_w = w / w.sum()
        self.cat_cdf = np.cumsum(self.cat_w)
        self.cat_cdf[-1] = 1.0
        self.nouns, self.variants = nouns, variants

        # adjectives per department: attribute triggers, then neutral ones
        adjs: list[str] = []
        adj_attr: list[int] = []
        trig_off, n_trig, neu_off, n_neu = [], [], [], []
        for _, _, _, _, attrs, neutral, _ in DEPARTMENTS:
            trig_off.append(len(adjs))
            for a, words in attrs.items():
                adjs += words
                adj_attr += [label_of[a]] * len(words)
            n_trig.append(len(adjs) - trig_off[-1])
            neu_off.append(len(adjs))
            adjs += neutral
            adj_attr += [-1] * len(neutral)
            n_neu.append(len(neutral))
        self.adjs, self.adj_attr = adjs, np.array(adj_attr)
        self.trig_off, self.n_trig = np.array(trig_off), np.array(n_trig)
        self.neu_off, self.n_neu = np.array(neu_off), np.array(n_neu)
        dept_of_adj = np.repeat(np.arange(len(DEPARTMENTS)), self.n_trig + self.n_neu)
        trig = self.adj_attr >= 0
        self.adj_p = np.where(
            trig,
            _P_ADJ * _P_TRIGGER / self.n_trig[dept_of_adj],
            _P_ADJ * (1 - _P_TRIGGER) / self.n_neu[dept_of_adj],
        )

        # brands per department: the vocabulary's, then first word x last word recombinations
        # (in a seeded order), Zipf-weighted by rank (:data:`_BRAND_ZIPF`)
        all_last = list(dict.fromkeys(b.split(" ")[-1] for d in DEPARTMENTS for b in d[2]))
        brands: list[str] = []
        brand_dept: list[int] = []
        brand_p: list[float] = []
        taken = {b for d in DEPARTMENTS for b in d[2]}
        for di, d in enumerate(DEPARTMENTS):
            own = list(d[2])
            firsts = list(dict.fromkeys(b.split(" ")[0] for b in own))
            extra = [
                f"{f} {last}"
                for f in firsts
                for last in all_last
                if f != last and f"{f} {last}" not in taken
            ]
            extra = [extra[i] for i in rng.permutation(len(extra))]
            taken.update(extra)
            names = own + extra
            z = np.arange(1, len(names) + 1) ** -_BRAND_ZIPF
            brand_p += list((1 - _P_NO_BRAND) * z / z.sum())
            brands += names
            brand_dept += [di] * len(names)
        self.brands, self.brand_dept = brands, np.array(brand_dept)
        self.brand_p = np.array(brand_p)
        self.brand_cum = _segment_cdf(self.brand_dept, self.brand_p)

        # keywords of each noun (up to 2), missions of each category
        kw = {n: [label_of[k] for k, ns in KEYWORD_LABELS.items() if n in ns] for n in nouns}
        self.noun_kw = _pad([kw[n][:2] for n in nouns], 2)
        self.missions = [m for m, _ in MISSIONS]
        self.mission_label = np.array([label_of[m] for m in self.missions])
        cat_index = {c: i for i, c in enumerate(cats)}
        self.mission_cats = [[cat_index[c] for c in cs] for _, cs in MISSIONS]
        self.cat_missions = _pad(
            [[m for m, cs in enumerate(self.mission_cats) if c in cs] for c in range(len(cats))],
            2,
        )
        # complementary categories: same department or sharing a mission
        self.complements = [
            sorted(
                {j for j in range(len(cats)) if self.cat_dept[j] == self.cat_dept[c]}
                | {j for cs in self.mission_cats if c in cs for j in cs} - {c}
            )
            for c in range(len(cats))
        ]
        self.n_complements = np.array([len(c) for c in self.complements])
        self.complement_matrix = _pad(self.complements, 1)
        self.hub_cats = np.array([cat_index[c] for c in HUB_CATEGORIES])
        self.n_mission_cats = np.array([len(c) for c in self.mission_cats])
        self.mission_cat_matrix = _pad(self.mission_cats, 1)
        self.cats = cats
        self.words = {
            name: np.array([len(s.split(" ")) for s in seq])
            for name, seq in (
                ("brand", brands),
                ("adj", adjs),
                ("noun", nouns),
                ("variant", variants),
            )
        }
        self._rank_labels(base, spec.n_labels)

    def _rank_labels(self, base: list[tuple[str, str]], n_labels: int) -> None:
        """The label set: the base labels, then keyword labels by expected product count
        (ties by kind, brand, adjective, noun) until ``n_labels``, texts unique."""
        import numpy as np

        n_noun, n_adj = len(self.nouns), len(self.adjs) + 1
        n_brand = len(self.brands) + 1
        keys, mass = [], []
        p_noun = self.cat_w[self.noun_cat] / self.cat_n_nouns[self.noun_cat]
        for di in range(len(DEPARTMENTS)):
            nn = np.flatnonzero(self.cat_dept[self.noun_cat] == di)
            aa = np.arange(self.trig_off[di], self.neu_off[di] + self.n_neu[di])
            bb = np.flatnonzero(self.brand_dept == di)
            pn, pa_, pb = p_noun[nn], self.adj_p[aa], self.brand_p[bb]
            keys.append(_key(_NOUN, -1, -1, nn, n_brand, n_adj, n_noun))
            mass.append(pn)
            a2, n2 = np.meshgrid(aa, nn, indexing="ij")
            keys.append(_key(_ADJ_NOUN, -1, a2.ravel(), n2.ravel(), n_brand, n_adj, n_noun))
            mass.append(np.outer(pa_, pn).ravel())
            b2, n2 = np.meshgrid(bb, nn, indexing="ij")
            keys.append(_key(_BRAND_NOUN, b2.ravel(), -1, n2.ravel(), n_brand, n_adj, n_noun))
            mass.append(np.outer(pb, pn).ravel())
            b3, a3, n3 = np.meshgrid(bb, aa, nn, indexing="ij")
            keys.append(
                _key(_BRAND_ADJ_NOUN, b3.ravel(), a3.ravel(), n3.ravel(), n_brand, n_adj, n_noun)
            )
            mass.append((pb[:, None, None] * pa_[None, :, None] * pn[None, None, :]).ravel())
        key, m = np.concatenate(keys), np.concatenate(mass)
        order = np.lexsort((key, -m))
        texts = [t for t, _ in base]
        self.label_kind = [k for _, k in base]
        seen = set(texts)
        chosen: list[int] = []
        want = n_labels - len(base)
        for i in order:
            if len(chosen) >= want:
                break
            text = self._fine_text(int(key[i]), n_brand, n_adj, n_noun)
            if text in seen:
                continue
            seen.add(text)
            texts.append(text)
            self.label_kind.append(_FINE_KINDS[int(key[i]) // (n_brand * n_adj * n_noun)])
            chosen.append(int(i))
        self.label_texts = texts
        sel = np.array(chosen, dtype=np.int64)
        ids = len(base) + np.arange(len(sel))
        o = np.argsort(key[sel])
        self.fine_keys, self.fine_ids = key[sel][o], ids[o]
        self.dims = (n_brand, n_adj, n_noun)

    def _fine_text(self, key: int, n_brand: int, n_adj: int, n_noun: int) -> str:
        rest = key % (n_brand * n_adj * n_noun)
        b, rest = divmod(rest, n_adj * n_noun)
        a, n = divmod(rest, n_noun)
        words = ([self.brands[b - 1].lower()] if b else []) + ([self.adjs[a - 1]] if a else [])
        return " ".join(words + [self.nouns[n]])

    def fine_label(self, kind: int, brand, adj, noun):
        """Label index of keyword labels ``(kind, brand, adj, noun)`` (-1 = none; missing
        brand or adjective: -1)."""
        import numpy as np

        n_brand, n_adj, n_noun = self.dims
        k = _key(kind, brand, adj, noun, n_brand, n_adj, n_noun)
        if not len(self.fine_keys):
            return np.full(np.shape(k), -1)
        pos = np.minimum(np.searchsorted(self.fine_keys, k), len(self.fine_keys) - 1)
        return np.where(self.fine_keys[pos] == k, self.fine_ids[pos], -1)


def _key(kind, brand, adj, noun, n_brand, n_adj, n_noun):
    """Integer key of a keyword label: kind, brand + 1, adjective + 1, noun (0 = none)."""
    import numpy as np

    b = np.asarray(brand, dtype=np.int64) + 1
    a = np.asarray(adj, dtype=np.int64) + 1
    return ((kind * n_brand + b) * n_adj + a) * n_noun + np.asarray(noun, dtype=np.int64)


def _pad(rows: list[list[int]], width: int):
    """Ragged lists of ints as a matrix padded with -1 (at least ``width`` columns)."""
    import numpy as np

    out = np.full((len(rows), max([width] + [len(r) for r in rows])), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _segment_cdf(segment, weight):
    """``segment + within-segment CDF`` of items sorted by segment: drawing segment ``s`` is
    ``searchsorted(cdf, s + u, "right")`` with ``u`` in ``[0, 1)``."""
    import numpy as np

    segment = np.asarray(segment)
    w = np.asarray(weight, dtype=np.float64)
    cum = np.cumsum(w)
    starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
    ends = np.r_[starts[1:], len(w)]
    before = np.r_[0.0, cum][starts]
    total = cum[ends - 1] - before
    rep = np.repeat(np.arange(len(starts)), ends - starts)
    cdf = (cum - before[rep]) / total[rep]
    cdf[ends - 1] = 1.0
    return segment + cdf


# --------------------------------------------------------------------------- products
def _product_block(shop: _Shop, k: int) -> dict[str, Any]:
    """Products ``[k * 1024, (k + 1) * 1024)``: integer attributes (-1 = none), popularity,
    missions and the labels' keep draws, from the block's own random stream."""
    import numpy as np

    spec = shop.spec
    lo = k * _BLOCK
    n = min(_BLOCK, spec.instances - lo)
    rng = np.random.RandomState([spec.seed, 1, k])
    cat = np.minimum(
        np.searchsorted(shop.cat_cdf, rng.uniform(size=n), "right"), len(shop.cats) - 1
    )
    dept = shop.cat_dept[cat]
    noun = shop.cat_noun_off[cat] + (rng.uniform(size=n) * shop.cat_n_nouns[cat]).astype(np.int64)
    brand = np.searchsorted(shop.brand_cum, dept + rng.uniform(size=n), "right")
    brand[rng.uniform(size=n) < _P_NO_BRAND] = -1
    trig = rng.uniform(size=n) < _P_TRIGGER
    ua = rng.uniform(size=n)
    adj = np.where(
        trig,
        shop.trig_off[dept] + (ua * shop.n_trig[dept]).astype(np.int64),
        shop.neu_off[dept] + (ua * shop.n_neu[dept]).astype(np.int64),
    )
    adj[rng.uniform(size=n) >= _P_ADJ] = -1
    variant = shop.cat_var_off[cat] + (rng.uniform(size=n) * shop.cat_n_var[cat]).astype(np.int64)
    has_variant = rng.uniform(size=n) < _P_VARIANT
    popularity = rng.lognormal(0.0, _POP_SIGMA, size=n)
    cand = shop.cat_missions[cat]
    member = (cand >= 0) & (rng.uniform(size=cand.shape) < _P_MISSION)
    member &= np.cumsum(member, axis=1) <= 2
    first = np.argsort(~member, axis=1, kind="stable")[:, :2]
    missions = np.take_along_axis(np.where(member, cand, -1), first, axis=1)
    keep = rng.uniform(size=(n, len(_KEEP))) < np.array(_KEEP)

    # titles of 2-8 words: drop the adjective, then the variant, when too long; a lone noun
    # gets its variant
    words = shop.words
    n_words = (
        np.where(brand >= 0, words["brand"][brand], 0)
        + np.where(adj >= 0, words["adj"][adj], 0)
        + words["noun"][noun]
    )
    var_words = words["variant"][variant]
    too_long = n_words + np.where(has_variant, var_words, 0) > _MAX_TITLE_WORDS
    n_words = np.where(too_long & (adj >= 0), n_words - words["adj"][np.maximum(adj, 0)], n_words)
    adj = np.where(too_long, -1, adj)
    has_variant &= n_words + var_words <= _MAX_TITLE_WORDS
    has_variant |= n_words < 2
    return {
        "lo": lo,
        "category": cat,
        "noun": noun,
        "brand": brand,
        "adjective": adj,
        "variant": np.where(has_variant, variant, -1),
        "popularity": popularity,
        "missions": missions,
        "keep": keep,
    }


def _product_labels(shop: _Shop, b: dict[str, Any]):
    """``(row, label index)`` of a block's products: the first :data:`MAX_LABELS` present and
    kept slots (priority order of :data:`_KEEP`), sorted by row then label."""
    import numpy as np

    noun, brand, adj = b["noun"], b["brand"], b["adjective"]
    adj0 = np.maximum(adj, 0)

    def if_(ok, v):
        return np.where(ok, v, -1)

    m = b["missions"]
    slots = np.stack(
        [
            shop.cat_label[b["category"]],
            if_(m[:, 0] >= 0, shop.mission_label[np.maximum(m[:, 0], 0)]),
            if_(m[:, 1] >= 0, shop.mission_label[np.maximum(m[:, 1], 0)]),
            if_(adj >= 0, shop.adj_attr[adj0]),
            if_((brand >= 0) & (adj >= 0), shop.fine_label(_BRAND_ADJ_NOUN, brand, adj, noun)),
            if_(brand >= 0, shop.fine_label(_BRAND_NOUN, brand, -1, noun)),
            if_(adj >= 0, shop.fine_label(_ADJ_NOUN, -1, adj, noun)),
            shop.fine_label(_NOUN, -1, -1, noun),
            shop.noun_kw[noun, 0],
            shop.noun_kw[noun, 1],
            shop.dept_label[shop.cat_dept[b["category"]]],
        ],
        axis=1,
    )
    on = (slots >= 0) & b["keep"]
    on &= np.cumsum(on, axis=1) <= MAX_LABELS
    row, col = np.nonzero(on)
    lab = slots[row, col]
    order = np.lexsort((lab, row))
    return row[order], lab[order]


def _blocks(n: int, chunk_size: int) -> Iterator[range]:
    """Block numbers in chunks of ``max(1, chunk_size // 1024)`` blocks."""
    n_blocks = -(-n // _BLOCK)
    step = max(1, chunk_size // _BLOCK)
    for start in range(0, n_blocks, step):
        yield range(start, min(start + step, n_blocks))


def _ids(prefix: str, lo: int, hi: int, width: int):
    import numpy as np

    return np.char.add(prefix, np.char.zfill(np.arange(lo, hi).astype("U"), width))


@dataclass(frozen=True, eq=False)
class Catalogue:
    """The products of a spec as numeric arrays (row ``i`` is instance ``p<i>``, -1 = none):
    ``category``, ``noun``, ``brand``, ``adjective``, ``variant`` (indices into the
    vocabulary), ``popularity`` and ``missions`` (``N x 2``)."""

    category: Any
    noun: Any
    brand: Any
    adjective: Any
    variant: Any
    popularity: Any
    missions: Any


def synthetic_catalogue(spec: SyntheticSpec) -> Catalogue:
    """The products of ``spec`` without writing anything (numeric arrays, no strings).

    Examples
    --------
    >>> cat = synthetic_catalogue(SyntheticSpec(1000, seed=1))
    >>> cat.category.shape, int(cat.category.max()) < 60
    ((1000,), True)
    """
    return _catalogue(_Shop(spec), None)


def _catalogue(shop: _Shop, sink) -> Catalogue:
    """All product blocks, chunk by chunk; ``sink(blocks)`` (when given) writes each chunk."""
    import numpy as np

    parts: dict[str, list[Any]] = {f: [] for f in Catalogue.__dataclass_fields__}
    for chunk in _blocks(shop.spec.instances, shop.spec.chunk_size):
        blocks = [_product_block(shop, k) for k in chunk]
        if sink is not None:
            sink(blocks)
        for f in parts:
            parts[f] += [b[f] for b in blocks]
    return Catalogue(**{f: np.concatenate(v) for f, v in parts.items()})


# --------------------------------------------------------------------------- baskets
class _Pools:
    """Item pools drawn by popularity: one per category, one per mission, all items, hub items;
    an empty pool falls back to all items."""

    def __init__(self, shop: _Shop, cat: Catalogue):
        import numpy as np

        n = len(cat.category)
        n_cat, n_mis = len(shop.cats), len(shop.missions)
        self.all_items, self.hub = n_cat + n_mis, n_cat + n_mis + 1
        in_hub = np.flatnonzero(np.isin(cat.category, shop.hub_cats))
        n_hub = max(30, n // 1000)
        hub = in_hub[np.lexsort((in_hub, -cat.popularity[in_hub]))[:n_hub]]
        items = [np.arange(n)]
        pool = [cat.category]
        for j in range(2):
            has = np.flatnonzero(cat.missions[:, j] >= 0)
            items.append(has)
            pool.append(n_cat + cat.missions[has, j])
        items += [np.arange(n), hub]
        pool += [np.full(n, self.all_items), np.full(len(hub), self.hub)]
        item, p = np.concatenate(items), np.concatenate(pool)
        order = np.lexsort((item, p))
        self.item, p = item[order], p[order]
        self.cdf = _segment_cdf(p, cat.popularity[self.item])
        present = np.bincount(p, minlength=self.hub + 1) > 0
        self.effective = np.where(present, np.arange(self.hub + 1), self.all_items)
        self.category = cat.category

    def draw(self, pool, u):
        """One item of each ``pool`` (array), by popularity, from uniforms ``u``."""
        import numpy as np

        p = self.effective[pool]
        return self.item[np.searchsorted(self.cdf, p + u, "right")]


def _basket_block(shop: _Shop, pools: _Pools, k: int):
    """Baskets ``[k * 1024, (k + 1) * 1024)``: ``(basket in block, item)`` rows sorted by basket
    then item."""
    import numpy as np

    spec = shop.spec
    rng = np.random.RandomState([spec.seed, 2, k])
    nb, n_cat = _BLOCK, len(shop.cats)
    kind_u = rng.uniform(size=nb)
    mission = kind_u < _P_MISSION_BASKET
    complement = ~mission & (kind_u < _P_MISSION_BASKET + _P_COMPLEMENT_BASKET)
    size = np.minimum(_MIN_BASKET + rng.poisson(_BASKET_POISSON, size=nb), _MAX_BASKET)
    n_hub = np.where(rng.uniform(size=nb) < _P_HUB, 1 + (rng.uniform(size=nb) < _P_SECOND_HUB), 0)
    n_core = np.ceil(_OVERDRAW * (size - n_hub)).astype(np.int64)
    m = rng.randint(len(shop.missions), size=nb)
    c1 = pools.category[pools.draw(np.full(nb, pools.all_items), rng.uniform(size=nb))]
    comp_u = rng.uniform(size=nb)
    c2 = shop.complement_matrix[c1, (comp_u * shop.n_complements[c1]).astype(np.int64)]
    c2 = np.where(rng.uniform(size=nb) < 0.5, c2, c1)

    n_slots = n_hub + n_core + _FILLERS
    total = int(n_slots.sum())
    basket = np.repeat(np.arange(nb), n_slots)
    pos = np.arange(total) - np.repeat(np.cumsum(n_slots) - n_slots, n_slots)
    us, uc, ui = rng.uniform(size=total), rng.uniform(size=total), rng.uniform(size=total)
    mb = m[basket]
    mission_cat = shop.mission_cat_matrix[mb, (uc * shop.n_mission_cats[mb]).astype(np.int64)]
    core = np.where(
        mission[basket],
        np.where(us < 0.8, n_cat + mb, mission_cat),
        np.where(complement[basket], np.where(us < 0.5, c1[basket], c2[basket]), pools.all_items),
    )
    pool = np.where(
        pos < n_hub[basket],
        pools.hub,
        np.where(pos < (n_hub + n_core)[basket], core, pools.all_items),
    )
    item = pools.draw(pool, ui)
    # first occurrences in draw order, the first `size` of each basket
    n_items = len(pools.category)
    _, first = np.unique(basket * n_items + item, return_index=True)
    first.sort()
    b = basket[first]
    rank = np.arange(len(first)) - np.searchsorted(b, np.arange(nb))[b]
    sel = first[rank < size[b]]
    order = np.lexsort((item[sel], basket[sel]))
    return basket[sel][order], item[sel][order]


# --------------------------------------------------------------------------- writing
def write_synthetic_data(out_dir: str, spec: SyntheticSpec) -> tuple[dict[str, str], dict]:
    """Write the synthetic shop of ``spec`` (see the module docstring) as input-contract Parquet
    files, chunk by chunk.

    Parameters
    ----------
    out_dir : str
        Local folder (created when missing).
    spec : SyntheticSpec
        Size and seed (and the chunk size, which changes memory, not bytes).

    Returns
    -------
    (paths, counts)
        ``{"instances", "labels", "instance_labels", "events"}`` -> absolute file paths, and
        what was made (rows, baskets, label kinds, popularity share of the top 1 % of items).

    Examples
    --------
    >>> import tempfile, pyarrow.parquet as pq
    >>> paths, counts = write_synthetic_data(tempfile.mkdtemp(), SyntheticSpec(1000, seed=7))
    >>> pq.read_table(paths["events"]).column_names
    ['basket_id', 'item_id', 'event_time']
    >>> counts["instances"], counts["labels"], counts["events"] >= 50_000
    (1000, 149, True)
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    out = os.path.abspath(out_dir)
    os.makedirs(out, exist_ok=True)
    shop = _Shop(spec)
    n = spec.instances
    width = len(str(n - 1))
    label_ids = pa.array(
        _ids("L", 0, len(shop.label_texts), max(3, len(str(len(shop.label_texts) - 1))))
    )
    brands = pa.array(shop.brands)
    adjs = pa.array([title_case(a) for a in shop.adjs])
    nouns = pa.array([title_case(x) for x in shop.nouns])
    variants = pa.array(shop.variants)
    item_ids: list[Any] = []
    counts: dict[str, Any] = {"test": 0, "instance_labels": 0}

    def take(values, idx):
        return values.take(pa.array(idx, mask=idx < 0))

    with (
        ParquetStream(out, "instances", [storage.INSTANCE_ID, storage.TEXT, storage.SPLIT]) as inst,
        ParquetStream(out, "instance_labels", [storage.INSTANCE_ID, storage.LABEL_ID]) as il,
    ):

        def sink(blocks: list[dict[str, Any]]) -> None:
            for b in blocks:
                rows = len(b["noun"])
                ids = pa.array(_ids("p", b["lo"], b["lo"] + rows, width))
                head = pc.binary_join_element_wise(
                    take(brands, b["brand"]),
                    take(adjs, b["adjective"]),
                    nouns.take(pa.array(b["noun"])),
                    " ",
                    null_handling="skip",
                )
                text = pc.binary_join_element_wise(
                    head, take(variants, b["variant"]), ", ", null_handling="skip"
                )
                split = [_split_of(i) for i in ids.to_pylist()]
                counts["test"] += split.count(storage.SPLIT_TEST)
                inst.write({storage.INSTANCE_ID: ids, storage.TEXT: text, storage.SPLIT: split})
                row, lab = _product_labels(shop, b)
                il.write(
                    {
                        storage.INSTANCE_ID: ids.take(pa.array(row)),
                        storage.LABEL_ID: label_ids.take(pa.array(lab)),
                    }
                )
                counts["instance_labels"] += len(row)
                item_ids.append(ids)

        cat = _catalogue(shop, sink)
    with ParquetStream(out, "labels", [storage.LABEL_ID, storage.TEXT]) as lab_out:
        lab_out.write({storage.LABEL_ID: label_ids, storage.TEXT: shop.label_texts})

    all_ids = pa.concat_arrays(item_ids)
    pools = _Pools(shop, cat)
    target = spec.n_events
    spacing = max(1, int(365 * 86400 * 10 / target))  # ~10 events per basket over a year
    start = np.datetime64("2026-01-01T00:00:00")
    bwidth = len(str(target))
    bought = np.zeros(n, dtype=np.int64)
    n_events = n_baskets = 0
    with ParquetStream(
        out, "events", [storage.BASKET_ID, storage.ITEM_ID, storage.EVENT_TIME]
    ) as ev:
        k = 0
        while n_events < target:
            basket_parts, item_parts = [], []
            for _ in range(max(1, 2 * spec.chunk_size // _BLOCK)):
                bk, item = _basket_block(shop, pools, k)
                sizes = np.bincount(bk, minlength=_BLOCK)
                cum = n_events + np.cumsum(sizes)
                if cum[-1] >= target:  # the basket that reaches the target is the last one
                    last = int(np.searchsorted(cum, target))
                    keep = bk <= last
                    bk, item, sizes = bk[keep], item[keep], sizes[: last + 1]
                basket_parts.append(k * _BLOCK + bk)
                item_parts.append(item)
                n_events += len(item)
                n_baskets = k * _BLOCK + len(sizes)
                k += 1
                if n_events >= target:
                    break
            bglob, item = np.concatenate(basket_parts), np.concatenate(item_parts)
            b_lo = int(bglob[0])
            b_hi = int(bglob[-1]) + 1
            secs = np.arange(b_lo, b_hi) * spacing + (
                _basket_jitter(spec, b_lo, b_hi) * spacing
            ).astype(np.int64)
            when = np.datetime_as_string(start + secs.astype("timedelta64[s]"), unit="s")
            local = pa.array(bglob - b_lo)
            ev.write(
                {
                    storage.BASKET_ID: pa.array(_ids("b", b_lo, b_hi, bwidth)).take(local),
                    storage.ITEM_ID: all_ids.take(pa.array(item)),
                    storage.EVENT_TIME: pa.array(when).take(local),
                }
            )
            bought += np.bincount(item, minlength=n)
    top = np.sort(bought)[::-1][: max(1, n // 100)].sum()
    kinds: dict[str, int] = {}
    for kind in shop.label_kind:
        kinds[kind] = kinds.get(kind, 0) + 1
    counts.update(
        instances=n,
        labels=len(shop.label_texts),
        label_kinds=dict(sorted(kinds.items())),
        events=n_events,
        baskets=n_baskets,
        items_never_bought=int((bought == 0).sum()),
        top_1pct_items_event_share=round(float(top / max(1, n_events)), 4),
    )
    paths = {
        "instances": inst.path,
        "labels": lab_out.path,
        "instance_labels": il.path,
        "events": ev.path,
    }
    return paths, counts


def _basket_jitter(spec: SyntheticSpec, lo: int, hi: int):
    """Uniforms in ``[0, 1)`` of baskets ``[lo, hi)`` (their time within their slot), from the
    baskets' blocks' own streams, whatever the chunking."""
    import numpy as np

    out = []
    for k in range(lo // _BLOCK, -(-hi // _BLOCK)):
        u = np.random.RandomState([spec.seed, 3, k]).uniform(size=_BLOCK)
        a, b = max(lo, k * _BLOCK) - k * _BLOCK, min(hi, (k + 1) * _BLOCK) - k * _BLOCK
        out.append(u[a:b])
    return np.concatenate(out)


def prepare_synthetic(
    output_dir: str, instances: int, seed: int = SYNTHETIC_SEED
) -> dict[str, str]:
    """``prepare-data --source synthetic``: the synthetic tables plus ``prepare_stats.json``.

    Examples
    --------
    >>> import json, os, tempfile
    >>> out = tempfile.mkdtemp()
    >>> paths = prepare_synthetic(out, 500, seed=2)
    >>> json.load(open(os.path.join(out, "prepare_stats.json")))["instances"]["rows"]
    500
    """
    spec = SyntheticSpec(instances, seed=seed)
    paths, c = write_synthetic_data(output_dir, spec)
    stats: dict[str, Any] = {
        "source": "synthetic",
        "rules": {
            "generator": "pina_spark.datasets.synthetic.write_synthetic_data",
            "seed": spec.seed,
            "instances": spec.instances,
            "events_target": spec.n_events,
            "labels_target": spec.n_labels,
            "split": f"test when in_sample_fraction(instance_id, {TEST_FRACTION}, '{TEST_SALT}')",
            "labels_per_instance": f"1-{MAX_LABELS}",
            "basket_size": f"{_MIN_BASKET}-{_MAX_BASKET}",
        },
        "dropped": 0,
        "instances": {
            "rows": c["instances"],
            "train": c["instances"] - c["test"],
            "test": c["test"],
        },
        "labels": {"rows": c["labels"], "kinds": c["label_kinds"]},
        "instance_labels": {"rows": c["instance_labels"]},
        "events": {
            "rows": c["events"],
            "baskets": c["baskets"],
            "items_never_bought": c["items_never_bought"],
            "top_1pct_items_event_share": c["top_1pct_items_event_share"],
        },
    }
    _write_json(os.path.join(os.path.abspath(output_dir), STATS_FILE), stats)
    log.info(
        "synthetic data in %s: %d products (%d test), %d labels, %d pairs, %d events in %d "
        "baskets",
        output_dir,
        c["instances"],
        c["test"],
        c["labels"],
        c["instance_labels"],
        c["events"],
        c["baskets"],
    )
    return paths
