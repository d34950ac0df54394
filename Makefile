# The two commands in the README: `make run` and `make test`. Everything else is a step of theirs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_PACKAGES := openssh-server openssh-client xvfb xauth

.PHONY: run test check lint unit system-deps venv bench agent-pyz screenshots clean

run: $(STAMP)
	$(BIN)/meshdeck plan --model deepseek-v3.2 --gpu H200-SXM-141GB --nodes 1 --gpus-per-node 8

# Installs what the tests need (Debian packages when run as root, the venv, the project), then runs
# ruff, the import-layer contracts and the whole pytest suite (benchmarks excluded: `make bench`).
test: system-deps $(STAMP) check
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

check: $(STAMP)
	$(BIN)/ruff check app agent tests packaging
	$(BIN)/ruff format --check app agent tests packaging
	$(BIN)/lint-imports --no-cache

system-deps:
	@missing=""; \
	command -v /usr/sbin/sshd >/dev/null 2>&1 || missing="$$missing openssh-server"; \
	command -v ssh-keygen >/dev/null 2>&1 || missing="$$missing openssh-client"; \
	command -v Xvfb >/dev/null 2>&1 || missing="$$missing xvfb xauth"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing (run 'sudo apt-get install $(SYSTEM_PACKAGES)'; tests needing them will skip)"; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned to the CPU wheel; the project's `torch>=2.4` range is then already met.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,workers]'
	touch $(STAMP)

venv: $(STAMP)

bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -s tests/benchmarks -p no:cacheprovider -o addopts=""

agent-pyz: $(STAMP)
	$(BIN)/python packaging/build_agent.py

clean:
	rm -rf build dist .pytest_cache .ruff_cache
