"""``<root>/selection/selection.json``: the variant selection of a run root, written and read
here only.

The record says which variant (and config settings) production runs on that root's models
should use, why (the validation table and the rule) and for which models: the version tokens of
the root's ``models`` and vectorizer folders when it was chosen, so a run on models retrained
since refuses it as stale (:func:`check_fresh`).

It is published like a table (staging folder, ``_SUCCESS``, atomic swap,
:func:`pina_spark.storage.publish`) by the process holding the root's lease, then committed
(``<root>/_commits/select.json``, :func:`pina_spark.storage.commit_stage`).

Examples
--------
>>> rec = {"format": FORMAT, "variant": "vectorizer_only", "settings": {}, "validation": [],
...        "rule": "r", "models": {"models": "v1", "vectorizer": "v2"}}
>>> validate_record(rec, "s.json")["variant"]
'vectorizer_only'
>>> validate_record({**rec, "variant": "nope"}, "s.json")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pina_spark.selection.artifact.SelectionError: s.json: unreadable selection: variant 'nope' ...
"""

import json
import logging
from collections.abc import Mapping
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError
from pina_spark.config import variants as V
from pina_spark.models.artifacts import vectorizer_dir

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "SELECTION_DIR",
    "SELECTION_FILE",
    "REPORT_FILE",
    "SELECT_STAGE",
    "SelectionError",
    "selection_uri",
    "models_versions",
    "publish_selection",
    "read_selection",
    "validate_record",
    "check_fresh",
    "selection_summary",
]

#: the record's format version
FORMAT = 1
#: the folder under the run root, and the file in it
SELECTION_DIR = "selection"
SELECTION_FILE = "selection.json"
#: the selection's report beside it (markdown, written by ``pina-spark select``)
REPORT_FILE = "report.md"
#: the name of its commit record (``<root>/_commits/select.json``)
SELECT_STAGE = "select"
#: keys every record has
REQUIRED = ("format", "variant", "settings", "validation", "rule", "models")


class SelectionError(ConfigError):
    """A selection that cannot be followed: missing (where required), unreadable or stale."""


def selection_uri(root: str) -> str:
    """Where the selection of the run root ``root`` lives."""
    return storage.RunPaths(root).table(SELECTION_DIR) + "/" + SELECTION_FILE


def models_versions(root: str) -> dict[str, str | None]:
    """The version tokens of ``root``'s g models folder and vectorizer folder (``None`` for a
    folder without one): what a selection is chosen for."""
    models = storage.RunPaths(root).table(storage.MODELS)
    return {
        "models": storage.table_version(models),
        "vectorizer": storage.table_version(vectorizer_dir(models)),
    }


def validate_record(rec: Any, where: str) -> dict[str, Any]:
    """``rec`` when it is a well-formed selection record, else :class:`SelectionError`."""

    def bad(why: str) -> SelectionError:
        return SelectionError(
            f"{where}: unreadable selection: {why} (rerun `pina-spark select` on that root, "
            "or set select.follow: off to ignore it)"
        )

    if not isinstance(rec, dict):
        raise bad("not a JSON object")
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise bad(f"missing key(s) {missing}")
    if rec["format"] != FORMAT:
        raise bad(f"format {rec['format']!r}, this version reads {FORMAT}")
    if rec["variant"] not in V.FEATURES:
        raise bad(f"variant {rec['variant']!r} is not one of {list(V.FEATURES)}")
    if not isinstance(rec["settings"], dict) or not isinstance(rec["models"], dict):
        raise bad("settings and models must be JSON objects")
    return rec


def read_selection(root: str) -> dict[str, Any] | None:
    """The selection record of ``root`` (``None`` when it has none); :class:`SelectionError`
    when it is there but cannot be read or is malformed."""
    uri = selection_uri(root)
    try:
        raw = storage.read_bytes(uri)
    except Exception as e:
        raise SelectionError(f"{uri}: unreadable selection: {type(e).__name__}: {e}") from e
    if raw is None:
        return None
    try:
        rec = json.loads(raw)
    except ValueError as e:
        raise SelectionError(
            f"{uri}: unreadable selection: not JSON ({e}); rerun `pina-spark select` on that "
            "root, or set select.follow: off to ignore it"
        ) from None
    return validate_record(rec, uri)


def check_fresh(rec: Mapping[str, Any], root: str) -> None:
    """:class:`SelectionError` when ``root``'s models are not those ``rec`` was chosen for."""
    now = models_versions(root)
    was = {k: rec["models"].get(k) for k in now}
    if now != was:
        raise SelectionError(
            f"{selection_uri(root)}: stale selection: chosen for the models {was}, the root "
            f"now holds {now} (retrained since); rerun `pina-spark select` on it, or set "
            "select.follow: off to ignore it"
        )


def publish_selection(
    spark, root: str, rec: Mapping[str, Any], run_id: str, report: str | None = None
) -> str:
    """Publish ``rec`` (with this root's model versions added) as ``root``'s selection and
    commit it, with ``report`` (markdown) as :data:`REPORT_FILE` beside it when given; the
    caller must hold the root's lease (:func:`pina_spark.storage.acquire_lease`). Returns the
    file's URI."""
    paths = storage.RunPaths(root)
    if storage.held_run_id(paths.root) is None:
        raise storage.LeaseError(
            f"{paths.root}: publishing a selection needs the root's lease (acquire_lease)"
        )
    full = validate_record(
        {"format": FORMAT, **rec, "models": models_versions(root)}, selection_uri(root)
    )
    staging = paths.staging(SELECTION_DIR)
    storage.write_bytes(
        staging + "/" + SELECTION_FILE, json.dumps(full, indent=1, sort_keys=True).encode()
    )
    if report is not None:
        storage.write_bytes(staging + "/" + REPORT_FILE, report.encode("utf-8"))
    storage.write_bytes(staging + "/_SUCCESS", b"")
    try:
        storage.publish(spark, staging, paths.table(SELECTION_DIR))
    except BaseException:
        storage.discard_staging(spark, staging)
        raise
    storage.commit_stage(paths, SELECT_STAGE, (SELECTION_DIR,), run_id)
    log.info("selection: %s chosen, published %s", full["variant"], selection_uri(root))
    return selection_uri(root)


def selection_summary(rec: Mapping[str, Any], uri: str) -> str:
    """The markdown paragraph a run following ``rec`` (read from ``uri``) shows first in its
    ``report.md``.

    Examples
    --------
    >>> rec = {"variant": "pina", "candidate": "pina/text neighbors.k=5",
    ...        "settings": {"neighbors.k": 5}}
    >>> print(selection_summary(rec, "/r/selection/selection.json"))  # doctest: +ELLIPSIS
    ## Selection
    <BLANKLINE>
    This run follows the selection `/r/selection/selection.json`: variant `pina` ...
    """
    settings = ", ".join(f"`{k}: {v}`" for k, v in (rec.get("settings") or {}).items())
    return "\n".join(
        [
            "## Selection",
            "",
            f"This run follows the selection `{uri}`: variant `{rec['variant']}` (candidate "
            f"`{rec.get('candidate', rec['variant'])}`), settings {settings or 'none'}; chosen "
            f"on a validation split of train by `pina-spark select` (its table: "
            f"`{REPORT_FILE}` beside it). Validation gains run optimistic (the vectorizer and g "
            "had seen the validation rows' texts and edges), alike for every candidate.",
            "",
        ]
    )
