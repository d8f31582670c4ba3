"""The name `jobs/neighbors.py` had until every stage's job became `jobs/<stage>.py`.

Step lists and DAGs written before the rename keep working: this runs the ``neighbors`` stage,
as ``jobs/neighbors.py`` does, after a warning. Point them at ``jobs/neighbors.py``. It imports
the entry point from ``pina_spark`` as every job does (spark-submit in cluster mode ships this
file alone, without its siblings).
"""

import os
import sys

try:
    from pina_spark.cli import job_main
except ImportError:  # running from a source checkout without the wheel installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from pina_spark.cli import job_main

if __name__ == "__main__":
    print(
        "pina-spark: jobs/predict_neighbors.py is now jobs/neighbors.py; update the step list",
        file=sys.stderr,
    )
    sys.exit(job_main("neighbors"))
