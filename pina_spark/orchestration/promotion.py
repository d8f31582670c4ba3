"""The promoted model: ``<output>/_PROMOTED``, a small JSON pointer to the run root whose
``models/`` scheduled runs follow (``--models latest``).

Only the evaluate stage writes it (:func:`consider`, with ``evaluate.promote: true``), and only
when the run passes the gate: ``evaluate.gate_metric`` of ``evaluate.gate_variant`` is not below
the currently promoted run's value by more than ``evaluate.gate_tolerance`` (the first run of an
output is promoted when it has the metric). A failed gate leaves the pointer as it was, so a
retraining that got worse never reaches the daily runs. :func:`resolve_models` turns
``run.models: latest`` into that run root once, on the driver, before anything runs.

The pointer also holds the checksums digest of the promoted run's vectorizer folder
(``digests``), taken when it is promoted: the record sits under ``output``, out of reach of
whoever writes only run roots, and the embed stage loads that run's vectorizer only while it
still has that digest (:func:`pina_spark.models.trust.anchor`). A record written before
digests were recorded vouches for nothing; :func:`record_digests` (``pina-spark promote``)
adds them once, for the run it names, on an operator's word that the run was not changed.

Examples
--------
>>> decide({"value": 0.40}, 0.39, tolerance=0.02)
(True, '0.3900 >= promoted 0.4000 - tolerance 0.0200')
>>> decide({"value": 0.40}, 0.37, tolerance=0.02)
(False, '0.3700 < promoted 0.4000 - tolerance 0.0200')
>>> decide(None, 0.10, tolerance=0.0)
(True, 'no promoted run yet')
"""

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from pina_spark import storage
from pina_spark.config import ConfigError, PinaConfig
from pina_spark.models.trust import (
    DIGESTS,
    PROMOTED,
    folder_digest,
    promotion_output,
    read_promoted,
)
from pina_spark.storage import InputError

log = logging.getLogger(__name__)

#: the ``run.models`` / ``--models`` value that means "the promoted run"
LATEST = "latest"


def pointer_uri(output: str) -> str:
    return storage.join(output, PROMOTED)


def digests_of(run_root: str) -> dict[str, str]:
    """``{folder name: checksums digest}`` of the model folders of ``run_root`` that the
    promotion record vouches for: its vectorizer (none when it has no checksums or cannot be
    read here: then ``run.models: latest`` refuses it, saying nothing vouches for it), and its
    ``models`` (g), where the run trained g (a run of the cheap path has none), so a refit of g
    on the promoted root after the promotion reaches no daily run either."""
    paths = storage.RunPaths(run_root)
    out = {}
    for folder in (storage.VECTORIZER, storage.MODELS):
        uri = paths.table(folder)
        try:
            digest = folder_digest(uri)
        except Exception as e:
            log.warning("promotion: no digest of %s (%s: %s)", uri, type(e).__name__, e)
            digest = None
        if digest:
            out[folder] = digest
    return out if storage.VECTORIZER in out else {}


#: the stage that writes each model folder a promotion record pins
_WRITER = {storage.VECTORIZER: "vectorizer", storage.MODELS: "pretrain"}


def _refit_after(run_root: str, promoted_at: str | None, folders) -> str | None:
    """The stage of ``run_root`` that wrote one of ``folders`` after ``promoted_at`` (the
    record's UTC time, to the second), per its manifest; ``None`` where none did or the times
    are unknown."""
    from pina_spark.storage.manifest import Manifest

    if not promoted_at:
        return None
    m = Manifest(storage.RunPaths(run_root).manifest)
    for folder in sorted(folders):
        stage = _WRITER.get(folder)
        finished = str((m.stage(stage) or {}).get("finished") or "") if stage else ""
        if finished[:19] > str(promoted_at)[:19]:  # ISO UTC: the text order is the time order
            return stage
    return None


