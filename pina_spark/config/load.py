"""Loading a config: YAML files (local or a URI), ``--set key.sub=value`` overrides, the checks
across sections, and the text forms (:func:`dump_config`, :func:`skeleton`). Only this module
knows YAML; the sections themselves are :mod:`pina_spark.config.sections`.

Examples
--------
>>> cfg = config_from_dict({"output": "/tmp/run", "input": {"instances": "i.parquet"}})
>>> cfg.neighbors.k
5
>>> config_from_dict({"output": "/tmp/run", "neighbours": {}})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pina_spark.config.sections.ConfigError: <dict>: unknown key 'neighbours' (known: aggregate, ...)
>>> apply_overrides({"neighbors": {"k": 5}}, ["neighbors.k=7", "spark.conf.spark.x.y=1"])
{'neighbors': {'k': 7}, 'spark': {'conf': {'spark.x.y': '1'}}}
>>> parse_stages("pretrain,graph")
('graph', 'pretrain')
"""

from collections.abc import Callable, Mapping
from typing import Any

from pina_spark.config.sections import STAGE_NAMES, ConfigError, PinaConfig

__all__ = [
    "load_config",
    "config_from_dict",
    "apply_overrides",
    "dump_config",
    "skeleton",
    "parse_stages",
    "set_dotted",
]


def load_config(
    path: str | None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
    read: Callable[[str], bytes | None] | None = None,
    spelled: Mapping[str, str] | None = None,
) -> PinaConfig:
    """Read a YAML file (or start from ``base``), apply ``key.sub=value`` overrides, build.
    ``spelled``: how the user gave an override that came from a flag (``run.run_date=X`` ->
    ``--run-date X``), so an error about its value names the flag.

    ``path`` is a local file (or ``file://``); a URI (``s3://``, ``s3a://``: a config kept
    next to an EMR step) is read by ``read`` (``None`` when it does not exist), which the CLI
    passes as :func:`pina_spark.storage.read_bytes`: filesystems belong to the storage layer,
    which maps Hadoop's ``s3a://`` for pyarrow. In a notebook::

        from pina_spark import storage
        cfg = load_config("s3a://bucket/conf/emr.yaml", read=storage.read_bytes)

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(p, "w").write("output: /tmp/x\\nneighbors: {k: 3}\\n")
    >>> load_config(p, ["neighbors.k=7"]).neighbors.k
    7
    """
    import yaml

    data: dict[str, Any] = dict(base or {})
    source = "<defaults>"
    if path is not None:
        source = str(path)
        text = _read_text(str(path), read)
        try:
            loaded = yaml.safe_load(text) or {}
        except (yaml.YAMLError, ValueError) as e:  # ValueError: e.g. an impossible date
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping, found {type(loaded).__name__}")
        data = _deep_merge(data, loaded)
    if not overrides:
        return config_from_dict(data, source)
    try:
        return config_from_dict(apply_overrides(data, overrides, source), source)
    except ConfigError as e:
        raise _blame_overrides(e, overrides, source, spelled) from None


def _blame_overrides(
    e: ConfigError, overrides: list[str], source: str, spelled: Mapping[str, str] | None = None
) -> ConfigError:
    """``e`` (an error of the config with ``overrides`` applied) naming the ``--set`` that
    sets the key it is about, or that key's section: a ``--set`` wins over the file, so the
    value was the ``--set``'s (or the flag's, as ``spelled`` gives it). Other errors are left
    naming the file.

    >>> e = ConfigError("c.yaml: neighbors.k: expected an integer, found 'abc'")
    >>> print(_blame_overrides(e, ["run.force=true", "neighbors.k=abc"], "c.yaml"))
    --set 'neighbors.k=abc': neighbors.k: expected an integer, found 'abc'
    >>> print(_blame_overrides(e, ["run.force=true"], "c.yaml"))
    c.yaml: neighbors.k: expected an integer, found 'abc'
    >>> i = ConfigError("c.yaml: evaluate.ks[1]: expected an integer, found 'x'")
    >>> print(_blame_overrides(i, ["evaluate.ks=[1, x]"], "c.yaml"))
    --set 'evaluate.ks=[1, x]': evaluate.ks[1]: expected an integer, found 'x'
    >>> d = ConfigError("c.yaml: run.run_date: expected a calendar date YYYY-MM-DD")
    >>> print(_blame_overrides(d, ["run.run_date=1"], "c.yaml", {"run.run_date=1": "--run-date 1"}))
    --run-date 1: run.run_date: expected a calendar date YYYY-MM-DD
    """
    msg = str(e)
    if msg.startswith("--set ") or not msg.startswith(f"{source}: "):
        return e  # named already (an unknown key, apply_overrides), or not about one key
    body = msg[len(source) + 2 :]
    key = body.split(":", 1)[0].split(" ", 1)[0].split("[", 1)[0]  # evaluate.ks[1]: evaluate.ks
    # a --set wins over the file: one that sets the key (or its section) gave the value
    named = [o for o in overrides if (key + ".").startswith(o.split("=", 1)[0].strip() + ".")]
    if not named:
        return e
    spelled = spelled or {}
    flags = [spelled[o] for o in named if o in spelled]
    sets = [repr(o) for o in named if o not in spelled]
    return ConfigError(
        ", ".join(flags + ([f"--set {', '.join(sets)}"] if sets else [])) + f": {body}"
    )


