#!/bin/bash
# Everything the GPU machine has to show, in one call (run from the repository root there, with
# onnxruntime-gpu installed and custom_ops/build carried). Results go under ${OUT:-out/gpu}.
#   kernels/   custom-op GPU tests, compute-sanitizer memcheck, custom-op benchmark (custom_ops/gpu_check.sh)
#   train/     training parity on CUDA + placement + SmolLM2-135M-shaped AdamW step vs PyTorch
#   llama*.json  SmolLM2-135M-shaped decode tokens/s and prefill vs transformers.generate
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/train"
status=0
step() { echo "=== $*"; "$@" || { echo "!!! failed: $*"; status=1; }; }
[ "${SKIP_KERNELS:-0}" = 1 ] || step env OUT="$OUT/kernels" PYTHON="$PY" MEMCHECK_TIMEOUT="${MEMCHECK_TIMEOUT:-150}" bash custom_ops/gpu_check.sh
step $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_training_parity.py
step $PY benchmarks/train_gpu.py "$OUT/train"
step $PY benchmarks/llama.py --device cuda --out-dir "$OUT"
echo "gpu_suite status: $status"
exit $status
