"""Data sets in the input contract: the built-in demo generator and converters of the shared data.

Every function here writes single Parquet files with pyarrow (no Spark needed) whose columns are
exactly the input contract of :data:`pina_spark.io.INPUT_COLUMNS` (all strings except ``weight``):

- ``instances``: ``instance_id, text, split`` (``split`` in ``train``/``test``)
- ``labels``: ``label_id, text``
- ``instance_labels``: ``instance_id, label_id``
- ``events``: ``basket_id, item_id[, event_time]``

Test splits are id-seeded (:func:`pina_spark.folds.in_sample_fraction`, 20 %), never random, so a
rerun gives the same split. Every writer is idempotent: rerunning writes byte-identical files.

Sources (``prepare_data``):

``demo``
    :func:`write_demo_data`: a synthetic shop (see its docstring for the generative story).
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

import json
import logging
import os
import uuid
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from . import io
from .folds import in_sample_fraction

log = logging.getLogger(__name__)

__all__ = [
    "write_demo_data",
    "demo_catalogue",
    "prepare_data",
    "prepare_citeulike",
    "prepare_instacart",
    "citeulike_text",
    "SOURCES",
    "DEMO_TEST_SALT",
    "TEST_SALT",
    "TEST_FRACTION",
    "STATS_FILE",
]

SOURCES = ("demo", "instacart", "citeulike-t")
DEMO_TEST_SALT = "pina-demo-test"
TEST_SALT = "pina-test"
TEST_FRACTION = 0.2
STATS_FILE = "prepare_stats.json"
DEMO_SEED = 20230723  # ICML 2023: a constant, never time or rand()

# --------------------------------------------------------------------------- demo vocabulary
# department -> (department label, brands, {category label: nouns},
#                {attribute label: trigger adjectives}, neutral adjectives, variants)
_DEPARTMENTS = [
    (
        "grocery",
        "grocery essentials",
        [
            "Harvest Valley",
            "Green Acre",
            "Sunny Farms",
            "Golden Mill",
            "Blue Ridge",
            "Nature's Table",
        ],
        {
            "breakfast foods": [
                "granola",
                "oatmeal",
                "pancake mix",
                "maple syrup",
                "breakfast cereal",
            ],
            "snack foods": [
                "tortilla chips",
                "trail mix",
                "pretzels",
                "granola bars",
                "popcorn",
                "crackers",
            ],
            "fresh produce": ["bananas", "avocados", "baby spinach", "strawberries", "apples"],
            "dairy and eggs": [
                "whole milk",
                "greek yogurt",
                "cheddar cheese",
                "butter",
                "large eggs",
            ],
            "pasta and sauces": [
                "spaghetti",
                "penne pasta",
                "marinara sauce",
                "basil pesto",
                "grated parmesan",
            ],
            "beverages": [
                "sparkling water",
                "cold brew coffee",
                "green tea",
                "orange juice",
                "lemonade",
            ],
        },
        {
            "organic food": ["organic"],
            "gluten free": ["gluten-free"],
            "low sugar": ["unsweetened", "low-sugar"],
        },
        ["classic", "natural", "fresh", "original", "honey", "sea salt", "vanilla", "whole grain"],
        ["12 oz", "16 oz", "family size", "2 lb bag", "pack of 6", "32 oz"],
    ),
    (
        "baby",
        "baby products",
        ["Little Sprout", "Tiny Steps", "Cuddle Co", "BabyBloom", "Nestling"],
        {
            "baby feeding": [
                "baby bottle",
                "sippy cup",
                "bottle warmer",
                "baby food pouch",
                "bib set",
                "infant formula",
            ],
            "diapering": ["diapers", "baby wipes", "diaper cream", "changing pad", "diaper bag"],
            "nursery": [
                "crib sheet",
                "baby monitor",
                "swaddle blanket",
                "night light",
                "rocking chair",
            ],
            "baby bath": ["baby shampoo", "hooded towel", "baby bath tub", "baby lotion"],
            "baby travel": ["stroller", "car seat", "baby carrier", "travel crib"],
        },
        {
            "organic baby": ["organic"],
            "newborn essentials": ["newborn"],
            "hypoallergenic": ["hypoallergenic", "fragrance-free"],
        },
        ["soft", "gentle", "classic", "cozy", "pastel", "easy-clean"],
        ["0-6 months", "size 1", "size 3", "pack of 3", "2 count", "one size"],
    ),
    (
        "pets",
        "pet supplies",
        ["Happy Paws", "Whisker Works", "Tail Time", "Furbest", "PetPal"],
        {
            "dog food": ["dry dog food", "dog treats", "wet dog food", "dental chews"],
            "cat supplies": ["cat litter", "scratching post", "cat food", "litter box", "cat toy"],
            "pet grooming": ["pet shampoo", "grooming brush", "nail clipper", "flea collar"],
            "dog walking": ["dog leash", "dog harness", "poop bags", "dog collar"],
            "aquarium supplies": [
                "fish food",
                "aquarium filter",
                "aquarium gravel",
                "water conditioner",
            ],
        },
        {
            "grain free pet food": ["grain-free"],
            "puppy and kitten": ["puppy", "kitten"],
            "natural pet care": ["natural"],
        },
        ["premium", "durable", "chicken", "salmon", "reflective", "classic"],
        ["small", "medium", "large", "5 lb bag", "15 lb bag", "pack of 100"],
    ),
    (
        "outdoor",
        "outdoor recreation",
        ["TrailPeak", "Summit Ridge", "Northwood", "Basecamp", "WildTrail"],
        {
            "camping gear": [
                "tent",
                "sleeping bag",
                "camping stove",
                "lantern",
                "camp chair",
                "sleeping pad",
            ],
            "hiking gear": [
                "hiking boots",
                "trekking poles",
                "daypack",
                "hydration pack",
                "trail map",
            ],
            "fishing gear": [
                "fishing rod",
                "tackle box",
                "fishing reel",
                "lure set",
                "fishing line",
            ],
            "beach and water": [
                "beach towel",
                "beach umbrella",
                "snorkel set",
                "cooler",
                "kayak paddle",
            ],
            "climbing gear": ["climbing harness", "carabiner set", "chalk bag", "climbing rope"],
        },
        {
            "waterproof gear": ["waterproof"],
            "ultralight gear": ["ultralight"],
            "family camping": ["family-size"],
        },
        ["rugged", "compact", "all-season", "insulated", "classic", "packable"],
        ["2-person", "green", "orange", "regular", "long", "20L"],
    ),
    (
        "kitchen",
        "kitchen and dining",
        ["ChefMate", "Copper & Oak", "HomeChef", "KitchenCraft", "Prep Pro"],
        {
            "cookware": ["frying pan", "saucepan", "dutch oven", "stock pot", "wok"],
            "bakeware": ["baking sheet", "muffin tin", "cake pan", "mixing bowl", "rolling pin"],
            "kitchen gadgets": [
                "garlic press",
                "vegetable peeler",
                "can opener",
                "kitchen scale",
                "meat thermometer",
            ],
            "coffee and tea": [
                "french press",
                "coffee grinder",
                "tea kettle",
                "pour-over dripper",
                "coffee mugs",
            ],
            "food storage": ["food containers", "zipper bags", "mason jars", "lunch box"],
        },
        {
            "nonstick cookware": ["nonstick"],
            "stainless steel": ["stainless steel"],
            "dishwasher safe": ["dishwasher-safe"],
        },
        ["classic", "heavy-duty", "modern", "compact", "ceramic", "bamboo"],
        ["10 inch", "12 inch", "3 qt", "set of 4", "black", "red"],
    ),
    (
        "electronics",
        "consumer electronics",
        ["Voltix", "SoundWave", "Pixelon", "ZenTech", "Amperon"],
        {
            "audio": ["headphones", "earbuds", "bluetooth speaker", "soundbar"],
            "phone accessories": [
                "phone case",
                "screen protector",
                "phone charger",
                "car mount",
                "power bank",
            ],
            "computer accessories": [
                "keyboard",
                "mouse",
                "USB hub",
                "webcam",
                "laptop stand",
                "monitor",
            ],
            "batteries and cables": [
                "AA batteries",
                "AAA batteries",
                "USB-C cable",
                "HDMI cable",
                "extension cord",
            ],
            "smart home": ["smart plug", "smart bulb", "video doorbell", "smart thermostat"],
        },
        {
            "wireless electronics": ["wireless", "cordless"],
            "fast charging": ["fast-charging"],
            "gaming gear": ["gaming", "RGB"],
        },
        ["portable", "slim", "pro", "compact", "ultra", "classic"],
        ["black", "white", "6 ft", "4-pack", "2nd gen", "10000mAh"],
    ),
    (
        "beauty",
        "beauty and personal care",
        ["Glow Lab", "Pure Petal", "Luxe Leaf", "Daybreak", "Velvet Rose"],
        {
            "skin care": [
                "face moisturizer",
                "facial cleanser",
                "face serum",
                "sunscreen",
                "eye cream",
            ],
            "hair care": ["shampoo", "conditioner", "hair mask", "hair dryer", "hair brush"],
            "makeup": ["lipstick", "mascara", "foundation", "eyeshadow palette", "makeup brushes"],
            "bath and body": ["body wash", "body lotion", "bath bombs", "hand soap", "loofah"],
            "oral care": ["toothpaste", "electric toothbrush", "mouthwash", "dental floss"],
        },
        {
            "vegan beauty": ["vegan"],
            "fragrance free": ["unscented"],
            "anti aging": ["anti-aging", "retinol"],
        },
        ["hydrating", "gentle", "daily", "lavender", "coconut", "mint"],
        ["2 oz", "8 oz", "travel size", "pack of 2", "shade 3", "value pack"],
    ),
    (
        "household",
        "household supplies",
        ["CleanCo", "Brightside", "FreshNest", "Sparkle", "HomeBasics"],
        {
            "cleaning supplies": [
                "all-purpose cleaner",
                "glass cleaner",
                "scrub brush",
                "mop",
                "sponges",
            ],
            "laundry": [
                "laundry detergent",
                "fabric softener",
                "dryer sheets",
                "stain remover",
                "laundry basket",
            ],
            "paper goods": [
                "paper towels",
                "toilet paper",
                "facial tissues",
                "napkins",
                "paper plates",
            ],
            "trash and storage": ["trash bags", "storage bins", "vacuum bags", "shelf liner"],
        },
        {
            "eco friendly cleaning": ["eco", "plant-based"],
            "bulk household": ["bulk"],
            "disinfecting": ["disinfecting", "antibacterial"],
        },
        ["lemon", "fresh scent", "heavy-duty", "ultra", "original", "lavender"],
        ["12 rolls", "24 count", "64 oz", "pack of 3", "large", "100 count"],
    ),
    (
        "office",
        "office products",
        ["PaperTrail", "InkWell", "DeskPro", "Scriptora", "Notable"],
        {
            "writing supplies": [
                "ballpoint pens",
                "gel pens",
                "highlighters",
                "pencils",
                "markers",
            ],
            "paper and notebooks": [
                "spiral notebook",
                "sticky notes",
                "printer paper",
                "legal pads",
                "planner",
            ],
            "desk organization": [
                "desk organizer",
                "file folders",
                "binder",
                "stapler",
                "desk lamp",
            ],
            "school supplies": [
                "school backpack",
                "pencil case",
                "scientific calculator",
                "glue sticks",
                "index cards",
            ],
            "art supplies": [
                "sketchbook",
                "watercolor set",
                "colored pencils",
                "acrylic paint",
                "paint brushes",
            ],
        },
        {
            "recycled paper": ["recycled"],
            "ergonomic office": ["ergonomic"],
            "colorful supplies": ["assorted color", "neon"],
        },
        ["classic", "premium", "fine point", "college ruled", "heavy-duty", "compact"],
        ["12 pack", "5 pack", "letter size", "A5", "black", "blue"],
    ),
    (
        "sports",
        "sports and fitness",
        ["IronCore", "FlexFit", "ProStride", "Velocity", "Peak Athletics"],
        {
            "fitness equipment": [
                "dumbbells",
                "kettlebell",
                "resistance bands",
                "jump rope",
                "pull-up bar",
            ],
            "yoga": ["yoga mat", "yoga block", "yoga strap", "meditation cushion"],
            "running": ["running shoes", "running belt", "sports watch", "compression socks"],
            "cycling": ["bike helmet", "bike lock", "bike lights", "cycling gloves", "bike pump"],
            "team sports": [
                "soccer ball",
                "basketball",
                "baseball glove",
                "shin guards",
                "sports bottle",
            ],
        },
        {
            "home gym": ["adjustable", "foldable"],
            "high visibility": ["hi-vis"],
            "beginner friendly": ["beginner"],
        },
        ["lightweight", "pro", "breathable", "classic", "durable", "non-slip"],
        ["5 lb", "10 lb", "medium", "large", "size 5", "blue"],
    ),
    (
        "garden",
        "patio lawn and garden",
        ["GreenThumb", "Bloomfield", "Terra Firma", "Rootwell", "Yardworks"],
        {
            "gardening tools": [
                "pruning shears",
                "garden trowel",
                "garden gloves",
                "rake",
                "garden hose",
            ],
            "seeds and plants": [
                "tomato seeds",
                "herb seeds",
                "flower bulbs",
                "potting soil",
                "plant food",
            ],
            "outdoor furniture": ["patio chair", "hammock", "outdoor cushions", "patio umbrella"],
            "grilling": ["charcoal grill", "grill brush", "BBQ tongs", "charcoal", "grill cover"],
            "lawn care": ["lawn mower", "leaf blower", "grass seed", "sprinkler", "fertilizer"],
        },
        {
            "organic gardening": ["organic"],
            "heirloom seeds": ["heirloom"],
            "weather resistant": ["weather-resistant", "rust-proof"],
        },
        ["classic", "heavy-duty", "ergonomic", "cedar", "compact", "premium"],
        ["small", "large", "25 ft", "50 ft", "1 lb", "set of 2"],
    ),
    (
        "toys",
        "toys and games",
        ["PlayNest", "Brightblocks", "Wonderkin", "TinyTown", "FunForge"],
        {
            "building toys": [
                "building blocks",
                "magnetic tiles",
                "construction set",
                "marble run",
            ],
            "board games": ["board game", "card game", "jigsaw puzzle", "chess set", "trivia game"],
            "outdoor toys": [
                "water blaster",
                "kite",
                "bubble machine",
                "sandbox toys",
                "kick scooter",
            ],
            "arts and crafts kits": [
                "craft kit",
                "play dough",
                "bead kit",
                "coloring book",
                "sticker book",
            ],
            "plush and dolls": [
                "teddy bear",
                "doll",
                "plush unicorn",
                "dollhouse",
                "action figure",
            ],
        },
        {
            "stem learning": ["STEM", "educational"],
            "toddler toys": ["toddler"],
            "family game night": ["family"],
        },
        ["classic", "deluxe", "mini", "rainbow", "wooden", "colorful"],
        ["100 pieces", "500 pieces", "ages 3+", "ages 8+", "set of 12", "large"],
    ),
]

# category-specific variants (otherwise the department's): "AA Batteries, 24-pack", not "10 inch"
_CATEGORY_VARIANTS = {
    "fresh produce": ["1 lb", "2 lb bag", "bunch", "family pack", "5 oz clamshell"],
    "dairy and eggs": ["half gallon", "1 gallon", "8 oz", "dozen", "32 oz tub"],
    "beverages": ["12 pack", "6 pack", "64 oz", "1 liter", "24 pack"],
    "audio": ["black", "white", "midnight blue", "2nd gen", "over-ear"],
    "batteries and cables": ["4-pack", "24-pack", "6 ft", "10 ft", "3-pack"],
    "makeup": ["shade 1", "shade 3", "nude", "ruby red", "travel size"],
    "bath and body": ["8 oz", "16 oz", "pack of 2", "value pack", "travel size"],
    "plush and dolls": ["12 inch", "18 inch", "mini", "collector edition", "gift box"],
    "board games": ["2-4 players", "ages 8+", "family edition", "1000 pieces", "500 pieces"],
    "building toys": ["100 pieces", "250 pieces", "ages 3+", "ages 6+", "starter set"],
    "camping gear": ["2-person", "4-person", "green", "orange", "20 degree"],
    "fitness equipment": ["5 lb", "10 lb", "20 lb", "light", "heavy"],
    "paper goods": ["12 rolls", "24 rolls", "6 pack", "100 count", "250 count"],
    "cookware": ["10 inch", "12 inch", "3 qt", "5 qt", "set of 2"],
    "hair care": ["12 oz", "travel size", "pack of 2", "salon size", "black"],
}

# keyword labels across departments: label -> nouns that carry it (title-predictable)
_KEYWORD_LABELS = {
    "coffee lovers": [
        "cold brew coffee",
        "french press",
        "coffee grinder",
        "pour-over dripper",
        "coffee mugs",
    ],
    "lighting": ["lantern", "night light", "desk lamp", "smart bulb", "bike lights"],
    "water fun": ["snorkel set", "kayak paddle", "water blaster", "sprinkler", "beach towel"],
    "kids crafts": ["coloring book", "craft kit", "play dough", "watercolor set", "sticker book"],
    "storage solutions": [
        "storage bins",
        "food containers",
        "desk organizer",
        "tackle box",
        "mason jars",
    ],
    "charging and power": [
        "phone charger",
        "power bank",
        "AA batteries",
        "AAA batteries",
        "extension cord",
    ],
    "travel essentials": [
        "travel crib",
        "power bank",
        "daypack",
        "car mount",
        "hydration pack",
        "lunch box",
    ],
    "cleaning tools": ["scrub brush", "mop", "sponges", "grill brush", "vacuum bags"],
    "outdoor cooking": ["camping stove", "charcoal grill", "BBQ tongs", "charcoal", "cooler"],
    "sleep and rest": [
        "sleeping bag",
        "sleeping pad",
        "crib sheet",
        "swaddle blanket",
        "hammock",
        "meditation cushion",
    ],
    "healthy snacks": ["trail mix", "granola bars", "avocados", "greek yogurt", "apples"],
    "hydration": ["sparkling water", "hydration pack", "sports bottle", "lemonade"],
    "footwear": ["hiking boots", "running shoes", "compression socks"],
}

# shopping missions: context labels that only co-purchase reveals. A random subset of the items
# of each listed category takes part (membership is NOT a function of the title).
_MISSIONS = [
    (
        "weekend camping trip",
        ["camping gear", "hiking gear", "snack foods", "batteries and cables", "grilling"],
    ),
    ("backyard bbq", ["grilling", "beverages", "outdoor furniture", "paper goods", "snack foods"]),
    ("new baby arrival", ["baby feeding", "diapering", "nursery", "baby bath", "laundry"]),
    (
        "back to school",
        [
            "school supplies",
            "writing supplies",
            "paper and notebooks",
            "computer accessories",
            "snack foods",
        ],
    ),
    (
        "home office setup",
        ["computer accessories", "desk organization", "coffee and tea", "smart home"],
    ),
    ("puppy starter kit", ["dog food", "dog walking", "pet grooming", "cleaning supplies"]),
    ("new kitten", ["cat supplies", "pet grooming", "cleaning supplies"]),
    ("beach vacation", ["beach and water", "skin care", "outdoor toys", "beverages"]),
    ("game night", ["board games", "snack foods", "beverages", "paper goods"]),
    ("home workout", ["fitness equipment", "yoga", "audio", "beverages"]),
    ("spring cleaning", ["cleaning supplies", "laundry", "trash and storage"]),
    ("holiday baking", ["bakeware", "breakfast foods", "dairy and eggs", "food storage"]),
    ("italian dinner night", ["pasta and sauces", "cookware", "dairy and eggs", "beverages"]),
    ("garden makeover", ["gardening tools", "seeds and plants", "lawn care", "outdoor furniture"]),
    ("spa day at home", ["bath and body", "skin care", "hair care", "yoga"]),
    ("marathon training", ["running", "beverages", "audio", "snack foods"]),
    ("bike commuting", ["cycling", "phone accessories", "hiking gear"]),
    ("fishing weekend", ["fishing gear", "beach and water", "snack foods", "camping gear"]),
    ("rainy day crafts", ["arts and crafts kits", "art supplies", "building toys"]),
    ("smart home upgrade", ["smart home", "batteries and cables", "audio"]),
    ("first apartment", ["cookware", "cleaning supplies", "trash and storage", "kitchen gadgets"]),
    (
        "kids birthday party",
        ["plush and dolls", "outdoor toys", "paper goods", "bakeware", "snack foods"],
    ),
    ("aquarium setup", ["aquarium supplies", "cleaning supplies", "smart home"]),
    ("daily commute", ["phone accessories", "audio", "coffee and tea"]),
    ("climbing trip", ["climbing gear", "hiking gear", "snack foods"]),
    ("holiday gift shopping", ["audio", "board games", "plush and dolls", "makeup"]),
    ("tailgate party", ["grilling", "beverages", "team sports", "snack foods"]),
    ("road trip", ["phone accessories", "snack foods", "beverages", "audio"]),
]

# categories whose most popular items are everyday "hub" items added to many baskets
_HUB_CATEGORIES = (
    "fresh produce",
    "dairy and eggs",
    "paper goods",
    "batteries and cables",
    "beverages",
)

_DEMO_PRODUCTS = 2500
_DEMO_BASKETS = 15000
_MAX_LABELS = 5
_MIN_BASKET, _MAX_BASKET = 3, 15


def demo_catalogue(seed: int = DEMO_SEED) -> Tuple[List[dict], List[dict], List[Tuple[str, str]]]:
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
    label_defs: List[Tuple[str, str]] = []  # (text, kind)
    for _, dept_label, _, cats, attrs, _, _ in _DEPARTMENTS:
        label_defs.append((dept_label, "department"))
        label_defs += [(c, "category") for c in cats]
        label_defs += [(a, "attribute") for a in attrs]
    label_defs += [(k, "keyword") for k in _KEYWORD_LABELS]
    label_defs += [(m, "mission") for m, _ in _MISSIONS]
    texts = [t for t, _ in label_defs]
    if len(set(texts)) != len(texts):  # pragma: no cover - guards edits of the vocabulary
        raise ValueError("demo label texts must be unique")
    label_id = {t: f"L{i:03d}" for i, (t, _) in enumerate(label_defs)}
    labels = [{"label_id": label_id[t], "text": t, "kind": k} for t, k in label_defs]

    # ---- products
    cat_list = [(dept, cat) for dept, _, _, cats, _, _, _ in _DEPARTMENTS for cat in cats]
    dept_info = {d[0]: d for d in _DEPARTMENTS}
    kw_of_noun: Dict[str, List[str]] = {}
    for kw, nouns in _KEYWORD_LABELS.items():
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
            vs = _CATEGORY_VARIANTS.get(cat, variants)
            variant = vs[rng.randint(len(vs))]
            title = f"{brand} {_title_case(adj)} {_title_case(noun)}, {variant}"
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
    by_cat: Dict[str, List[int]] = {}
    for j, p in enumerate(products):
        by_cat.setdefault(p["category"], []).append(j)
    for mission, m_cats in _MISSIONS:
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
            io.SPLIT_TEST
            if in_sample_fraction(iid, TEST_FRACTION, DEMO_TEST_SALT)
            else io.SPLIT_TRAIN
        )
        pairs += [(iid, label_id[t]) for t in labs]
    pairs.sort()
    return products, labels, pairs


def _title_case(s: str) -> str:
    return " ".join(
        w if (w[:1].isdigit() or w.isupper()) else w[:1].upper() + w[1:] for w in s.split(" ")
    )


def _demo_baskets(products: List[dict], seed: int = DEMO_SEED) -> List[Tuple[str, str, str]]:
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
    by_cat: Dict[str, List[int]] = {}
    by_mission: Dict[str, List[int]] = {}
    dept_cats: Dict[str, List[str]] = {}
    for j, p in enumerate(products):
        by_cat.setdefault(p["category"], []).append(j)
        for m in p["missions"]:
            by_mission.setdefault(m, []).append(j)
        dept_cats.setdefault(p["department"], [])
        if p["category"] not in dept_cats[p["department"]]:
            dept_cats[p["department"]].append(p["category"])
    missions = [m for m, _ in _MISSIONS if m in by_mission]
    mission_cats = {m: cs for m, cs in _MISSIONS}
    hub_pool = sorted(
        (j for c in _HUB_CATEGORIES for j in by_cat.get(c, [])), key=lambda j: (-pop[j], j)
    )[:30]
    glob_p = pop / pop.sum()

    glob_cdf = np.cumsum(glob_p)

    def draw(pool: Union[Sequence[int], np.ndarray], k: int) -> List[int]:
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


def write_demo_data(out_dir: str) -> Dict[str, str]:
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
                io.INSTANCE_ID: [p["instance_id"] for p in products],
                io.TEXT: [p["text"] for p in products],
                io.SPLIT: [p["split"] for p in products],
            },
        ),
        "labels": _write(
            out,
            "labels",
            {
                io.LABEL_ID: [lab["label_id"] for lab in labels],
                io.TEXT: [lab["text"] for lab in labels],
            },
        ),
        "instance_labels": _write(
            out,
            "instance_labels",
            {io.INSTANCE_ID: [a for a, _ in pairs], io.LABEL_ID: [b for _, b in pairs]},
        ),
        "events": _write(
            out,
            "events",
            {
                io.BASKET_ID: [r[0] for r in events],
                io.ITEM_ID: [r[1] for r in events],
                io.EVENT_TIME: [r[2] for r in events],
            },
        ),
    }
    n_test = sum(p["split"] == io.SPLIT_TEST for p in products)
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


# --------------------------------------------------------------------------- writing helpers
def _write(out_dir: str, name: str, columns: Dict[str, list]) -> str:
    """Write one single-file Parquet table of string columns atomically (tmp + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [pa.field(c, pa.float64() if c == io.WEIGHT else pa.string()) for c in columns]
    table = pa.table(
        {c: pa.array(v, type=f.type) for (c, v), f in zip(columns.items(), fields)},
        schema=pa.schema(fields),
    )
    path = os.path.join(out_dir, f"{name}.parquet")
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, path)
    return path


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def _read_lines(path: str) -> List[str]:
    """Lines of a text file; a missing final newline is fine, no trailing empty line is made."""
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


