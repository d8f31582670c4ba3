"""Deterministic, id-seeded assignment of folds and of the validation split.

Used on the driver (pretraining the fold models) and on executors (routing each train row to the
fold model that never saw it), so both sides agree without a join. Never ``rand()``.

The fold split has a seed (``neighbors.fold_seed``). Seed 0 is the split every run made
before the key existed: ``u``, the id's hash in ``[0, 1)``, cut into F equal parts. Another seed
``s`` first maps ``u`` to ``frac(A_s * u)`` (exactly: the 48-bit integer ``n = u * 2**48``
times an odd multiplier ``A_s`` from :func:`split_multiplier`, mod ``2**48``), then cuts that.
Because ``u`` is a uniform hash, ``frac(A_s * u)`` is uniform and, for a multiplier in the
thousands, nearly independent of ``u``'s leading digits: another split of the same ids, in
which a train instance's fold is independent of its fold under seed 0. The mapping is integer
arithmetic in Python, numpy and Spark SQL alike, so the driver, the executors and the JVM
agree, and the stored hash units (``embstore``'s ``fold_unit``) do not depend on the seed.

Examples
--------
>>> fold_of("article-17", 5) == fold_of("article-17", 5)
True
>>> 0 <= fold_of("article-17", 5) < 5
True
>>> ids = [f"i{n}" for n in range(3000)]
>>> same = sum(fold_of(i, 3) == fold_of(i, 3, seed=1) for i in ids) / len(ids)
>>> 0.3 < same < 0.37   # independent splits agree on about 1/3 of the rows
True
"""

import hashlib

#: the salt of the validation split's hash (:func:`is_validation`, :func:`validation_fold`)
_VALID_SALT = "pina-valid"


def _hash48(node_id: str, salt: str) -> int:
    """The first 12 hex digits (48 bits) of ``sha1(salt + '\\x1f' + node_id)``."""
    return int(hashlib.sha1(f"{salt}\x1f{node_id}".encode()).hexdigest()[:12], 16)


def _unit(node_id: str, salt: str) -> float:
    return _hash48(node_id, salt) / float(16**12)


#: the bits of the id hash a fold is cut from (12 hex digits)
_BITS = 48


def split_multiplier(seed: int) -> int:
    """The odd multiplier ``A_s`` of fold split ``seed``: 1 for seed 0 (the split before
    ``neighbors.fold_seed`` existed), else an odd integer in ``[2**13, 2**14)`` from a hash of
    the seed (small enough that ``n * A_s`` of a 48-bit ``n`` fits an int64).

    Examples
    --------
    >>> split_multiplier(0)
    1
    >>> all(8192 <= split_multiplier(s) < 16384 and split_multiplier(s) % 2 for s in (1, 2, 3))
    True
    >>> len({split_multiplier(s) for s in range(1, 50)})
    49
    """
    if seed < 0:
        raise ValueError(f"fold seed must be >= 0, got {seed}")
    if seed == 0:
        return 1
    m = int(hashlib.sha1(f"pina-fold-seed\x1f{seed}".encode()).hexdigest()[:4], 16)
    return 2**13 + (m % 2**13) | 1


def fold_unit(instance_id: str) -> float:
    """The id-hash in ``[0, 1)`` that :func:`fold_of` cuts into folds (any number of folds, any
    seed)."""
    return _unit(instance_id, "pina-fold")


def fold_of(instance_id: str, folds: int, seed: int = 0) -> int:
    """Fold in ``[0, folds)`` of a train instance, from a hash of its id (split ``seed``)."""
    n = _hash48(instance_id, "pina-fold") * split_multiplier(seed) % 2**_BITS
    return min(int(n / float(16**12) * folds), folds - 1)


def fold_expr(id_col, folds: int, seed: int = 0):
    """:func:`fold_of` as a Spark column expression of a string id column, computed in the JVM
    (sha1, the same 12 hex digits, the same integer and double arithmetic), so executors route
    rows by fold without a Python UDF (the neighbours stage co-locates the rows of one fold
    model with it; the aggregate stage's label features take g's folds from it).
    ``tests/test_inference.py`` checks it against :func:`fold_of` for two splits.

    Examples
    --------
    >>> from pyspark.sql import functions as F
    >>> df = spark.createDataFrame([("a",), ("b",)], "id string")
    >>> [r[0] for r in df.select(fold_expr(F.col("id"), 5, 2)).collect()] == [
    ...     fold_of("a", 5, 2), fold_of("b", 5, 2)]
    True
    """
    from pyspark.sql import functions as F

    h = F.sha1(F.concat(F.lit("pina-fold\x1f"), id_col))
    digits = F.conv(F.substring(h, 1, 12), 16, 10)
    a = split_multiplier(seed)
    if a == 1:
        unit = digits.cast("double") / float(16**12)
    else:  # n * a < 2**62: no overflow (ANSI mode would raise on one)
        n = F.pmod(digits.cast("long") * F.lit(a).cast("long"), F.lit(2**_BITS).cast("long"))
        unit = n.cast("double") / float(16**12)
    return F.least(F.floor(unit * float(folds)).cast("int"), F.lit(folds - 1))


def fold_of_unit(units, folds: int, seed: int = 0):
    """:func:`fold_of` of many ids at once, from their :func:`fold_unit` values (numpy array);
    NaN (not a train instance) gives -1.

    Examples
    --------
    >>> import numpy as np
    >>> fold_of_unit(np.array([fold_unit("a"), np.nan]), 5).tolist() == [fold_of("a", 5), -1]
    True
    >>> fold_of_unit(np.array([fold_unit("a")]), 5, seed=2).tolist() == [fold_of("a", 5, 2)]
    True
    """
    import numpy as np

    u = np.asarray(units, dtype=np.float64)
    ok = ~np.isnan(u)
    out = np.full(u.shape, -1, dtype=np.int64)
    a = split_multiplier(seed)
    v = u[ok]
    if a != 1:
        n = np.rint(v * float(16**12)).astype(np.int64)
        v = ((n * np.int64(a)) % np.int64(2**_BITS)).astype(np.float64) / float(16**12)
    out[ok] = np.minimum(np.floor(v * float(folds)).astype(np.int64), folds - 1)
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
