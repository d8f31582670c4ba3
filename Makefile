# pina-spark: two commands do all set-up on a fresh machine (Python 3.9+, Java 17):
#   make demo   creates .venv, installs everything, runs the whole pipeline on the demo data
#   make test   creates/refreshes .venv, runs the test suite
# Also: make dist (wheel + wheelhouse for EMR, see docs/emr.md), make test-spark35 (the demo on
# pyspark 3.5 in .venv35, as EMR 7 runs it); .ci/run runs make test then make test-spark35.
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

.PHONY: venv demo test smoke dist test-spark35 clean

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

test: $(STAMP)
	$(PY) -m pytest -q -ra $(PYTEST_ARGS) tests

# ---------------------------------------------------------------- EMR packaging (not part of test)
# dist/pina_spark-*.whl (for --py-files) and dist/wheelhouse/: every wheel the cluster needs for
# Python $(EMR_PYTHON_VERSION) on x86_64 Linux (pyspark excluded: EMR's Spark is used), installed
# offline on every node by conf/emr/bootstrap.sh.
EMR_PYTHON_VERSION ?= 3.11
EMR_PIP_TARGET := --only-binary=:all: --python-version $(EMR_PYTHON_VERSION) \
	--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux_2_28_x86_64
dist: $(STAMP)
	rm -rf dist build
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .
	mkdir -p dist/wheelhouse
	grep -v -E '^(pyspark)([=<> ]|$$)' requirements.txt > dist/wheelhouse/requirements-emr.txt
	$(PY) -m pip download -q -d dist/wheelhouse $(EMR_PIP_TARGET) torch==2.13.0
	$(PY) -m pip download -q -d dist/wheelhouse $(EMR_PIP_TARGET) \
		-r dist/wheelhouse/requirements-emr.txt
	cp dist/pina_spark-*.whl dist/wheelhouse/
	cp conf/emr/bootstrap.sh dist/
	@echo "dist ready: $$(ls dist/*.whl) + dist/wheelhouse ($$(ls dist/wheelhouse | wc -l) files," \
		"$$(du -sh dist/wheelhouse | cut -f1)); upload: see docs/emr.md"

# ---------------------------------------------------------------- Spark 3.5 (EMR 7) check
VENV35 ?= .venv35
PY35 := $(VENV35)/bin/python
PYSPARK35 ?= 3.5.8
STAMP35 := $(VENV35)/.installed-$(PYSPARK35)
DEMO35_OUT ?= runs/demo35

$(STAMP35): setup.py requirements.txt
	test -x $(PY35) || $(PYTHON) -m venv $(VENV35)
	$(PY35) -m pip install -q --upgrade pip
	$(PY35) -m pip install -q torch==2.13.0
	grep -v -E '^(pyspark)([=<> ]|$$)' requirements.txt > $(VENV35)/requirements35.txt
	echo "pyspark==$(PYSPARK35)" >> $(VENV35)/requirements35.txt
	$(PY35) -m pip install -q -r $(VENV35)/requirements35.txt
	$(PY35) -m pip install -q --no-deps -e .
	$(PY35) -m pina_spark.smoke
	touch $(STAMP35)

test-spark35: $(STAMP35)
	PYSPARK_PYTHON=$(abspath $(PY35)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY35)) \
		$(VENV35)/bin/pina-spark demo --output $(DEMO35_OUT) --force
	$(PY35) -c "import pyspark, sys; assert pyspark.__version__.startswith('3.5'), pyspark.__version__"
	test -f $(DEMO35_OUT)/run/eval/_SUCCESS

clean:
	rm -rf $(VENV) $(VENV35) runs dist build *.egg-info
