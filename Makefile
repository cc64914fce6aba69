# Two entry points: `make demo` and `make test`. Both are idempotent: the virtual environment is
# reused, and pip's wheel cache keeps the llama-server build (15-20 min the first time on 2 cores).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.frank-setup

.PHONY: setup demo test clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[llamacpp,test]'
	$(PY) -m frankenstein doctor
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/frank demo

# pytest exit code 5 (no tests collected) is a failure here, never a pass.
test: setup
	$(PY) -m pytest -q tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

clean-venv:
	rm -rf $(VENV)
