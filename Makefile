# The two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: run test lint unit e2e spark bench bench-rabbitmq fuzz clean

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,spark]'
	touch $(VENV)/.core $@

run: $(VENV)/.core
	$(VENV)/bin/headrace serve

lint: $(VENV)/.dev
	$(VENV)/bin/lint-imports

test: $(VENV)/.dev lint
	$(PY) -m pytest tests

unit: $(VENV)/.dev
	$(PY) -m pytest tests/unit tests/amqp

e2e: $(VENV)/.dev
	$(PY) -m pytest tests/e2e

spark: $(VENV)/.dev
	$(PY) -m pytest tests/spark

clean:
	rm -rf $(VENV) build *.egg-info headrace-data
