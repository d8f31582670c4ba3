# pina-spark: two commands do all set-up on a fresh machine (Python 3.10-3.12, Java 17):
#   make demo   creates .venv, installs everything, runs the whole pipeline on the demo data
#   make test   creates/refreshes .venv, runs the test suite
# Inner loop: make test-fast (no lint; leaves out the slow and demo markers, see its target).
# Also: make dist (wheel + venv-pack'd environment archive for EMR, see docs/emr.md), make docs
# (docs/config.md), make test-spark35 (the demo on pyspark 3.5 in .venv35, as EMR 7 runs it),
# make check-install35 (the wheel installed over a platform's pyspark 3.5), make test-airflow
# (the DAGs in their own venv), make test-spark35-full (the whole suite on pyspark 3.5), make lint;
# .ci/run runs make test, test-spark35-ci (a 3.5 subset), check-install35 and test-airflow.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= runs/demo
PYTEST_ARGS ?=
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP ?= 127.0.0.1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo test lint smoke dist test-spark35 clean docs

venv: $(STAMP)

$(STAMP): setup.py requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, in its own call: unpinned, pip would pull GBs of CUDA wheels
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pina_spark.smoke
	touch $(STAMP)

smoke: $(STAMP)
	$(PY) -m pina_spark.smoke

demo: $(STAMP)
	$(VENV)/bin/pina-spark demo --output $(DEMO_OUT)

# the README's test command: lint, format check and type check first (seconds), then the suite and
# every docstring example (one shared SparkSession: conftest.py)
test: lint
	$(PY) -m pytest -q -ra --doctest-modules $(PYTEST_ARGS) tests pina_spark

# the inner loop (under 3 min on 2 cores): the suite and every docstring example, less the tests
# marked slow (over ~3 s, or on a costly module fixture) or demo (on the demo run through
# spark-submit); no lint, format or type check. Markers: pytest.ini. `make test` runs them all.
.PHONY: test-fast
test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not slow and not demo" --doctest-modules $(PYTEST_ARGS) \
		tests pina_spark

# settings in pyproject.toml; tool versions pinned in requirements-dev.txt
LINT_PATHS := pina_spark tests benchmarks jobs conf/airflow setup.py conftest.py
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy

# docs/config.md from the config dataclasses (tests/test_config_reference.py checks it is current)
docs: $(STAMP)
	$(PY) -m pina_spark.config.reference > docs/config.md

# ---------------------------------------------------------------- EMR packaging (not part of test)
# make dist      dist/pina_spark-<v>-py3-none-any.whl + dist/pina-env-<v>.tar.gz: a venv-pack'd
#                Python 3.11 environment (CPU torch, the lock file's versions, no pyspark) that
#                every spark-submit ships with --archives dist/pina-env-<v>.tar.gz#env and
#                spark.pyspark.python=./env/bin/python (docs/emr.md "Per-job environment").
#                The archive holds compiled wheels for the machine that builds it: build on
#                x86_64 Linux with Python 3.11, like the EMR nodes (check-dist-platform says so
#                and stops elsewhere).
# make dist-gpu  dist/pina-env-gpu-<v>.tar.gz: the same with a CUDA build of torch (GBs).
# make dist-wheelhouse  dist/wheelhouse/ + dist/bootstrap.sh: the bootstrap-per-cluster route.
# make dist-wheelhouse-gpu  dist/wheelhouse-gpu/: CUDA torch for that route's GPU nodes.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' pina_spark/__init__.py)
WHEEL := dist/pina_spark-$(VERSION)-py3-none-any.whl
# the interpreter the archive is built with (must be 3.11, like the cluster's python3.11) and
# where that interpreter lives on the nodes: the archive's bin/python links to
# $(EMR_PYTHON_PREFIX)/bin/$(EMR_PYTHON) (AL2023's python3.11 package installs /usr/bin/python3.11)
ENV_PYTHON ?= $(PYTHON)
EMR_PYTHON ?= python3.11
EMR_PYTHON_PREFIX ?= /usr
# where pip finds each torch build (PyTorch's own indexes; PyPI's torch for Linux is the CUDA
# build): set one empty to use pip's own configuration (a mirror that has the right build)
TORCH_CPU_PIP ?= --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
TORCH_GPU_PIP ?= --index-url https://download.pytorch.org/whl/cu126 --extra-index-url https://pypi.org/simple
# the platform the archive is built for (the EMR nodes') and the one building it
DIST_PLATFORM := Linux x86_64
BUILD_PLATFORM ?= $(shell uname -s) $(shell uname -m)

