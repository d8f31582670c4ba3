"""Stage order, resume/skip, run dates, manifest writes.

Stage modules never import each other: each exposes ``run_stage(ctx) -> dict`` (statistics) and
reads/writes published tables through :mod:`pina_spark.io`; this module wires them in order.

A stage is skipped when its manifest entry is ``complete`` for the same fingerprint (the config
sections it depends on + the input files' fingerprint + the fingerprints of the stages before it)
and its outputs are complete on storage; ``force`` redoes everything.

Examples
--------
>>> from pina_spark.config import config_from_dict
>>> cfg = config_from_dict({"output": "/tmp/r", "input": {"instances": "i.csv",
...     "labels": "l.csv", "instance_labels": "il.csv"}})
>>> [s.name for s in plan(cfg, ("graph", "pretrain"))]
['graph', 'pretrain']
"""
import dataclasses as dc
import importlib
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import io
from .config import STAGE_NAMES, PinaConfig
from .manifest import Manifest

log = logging.getLogger(__name__)


@dc.dataclass(frozen=True)
class StageSpec:
    """A stage: its entry point (``module:function``), the config sections its output depends on,
    and the run-relative outputs that must be complete for it to count as done."""
    name: str
    target: str
    sections: Tuple[str, ...]
    outputs: Tuple[str, ...]

    def load(self) -> Callable[["StageContext"], Dict[str, Any]]:
        mod, fn = self.target.split(":")
        return getattr(importlib.import_module(mod), fn)


STAGES: Dict[str, StageSpec] = {s.name: s for s in [
    StageSpec("graph", "pina_spark.graph:run_stage",
              ("input", "side_info", "task", "graph"), (io.NODES, io.PRETRAIN_EDGES,
                                                        io.INSTANCE_LABELS)),
    StageSpec("pretrain", "pina_spark.pretrain:run_stage",
              ("pretrain", "neighbors"), (io.MODELS,)),
    StageSpec("embed", "pina_spark.inference:run_embed_stage",
              ("inference",), (io.EMBEDDINGS,)),
    StageSpec("neighbors", "pina_spark.inference:run_neighbors_stage",
              ("neighbors", "inference"), (io.NEIGHBORS,)),
    StageSpec("aggregate", "pina_spark.aggregate:run_stage",
              ("aggregate",), (io.FEATURES,)),
    StageSpec("train", "pina_spark.downstream:run_stage",
              ("train",), (io.PREDICTIONS,)),
    StageSpec("evaluate", "pina_spark.evaluate:run_stage",
              ("evaluate",), (io.EVAL,)),
]}
assert tuple(STAGES) == STAGE_NAMES


@dc.dataclass
class StageContext:
    """What a stage gets: the session, the config, the run's paths and the manifest.

    ``models`` is where models are read from (this run's ``models/`` unless ``run.models`` names
    an earlier run)."""
    spark: Any
    cfg: PinaConfig
    paths: io.RunPaths
    manifest: Manifest
    models_root: str

    @property
    def models(self) -> str:
        return self.models_root


def plan(cfg: PinaConfig, stages: Sequence[str]) -> List[StageSpec]:
    """The stages to consider, in pipeline order."""
    return [STAGES[s] for s in STAGE_NAMES if s in stages]


def make_context(spark, cfg: PinaConfig) -> StageContext:
    paths = io.RunPaths(cfg.output, cfg.run.run_date)
    manifest = Manifest(paths.manifest)
    models_root = (io.RunPaths(cfg.run.models).table(io.MODELS) if cfg.run.models
                   else paths.table(io.MODELS))
    return StageContext(spark=spark, cfg=cfg, paths=paths, manifest=manifest,
                        models_root=models_root)


def run_pipeline(spark, cfg: PinaConfig, stages: Optional[Sequence[str]] = None,
                 force: Optional[bool] = None) -> Dict[str, Any]:
    """Run ``stages`` (all by default) in order; returns ``{stage: "ran"|"skipped"}``.

    Examples
    --------
    >>> run_pipeline(spark, cfg, ["graph"])          # doctest: +SKIP
    {'graph': 'ran'}
    """
    force = cfg.run.force if force is None else force
    ctx = make_context(spark, cfg)
    io.recover(spark, ctx.paths, [o for s in STAGES.values() for o in s.outputs])
    ctx.manifest.set_run_info(cfg.to_dict())
    inputs_fp = io.input_fingerprint(spark, dc.astuple(cfg.input))
    result: Dict[str, str] = {}
    upstream = inputs_fp + (cfg.run.models or "")
    for spec in plan(cfg, stages or STAGE_NAMES):
        fp = cfg.fingerprint(*spec.sections)
        fp = _hash(upstream + fp)
        upstream = fp
        # every output folder (Spark tables and model folders alike) ends with a _SUCCESS file
        outputs_ok = all(io.is_complete(spark, ctx.paths.table(o)) for o in spec.outputs)
        if not force and ctx.manifest.is_complete(spec.name, fp) and outputs_ok:
            log.info("stage %s: complete for fingerprint %s, skipped", spec.name, fp)
            result[spec.name] = "skipped"
            continue
        log.info("stage %s: start (fingerprint %s)", spec.name, fp)
        ctx.manifest.mark_started(spec.name, fp)
        t0 = time.time()
        try:
            stats = spec.load()(ctx) or {}
        except Exception as e:
            ctx.manifest.mark_failed(spec.name, f"{type(e).__name__}: {e}")
            log.error("stage %s failed after %.1fs: %s", spec.name, time.time() - t0, e)
            raise
        dt = time.time() - t0
        ctx.manifest.record_stage(spec.name, stats, fp, dt)
        log.info("stage %s: done in %.1fs %s", spec.name, dt, _brief(stats))
        result[spec.name] = "ran"
    return result


def _hash(s: str) -> str:
    import hashlib
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def _brief(stats: Dict[str, Any]) -> str:
    items = [(k, v) for k, v in stats.items() if isinstance(v, (int, float, str))][:8]
    return " ".join(f"{k}={v}" for k, v in items)
