"""``python -m pina_spark.cli``: the ``pina-spark`` command."""

import sys

from pina_spark.cli.commands import main

sys.exit(main())