.PHONY: wheel dist dist-gpu dist-wheelhouse dist-wheelhouse-gpu check-install35 test-airflow test-spark35-full test-spark35-ci \
	check-dist-platform

wheel: $(STAMP)
	rm -rf build/lib build/bdist.* dist/pina_spark-*.whl
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .
	test -f $(WHEEL)

# a venv-pack archive carries the build machine's compiled wheels and its Python's
# lib/pythonX.Y: both must be the nodes' (x86_64 Linux, $(EMR_PYTHON))
check-dist-platform:
	@if [ "$(BUILD_PLATFORM)" != "$(DIST_PLATFORM)" ]; then \
		echo "make dist: this machine is $(BUILD_PLATFORM), the EMR nodes are x86_64 Linux:" \
			"the archive would hold $(BUILD_PLATFORM) wheels. Build it on x86_64 Linux (the" \
			"cluster's primary node, or a linux/amd64 container); make dist-wheelhouse" \
			"downloads the nodes' wheels from any machine." >&2; exit 1; fi
	@v=$$($(ENV_PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])'); \
	if [ "$$v" != "$(EMR_PYTHON)" ]; then \
		echo "make dist: ENV_PYTHON=$(ENV_PYTHON) is $$v, the nodes run $(EMR_PYTHON):" \
			"set ENV_PYTHON to a $(EMR_PYTHON)" >&2; exit 1; fi
	@echo "build platform $(BUILD_PLATFORM), $(EMR_PYTHON): the EMR nodes' (ok)"

dist: check-dist-platform wheel
	cp conf/emr/bootstrap-node.sh dist/
	$(MAKE) --no-print-directory _env FLAVOR=cpu ARCHIVE=dist/pina-env-$(VERSION).tar.gz \
		TORCH_PIP="$(TORCH_CPU_PIP)"

dist-gpu: check-dist-platform wheel
	$(MAKE) --no-print-directory _env FLAVOR=gpu ARCHIVE=dist/pina-env-gpu-$(VERSION).tar.gz \
		TORCH_PIP="$(TORCH_GPU_PIP)"

