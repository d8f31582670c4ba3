"""Which model folders a run may load: decided once on the driver, then checked by every executor.

A model folder lists its files' sha256 in ``_CHECKSUMS.json`` files inside it
(:mod:`pina_spark.runtime.checksums`); whoever can write the folder can rewrite those too, so
they prove only that a copy is whole. What vouches for a folder is kept where the writer of a run
root cannot rewrite it silently:

- the HMAC key in ``$PINA_SPARK_MODEL_KEY`` (the driver's environment, never a file): a folder
  published while the key was set carries ``_CHECKSUMS.sig``, the HMAC of its checksums digest;
- the promotion record ``<output>/_PROMOTED`` (:mod:`pina_spark.orchestration.promotion`;
  the one of ``run.promoted_from`` where that is set, :func:`promotion_output`):
  the evaluate stage that promotes a run writes the digest of its vectorizer folder there, so
  ``run.models: latest`` (or ``run.models`` naming the promoted run) loads only that content.
  A record without digests (written before they were recorded) vouches for nothing; the error
  names ``pina-spark promote``, which records them once (:func:`pina_spark.orchestration.
  promotion.record_digests`).

:func:`anchor` applies the policy to one folder and returns the digest it vouched for:

- key set: the folder must carry a valid signature (unsigned or re-signed folders are refused,
  this run's own included);
- the promotion record of :func:`promotion_output` names the ``run.models`` run with a digest
  for the folder:
  the folder must have that digest;
- otherwise the run's own models (no ``run.models``) are loaded as today (the run root is the
  run's own), and another run's models (``run.models``) only with ``run.trust_models: true``.

The digest reaches the executors inside the stage's frozen plan (never a global); each checks
its local copy against it (:func:`pina_spark.runtime.checksums.local_model_dir`), so a folder
changed after the driver's check is refused too. A refused folder raises
:class:`ModelTrustError` (an input error: the command stops with exit code 2 and the message).

Example::

    digest = anchor(cfg, "s3://b/runs/prod/run_date=2026-11-20/vectorizer", "vectorizer")
"""

import hmac
import json
import logging
import os
from typing import Any

from pina_spark import storage
from pina_spark.runtime.checksums import (
    CHECKSUMS,
    MODEL_KEY_ENV,
    SIGNATURE,
    local_listed,
    model_key,
    part_digest,
    signature,
)

log = logging.getLogger(__name__)

__all__ = [
    "PROMOTED",
    "DIGESTS",
    "ModelTrustError",
    "anchor",
    "anchor_parts",
    "folder_digest",
    "listed_checksums",
    "promotion_output",
    "read_promoted",
]

#: the promotion record, a file under ``output`` (not under a ``run_date=`` folder)
PROMOTED = "_PROMOTED"
#: the promotion record's entry ``{model folder name: checksums digest}`` of the promoted run
DIGESTS = "digests"
#: the command that records the digests of the promoted run in a record that has none
REPROMOTE_COMMAND = "pina-spark promote"


class ModelTrustError(storage.InputError):
    """A model folder nothing trusted vouches for; the message names it and what to do."""


def promotion_output(cfg) -> str:
    """The output whose promotion record a run follows (``run.models: latest``) and trusts:
    ``run.promoted_from``, else the run's own ``output``.

    Examples
    --------
    >>> from pina_spark.config import config_from_dict
    >>> promotion_output(config_from_dict({"output": "s3://b/pina/runs/prod"}))
    's3://b/pina/runs/prod'
    >>> promotion_output(config_from_dict({"output": "s3://b/pina/runs/prod-daily",
    ...     "run": {"promoted_from": "s3://b/pina/runs/prod"}}))
    's3://b/pina/runs/prod'
    """
    return cfg.run.promoted_from or cfg.output


def read_promoted(output: str) -> dict[str, Any] | None:
    """The promotion record of ``output``, or ``None`` when nothing was promoted yet."""
    raw = storage.read_bytes(storage.join(output, PROMOTED))
    return json.loads(raw) if raw else None


