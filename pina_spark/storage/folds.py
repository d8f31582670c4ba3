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

#: the salt of the validation split's hash (:func:`is_validation`, :func:`validation_fold`)
_VALID_SALT = "pina-valid"


def _unit(node_id: str, salt: str) -> float:
    h = hashlib.sha1(f"{salt}\x1f{node_id}".encode()).hexdigest()
    return int(h[:12], 16) / float(16**12)


def fold_unit(instance_id: str) -> float:
    """The id-hash in ``[0, 1)`` that :func:`fold_of` cuts into folds (any number of folds)."""
    return _unit(instance_id, "pina-fold")


def fold_of(instance_id: str, folds: int) -> int:
    """Fold in ``[0, folds)`` of a train instance, from a hash of its id."""
    return min(int(fold_unit(instance_id) * folds), folds - 1)


def fold_expr(id_col, folds: int):
    """:func:`fold_of` as a Spark column expression of a string id column, computed in the JVM
    (sha1, the same 12 hex digits, the same double arithmetic), so executors route rows by fold
    without a Python UDF. ``tests/test_aggregate.py`` checks it against :func:`fold_of`."""
    from pyspark.sql import functions as F

    h = F.sha1(F.concat(F.lit("pina-fold\x1f"), id_col))
    unit = F.conv(F.substring(h, 1, 12), 16, 10).cast("double") / float(16**12)
    return F.least(F.floor(unit * float(folds)).cast("int"), F.lit(folds - 1))


def fold_of_unit(units, folds: int):
    """:func:`fold_of` of many ids at once, from their :func:`fold_unit` values (numpy array);
    NaN (not a train instance) gives -1.

    Examples
    --------
    >>> import numpy as np
    >>> fold_of_unit(np.array([fold_unit("a"), np.nan]), 5).tolist() == [fold_of("a", 5), -1]
    True
    """
    import numpy as np

    u = np.asarray(units, dtype=np.float64)
    ok = ~np.isnan(u)
    out = np.full(u.shape, -1, dtype=np.int64)
    out[ok] = np.minimum(np.floor(u[ok] * float(folds)).astype(np.int64), folds - 1)
    return out


def is_validation(instance_id: str, fraction: float) -> bool:
    """Whether a *train* instance belongs to the validation split carved out for tuning."""
    return _unit(instance_id, _VALID_SALT) < fraction


def validation_fold(instance_id: str, folds: int) -> int:
    """The cross-validation fold in ``[0, folds)`` of a *train* instance (``select.cv_folds``),
    from the same hash as :func:`is_validation`: fold 0 of ``folds`` is the carve-out of
    ``fraction = 1 / folds``.

    Examples
    --------
    >>> ids = [f"i{n}" for n in range(200)]
    >>> all((validation_fold(i, 5) == 0) == is_validation(i, 0.2) for i in ids)
    True
    """
    return min(int(_unit(instance_id, _VALID_SALT) * folds), folds - 1)


def is_heldout(key: str, fraction: float, salt: str = "pina-holdout") -> bool:
    """Generic id-seeded Bernoulli(fraction), e.g. B_pre rows held out to evaluate g."""
    return _unit(key, salt) < fraction


def in_sample_fraction(key: str, fraction: float, salt: str) -> bool:
    """Id-seeded sampling (down-sampling, test splits of prepared data sets)."""
    return _unit(key, salt) < fraction