# one environment archive: torch first (its own call, the build chosen by TORCH_PIP), then the
# wheel with its dependencies held at the lock file's versions (requirements.txt minus pyspark,
# as pip constraints), checked, then packed
_env:
	rm -rf build/env-$(FLAVOR) $(ARCHIVE)
	mkdir -p build
	$(ENV_PYTHON) -m venv build/env-$(FLAVOR)
	grep -v -E '^(pyspark)([=<> ]|$$)' requirements.txt > build/constraints-$(FLAVOR).txt
	build/env-$(FLAVOR)/bin/python -m pip install -q $(TORCH_PIP) torch==2.13.0
	build/env-$(FLAVOR)/bin/python -m pip install -q -c build/constraints-$(FLAVOR).txt $(WHEEL)
	build/env-$(FLAVOR)/bin/python -c "import importlib.util as u, sys, torch; \
		assert u.find_spec('pyspark') is None, 'pyspark must come from the platform'; \
		gpu = '$(FLAVOR)' == 'gpu'; assert bool(torch.version.cuda) == gpu, \
		f'torch {torch.__version__} (cuda={torch.version.cuda}) is not a $(FLAVOR) build: set TORCH_$(shell echo $(FLAVOR) | tr a-z A-Z)_PIP'"
	cd build && HF_HUB_OFFLINE=1 env-$(FLAVOR)/bin/python -m pina_spark.smoke --without-spark
	cd build && env-$(FLAVOR)/bin/python -c "import pina_spark, os; \
		assert os.path.realpath(pina_spark.__file__).startswith(os.path.realpath('env-$(FLAVOR)')), pina_spark.__file__"
	test -x build/env-$(FLAVOR)/bin/pina-spark
	# point the venv at the nodes' interpreter, then pack (venv-pack 0.2's --python-prefix
	# mangles a python3 -> .../bin/python3 link into .../bin/python3.113)
	ln -sfn $(EMR_PYTHON_PREFIX)/bin/$(EMR_PYTHON) build/env-$(FLAVOR)/bin/python3
	sed -i -e 's#^home = .*#home = $(EMR_PYTHON_PREFIX)/bin#' \
		-e 's#^executable = .*#executable = $(EMR_PYTHON_PREFIX)/bin/$(EMR_PYTHON)#' \
		-e '/^command = /d' build/env-$(FLAVOR)/pyvenv.cfg
	$(PY) -m venv_pack -p build/env-$(FLAVOR) -o $(ARCHIVE) -q
	tar -tvzf $(ARCHIVE) bin/python3 | grep -q -- "-> $(EMR_PYTHON_PREFIX)/bin/$(EMR_PYTHON)$$"
	tar -tzf $(ARCHIVE) | grep -q -x bin/pina-spark
	tar -tzf $(ARCHIVE) | grep -q -x lib/$(EMR_PYTHON)/site-packages/pina_spark/__init__.py
	@echo "$(ARCHIVE): $$(du -h $(ARCHIVE) | cut -f1) packed, $$(du -sh build/env-$(FLAVOR) | cut -f1) unpacked" \
		"(torch $$(build/env-$(FLAVOR)/bin/python -c 'import torch; print(torch.__version__)'))"

# bootstrap-per-cluster route: every wheel the nodes need for Python $(EMR_PYTHON_VERSION) on
# x86_64 Linux (pyspark excluded: EMR's Spark is used), installed offline on every node by
# conf/emr/bootstrap.sh into /opt/pina/venv
EMR_PYTHON_VERSION ?= 3.11
EMR_PIP_TARGET := --only-binary=:all: --python-version $(EMR_PYTHON_VERSION) \
	--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux_2_28_x86_64
dist-wheelhouse: wheel
	rm -rf dist/wheelhouse
	mkdir -p dist/wheelhouse
	grep -v -E '^(pyspark)([=<> ]|$$)' requirements.txt > dist/wheelhouse/requirements-emr.txt
	$(PY) -m pip download -q -d dist/wheelhouse $(EMR_PIP_TARGET) $(TORCH_CPU_PIP) torch==2.13.0
	$(PY) -m pip download -q -d dist/wheelhouse $(EMR_PIP_TARGET) \
		-r dist/wheelhouse/requirements-emr.txt
	cp $(WHEEL) dist/wheelhouse/
	cp conf/emr/bootstrap.sh conf/emr/bootstrap-node.sh dist/
	@echo "wheelhouse ready: $$(ls dist/wheelhouse | wc -l) files, $$(du -sh dist/wheelhouse | cut -f1)"

# GPU nodes of the bootstrap route: a CUDA build of torch and its nvidia-* wheels, uploaded to
# dist/wheelhouse-gpu/ beside dist/wheelhouse/ (bootstrap.sh --gpu refuses to start without it)
dist-wheelhouse-gpu:
	rm -rf dist/wheelhouse-gpu
	mkdir -p dist/wheelhouse-gpu
	$(PY) -m pip download -q -d dist/wheelhouse-gpu $(EMR_PIP_TARGET) $(TORCH_GPU_PIP) torch==2.13.0
	@echo "GPU wheelhouse ready: $$(ls dist/wheelhouse-gpu | wc -l) files"

