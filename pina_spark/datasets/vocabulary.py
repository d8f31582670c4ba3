"""The shop vocabulary that the generators share (package data, ``demo_vocabulary.json``):
departments with their brands, categories and nouns, attribute labels and the adjectives that
trigger them, neutral adjectives, variants (sizes, colours), cross-department keyword labels,
shopping missions and the categories of everyday hub items.

Examples
--------
>>> len(DEPARTMENTS), DEPARTMENTS[0][0]
(12, 'grocery')
>>> title_case("sea salt AA batteries")
'Sea Salt AA Batteries'
"""

import json
import os
from typing import Any


def _load() -> dict[str, Any]:
    path = os.path.join(os.path.dirname(__file__), "demo_vocabulary.json")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


_V = _load()
#: department -> (department label, brands, {category label: nouns},
#: {attribute label: trigger adjectives}, neutral adjectives, variants)
DEPARTMENTS: list[tuple] = [tuple(d) for d in _V["departments"]]
#: category-specific variants (otherwise the department's)
CATEGORY_VARIANTS: dict[str, list[str]] = _V["category_variants"]
#: keyword labels across departments: label -> nouns that carry it (title-predictable)
KEYWORD_LABELS: dict[str, list[str]] = _V["keyword_labels"]
#: shopping missions ``(label, categories)``: context labels that only co-purchase reveals
MISSIONS: list[tuple[str, list[str]]] = [(m[0], m[1]) for m in _V["missions"]]
#: categories whose most popular items are everyday "hub" items added to many baskets
HUB_CATEGORIES: tuple[str, ...] = tuple(_V["hub_categories"])


def title_case(s: str) -> str:
    """Capitalise each word of a title, leaving words that start with a digit or are all
    upper case ("AA", "12 oz") alone."""
    return " ".join(
        w if (w[:1].isdigit() or w.isupper()) else w[:1].upper() + w[1:] for w in s.split(" ")
    )
