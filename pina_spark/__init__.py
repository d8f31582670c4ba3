"""pina-spark: PINA (Predicted Instance Neighborhood Aggregation, Chien et al., ICML 2023) for
extreme multi-label classification on Apache Spark.

Importing the package is cheap and driver-safe: no torch, PECOS or GPU library is imported here.
"""

__version__ = "0.1.0"