# The wheel on a platform that already has Spark 3.5 (EMR 7, a notebook): a fresh venv gets
# pyspark 3.5 FIRST, then torch (own call, as above), then `pip install dist/pina_spark-*.whl`
# with its dependencies; pyspark must still be 3.5 afterwards (install metadata must not pull
# another Spark). Wheels come from pip's cache after the first run.
INSTALL35_VENV ?= build/venv-install35
check-install35: wheel
	rm -rf $(INSTALL35_VENV)
	$(PYTHON) -m venv $(INSTALL35_VENV)
	$(INSTALL35_VENV)/bin/python -m pip install -q "pyspark==$(PYSPARK35)"
	$(INSTALL35_VENV)/bin/python -m pip install -q torch==2.13.0
	$(INSTALL35_VENV)/bin/python -m pip install -q $(WHEEL)
	$(INSTALL35_VENV)/bin/python -m pip check
	$(INSTALL35_VENV)/bin/python -c "import pyspark, pina_spark; \
		assert pyspark.__version__ == '$(PYSPARK35)', pyspark.__version__; \
		print('pyspark', pyspark.__version__, 'kept; pina_spark', pina_spark.__version__, 'installed')"
	test -x $(INSTALL35_VENV)/bin/pina-spark
	$(INSTALL35_VENV)/bin/pina-spark --version

# ---------------------------------------------------------------- Airflow DAGs (separate venv)
# conf/airflow/*.py loaded with DagBag and run with dag.test() against a fake EMR, in venvs of
# their own (Airflow's dependency set must not meet the pinned stack); tests/test_airflow_dags.py
# and the helpers' docstring examples. Twice: on the pinned Airflow 3 and on the oldest supported,
# Airflow 2.9 with the last Amazon provider that supports it. ~2 min per venv to install here.
# AIRFLOW_PINS: upper bounds that an Airflow release needs and does not declare. Airflow 2.9.3
# sets an attribute on cryptography's MultiFernet, which cryptography 51 made a Rust class that
# refuses it (AttributeError 'is_encrypted' in db.resetdb; Airflow's own constraints file for
# 2.9.3 pins cryptography 42.0.8). Airflow 3.3.2 runs on 51.
empty :=
space := $(empty) $(empty)
VENV_AIRFLOW ?= .venv-airflow
AIRFLOW_VERSION ?= 3.3.2
AIRFLOW_AMAZON_VERSION ?= 9.39.0
AIRFLOW_PINS ?=
VENV_AIRFLOW2 ?= .venv-airflow2
AIRFLOW2_VERSION ?= 2.9.3
AIRFLOW2_AMAZON_VERSION ?= 9.6.0
AIRFLOW2_PINS ?= cryptography<51
STAMP_AIRFLOW := $(VENV_AIRFLOW)/.installed-$(AIRFLOW_VERSION)-$(AIRFLOW_AMAZON_VERSION)$(if $(AIRFLOW_PINS),-$(subst <,-lt,$(subst $(space),,$(AIRFLOW_PINS))))

$(STAMP_AIRFLOW):
	test -x $(VENV_AIRFLOW)/bin/python || $(PYTHON) -m venv $(VENV_AIRFLOW)
	$(VENV_AIRFLOW)/bin/python -m pip install -q "apache-airflow==$(AIRFLOW_VERSION)" \
		"apache-airflow-providers-amazon==$(AIRFLOW_AMAZON_VERSION)" "pytest>=7.4" \
		$(foreach p,$(AIRFLOW_PINS),"$(p)")
	touch $(STAMP_AIRFLOW)

