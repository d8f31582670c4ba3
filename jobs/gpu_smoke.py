"""GPU smoke check as a spark-submit entry point (not a pipeline stage): the first step of
conf/emr/steps-gpu.json. See pina_spark/runtime/gpu_smoke.py.

    spark-submit --master yarn --deploy-mode cluster \
        --archives s3://YOUR-BUCKET/pina/dist/pina-env-gpu-0.1.0.tar.gz#env \
        --conf spark.pyspark.python=./env/bin/python \
        --conf spark.executor.resource.gpu.amount=1 --conf spark.task.resource.gpu.amount=1 \
        jobs/gpu_smoke.py --tasks 1
"""

import os
import sys

try:
    from pina_spark.runtime.gpu_smoke import main
except ImportError:  # running from a source checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from pina_spark.runtime.gpu_smoke import main

if __name__ == "__main__":
    sys.exit(main())
