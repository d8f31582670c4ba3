"""The name `jobs/neighbors.py` had until every stage's job became `jobs/<stage>.py`.

Step lists and DAGs written before the rename keep working: this runs the ``neighbors`` stage,
as ``jobs/neighbors.py`` does, after a warning. Point them at ``jobs/neighbors.py``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from neighbors import job_main  # noqa: E402  (the same entry point)

if __name__ == "__main__":
    print(
        "pina-spark: jobs/predict_neighbors.py is now jobs/neighbors.py; update the step list",
        file=sys.stderr,
    )
    sys.exit(job_main("neighbors"))
