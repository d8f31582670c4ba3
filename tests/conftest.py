"""Test-only fixtures: the shared real data sets (skipped with a clear message where ../shared is
absent) and the demo run through spark-submit, and the markers their users get. The
session-scoped SparkSession and the test environment live in the repository's top-level
conftest.py, shared with the doctests."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("PINA_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


#: fixture -> the marker every test that uses it (directly or through its fixtures) carries
FIXTURE_MARKERS = {
    "demo_submit_run": "demo",
    "instacart_dir": "shared_data",
    "citeulike_dir": "shared_data",
}


def pytest_collection_modifyitems(config, items):
    """Marks the tests by the fixtures they use (pytest.ini lists the markers), so that
    ``-m "not demo"`` never starts the demo run."""
    for item in items:
        for fixture in set(FIXTURE_MARKERS) & set(getattr(item, "fixturenames", ())):
            item.add_marker(FIXTURE_MARKERS[fixture])


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


@pytest.fixture
def fake_s3(tmp_path, monkeypatch):
    """pyarrow's ``FileSystem.from_uri`` replaced by one that refuses every scheme but
    ``s3://`` (as pyarrow refuses ``s3a://``) and maps ``s3://bucket/key`` to
    ``tmp_path/bucket/key``. Returns the list of URIs it was asked for."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    seen: list[str] = []

    class FakeFileSystem:
        @staticmethod
        def from_uri(uri):
            seen.append(uri)
            if not uri.startswith("s3://"):
                raise pa.ArrowInvalid(f"Unrecognized filesystem type in URI: {uri}")
            return pafs.LocalFileSystem(), str(tmp_path / uri[len("s3://") :])

    monkeypatch.setattr(pafs, "FileSystem", FakeFileSystem)
    return seen
