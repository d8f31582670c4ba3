"""The vectorizer stage: Phi_pre = [Phi_dnn ; Phi_stat] fitted on the pretraining rows (the encoder
fine-tuned on B_pre where configured) and published as ``<run>/vectorizer``. :mod:`.stage` holds
:func:`run`, :mod:`.stats` what it returns; the fitting code lives in :mod:`pina_spark.models`.
"""

from pina_spark.stages.vectorizer.stage import run
from pina_spark.stages.vectorizer.stats import VectorizerStats

__all__ = ["run", "VectorizerStats"]