def _split_of(instance_id: str, salt: str = TEST_SALT) -> str:
    return io.SPLIT_TEST if in_sample_fraction(instance_id, TEST_FRACTION, salt) else io.SPLIT_TRAIN


def _need(input_dir: Optional[str], source: str, files: Sequence[str]) -> str:
    if not input_dir:
        raise io.InputError(
            f"prepare-data --source {source}: --input (folder of the raw data " f"set) is required"
        )
    missing = [f for f in files if not os.path.isfile(os.path.join(input_dir, f))]
    if missing:
        raise io.InputError(f"prepare-data --source {source}: {input_dir} lacks {missing}")
    return input_dir


# --------------------------------------------------------------------------- citeulike-t
def _parse_counted_line(line: str, path: str, lineno: int) -> List[str]:
    """``n a b c ...`` -> ``[a, b, c]``; the leading count must match."""
    parts = line.split()
    if not parts:
        return []
    n = int(parts[0])
    if n != len(parts) - 1:
        raise io.InputError(f"{path}:{lineno + 1}: count {n} != {len(parts) - 1} entries")
    return parts[1:]


def citeulike_text(entries: Sequence[str], vocabulary: Sequence[str]) -> str:
    """Text of one article from its ``mult.dat`` entries (``"word_id:count"`` strings).

    Words ordered by count descending, ties by vocabulary index ascending; each word repeated by
    its count; joined by single spaces. No words gives ``""``.

    Examples
    --------
    >>> citeulike_text(["2:1", "0:2", "1:2"], ["gene", "cell", "protein"])
    'gene gene cell cell protein'
    """
    bag = []
    for e in entries:
        wid, cnt = e.split(":")
        bag.append((-int(cnt), int(wid)))
    bag.sort()
    return " ".join(" ".join([vocabulary[w]] * (-c)) for c, w in bag)


