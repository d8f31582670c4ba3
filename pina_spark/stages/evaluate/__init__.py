"""The evaluate stage: P@k / R@k per downstream variant, paired t-tests, ``report.md`` and
``pk.png``. :mod:`.stage` holds :func:`run`.
"""

from pina_spark.stages.evaluate.stage import run

__all__ = ["run"]