def listed_checksums(uri: str) -> dict[str, bytes]:
    """The ``_CHECKSUMS.json`` files of the model folder ``uri`` (local or a ``pyarrow.fs`` URI
    such as ``s3://``), ``{folder relative to the top: bytes}``
    (:func:`~pina_spark.runtime.checksums.local_listed`); ``{}`` where it has none."""
    if not storage.is_remote(uri):
        p = storage.local_path(uri)
        return local_listed(p) if os.path.isdir(p) else {}
    import pyarrow.fs as pafs

    fs, root = storage.pyarrow_fs(uri)
    root = root.rstrip("/")
    listed = {}
    for fi in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=True)):
        if fi.type == pafs.FileType.File and fi.base_name == CHECKSUMS:
            rel = os.path.dirname(fi.path[len(root) + 1 :])
            with fs.open_input_stream(fi.path) as fh:
                listed[rel] = fh.read()
    return listed


def folder_digest(uri: str) -> str | None:
    """:func:`~pina_spark.runtime.checksums.checksums_digest` of the model folder ``uri`` (local
    or a ``pyarrow.fs`` URI such as ``s3://``: only its ``_CHECKSUMS.json`` files are read), or
    ``None`` when its top has none."""
    return part_digest(listed_checksums(uri))


def anchor(cfg, uri: str, name: str) -> str:
    """Driver side: refuse the model folder ``uri`` (``name``: ``vectorizer``) unless the policy
    of this module lets the run ``cfg`` load it; returns the digest executors check their copy
    against (``""`` for a folder without checksums that the policy accepts: models published
    before checksums existed).

    Raises
    ------
    ModelTrustError
        Names the folder, what failed and how to vouch for it.
    """
    return _anchor_digest(cfg, uri, name, folder_digest(uri))


def anchor_parts(cfg, uri: str, name: str, parts, files=()) -> dict[str, str]:
    """:func:`anchor` for a folder whose sub-folders executors load one by one (``models``:
    ``g/<variant>/fold=<f>``): the policy applied to the whole folder ``uri``, and the digest of
    each of ``parts`` (paths relative to ``uri``) taken from the same listing of its checksums,
    so a part cannot change between the driver's check and the digest the executors compare
    their copy with (``""`` for a part without checksums, where the policy accepts the folder).
    ``files`` (relative paths) are files the driver reads itself (``folds.json``, each part's
    ``output_nodes.npy``): each must have the sha256 the vouched-for listing holds for it.

    Raises
    ------
    ModelTrustError
        As :func:`anchor`; or, in a folder with checksums, a part without checksums of its own
        (added after the folder was published: the folder's digest does not cover it) or a
        file whose content is not the one listed.
    """
    listed = listed_checksums(uri)
    whole = part_digest(listed)
    _anchor_digest(cfg, uri, name, whole)
    digests = {p: part_digest(listed, p.strip("/")) for p in parts}
    if whole is None:  # a folder from before checksums, which the policy accepted
        return {p: "" for p in parts}
    lacking = sorted(p for p, d in digests.items() if d is None)
    if lacking:
        raise ModelTrustError(
            f"model folder {uri}: {', '.join(lacking)} has no {CHECKSUMS} of its own, so the "
            f"digest vouched for does not cover it (added after the folder was published?); "
            f"refusing to load it"
        )
    for rel in files:
        _check_listed_file(uri, listed, rel.strip("/"))
    return {p: str(d) for p, d in digests.items()}


def _check_listed_file(uri: str, listed, rel: str) -> None:
    """Refuse ``uri``/``rel`` unless its sha256 is the one its folder's listed
    ``_CHECKSUMS.json`` holds."""
    import hashlib

    folder, base = rel.rsplit("/", 1) if "/" in rel else ("", rel)
    try:
        expected = json.loads(listed.get(folder) or b"{}").get(base)
    except (ValueError, AttributeError) as e:
        where = f"{folder}/{CHECKSUMS}" if folder else CHECKSUMS
        raise ModelTrustError(
            f"model folder {uri}: {where} cannot be read ({type(e).__name__}: {e}): a corrupt "
            f"or rewritten folder; refusing to load it"
        ) from None
    raw = storage.read_bytes(storage.join(uri, rel))
    got = hashlib.sha256(raw).hexdigest() if raw is not None else None
    if expected is None or got != expected:
        raise ModelTrustError(
            f"model folder {uri}: {rel} is not the file its vouched-for {CHECKSUMS} lists "
            f"({'not listed' if expected is None else 'other content'}); refusing to read it"
        )


