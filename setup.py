"""pina-spark: PINA for extreme multi-label classification on Apache Spark."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _reqs(name):
    with open(os.path.join(HERE, name)) as fh:
        return [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]


setup(
    name="pina-spark",
    version="0.1.0",
    description="PINA (Predicted Instance Neighborhood Aggregation) for XMC on Apache Spark",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pina_spark", "pina_spark.*"]),
    package_data={"pina_spark": ["conf/*.yaml"]},
    python_requires=">=3.9",
    # torch is pinned but installed first, separately (a CPU build here; CUDA builds on GPU nodes)
    install_requires=["torch==2.13.0"] + _reqs("requirements.txt"),
    extras_require={"dev": _reqs("requirements-dev.txt"),
                    # EMR 7 ships Spark 3.5 / Python 3.9: the library runs there unchanged
                    "spark35": ["pyspark>=3.5,<3.6"]},
    entry_points={"console_scripts": ["pina-spark=pina_spark.cli:main"]},
)
