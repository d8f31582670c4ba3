"""Install metadata (setup.py) and the EMR packaging (Makefile, ``make dist``): the lock file
(requirements.txt, the Makefile's torch and pyspark 3.5 pins) lies inside setup.py's ranges, the
declared Python versions are those the pinned stack has wheels for, and ``make dist`` takes
torch from the CPU wheel index by default and stops on a build platform unlike the EMR nodes'.
No Spark, no network."""

import ast
import os
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup_py():
    """setup.py's literal module constants and ``setup()`` keywords (parsed, not run)."""
    with open(os.path.join(ROOT, "setup.py")) as fh:
        tree = ast.parse(fh.read())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup":
            for kw in node.keywords:
                if isinstance(kw.value, ast.Dict):  # extras_require: the literal entries
                    out[kw.arg] = {
                        ast.literal_eval(k): ast.literal_eval(v)
                        for k, v in zip(kw.value.keys, kw.value.values)
                        if isinstance(v, ast.List)
                    }
                elif isinstance(kw.value, ast.Name):
                    out[kw.arg] = out.get(kw.value.id)
    return out


def _make_var(name, *args):
    """The value of a Makefile variable, as make expands it."""
    with open(os.path.join(ROOT, "Makefile")) as fh:
        text = fh.read()
    if not re.search(rf"^{name}\s*[:?]?=", text, re.M):
        raise KeyError(name)
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", ROOT, "-f", "-", f"_print_{name}", *args],
        input=f"include Makefile\n_print_{name}:\n\t@echo '$({name})'\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _lock():
    """``{name: version}`` of requirements.txt's ``==`` pins plus the Makefile's torch pin."""
    pins = {}
    with open(os.path.join(ROOT, "requirements.txt")) as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==")
                pins[name.strip().lower()] = version.strip()
    with open(os.path.join(ROOT, "Makefile")) as fh:
        torch = set(re.findall(r"torch==([0-9][0-9.]*)", fh.read()))
    assert len(torch) == 1, torch  # one torch pin everywhere in the Makefile
    pins["torch"] = torch.pop()
    return pins


def test_lock_file_lies_inside_the_install_ranges():
    setup = _setup_py()
    ranges = {Requirement(r).name.lower(): Requirement(r) for r in setup["INSTALL_REQUIRES"]}
    pins = _lock()
    for name, version in pins.items():
        if name == "pyspark":  # the platform's; an extra for local use
            assert version in Requirement(setup["extras_require"]["spark"][0]).specifier
            continue
        assert name in ranges, f"{name}=={version} is pinned but not an install requirement"
        assert version in ranges[name].specifier, f"{name}=={version} outside {ranges[name]}"
    unpinned = set(ranges) - set(pins)
    for name in unpinned:  # a lower bound only (PyYAML>=6.0): the lock says the same
        assert not [s for s in ranges[name].specifier if s.operator in ("<", "<=", "==")], name
    py35 = _make_var("PYSPARK35")
    assert py35 in Requirement(setup["extras_require"]["spark35"][0]).specifier
    assert py35 in Requirement(setup["extras_require"]["spark"][0]).specifier


def test_declared_python_versions_are_the_stacks():
    """>=3.10 (torch 2.13 and pyarrow 25 have no cp39 wheels), <3.13 (numpy<2, which libpecos
    needs, has no cp313 wheels); one classifier per supported minor version; the EMR nodes'
    Python and this test's inside the range."""
    setup = _setup_py()
    assert setup["python_requires"] == setup["PYTHON_REQUIRES"] == ">=3.10,<3.13"
    spec = SpecifierSet(setup["PYTHON_REQUIRES"])
    declared = sorted(
        c.rsplit(" ", 1)[1]
        for c in setup["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    supported = [f"3.{m}" for m in range(6, 20) if f"3.{m}" in spec]
    assert declared == supported == ["3.10", "3.11", "3.12"]
    assert "{}.{}".format(*sys.version_info[:2]) in spec
    assert _make_var("EMR_PYTHON").replace("python", "") in spec
    numpy = next(Requirement(r) for r in setup["INSTALL_REQUIRES"] if r.startswith("numpy"))
    assert "2.0" not in numpy.specifier  # the reason for <3.13


def test_make_dist_takes_torch_from_the_cpu_wheel_index():
    """A stock Linux pip gets the CUDA torch from PyPI: the CPU archive names PyTorch's CPU index
    (PyPI still serves every other package), as the GPU one names its CUDA index."""
    cpu = _make_var("TORCH_CPU_PIP").split()
    gpu = _make_var("TORCH_GPU_PIP").split()
    for flags, index in ((cpu, "https://download.pytorch.org/whl/cpu"), (gpu, "whl/cu")):
        assert flags[0] == "--index-url" and index in flags[1]
        assert flags[2:] == ["--extra-index-url", "https://pypi.org/simple"]


def _make(*args):
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", ROOT, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "platform, ok", [("Linux x86_64", True), ("Darwin arm64", False), ("Linux aarch64", False)]
)
def test_make_dist_checks_the_build_platform(platform, ok):
    here = "python{}.{}".format(*sys.version_info[:2])
    r = _make(
        "check-dist-platform",
        f"BUILD_PLATFORM={platform}",
        f"ENV_PYTHON={sys.executable}",
        f"EMR_PYTHON={here}",
    )
    assert (r.returncode == 0) == ok, r.stdout + r.stderr
    if not ok:
        assert f"this machine is {platform}, the EMR nodes are x86_64 Linux" in r.stderr


def test_make_dist_checks_the_archive_python():
    r = _make(
        "check-dist-platform",
        "BUILD_PLATFORM=Linux x86_64",
        f"ENV_PYTHON={sys.executable}",
        "EMR_PYTHON=python3.99",
    )
    assert r.returncode != 0
    assert "the nodes run python3.99" in r.stderr


def test_make_dist_stops_before_building_on_another_platform():
    r = _make("dist", "BUILD_PLATFORM=Darwin arm64")
    assert r.returncode != 0 and "the EMR nodes are x86_64 Linux" in r.stderr
    assert "pip" not in r.stdout  # nothing was built