def _anchor_digest(cfg, uri: str, name: str, digest: str | None) -> str:
    key = model_key()
    if key is not None:
        _check_signature(uri, digest, key)
    other = cfg.run.models
    record_of = promotion_output(cfg)
    record = storage.join(record_of, PROMOTED)
    named, pinned = _pinned(record_of, other, name) if other else (False, None)
    if pinned is not None:
        if digest != pinned:
            raise ModelTrustError(
                f"model folder {uri}: its checksums digest {digest} is not the {pinned} that the "
                f"promotion record {record} holds for it (rewritten "
                f"after it was promoted?); refusing to load it"
            )
        return digest or ""
    if key is not None or not other:
        return digest or ""
    if cfg.run.trust_models:
        log.warning(
            "run.trust_models: loading %s, which neither %s nor the promotion record vouches "
            "for: whoever can write %s decides what runs here",
            uri,
            MODEL_KEY_ENV,
            other,
        )
        return digest or ""
    if named:
        pinned_any = bool((read_promoted(record_of) or {}).get(DIGESTS))
        why = (
            f"a record written before pina-spark pinned the {name} folder vouches for nothing "
            f"here"
            if pinned_any
            else "a record written before pina-spark recorded digests vouches for nothing"
        )
        raise ModelTrustError(
            f"model folder {uri} (run.models {other}): the promotion record "
            f"{record} names that run but holds no digest of its "
            f"{name} folder ({why}). To upgrade, once: check that nobody changed {other} "
            f"since it was promoted, then run `{REPROMOTE_COMMAND} --config <this config>`, "
            f"which records the digests of the promoted run's models in the record (docs/emr.md, "
            f"'Upgrading'); or set {MODEL_KEY_ENV} and publish the models again"
        )
    raise ModelTrustError(
        f"model folder {uri} (run.models {other}): nothing vouches for it: no promotion record "
        f"{record} names that run with a digest, and "
        f"{MODEL_KEY_ENV} is not set. Promote that run under {record_of} (evaluate.promote; "
        f"a promotion vouches only for runs of its own output; run.promoted_from names the "
        f"output whose record a run follows) and use run.models: latest, "
        f"publish it with {MODEL_KEY_ENV} set and set it here too, or set "
        f"run.trust_models: true if only trusted people can write {other}"
    )


def _pinned(output: str, models_run: str, name: str) -> tuple[bool, str | None]:
    """``(named, digest)``: whether the promotion record of ``output`` names ``models_run``,
    and the digest it holds for its folder ``name`` (``None``: none recorded)."""
    record = read_promoted(output)
    if not record or storage.norm(str(record.get("run", ""))) != storage.norm(models_run):
        return False, None
    digest = (record.get(DIGESTS) or {}).get(name)
    return True, (str(digest) if digest else None)


def _check_signature(uri: str, digest: str | None, key: bytes) -> None:
    if digest is None:
        raise ModelTrustError(
            f"model folder {uri} has no {CHECKSUMS}, and {MODEL_KEY_ENV} is set: unsigned "
            f"models are refused (publish it again with the key set)"
        )
    sig_uri = storage.join(uri, SIGNATURE)
    raw = storage.read_bytes(sig_uri)
    if raw is None:
        raise ModelTrustError(
            f"model folder {uri} has no {SIGNATURE}, and {MODEL_KEY_ENV} is set: unsigned "
            f"models are refused (publish it again with the key set)"
        )
    if not hmac.compare_digest(raw.decode("ascii", "replace").strip(), signature(digest, key)):
        raise ModelTrustError(
            f"model folder {uri}: {sig_uri} does not match its {CHECKSUMS} files under "
            f"{MODEL_KEY_ENV} (rewritten, or signed with another key); refusing to load it"
        )
