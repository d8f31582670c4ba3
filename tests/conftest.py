"""Test-only fixtures: the shared real data sets (skipped with a clear message where ../shared is
absent) and the demo run through spark-submit. The session-scoped SparkSession and the test
environment live in the repository's top-level conftest.py, shared with the doctests."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("PINA_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def pytest_addoption(parser):
    parser.addoption(
        "--runslow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long test, run with --runslow")
    config.addinivalue_line("markers", "submit: runs jobs/*.py through spark-submit (make test)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --runslow to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def demo_submit_run(tmp_path_factory):
    """The demo pipeline run once through spark-submit (tests/demo_run.py)."""
    from demo_run import run_demo_via_spark_submit

    return run_demo_via_spark_submit(tmp_path_factory.mktemp("demo_submit"))


def _shared(name):
    path = os.path.abspath(os.path.join(SHARED_DATA, name))
    if not os.path.isdir(path):
        pytest.skip(
            f"shared data set '{name}' not found at {path} "
            f"(set PINA_SHARED_DATA or place ../shared/data beside the repo)"
        )
    return path


@pytest.fixture(scope="session")
def instacart_dir():
    return _shared("instacart")


@pytest.fixture(scope="session")
def citeulike_dir():
    return _shared("citeulike-t")
