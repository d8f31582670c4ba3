"""Deterministic, id-seeded assignment of folds and of the validation split.

Used on the driver (pretraining the fold models) and on executors (routing each train row to the
fold model that never saw it), so both sides agree without a join. Never ``rand()``.

Examples
--------
>>> fold_of("article-17", 5) == fold_of("article-17", 5)
True
>>> 0 <= fold_of("article-17", 5) < 5
True
"""
import hashlib


def _unit(node_id: str, salt: str) -> float:
    h = hashlib.sha1(f"{salt}\x1f{node_id}".encode("utf-8")).hexdigest()
    return int(h[:12], 16) / float(16 ** 12)


def fold_of(instance_id: str, folds: int) -> int:
    """Fold in ``[0, folds)`` of a train instance, from a hash of its id."""
    return min(int(_unit(instance_id, "pina-fold") * folds), folds - 1)


def is_validation(instance_id: str, fraction: float) -> bool:
    """Whether a *train* instance belongs to the validation split carved out for tuning."""
    return _unit(instance_id, "pina-valid") < fraction


def is_heldout(key: str, fraction: float, salt: str = "pina-holdout") -> bool:
    """Generic id-seeded Bernoulli(fraction), e.g. B_pre rows held out to evaluate g."""
    return _unit(key, salt) < fraction


def in_sample_fraction(key: str, fraction: float, salt: str) -> bool:
    """Id-seeded sampling (down-sampling, test splits of prepared data sets)."""
    return _unit(key, salt) < fraction
