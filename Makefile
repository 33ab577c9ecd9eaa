# dataplane: set-up, demo and tests. Each target does all set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
BIN := $(VENV)/bin
DATA ?= data
# Debian packages: real data for the demo and tests, Chromium for the report test.
APT_PACKAGES := dataset-fashion-mnist opencv-doc
APT_TEST_PACKAGES := $(APT_PACKAGES) chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: demo test test-slow test-gpu typecheck lint venv system-deps system-test-deps clean help

help:
	@echo "make demo   - install into $(VENV), install the real dataset, run the main job"
	@echo "make test   - install what tests need, run the suite (not slow)"
	@echo "make test-slow - the slow tests"
	@echo "make test-gpu - the gpu tests (needs a CUDA device)"
	@echo "make typecheck - mypy over every package (dev dependencies)"
	@echo "make lint   - ruff check over the repository (dev dependencies)"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -e '.[test,darshan]'
	touch $@

venv: $(VENV)/.installed

define apt_install
	@if command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    $(SUDO) apt-get install -y -q $$missing >/dev/null || \
	      { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $$missing >/dev/null; } || \
	      echo "WARNING: could not apt-get install$$missing; tests needing them will skip"; \
	  fi; \
	else \
	  echo "NOTE: apt-get not found. Install Fashion-MNIST (IDX files) and point DATAPLANE_FMNIST_DIR at them;"; \
	  echo "      tests that need $(1) will skip."; \
	fi
endef

system-deps:
	$(call apt_install,$(APT_PACKAGES))

system-test-deps:
	$(call apt_install,$(APT_TEST_PACKAGES))

demo: venv system-deps
	$(BIN)/dataplane ingest fmnist $(DATA)/fmnist --format folder
	$(BIN)/dataplane iterate $(DATA)/fmnist/train --epochs 2
	$(BIN)/dataplane serve --demo
	@# A few minutes of training: fresh, then perfect (pre-train on cached augmented samples,
	@# fine-tune fresh) on the first 10k images per split; compare prints accuracy and speed-up.
	rm -rf runs/demo-fresh runs/demo-perfect
	$(BIN)/dataplane train --data fmnist --data-root $(DATA) --limit 10000 --schedule fresh \
	  --epochs 5 --target-accuracy 0.7 --no-progress --run-dir runs/demo-fresh
	$(BIN)/dataplane train --data fmnist --data-root $(DATA) --limit 10000 --schedule perfect \
	  --variants 1 --phase1-fraction 0.6 --epochs 5 --target-accuracy 0.7 --no-progress \
	  --run-dir runs/demo-perfect
	$(BIN)/dataplane compare runs/demo-fresh runs/demo-perfect --target-accuracy 0.7 \
	  --out runs/demo-compare.png

test: venv system-test-deps
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: venv system-test-deps
	$(PY) -m pytest -m "slow" $(PYTEST_ARGS)

test-gpu: venv
	$(PY) -m pytest -m "gpu" $(PYTEST_ARGS)

$(VENV)/.dev-installed: $(VENV)/.installed
	$(PIP) install -q -e '.[dev]'
	touch $@

# Not part of `make test`: mypy and the stubs it reads change between releases, so a new one
# can flag code that did not change; run it before landing.
typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy dataplane cache preprocessing trainers placement logs_analysis

# Not part of `make test` either: a new ruff release can flag code that did not change (the
# rules are pinned in pyproject.toml, their checks are not); run it before landing.
lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache
