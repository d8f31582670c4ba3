"""``docs/config.md``: every config key with its type, default and meaning, generated from the
dataclasses of :mod:`pina_spark.config.sections` (types from the annotations, defaults from the
fields, meanings from each ``Attributes:`` entry of the docstrings, on one line). ``make docs``
rewrites it; ``tests/test_config_reference.py`` fails when it is stale or a key has no
documented meaning.

Examples
--------
>>> rows = reference_rows()
>>> [r for r in rows if r[0] == "neighbors.k"][0][1:3]
('int', '5')
"""

import dataclasses as dc
import inspect
import json
import re
import sys
import types
import typing
from typing import Any, Literal, get_args, get_origin

from pina_spark.config.sections import PinaConfig, _to_plain

HEADER = """# Configuration reference

Generated from `pina_spark/config/sections.py` by `make docs`
(`python -m pina_spark.config.reference > docs/config.md`); `tests/test_config_reference.py`
fails when this page is stale. Keys are dotted paths into the YAML file (`--set KEY=VALUE` on
the command line); an unknown key, a wrong type or a value out of range is an error naming the
key and the file. `pina-spark skeleton` prints every key with its default as YAML.

`spark.conf` only fills Spark conf keys that spark-submit `--conf`, the platform's
spark-defaults (EMR configuration classifications) or a notebook's running session left unset:
see `pina_spark/orchestration/session.py`. A local master that `pina-spark` starts itself, with
no `spark.driver.memory` from the launcher, the config or `SPARK_DRIVER_MEMORY`, gets a quarter
of the machine's memory (1-16 GiB; logged) instead of Spark's 1g; under spark-submit with a
local master, pass `--driver-memory` (the driver warns, naming a value).
"""


def attribute_docs(cls) -> dict[str, str]:
    """``{field: description}`` from the ``Attributes:`` block of ``cls``' docstring
    (``a, b: text`` documents both)."""
    doc = cls.__doc__ or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Attributes:"))
    except StopIteration:
        return {}
    out: dict[str, str] = {}
    first = lines[start].strip()[len("Attributes:") :].strip()
    body = ([first] if first else []) + lines[start + 1 :]
    indent = None
    names: list[str] = []
    for ln in body:
        if not ln.strip():
            continue
        ind = len(ln) - len(ln.lstrip())
        if indent is None:
            indent = ind
        m = re.match(r"([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*):\s*(.*)$", ln.strip())
        if ind == indent and m:
            names = [n.strip() for n in m.group(1).split(",")]
            for n in names:
                out[n] = m.group(2).strip()
        elif ind > indent and names:
            for n in names:
                out[n] = (out[n] + " " + ln.strip()).strip()
        else:
            break
    return out


def type_name(tp) -> str:
    """Readable annotation: ``int``, ``one of: a, b``, ``str or null``, ``list of int``."""
    origin = get_origin(tp)
    if tp is Any:
        return "any"
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return f"{type_name(args[0])} or null"
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return f"list of {type_name(item)}"
    if origin is dict:
        k, v = get_args(tp) or (str, Any)
        return f"mapping {type_name(k)} -> {type_name(v)}"
    return getattr(tp, "__name__", str(tp))


def _default(f: dc.Field) -> str:
    if f.default is not dc.MISSING:
        value = f.default
    elif f.default_factory is not dc.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    return json.dumps(_to_plain(value))


def reference_rows(cls=PinaConfig, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """``(key, type, default, meaning)`` for every leaf key, in declaration order (sections
    recurse; a section's own row is not listed)."""
    hints = typing.get_type_hints(cls)
    docs = attribute_docs(cls)
    rows: list[tuple[str, str, str, str]] = []
    for f in dc.fields(cls):
        tp = hints[f.name]
        if dc.is_dataclass(tp):
            rows += reference_rows(tp, prefix + f.name + ".")
            continue
        rows.append((prefix + f.name, type_name(tp), _default(f), docs.get(f.name, "")))
    return rows


def _section_title(cls) -> str:
    """The docstring's first line, and its second paragraph when it has one before the
    ``Attributes:`` block (what a reader of the section needs beside the keys)."""
    if not cls.__doc__:
        return ""
    doc = inspect.cleandoc(cls.__doc__)
    paras = [" ".join(p.split()) for p in doc.split("Attributes:")[0].split("\n\n") if p.strip()]
    return "\n\n".join([doc.splitlines()[0], *paras[1:2]])


def _cell(s: str) -> str:
    return s.replace("``", "`").replace("|", "\\|").replace("\n", " ")


def reference_markdown() -> str:
    """The whole page."""
    hints = typing.get_type_hints(PinaConfig)
    sections = [
        (f.name, hints[f.name]) for f in dc.fields(PinaConfig) if dc.is_dataclass(hints[f.name])
    ]
    rows = reference_rows()
    out = [HEADER]
    top = [r for r in rows if "." not in r[0]]
    groups = [("top level", "", top)] + [
        (name, _section_title(tp), [r for r in rows if r[0].startswith(name + ".")])
        for name, tp in sections
    ]
    for name, title, rs in groups:
        out.append(f"## `{name}`" if name != "top level" else "## top level")
        if title and not title.startswith("Attributes:"):
            out.append("")
            out.append(title)
        out += ["", "| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k}` | {_cell(t)} | `{_cell(d)}` | {_cell(m)} |" for k, t, d, m in rs]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
