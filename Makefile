# pina-spark: two commands do all set-up on a fresh machine (Python 3.9+, Java 17):
#   make demo   creates .venv, installs everything, runs the whole pipeline on the demo data
#   make test   creates/refreshes .venv, runs the test suite
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

.PHONY: venv demo test smoke dist clean

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

clean:
	rm -rf $(VENV) runs dist build *.egg-info