test-airflow:
	$(MAKE) --no-print-directory _test-airflow
	$(MAKE) --no-print-directory _test-airflow VENV_AIRFLOW=$(VENV_AIRFLOW2) \
		AIRFLOW_VERSION=$(AIRFLOW2_VERSION) AIRFLOW_AMAZON_VERSION=$(AIRFLOW2_AMAZON_VERSION) \
		AIRFLOW_PINS="$(AIRFLOW2_PINS)"

.PHONY: _test-airflow
_test-airflow: $(STAMP_AIRFLOW)
	AIRFLOW_HOME=$(abspath $(VENV_AIRFLOW))/home AIRFLOW__CORE__LOAD_EXAMPLES=False \
		AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=600 \
		$(VENV_AIRFLOW)/bin/python -m pytest -q -ra --doctest-modules tests/test_airflow_dags.py \
		conf/airflow/pina_emr_steps.py conf/airflow/pina_emr_operators.py

# ---------------------------------------------------------------- Spark 3.5 (EMR 7) check
VENV35 ?= .venv35
PY35 := $(VENV35)/bin/python
PYSPARK35 ?= 3.5.8
STAMP35 := $(VENV35)/.installed-$(PYSPARK35)
DEMO35_OUT ?= runs/demo35

$(STAMP35): setup.py requirements.txt requirements-dev.txt
	test -x $(PY35) || $(PYTHON) -m venv $(VENV35)
	$(PY35) -m pip install -q --upgrade pip
	$(PY35) -m pip install -q torch==2.13.0
	grep -v -E '^(pyspark)([=<> ]|$$)' requirements.txt > $(VENV35)/requirements35.txt
	echo "pyspark==$(PYSPARK35)" >> $(VENV35)/requirements35.txt
	$(PY35) -m pip install -q -r $(VENV35)/requirements35.txt -r requirements-dev.txt
	$(PY35) -m pip install -q --no-deps -e .
	$(PY35) -m pina_spark.smoke
	touch $(STAMP35)

test-spark35: $(STAMP35)
	PYSPARK_PYTHON=$(abspath $(PY35)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY35)) \
		$(VENV35)/bin/pina-spark demo --output $(DEMO35_OUT) --force
	$(PY35) -c "import pyspark, sys; assert pyspark.__version__.startswith('3.5'), pyspark.__version__"
	test -f $(DEMO35_OUT)/run/eval/_SUCCESS

# the whole test suite and the docstring examples on pyspark 3.5, as EMR 7 runs them (.ci/run)
test-spark35-full: $(STAMP35)
	PYSPARK_PYTHON=$(abspath $(PY35)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY35)) \
		$(PY35) -m pytest -q -ra --doctest-modules $(PYTEST_ARGS) tests pina_spark
	$(PY35) -c "import pyspark, sys; assert pyspark.__version__.startswith('3.5'), pyspark.__version__"

# CI's pyspark 3.5 run (.ci/run; the whole suite twice no longer fits CI's time): the fast tier
# and the demo through spark-submit, every stage's job and its golden digest (everything but the
# slow marker; the slow tests that rerun stages on the demo root run on pyspark 4 only), then
# every input-validation test, slow ones included (the rules most tied to Spark's version)
test-spark35-ci: $(STAMP35)
	PYSPARK_PYTHON=$(abspath $(PY35)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY35)) \
		$(PY35) -m pytest -q -ra -m "not slow" --doctest-modules $(PYTEST_ARGS) tests pina_spark
	PYSPARK_PYTHON=$(abspath $(PY35)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY35)) \
		$(PY35) -m pytest -q -ra -m slow $(PYTEST_ARGS) tests/test_validate.py tests/test_bad_input.py
	$(PY35) -c "import pyspark, sys; assert pyspark.__version__.startswith('3.5'), pyspark.__version__"

clean:
	rm -rf $(VENV) $(VENV35) $(VENV_AIRFLOW) $(VENV_AIRFLOW2) runs dist build *.egg-info
