"""pina-spark stage `neighbors` as a spark-submit entry point.

    spark-submit --master yarn --deploy-mode cluster --archives dist/pina-env-0.1.0.tar.gz#env \
        --conf spark.pyspark.python=./env/bin/python \
        jobs/neighbors.py --config conf/emr.yaml [--set key=value] [--run-date YYYY-MM-DD]

Locally: ``spark-submit --master local[2] jobs/neighbors.py --config conf/local.yaml``.
"""

import os
import sys

try:
    from pina_spark.cli import job_main
except ImportError:  # running from a source checkout without the wheel installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from pina_spark.cli import job_main

if __name__ == "__main__":
    sys.exit(job_main("neighbors"))
