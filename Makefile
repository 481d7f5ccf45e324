# The interface for people and CI alike. Each target installs what it needs
# into .venv first, so a fresh clone needs nothing but Python 3.11 and make.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt
SERVER_READY := $(VENV)/.server-installed
DEV_READY := $(VENV)/.dev-installed
BENCH_READY := $(VENV)/.bench-installed

.PHONY: install run test proto lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(SERVER_READY): $(BIN)/python pyproject.toml client/python/pyproject.toml constraints.txt
	$(PIP) -e client/python -e .
	touch $@

$(DEV_READY): $(SERVER_READY)
	$(PIP) -e client/python -e '.[dev]'
	touch $@

$(BENCH_READY): $(DEV_READY)
	$(PIP) -e client/python -e '.[dev,bench]'
	touch $@

install: $(DEV_READY)

## run: start the server on localhost:50051 (embedded Postgres, local model). ARGS="--port 6000" to change.
run: $(SERVER_READY)
	HF_HUB_OFFLINE=1 $(BIN)/contextfold serve $(ARGS)

## test: the whole suite against real servers, Postgres and the model.
test: $(DEV_READY)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## bench: Inject's fan-out (memory and two 100 ms providers) on a real server; CEL libraries compared.
bench: $(BENCH_READY)
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.cel_libraries

## proto: regenerate the checked-in stubs from protos/.
proto: $(DEV_READY)
	$(BIN)/python scripts/gen_protos.py

## lint: ruff, mypy on the client package, buf lint, and a check that the stubs are current.
lint: $(DEV_READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy client/python/contextfold
	$(BIN)/buf lint
	$(BIN)/python scripts/gen_protos.py --check

format: $(DEV_READY)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
