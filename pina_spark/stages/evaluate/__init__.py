"""The evaluate stage: P@k / R@k per downstream variant, paired t-tests, ``report.md`` and
``pk.png``. :mod:`.stage` holds :func:`run`, :mod:`.stats` what it returns.
"""

from pina_spark.stages.evaluate.stage import run
from pina_spark.stages.evaluate.stats import EvaluateStats

__all__ = ["run", "EvaluateStats"]