def prepare_citeulike(
    input_dir: Optional[str], output_dir: str, min_tag_articles: int = 5
) -> Tuple[Dict[str, str], dict]:
    """Convert the shared citeulike-t folder to the input contract (rules in the module docs).

    Parameters
    ----------
    input_dir : str or None
        Folder with ``mult.dat``, ``vocabulary.dat``, ``tags.dat``, ``tag-item.dat``,
        ``users.dat`` (``None`` or a folder lacking one: :class:`pina_spark.io.InputError`).
    output_dir : str
        Where the four Parquet files and ``prepare_stats.json`` go.
    min_tag_articles : int
        Keep a tag (label) only when it is on at least this many distinct articles.

    Returns
    -------
    (paths, stats)
        Absolute paths of ``instances``, ``labels``, ``instance_labels``, ``events``, and the
        statistics also written to ``prepare_stats.json``.

    Examples
    --------
    >>> paths, stats = prepare_citeulike("../shared/data/citeulike-t", "/tmp/cul")  # doctest: +SKIP
    >>> stats["tags"]["kept"]  # doctest: +SKIP
    8311
    """
    files = ["mult.dat", "vocabulary.dat", "tags.dat", "tag-item.dat", "users.dat"]
    d = _need(input_dir, "citeulike-t", files)
    out = os.path.abspath(output_dir)
    os.makedirs(out, exist_ok=True)
    vocab = _read_lines(os.path.join(d, "vocabulary.dat"))
    mult_path = os.path.join(d, "mult.dat")
    mult = _read_lines(mult_path)
    ids = [str(i) for i in range(len(mult))]
    texts = [
        citeulike_text(_parse_counted_line(ln, mult_path, i), vocab) for i, ln in enumerate(mult)
    ]
    splits = [_split_of(a) for a in ids]
    n_art = len(ids)

    tags = _read_lines(os.path.join(d, "tags.dat"))
    ti_path = os.path.join(d, "tag-item.dat")
    tag_items = _read_lines(ti_path)
    if len(tag_items) != len(tags):
        raise io.InputError(f"{ti_path}: {len(tag_items)} lines but tags.dat has {len(tags)}")
    raw_pairs = dup_pairs = bad_pairs = 0
    kept_pairs: List[Tuple[str, str]] = []
    kept_tags: List[int] = []
    dropped_tag_pairs = dropped_tags = 0
    for t, ln in enumerate(tag_items):
        entries = _parse_counted_line(ln, ti_path, t)
        raw_pairs += len(entries)
        arts = sorted({int(a) for a in entries})
        dup_pairs += len(entries) - len(arts)
        ok = [a for a in arts if 0 <= a < n_art]
        bad_pairs += len(arts) - len(ok)
        if len(ok) >= min_tag_articles:
            kept_tags.append(t)
            kept_pairs += [(str(a), str(t)) for a in ok]
        else:
            dropped_tags += 1
            dropped_tag_pairs += len(ok)
    kept_pairs.sort(key=lambda p: (int(p[0]), int(p[1])))
    label_texts = [tags[t].replace("-", " ").replace("_", " ").strip() for t in kept_tags]
    arts_with_tag = {a for a, _ in kept_pairs}
    arts_any_tag: Set[int] = set()
    for ln_i, ln in enumerate(tag_items):
        arts_any_tag.update(int(a) for a in _parse_counted_line(ln, ti_path, ln_i))

    u_path = os.path.join(d, "users.dat")
    users = _read_lines(u_path)
    ev_b: List[str] = []
    ev_i: List[str] = []
    ev_dup = ev_bad = 0
    for u, ln in enumerate(users):
        entries = _parse_counted_line(ln, u_path, u)
        uniq = sorted({int(a) for a in entries})
        ev_dup += len(entries) - len(uniq)
        ok = [a for a in uniq if 0 <= a < n_art]
        ev_bad += len(uniq) - len(ok)
        ev_b += [f"u{u}"] * len(ok)
        ev_i += [str(a) for a in ok]

    paths = {
        "instances": _write(
            out, "instances", {io.INSTANCE_ID: ids, io.TEXT: texts, io.SPLIT: splits}
        ),
        "labels": _write(
            out, "labels", {io.LABEL_ID: [str(t) for t in kept_tags], io.TEXT: label_texts}
        ),
        "instance_labels": _write(
            out,
            "instance_labels",
            {io.INSTANCE_ID: [a for a, _ in kept_pairs], io.LABEL_ID: [t for _, t in kept_pairs]},
        ),
        "events": _write(out, "events", {io.BASKET_ID: ev_b, io.ITEM_ID: ev_i}),
    }
    n_test = sum(s == io.SPLIT_TEST for s in splits)
    stats = {
        "source": "citeulike-t",
        "rules": {
            "instance_id": "0-based line number in mult.dat",
            "text": "words by count desc (ties: vocabulary index asc), each repeated by count",
            "split": f"test when in_sample_fraction(instance_id, {TEST_FRACTION}, "
            f"'{TEST_SALT}')",
            "label_id": "0-based line number in tags.dat",
            "label_text": "tag name with '-' and '_' replaced by spaces",
            "min_tag_articles": min_tag_articles,
            "basket_id": "'u' + 0-based line number in users.dat",
        },
        "instances": {
            "rows": n_art,
            "train": n_art - n_test,
            "test": n_test,
            "empty_text": sum(1 for t in texts if not t),
            "without_kept_tag": n_art - len(arts_with_tag),
            "without_any_tag": n_art - len(arts_any_tag & set(range(n_art))),
            "dropped": 0,
        },
        "tags": {
            "total": len(tags),
            "kept": len(kept_tags),
            "dropped_fewer_than_min_articles": dropped_tags,
            "kept_label_texts_not_unique": len(label_texts) - len(set(label_texts)),
        },
        "instance_labels": {
            "raw_entries": raw_pairs,
            "duplicate_entries_dropped": dup_pairs,
            "unknown_article_dropped": bad_pairs,
            "dropped_with_rare_tags": dropped_tag_pairs,
            "rows": len(kept_pairs),
        },
        "events": {
            "users": len(users),
            "rows": len(ev_b),
            "duplicate_entries_dropped": ev_dup,
            "unknown_article_dropped": ev_bad,
            "distinct_items": len(set(ev_i)),
        },
    }
    _write_json(os.path.join(out, STATS_FILE), stats)
    log.info(
        "citeulike-t -> %s: %d articles (%d test), %d/%d tags kept (>= %d articles), "
        "%d pairs (%d dropped with rare tags), %d events",
        out,
        n_art,
        n_test,
        len(kept_tags),
        len(tags),
        min_tag_articles,
        len(kept_pairs),
        dropped_tag_pairs,
        len(ev_b),
    )
    return paths, stats


