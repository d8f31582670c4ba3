"""docs/reliability.md's table of guarantees: every row names, in its "How it is tested" column,
at least one test as ``test_file.py::test_name``, and every test it names exists in ``tests/``
(found with ``ast``, without importing the file). Fast: no Spark, nothing run.

Forms a cell may use: ``test_io.py::test_a, ::test_b`` (``::test_b`` continues the file named
before it), ``test_x.py::test_c[spark/files]`` (a parametrised test: its function is looked
up), ``test_x.py::TestClass::test_d`` (a method), and free text in between (``(child process)``,
``(graph stage)``).
"""

import ast
import dataclasses as dc
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "reliability.md")
TESTS = os.path.join(ROOT, "tests")

#: one test reference: an optional file, then ``::`` names, then optional parameters
_REF = re.compile(r"(?:\b(test_\w+\.py))?((?:::\w+)+)(\[[^\]]*\])?")


@dc.dataclass(frozen=True)
class Row:
    number: str
    guarantee: str
    tested: str
    result: str


def table_rows(text: str) -> list[Row]:
    """The rows of the guarantees table: lines ``| <number> | ... |`` of four cells."""
    rows = []
    for line in text.splitlines():
        if not re.match(r"\|\s*\d+\s*\|", line):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 4:
            raise ValueError(f"row {cells[0]}: {len(cells)} cells, expected 4: {line[:80]}")
        rows.append(Row(*cells))
    return rows


def named_tests(cell: str) -> list[tuple[str, tuple[str, ...]]]:
    """The tests a "How it is tested" cell names, as (file, (name, ...)): a ``::name`` without a
    file continues the last file named; one before any file is an error."""
    out, current = [], None
    for m in _REF.finditer(cell):
        file, names = m.group(1), tuple(m.group(2).split("::")[1:])
        current = file or current
        if current is None:
            raise ValueError(f"::{'::'.join(names)} names no file before it")
        out.append((current, names))
    return out


def _defined(path: str) -> set[tuple[str, ...]]:
    """Top-level functions of a test file as (name,), methods of its classes as (cls, name)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    out: set[tuple[str, ...]] = set()
    for node in tree.body:
        if isinstance(node, funcs):
            out.add((node.name,))
        elif isinstance(node, ast.ClassDef):
            out.update((node.name, f.name) for f in node.body if isinstance(f, funcs))
    return out


def problems(text: str, tests_dir: str = TESTS) -> list[str]:
    """What is wrong with the table ``text``: a row naming no test, a reference without a file,
    a file or a test that does not exist, a row number used twice."""
    found, seen, cache = [], set(), {}
    rows = table_rows(text)
    if not rows:
        return ["no table rows found"]
    for row in rows:
        if row.number in seen:
            found.append(f"row {row.number}: number used twice")
        seen.add(row.number)
        try:
            refs = named_tests(row.tested)
        except ValueError as e:
            found.append(f"row {row.number}: {e}")
            continue
        if not refs:
            found.append(f"row {row.number}: names no test as test_file.py::test_name")
        for file, names in refs:
            path = os.path.join(tests_dir, file)
            if file not in cache:
                cache[file] = _defined(path) if os.path.isfile(path) else None
            if cache[file] is None:
                found.append(f"row {row.number}: {file} does not exist in {tests_dir}")
            elif names not in cache[file]:
                found.append(f"row {row.number}: {file}::{'::'.join(names)} does not exist")
    return found


def test_every_row_names_tests_that_exist():
    with open(TABLE, encoding="utf-8") as fh:
        text = fh.read()
    assert len(table_rows(text)) >= 40
    assert problems(text) == []


def test_the_check_refuses_a_missing_test_and_a_row_without_one(tmp_path):
    """The check itself: a row naming a test that does not exist, a ``::name`` with no file
    before it, a row naming none and a missing file are each reported; the shorthand, a
    parametrised name and a method are accepted."""
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('x', [1, 2])\n"
        "def test_one(x):\n    pass\n\n"
        "def test_two():\n    pass\n\n"
        "class TestThree:\n    def test_four(self):\n        pass\n"
    )
    good = (
        "| # | Guarantee | How it is tested | Result |\n|---|---|---|---|\n"
        "| 1 | g | test_a.py::test_one[1/2], ::test_two (child process) | pass |\n"
        "| 2 | g | test_a.py::TestThree::test_four; test_a.py::test_two | pass |\n"
    )
    assert problems(good, str(tmp_path)) == []
    assert named_tests("test_a.py::test_one[1/2], ::test_two") == [
        ("test_a.py", ("test_one",)),
        ("test_a.py", ("test_two",)),
    ]
    bad = good + (
        "| 3 | g | test_a.py::test_two, ::test_gone | pass |\n"
        "| 4 | g | ::test_two | pass |\n"
        "| 5 | g | by hand | pass |\n"
        "| 6 | g | test_b.py::test_one | pass |\n"
        "| 6 | g | test_a.py::test_one | pass |\n"
    )
    assert problems(bad, str(tmp_path)) == [
        "row 3: test_a.py::test_gone does not exist",
        "row 4: ::test_two names no file before it",
        "row 5: names no test as test_file.py::test_name",
        f"row 6: test_b.py does not exist in {tmp_path}",
        "row 6: number used twice",
    ]