def _read_text(path: str, read: Callable[[str], bytes | None] | None) -> str:
    """A local file, or a URI read by ``read`` (see :func:`load_config`), as text; a
    :class:`ConfigError` naming ``path`` where it is missing, unreadable or not UTF-8.

    >>> _read_text("s3a://bucket/conf/emr.yaml", None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.config.sections.ConfigError: s3a://bucket/conf/emr.yaml: a config at a URI ...
    >>> _read_text("s3a://bucket/conf/emr.yaml", lambda uri: b"output: /tmp/x")
    'output: /tmp/x'
    """
    remote = "://" in path and not path.startswith("file://")
    if remote and read is None:
        raise ConfigError(
            f"{path}: a config at a URI is read through the storage layer: "
            "load_config(path, read=pina_spark.storage.read_bytes) (the CLI does)"
        )
    try:
        if remote:
            raw = read(path) if read is not None else None
            if raw is None:
                raise FileNotFoundError(path)
        else:
            with open(path[len("file://") :] if path.startswith("file://") else path, "rb") as fh:
                raw = fh.read()
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from e
    except (OSError, ValueError) as e:  # e.g. access denied, a scheme pyarrow does not know
        raise ConfigError(f"{path}: cannot read the config: {e}") from e


def config_from_dict(data: dict[str, Any], source: str = "<dict>") -> PinaConfig:
    """Build a :class:`PinaConfig` strictly from a plain dict (see module docstring)."""
    cfg = PinaConfig.from_dict(data, source)
    _check_combinations(cfg, source)
    return cfg


def apply_overrides(
    data: dict[str, Any], overrides: list[str], source: str = "<cli>"
) -> dict[str, Any]:
    """Apply ``a.b.c=value`` strings; values are parsed as YAML scalars/lists (``k=[1,2]``)."""
    import yaml

    out = _deep_merge({}, data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key.sub=value ({source})")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"--set {item!r}: empty key ({source})")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except (yaml.YAMLError, ValueError):  # ValueError: YAML date-like, e.g. 2026-13-01
            value = raw
        node = out
        parts = key.split(".")
        if parts[:2] == ["spark", "conf"] and len(parts) > 3:
            # Spark conf keys contain dots: spark.conf.spark.executor.memory -> one key
            parts = parts[:2] + [".".join(parts[2:])]
        _check_key(parts, item)
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = {}
            elif not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: '{p}' is not a section ({source})")
            node[p] = dict(nxt)
            node = node[p]
        # spark.conf values keep their raw string form (Spark conf values are strings)
        node[parts[-1]] = raw if parts[:2] == ["spark", "conf"] else value
    return out


def _check_key(parts: list[str], item: str) -> None:
    """The key of override ``item`` must name a config key; else the error names ``--set`` as
    its source (not the YAML file the other keys came from) and the nearest known key.

    >>> _check_key(["neighbours", "k"], "neighbours.k=3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.config.sections.ConfigError: --set 'neighbours.k=3': unknown key 'neighbours' \
(did you mean 'neighbors'? known: aggregate, ...)
    """
    import dataclasses as dc
    import difflib
    import types
    import typing

    tp: Any = PinaConfig
    for i, part in enumerate(parts):
        if not dc.is_dataclass(tp):
            return  # inside a mapping (spark.conf, quality.max_quarantine_fraction): any key
        names = [f.name for f in dc.fields(tp)]
        if part not in names:
            removed = getattr(tp, "REMOVED", {})
            if part in removed:
                raise ConfigError(
                    f"--set {item!r}: '{'.'.join(parts[: i + 1])}' was removed: {removed[part]}"
                )
            near = difflib.get_close_matches(part, names, n=1)
            at = ".".join(parts[:i])
            hint = f"did you mean '{at + '.' if at else ''}{near[0]}'? " if near else ""
            raise ConfigError(
                f"--set {item!r}: unknown key '{'.'.join(parts[: i + 1])}' "
                f"({hint}known: {', '.join(sorted(names))})"
            )
        tp = typing.get_type_hints(tp)[part]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):  # X | None
            tp = next(a for a in typing.get_args(tp) if a is not type(None))


