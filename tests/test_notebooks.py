"""The notebooks execute top to bottom (nbclient) against a finished demo run, and are committed
without outputs.

The run: ``PINA_RUN`` when set (a finished run root), else the session's spark-submit demo run
(``demo_submit_run``: tests/demo_run.py). Fails with the reason when that run could not be
produced (a stage failing: see test_submit.py) or ``PINA_RUN`` is not a finished run.
"""

import glob
import os

import pytest

from demo_run import require_finished

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_notebooks_exist_and_have_no_outputs():
    import nbformat

    names = [os.path.basename(p) for p in NOTEBOOKS]
    assert "01_copurchase_graph.ipynb" in names and "02_pina_neighbors.ipynb" in names
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert (
                    cell.outputs == [] and cell.execution_count is None
                ), f"{os.path.basename(p)} is committed with outputs"
                # library functions, not copies of library code
                assert "def " not in cell.source, f"{os.path.basename(p)} defines functions"
        src = "\n".join(c.source for c in nb.cells)
        assert 'os.environ.get("PINA_RUN", "runs/demo/run")' in src
        assert "RUN = find_run_root(RUN)" in src  # the same run wherever the kernel starts
        notes = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for needle in ("EMR Studio", "%%configure", "spark.pyspark.python", "%matplot plt"):
            assert needle in notes, f"{os.path.basename(p)}: no {needle!r} in the EMR note"


def test_a_papermill_parameters_cell_sets_what_the_notebook_reads():
    """One cell tagged ``parameters`` (papermill injects its overrides after it), holding only
    assignments, before any cell uses them."""
    import ast

    import nbformat

    for p in NOTEBOOKS:
        cells = nbformat.read(p, as_version=4).cells
        tagged = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{os.path.basename(p)}: {len(tagged)} parameters cells"
        body = ast.parse(cells[tagged[0]].source).body
        assert body and all(isinstance(st, ast.Assign) for st in body)
        names = {t.id for st in body for t in st.targets if isinstance(t, ast.Name)}
        assert {"RUN", "MASTER"} <= names
        before = "\n".join(c.source for c in cells[: tagged[0]] if c.cell_type == "code")
        assert not any(n in before.split() for n in names)
        rest = "\n".join(c.source for c in cells[tagged[0] + 1 :] if c.cell_type == "code")
        assert all(n in rest for n in names), f"{os.path.basename(p)}: a parameter is unused"


@pytest.fixture(scope="module")
def finished_run(request):
    env = os.environ.get("PINA_RUN")
    if env:
        if not os.path.exists(os.path.join(env, "eval", "_SUCCESS")):
            pytest.fail(f"PINA_RUN={env} is not a finished run (no eval/_SUCCESS)", pytrace=False)
        return os.path.abspath(env)
    return require_finished(request.getfixturevalue("demo_submit_run"))["output"]


def _inject_parameters(nb, **values):
    """What ``papermill -p NAME VALUE`` does: a cell assigning the values, after the cell
    tagged ``parameters``."""
    import nbformat

    at = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])][0]
    src = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(at + 1, cell)


@pytest.mark.demo  # finished_run asks for demo_submit_run at run time (unless PINA_RUN)
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path, finished_run, monkeypatch, tmp_path):
    """01 runs as Jupyter starts it, in a repository's ``notebooks/`` with the default
    ``RUN = "runs/demo/run"`` (found in the repository root); 02 as papermill runs it, with
    ``-p RUN <run root>`` and the kernel in the repository root."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    monkeypatch.delenv("PINA_RUN", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    if os.path.basename(path).startswith("01"):
        repo = tmp_path / "repo"
        (repo / "runs" / "demo").mkdir(parents=True)
        (repo / "notebooks").mkdir()
        os.symlink(finished_run, repo / "runs" / "demo" / "run")
        cwd = str(repo / "notebooks")
    else:
        _inject_parameters(nb, RUN=finished_run)
        cwd = ROOT
    client = NotebookClient(
        nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": cwd}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert os.path.realpath(finished_run) in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no plot was produced"
