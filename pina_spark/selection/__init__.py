"""Variant selection: which variant (and settings) a data set's production runs use.

:mod:`.rule` is the choice rule on validation scores (pure Python); :mod:`.artifact` owns
``<root>/selection/selection.json`` (its only writer and reader) and applies a selection to a
production run's config.
"""
