# Two commands a user needs: `make demo` and `make test`. Both set everything up from this repo's files.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test setup lint format kernels asan clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)

kernels:
	@if [ -f custom_ops/Makefile ]; then $(MAKE) -C custom_ops; fi

# The kernel tests under AddressSanitizer (custom_ops/Makefile preloads libasan).
asan: setup
	$(MAKE) -C custom_ops asan-test PYTHON=$(abspath $(PY))

demo: setup kernels
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: setup kernels lint asan
	$(VENV)/bin/pytest -q

clean:
	rm -rf $(VENV) out custom_ops/build .pytest_cache .ruff_cache