def resolve_models(cfg: PinaConfig, stages: Sequence[str] = ()) -> PinaConfig:
    """``run.models: latest`` -> the run root promoted under ``run.promoted_from``
    (:func:`~pina_spark.models.trust.promotion_output`: else ``cfg.output``); other values as is.

    With ``stages`` (the command's): refuses (``InputError``) a ``run.models``, ``latest``
    included, that is this run's own root. Models are reused from another run: on its own root
    every step's settings change with ``run.models`` (a full run would rerun its graph and
    refit the vectorizer it means to reuse, leaving the root's g and its selection on the old
    one), and a daily run sharing a retraining run's run date would rerun on that run's nodes,
    leaving the day's products out, and exit 0."""
    if cfg.run.models != LATEST:
        _refuse_own_root(cfg, cfg.run.models, stages)
        return cfg
    record_of = promotion_output(cfg)
    p = read_promoted(record_of)
    if not p or not p.get("run"):
        raise ConfigError(
            f"run.models=latest: no promoted run at {pointer_uri(record_of)} (run "
            "the evaluate stage of a full run with evaluate.promote: true first, "
            "or pass --models <run root>"
            + (
                ""
                if cfg.run.promoted_from
                else "; a run that writes under an output of its "
                "own follows another output's promotion with run.promoted_from"
            )
            + ")"
        )
    import dataclasses as dc

    log.info(
        "run.models=latest: promoted run %s (%s %s=%s, promoted %s)",
        p["run"],
        p.get("variant"),
        p.get("metric"),
        p.get("value"),
        p.get("promoted_at"),
    )
    _refuse_own_root(cfg, p["run"], stages, f"run.models=latest names the promoted run {p['run']}")
    return cfg.replace(run=dc.replace(cfg.run, models=p["run"]))


def _refuse_own_root(cfg: PinaConfig, models: str | None, stages: Sequence[str], what: str = ""):
    """The refusal of :func:`resolve_models`: ``models`` (a run root) is ``cfg``'s own root."""
    own = storage.RunPaths(cfg.output, cfg.run.run_date).root
    if not stages or not models or not storage.same_place(models, own):
        return
    raise storage.InputError(
        f"{what or f'run.models {models}'}, which is this run's own root: a run reuses the "
        f"models of another run. To follow {models}'s selection with its models, write to "
        f"another output or --run-date (a daily run must not share a run date with the run "
        f"that trained its models); to retrain this root, run without --models"
    )


def decide(promoted: dict[str, Any] | None, value: float, tolerance: float) -> tuple[bool, str]:
    """``(passes, reason)`` of the gate for a run whose metric is ``value``."""
    if not promoted or promoted.get("value") is None:
        return True, "no promoted run yet"
    ref = float(promoted["value"])
    if value >= ref - tolerance:
        return True, f"{value:.4f} >= promoted {ref:.4f} - tolerance {tolerance:.4f}"
    return False, f"{value:.4f} < promoted {ref:.4f} - tolerance {tolerance:.4f}"


