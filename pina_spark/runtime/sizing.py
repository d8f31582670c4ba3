"""How many tasks a stage runs: one rule for every stage that sizes its tasks by rows.

Examples
--------
>>> n_partitions(11688, 4000, 2), n_partitions(11688, 4000, 1), n_partitions(3, 4000, 8)
(4, 3, 3)
"""

import math

__all__ = ["n_partitions"]


def n_partitions(n_rows: int, rows_per_task: int, slots: int = 1) -> int:
    """Tasks for ``n_rows``: about ``rows_per_task`` rows each, rounded up to a multiple of the
    task slots (every slot busy to the end of the stage), never more tasks than rows."""
    base = int(math.ceil(n_rows / float(max(1, rows_per_task))))
    slots = max(1, int(slots))
    return max(1, min(int(math.ceil(base / slots)) * slots, max(1, int(n_rows))))
