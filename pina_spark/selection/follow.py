"""Production runs follow the selection of the models they reuse.

A run whose ``run.models`` names a run root (``latest`` resolved first, through the promotion
pointer) that holds a selection (:mod:`pina_spark.selection.artifact`) runs with its
``settings``, and by default trains the chosen variant plus ``baseline`` and gates promotion on
the chosen variant. A key given explicitly (``--set KEY=...``) wins over the selection, and the
log names it. ``select.follow`` decides what a missing selection means (``auto``: nothing,
``required``: an error); a stale or unreadable one is always an error
(:class:`~pina_spark.selection.artifact.SelectionError`, exit 2), unless ``follow: off``.

Examples
--------
>>> followed_settings({"variant": "pina", "settings": {"neighbors.k": 10}})
{'neighbors.k': 10, 'train.variants': ['baseline', 'pina'], 'evaluate.gate_variant': 'pina'}
"""

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError, PinaConfig, config_from_dict
from pina_spark.config import variants as V
from pina_spark.config.load import set_dotted
from pina_spark.selection.artifact import (
    SelectionError,
    check_fresh,
    read_selection,
    selection_uri,
)

log = logging.getLogger(__name__)

__all__ = ["follow_selection", "followed_settings", "set_keys"]


def set_keys(sets: Iterable[str]) -> set[str]:
    """The keys of ``--set KEY=VALUE`` strings.

    Examples
    --------
    >>> sorted(set_keys(["neighbors.k=3", "train.variants=[pina]"]))
    ['neighbors.k', 'train.variants']
    """
    return {s.split("=", 1)[0].strip() for s in sets if "=" in s}


def followed_settings(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The config keys a run following ``rec`` sets: its ``settings``, then the variants trained
    (the chosen one plus ``baseline``) and the promotion gate's variant."""
    variant = rec["variant"]
    out = dict(rec["settings"])
    out.setdefault("train.variants", [v for v in V.ALL if v in (V.BASELINE, variant)])
    out.setdefault("evaluate.gate_variant", variant)
    return out


def follow_selection(
    cfg: PinaConfig, explicit: Iterable[str] = ()
) -> tuple[PinaConfig, dict[str, Any] | None]:
    """``cfg`` with the selection of ``run.models``' root applied (keys in ``explicit`` are
    left as ``cfg`` has them), and the record followed (``None``: none followed). ``run.models``
    must be resolved already (:func:`pina_spark.orchestration.promotion.resolve_models`)."""
    if cfg.select.follow == "off" or not cfg.run.models:
        return cfg, None
    root = storage.norm(cfg.run.models)
    rec = read_selection(root)
    if rec is None:
        if cfg.select.follow == "required":
            raise SelectionError(
                f"{selection_uri(root)}: no selection (select.follow: required); run "
                f"`pina-spark select` on {root} first, or set select.follow: auto"
            )
        return cfg, None
    check_fresh(rec, root)
    explicit = set(explicit)
    data = copy.deepcopy(cfg.to_dict())
    applied, kept = {}, []
    for key, value in followed_settings(rec).items():
        if key in explicit:
            kept.append(key)
            continue
        applied[key] = value
    try:
        for key, value in applied.items():
            set_dotted(data, key, value, "selection setting")
        out = config_from_dict(data, source=f"<selection {selection_uri(root)}>")
    except ConfigError as e:
        raise SelectionError(f"{selection_uri(root)}: unreadable selection: {e}") from None
    log.info("selection of %s: variant %s, settings %s", root, rec["variant"], applied)
    if kept:
        log.warning(
            "selection of %s: --set wins over the selection for %s", root, ", ".join(sorted(kept))
        )
    return out, rec