def comparable(
    promoted: dict[str, Any] | None,
    variant: str,
    metric: str,
    metrics_of: Callable[[str], dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, str]:
    """The promotion record to gate a run on ``variant``'s ``metric`` against, and a note.

    A record promoted on another variant or metric (a run that followed a ``vectorizer_only``
    selection, after a retraining gated on ``pina``) compares with the promoted run's own
    value of this variant and metric (``metrics_of(run)``, its evaluate stage's metrics), not
    with another variant's; where that run has none, with the record's value, as before.

    Examples
    --------
    >>> rec = {"run": "r1", "variant": "pina", "metric": "P@1", "value": 0.44}
    >>> runs = {"r1": {"variants": {"vectorizer_only": {"P@1": 0.437}}}}
    >>> ref, note = comparable(rec, "vectorizer_only", "P@1", runs.get)
    >>> ref["variant"], ref["value"], rec["value"]
    ('vectorizer_only', 0.437, 0.44)
    >>> note
    " (the promoted run's vectorizer_only P@1; it was promoted on pina P@1)"
    >>> comparable(rec, "pina", "P@1", runs.get)[0] is rec
    True
    >>> ref, note = comparable(rec, "vectorizer_only", "P@5", runs.get)  # none there
    >>> ref is rec, note
    (True, " (the record's value: r1 has none for vectorizer_only P@5)")
    """
    if not promoted or (promoted.get("variant"), promoted.get("metric")) == (variant, metric):
        return promoted, ""
    on = " ".join(str(promoted[k]) for k in ("variant", "metric") if promoted.get(k))
    run = promoted.get("run")
    if not run:
        return promoted, ""
    try:
        value = float(((metrics_of(str(run)) or {})["variants"][variant] or {})[metric])
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        why = "none" if isinstance(e, KeyError) else f"unreadable metrics ({e})"
        return promoted, f" (the record's value: {run} has {why} for {variant} {metric})"
    if not math.isfinite(value):
        return promoted, f" (the record's value: {run}'s {variant} {metric} is {value})"
    same = dict(promoted, variant=variant, metric=metric, value=value)
    return same, f" (the promoted run's {variant} {metric}; it was promoted on {on or '?'})"


def consider(
    cfg: PinaConfig,
    run_root: str,
    metrics: dict[str, Any],
    metrics_of: Callable[[str], dict[str, Any] | None] = lambda run: None,
) -> dict[str, Any]:
    """The gate of the evaluate stage: promote ``run_root`` (write the pointer) when it passes.
    ``metrics_of(run)``: an evaluated run's metrics (the evaluate stage's reader), for a record
    promoted on another variant (:func:`comparable`). Returns the decision, recorded in the
    stage's manifest statistics."""
    ev = cfg.evaluate
    value = (metrics.get("variants", {}).get(ev.gate_variant) or {}).get(ev.gate_metric)
    if value is None:
        decision = {
            "promoted": False,
            "reason": f"no {ev.gate_metric} for variant " f"{ev.gate_variant} in this run",
        }
        log.warning("promotion: %s", decision["reason"])
        return decision
    current = read_promoted(cfg.output)
    reference, note = comparable(current, ev.gate_variant, ev.gate_metric, metrics_of)
    ok, reason = decide(reference, float(value), ev.gate_tolerance)
    reason += note
    decision = {
        "promoted": ok,
        "reason": reason,
        "variant": ev.gate_variant,
        "metric": ev.gate_metric,
        "value": float(value),
    }
    if ok:
        pointer = {
            "run": storage.norm(run_root),
            "variant": ev.gate_variant,
            "metric": ev.gate_metric,
            "value": float(value),
            "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "previous": (current or {}).get("run"),
            DIGESTS: digests_of(run_root),
        }
        storage.check_lease_for(run_root)  # a trust anchor: never written on a lost lease
        storage.write_bytes(pointer_uri(cfg.output), json.dumps(pointer, indent=1).encode())
        log.info("promotion: %s promoted (%s)", run_root, reason)
    else:
        log.warning(
            "promotion: %s NOT promoted: %s; %s stays", run_root, reason, (current or {}).get("run")
        )
    return decision


def record_digests(cfg: PinaConfig) -> dict[str, Any]:
    """``pina-spark promote``: record in the promotion record of ``cfg.output`` (of
    ``run.promoted_from`` where that is set: the record that config's runs follow) the digests of
    the run it names (:func:`digests_of`), which a record written before digests existed lacks
    (then ``run.models: latest`` is refused), or before g's ``models`` digest was recorded (the
    folders it pins must still have their digests; g's is added). The run, its metric and value
    stay; the promoted run root's lease is held meanwhile, so no run rewrites its models while
    they are digested.
    Returns ``{"record", "run", "digests", "changed"}``; a record that holds these digests
    already is left as it is.

    Raises
    ------
    ConfigError
        Nothing is promoted under ``cfg.output``.
    InputError
        The promoted run's vectorizer has no checksums, or the record holds other digests for
        it (its models changed after the promotion: promote a run through evaluate instead).
    """
    import uuid

    uri = pointer_uri(promotion_output(cfg))
    record = read_promoted(promotion_output(cfg))
    if not record or not record.get("run"):
        raise ConfigError(
            f"no promoted run at {uri}: nothing to record (promote a run with the evaluate "
            f"stage, evaluate.promote: true)"
        )
    run_root = str(record["run"])
    with storage.acquire_lease(
        run_root,
        uuid.uuid4().hex[:12],
        stale_s=cfg.run.lease_stale_s,
        heartbeat_s=cfg.run.lease_heartbeat_s,
    ):
        digests = digests_of(run_root)
        if not digests:
            raise InputError(
                f"promoted run {run_root}: its {storage.VECTORIZER} folder has no checksums to "
                f"record (published before checksums existed): run its vectorizer stage again "
                f"with --force and promote it through the evaluate stage"
            )
        held = record.get(DIGESTS) or {}
        if held == digests:
            log.info("promotion: %s already holds the digests of %s", uri, run_root)
            return {"record": uri, "run": run_root, "digests": digests, "changed": False}
        # a record from before g's digest was recorded: the folders it pins must be unchanged
        if any(digests.get(name) != d for name, d in held.items()):
            raise InputError(
                f"promotion record {uri} holds digests {held} for {run_root}, but its models now "
                f"have {digests}: they changed after the promotion; refusing to vouch for them "
                f"(promote a run through the evaluate stage)"
            )
        refit = _refit_after(run_root, record.get("promoted_at"), set(digests) - set(held))
        if refit:
            raise InputError(
                f"promotion record {uri}: {run_root}'s {refit} stage finished after the run was "
                f"promoted ({record.get('promoted_at')}): what it wrote never passed the "
                f"promotion gate; refusing to vouch for it (promote a run through the evaluate "
                f"stage)"
            )
        storage.check_lease_for(run_root)
        new = {**record, DIGESTS: digests}
        new["digests_recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        storage.write_bytes(uri, json.dumps(new, indent=1).encode())
    log.warning("promotion: recorded the digests %s of the promoted run %s", digests, run_root)
    return {"record": uri, "run": run_root, "digests": digests, "changed": True}