def dump_config(cfg: PinaConfig) -> str:
    """YAML text of a config (round-trips through :func:`load_config`)."""
    import yaml

    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def skeleton() -> dict[str, Any]:
    """All keys with their defaults (``output`` as a placeholder)."""
    return PinaConfig.from_dict({"output": "<required>"}).to_dict()


def _check_combinations(cfg: PinaConfig, source: str) -> None:
    """Cross-field checks. Leak policy: see README "Leak guards"."""
    inp = cfg.input
    if cfg.side_info in ("i2i", "both") and not inp.events:
        raise ConfigError(
            f"{source}: side_info={cfg.side_info} needs input.events " "(raw co-purchase logs)"
        )
    if cfg.task.labels == "graph" and not inp.events:
        raise ConfigError(f"{source}: task.labels=graph needs input.events")
    _, sep, rest = str(cfg.output).strip().partition("://")
    if not (rest if sep else str(cfg.output).strip()).strip("/"):
        # an empty output would put the run root, its lease and tables at the filesystem root
        raise ConfigError(f"{source}: output: expected the run's output folder, got {cfg.output!r}")
    out = cfg.output.rstrip("/")
    for name, uri in cfg.input.to_dict().items():
        if not uri:
            continue
        u = str(uri).rstrip("/")
        if out == u or out.startswith(u + "/"):
            raise ConfigError(
                f"{source}: output {cfg.output} is input.{name} ({uri}) or lies "
                "inside it: publishing would replace or mix with the input. "
                "Choose an output folder outside the inputs"
            )
    if cfg.run.incremental and not cfg.run.models:
        raise ConfigError(
            f"{source}: run.incremental needs run.models (an earlier run whose "
            "models are reused)"
        )


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any, what: str) -> None:
    """Set the dotted config ``key`` (``neighbors.k``) of the plain config dict ``data`` to
    ``value`` in place; ``what`` names where the key came from in the error raised when a
    part of it is not a section.

    Examples
    --------
    >>> d = {"neighbors": {"k": 5}}
    >>> set_dotted(d, "neighbors.k", 10, "grid key"); d
    {'neighbors': {'k': 10}}
    >>> set_dotted(d, "neighbors.k.x", 1, "grid key")
    Traceback (most recent call last):
    ...
    pina_spark.config.sections.ConfigError: grid key 'neighbors.k.x': 'k' is not a config section
    """
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            raise ConfigError(f"{what} {key!r}: {p!r} is not a config section")
        node = nxt
    node[parts[-1]] = value


def parse_stages(spec: str | None) -> tuple[str, ...]:
    """``"graph,pretrain"`` -> ordered tuple; ``None`` (no ``--stages``) -> every stage. Unknown
    names are errors, and so is a list that names none (``--stages ""``: a script's unset
    variable must not mean "every stage").

    >>> parse_stages(" ,")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pina_spark.config.sections.ConfigError: --stages ' ,' names no stage (known: graph, ...)
    """
    if spec is None:
        return STAGE_NAMES
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ConfigError(
            f"--stages {spec!r} names no stage (known: {', '.join(STAGE_NAMES)}; leave "
            f"--stages out to run them all)"
        )
    bad = [s for s in names if s not in STAGE_NAMES]
    if bad:
        raise ConfigError(f"--stages: unknown stage(s) {bad} (known: {', '.join(STAGE_NAMES)})")
    return tuple(s for s in STAGE_NAMES if s in names)