# --------------------------------------------------------------------------- instacart
def prepare_instacart(input_dir: Optional[str], output_dir: str) -> Tuple[Dict[str, str], dict]:
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
        lacking one: :class:`pina_spark.io.InputError`).
    output_dir : str
        Where the Parquet files and ``prepare_stats.json`` go.

    Returns
    -------
    (paths, stats)
        Absolute paths of ``instances`` and ``events``, and the statistics.

    Examples
    --------
    >>> paths, stats = prepare_instacart("../shared/data/instacart", "/tmp/ic")  # doctest: +SKIP
    >>> stats["instances"]["rows"]  # doctest: +SKIP
    14190
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
            out, "instances", {io.INSTANCE_ID: ids, io.TEXT: texts, io.SPLIT: splits}
        ),
        "events": _write(
            out,
            "events",
            {
                io.BASKET_ID: op["order_id"].astype(str).tolist(),
                io.ITEM_ID: op["product_id"].astype(str).tolist(),
                io.EVENT_TIME: [order_time[o] for o in op["order_id"].tolist()],
            },
        ),
    }
    n_test = sum(s == io.SPLIT_TEST for s in splits)
    stats: Dict[str, Any] = {
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


# --------------------------------------------------------------------------- entry point
def prepare_data(source: str, input_dir: Optional[str], output_dir: str) -> Dict[str, str]:
    """Write a data set in the input contract under ``output_dir`` (``pina-spark prepare-data``).

    Parameters
    ----------
    source : str
        ``demo``, ``instacart`` or ``citeulike-t`` (rules in the module docstring).
    input_dir : str or None
        Folder of the raw data set (not used for ``demo``).
    output_dir : str
        Output folder: Parquet files plus ``prepare_stats.json`` (row counts, what was dropped
        and why).

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
    """
    if source == "demo":
        paths = write_demo_data(output_dir)
        import pyarrow.parquet as pq

        stats = {
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
    if source == "citeulike-t":
        return prepare_citeulike(input_dir, output_dir)[0]
    if source == "instacart":
        return prepare_instacart(input_dir, output_dir)[0]
    raise ValueError(f"prepare_data: unknown source {source!r} (known: {', '.join(SOURCES)})")
