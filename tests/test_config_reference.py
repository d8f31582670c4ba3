"""docs/config.md is generated from the config dataclasses and must be current: every key, its
type, default and a meaning (pina_spark/config/reference.py; regenerate with `make docs`)."""

import os

from pina_spark.config import skeleton
from pina_spark.config.reference import reference_markdown, reference_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "config.md")


def _leaf_keys(d, prefix=""):
    for k, v in d.items():
        # dict-valued settings (Spark conf, tf-idf kwargs, limits per reason, ...) are one key
        if isinstance(v, dict) and v and k not in ("conf", "tfidf", "xtransformer", "grid"):
            yield from _leaf_keys(v, prefix + k + ".")
        else:
            yield prefix + k


def test_every_key_has_type_default_and_meaning():
    rows = reference_rows()
    keys = [r[0] for r in rows]
    assert sorted(keys) == sorted(_leaf_keys(skeleton()))
    undocumented = [k for k, t, d, m in rows if not m]
    assert not undocumented, f"add them to the Attributes: block of their dataclass: {undocumented}"
    assert ("aggregate.writer", "one of: auto, arrow, spark", '"auto"') in [r[:3] for r in rows]


def test_docs_config_md_is_current():
    with open(DOC) as fh:
        current = fh.read()
    assert current == reference_markdown(), (
        "docs/config.md is stale: run `make docs` (python -m pina_spark.config.reference > "
        "docs/config.md) and commit it"
    )
