"""Running stages: the pipeline (order, resume/skip, run dates, incremental runs; :mod:`.pipeline`),
``tune`` (:mod:`.tune`), ``select``'s candidates and record (:mod:`.select`), the promoted
model (:mod:`.promotion`) and the one SparkSession builder (:mod:`.session`). Stages never
import this package.
"""
