"""Where a run's tables live: :class:`RunPaths`, the only builder of table and staging paths.

Examples
--------
>>> paths = RunPaths("/tmp/pina-run", run_date="2026-11-21")
>>> paths.table("features")
'/tmp/pina-run/run_date=2026-11-21/features'
"""

import uuid

from pina_spark.storage.lease import held_run_id
from pina_spark.storage.schemas import MANIFEST, STAGING, STAGING_RUN_TAG


class RunPaths:
    """Where a run's tables live. With ``run_date`` every output goes under
    ``<output>/run_date=YYYY-MM-DD/`` so a rerun of that date replaces only that date."""

    def __init__(self, output: str, run_date: str | None = None):
        self.output = output.rstrip("/")
        self.run_date = run_date
        self.root = self.output + (f"/run_date={run_date}" if run_date else "")

    def table(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def staging(self, rel: str) -> str:
        """A fresh staging folder for ``rel``, tagged with the run id of the lease this process
        holds on the root (``.run-<id>``) so :func:`~pina_spark.storage.publishing.recover`
        never touches a live run's files."""
        return (
            f"{self.root}/{STAGING}/{rel.replace('/', '__')}-{uuid.uuid4().hex[:12]}"
            f"{STAGING_RUN_TAG}{held_run_id(self.root) or 'none'}"
        )

    @property
    def manifest(self) -> str:
        return self.table(MANIFEST)

    def __repr__(self):
        return f"RunPaths({self.root!r})"
