"""The package's shape, checked from its source: no import cycle among pina_spark's modules
(imports inside functions count: a cycle hidden in a function is still a cycle), one package
per stage under pina_spark/stages named as the stage is named in ``STAGES``, and no module at
the top of pina_spark beyond an allow-list (every other module lives in a package by subject).
"""

import ast
import importlib
import os

import pytest

from pina_spark.stages import STAGES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "pina_spark"
PACKAGE_DIR = os.path.join(ROOT, PACKAGE)
#: the only modules allowed directly under pina_spark/
TOP_LEVEL_MODULES = {"__init__.py", "smoke.py"}


def package_modules(package_dir=PACKAGE_DIR):
    """``{dotted module name: file}`` for every .py file under ``package_dir`` (a package is
    named by its folder, not ``<folder>.__init__``)."""
    base = os.path.dirname(package_dir)
    modules = {}
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            parts = os.path.relpath(path, base)[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module, path):
    """Every dotted name ``module`` imports, anywhere in its file (module level, functions,
    ``if TYPE_CHECKING`` blocks), relative imports resolved; ``from a import b`` gives both
    ``a`` and ``a.b`` (``b`` may be a module or a name in ``a``)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # the package the dots count from: a package's own name, a module's parent
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                origin = ".".join(parts + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names += [origin] + [f"{origin}.{alias.name}" for alias in node.names]
    return names


def import_graph(modules):
    """``{module: set of modules of the package it imports}``. An import names the deepest
    module it reaches (``a.b.name`` -> ``a.b``); imports of the package's own root and of the
    importer's enclosing packages are left out: Python initialises those before the importer
    whatever it writes, so they order nothing."""

    def owner(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {m: set() for m in modules}
    for module, path in modules.items():
        for name in imported_names(module, path):
            target = owner(name)
            if (
                target
                and target != module
                and target != PACKAGE
                and not module.startswith(target + ".")
            ):
                graph[module].add(target)
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted, sorted by their first module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _cycle_path(graph, component):
    """One closed path through a cycle's modules, for the failure message."""
    members = set(component)
    path = [component[0]]
    while True:
        nxt = min(t for t in graph[path[-1]] if t in members)
        if nxt in path:
            return path[path.index(nxt) :] + [nxt]
        path.append(nxt)


def test_cycle_finder_finds_a_cycle_inside_a_function(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pina_spark.sub.b import x\n")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .a import y\n")
    (pkg / "c.py").write_text("from pina_spark import sub\nfrom pina_spark.sub import a\n")
    graph = import_graph(package_modules(str(pkg)))
    assert graph["pina_spark.sub.a"] == {"pina_spark.sub.b"}
    assert graph["pina_spark.c"] == {"pina_spark.sub", "pina_spark.sub.a"}
    assert cycles(graph) == [["pina_spark.sub.a", "pina_spark.sub.b"]]


def test_no_import_cycle_among_the_package_modules():
    modules = package_modules()
    assert len(modules) > 20 and "pina_spark.stages" in modules
    graph = import_graph(modules)
    found = cycles(graph)
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(
        " -> ".join(_cycle_path(graph, c)) for c in found
    )


@pytest.mark.parametrize("name", list(STAGES))
def test_each_stage_runs_from_the_package_named_after_it(name):
    spec = STAGES[name]
    assert spec.name == name
    assert spec.target == f"pina_spark.stages.{name}:run"
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "stages", name, "__init__.py"))
    run = getattr(importlib.import_module(f"pina_spark.stages.{name}"), "run", None)
    assert callable(run), f"pina_spark.stages.{name} exposes no run()"


def test_every_stage_package_is_a_stage():
    folder = os.path.join(PACKAGE_DIR, "stages")
    packages = {
        d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "__init__.py"))
    }
    assert packages == set(STAGES)


def test_no_flat_module_at_the_top_of_the_package():
    flat = {f for f in os.listdir(PACKAGE_DIR) if f.endswith(".py")}
    assert flat <= TOP_LEVEL_MODULES, (
        f"modules at the top of pina_spark: {sorted(flat - TOP_LEVEL_MODULES)}; "
        "put them in a package by subject"
    )
