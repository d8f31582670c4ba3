"""The model card of g: ``<run>/models/model_card.json``, written by the pretrain stage and read
by the evaluate stage (g's held-out report) and the aggregate stage (the tf-idf width).

What was trained (per variant: the problem's counts, the fits' times and sizes, g's held-out
P@k / R@k), how (the redacted ``pretrain`` and g-training ``neighbors`` settings, the fold rule)
and with which library versions. The vectorizer's own card (fitted by the vectorizer stage) is
copied in at the top level, under its own keys, so one file describes the whole models folder.

Examples
--------
>>> c = ModelCard(created_at="2026-01-01T00:00:00Z", versions={}, config={}, g="XR-Linear",
...               leave_self_out_rule="off", vectorizer_card={"vectorizer": {"dense_dim": 4}})
>>> d = c.to_dict()
>>> d["vectorizer"], "vectorizer_card" in d
({'dense_dim': 4}, False)
>>> ModelCard.from_dict(d) == c
True
"""

import dataclasses as dc
import json
import os
from collections.abc import Iterable
from typing import Any

from pina_spark import storage
from pina_spark.models.artifacts import MODEL_CARD

__all__ = ["ModelCard", "VECTORIZER_KEYS", "write_model_card", "read_model_card", "lacking_g"]

#: the vectorizer card's entries copied into the model card, at its top level
VECTORIZER_KEYS = ("vectorizer", "contrastive", "xtransformer")


@dc.dataclass
class ModelCard:
    """What the pretrain stage trained; filled in as the stage goes, written once at its end.

    Attributes:
        created_at: UTC time the stage started.
        versions: library versions of the models' stack.
        config: the redacted settings g was trained with.
        g: what g is, in words.
        leave_self_out_rule: how self entries of B_pre were treated.
        vectorizer_card: the vectorizer card's :data:`VECTORIZER_KEYS` entries.
        times_s: seconds per step (the vectorizer stage's as ``vectorizer_stage``).
        fit_inputs: how the fits got X (decided once on the driver).
        fits_on: ``driver`` | ``executors``.
        variants: per variant, its problem's counts and its fits' cards.
        folds: the fold rule and settings (also ``folds.json``).
        pretrain_report: g's held-out P@k / R@k per variant (``eval/pretrain.json``).
    """

    created_at: str
    versions: dict[str, Any]
    config: dict[str, Any]
    g: str
    leave_self_out_rule: str
    vectorizer_card: dict[str, Any] = dc.field(default_factory=dict)
    times_s: dict[str, Any] = dc.field(default_factory=dict)
    fit_inputs: str | None = None
    fits_on: str | None = None
    variants: dict[str, Any] = dc.field(default_factory=dict)
    folds: dict[str, Any] | None = None
    pretrain_report: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``model_card.json`` (unset entries left out)."""
        d = {f.name: getattr(self, f.name) for f in dc.fields(self) if f.name != "vectorizer_card"}
        d = {k: v for k, v in d.items() if v is not None}
        return {**d, **self.vectorizer_card}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelCard":
        """The card of a ``model_card.json`` object (unknown keys are an error)."""
        names = {f.name for f in dc.fields(cls)}
        vec = {k: d[k] for k in VECTORIZER_KEYS if k in d}
        unknown = sorted(set(d) - names - set(vec))
        if unknown:
            raise ValueError(f"model card: unknown entries {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names}, vectorizer_card=vec)


def write_model_card(card: ModelCard, folder: str) -> None:
    """Write ``card`` as ``<folder>/model_card.json`` (a local folder, before it is published)."""
    with open(os.path.join(folder, MODEL_CARD), "w") as fh:
        json.dump(card.to_dict(), fh, indent=1, sort_keys=True)


def read_model_card(models_root: str) -> ModelCard | None:
    """The card of a published models folder; ``None`` where it has none."""
    raw = storage.read_bytes(storage.join(models_root, MODEL_CARD))
    return ModelCard.from_dict(json.loads(raw)) if raw else None


def lacking_g(models_root: str, variants: Iterable[str]) -> list[str] | None:
    """The variants of ``variants`` whose g the card of the published models folder does not
    list (``[]``: none); ``None`` where the folder has no card or it cannot be read here (the
    neighbours stage then checks the g folders themselves).

    >>> lacking_g("/no/such/run/models", ["pina"]) is None
    True
    """
    try:
        card = read_model_card(models_root)
    except (OSError, ValueError, TypeError):
        return None
    if card is None:
        return None
    return [v for v in variants if v not in card.variants]
