"""The ``pina-spark`` command line: :mod:`.commands` (the commands and the ``jobs/<stage>.py`` entry
point) and :mod:`.status` (``status`` and ``compare``, read from a run's files alone).
"""

from pina_spark.cli.commands import job_main, main

__all__ = ["main", "job_main"]
