# Two commands a user needs: `make demo` and `make test`. Both set everything up from this repo's files.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test setup lint format kernels asan wheel-smoke bench-llama-cpu clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)

# The kernel libraries of this checkout, into custom_ops/build/ (custom_ops/CMakeLists.txt; the
# CUDA library too when nvcc is found, MEGANEURA_CUDA=0 skips it).
kernels:
	$(MAKE) -C custom_ops

# The kernel tests under AddressSanitizer (custom_ops/Makefile preloads libasan).
asan: setup
	$(MAKE) -C custom_ops asan-test PYTHON=$(abspath $(PY))

demo: setup kernels
	$(VENV)/bin/meganeura train models/mnist_mlp.py --epochs 10 --optimizer adam --checkpoint out/mnist_mlp.safetensors --export out/mnist_mlp_trained.onnx
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The wheel as a user gets it: built from this checkout, installed with [hf,data] into a fresh venv
# outside the tree, the CLI run from an empty folder (scripts/wheel_smoke.sh).
wheel-smoke: setup
	scripts/wheel_smoke.sh $(abspath $(PY))

test: setup kernels lint asan
	MEGANEURA_REQUIRE_KERNELS=1 $(VENV)/bin/pytest -q
	$(MAKE) test-ort-training
	$(MAKE) wheel-smoke

# The CPU decode benchmark of the README: ours vs onnxruntime-genai (its model builder's fp32 CPU model)
# vs transformers eager, SmolLM2-135M shape, random weights, one run; JSON in benchmarks/results/.
# onnxruntime-genai goes into .venv with the [bench] extra: it needs onnxruntime >= 1.31, which .venv
# has, and its builder onnx-ir; nothing else in .venv changes.
bench-llama-cpu: setup kernels
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/llama.py --device cpu

clean:
	rm -rf $(VENV) $(ORTT_VENV) out custom_ops/build .pytest_cache .ruff_cache

# --- onnxruntime-training -----------------------------------------------------------------------
# onnxruntime-training 1.19.2 is the last release (Sep 2024). It conflicts with the `onnxruntime`
# package (both provide the `onnxruntime` module), needs numpy<2 and onnx<=1.16 (IR <= 10), and its
# Python package imports torch. So it gets its own venv; this package goes in with --no-deps so
# `import onnxruntime` resolves to the training build. torch 2.13.0 (CPU) is the wheel on this disk.
ORTT_VENV := .venv-ort-training
ORTT_PY := $(ORTT_VENV)/bin/python
ORTT_STAMP := $(ORTT_VENV)/.installed
ORTT_PINS := onnxruntime-training-cpu==1.19.2 onnx==1.16.2 "numpy<2" torch==2.13.0

.PHONY: ort-training test-ort-training

$(ORTT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(ORTT_VENV)
	$(ORTT_PY) -m pip install -q --upgrade pip
	$(ORTT_PY) -m pip install -q $(ORTT_PINS) "click>=8.1" "tqdm>=4.60" "safetensors>=0.4" "pytest>=8"
	$(ORTT_PY) -m pip install -q --no-deps -e .
	touch $@

ort-training: $(ORTT_STAMP)

# Runs tests/ort_training in the training venv; the native side of the parity tests runs in the
# main venv's interpreter, handed over explicitly.
test-ort-training: setup ort-training
	$(ORTT_PY) -m pytest -q tests/ort_training --native-python=$(abspath $(PY))
