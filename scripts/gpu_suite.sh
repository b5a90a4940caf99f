#!/bin/bash
# Everything the GPU machine has to show, in calls of under 10 minutes each (run from the
# repository root there, with onnxruntime-gpu and egglog importable and the kernel libraries in
# custom_ops/build). Results go under ${OUT:-out/gpu}.
#   PHASE=checks  kernels/  custom-op GPU tests, compute-sanitizer memcheck (tests and hostile-model
#                           fuzz), custom-op benchmark (custom_ops/gpu_check.sh)
#                 pytest_gpu.txt  the GPU tests of training parity, fused Adam, the train step as
#                                 CUDA graphs, symbolic sizes, fuzz, fused attention
#                 flash_check.txt FlashAttention(Grad) vs a host reference, CUDA-graph replay, timing
#   PHASE=bench   optimize-cuda.json  e-graph optimizer off vs on: train and decode step, kernels
#                 llama*.json   SmolLM2-135M-shaped decode tokens/s and prefill vs transformers
#                               (fp32, batch 1: a quick look; PHASE=llama has the full comparison)
#   PHASE=llama   llama/llama-cuda-*.json  decode benchmark: ours fp32/fp16/bf16 (CUDA graph on and
#                               off) and onnxruntime-genai fp16 (its builder's model, CUDA graph on
#                               and off), batch 1 and 8; installs .whl/onnxruntime_genai_cuda-*.whl
#                               and .whl/onnx_ir-*.whl (--no-deps) when they are there
#   PHASE=llama-hf  the same JSON + transformers eager and static cache + torch.compile, fp32/fp16/bf16,
#                               batch 1 and 8 (run after PHASE=llama)
#   PHASE=train   train/        parity, SmolLM2-135M-shaped AdamW step, ours (fp32, fp32 + CUDA graphs,
#                               tf32, bf16, bf16 + CUDA graphs, fp16) vs Hugging Face (fp32, bf16,
#                               compile): 5 repeats, peak memory, ORT profile table
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
PY=${PYTHON:-python3}
PHASE=${PHASE:-checks}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MEGANEURA_REQUIRE_KERNELS=1
# Uninstalled (the GPU machine gets the tree, not the package), there is no meganeura_onnx.models /
# .cli (an install maps models/ and cli/ there): link them so the tests that import them run.
if ! $PY -c "import meganeura_onnx.models, meganeura_onnx.cli" 2>/dev/null; then
  for sub in models cli; do [ -e meganeura_onnx/$sub ] || ln -s ../$sub meganeura_onnx/$sub; done
fi
mkdir -p "$OUT"
status=0
step() { echo "=== $*"; "$@" || { echo "!!! failed: $*"; status=1; }; }
if [ "$PHASE" = checks ]; then
  step env OUT="$OUT/kernels" PYTHON="$PY" MEMCHECK_TIMEOUT="${MEMCHECK_TIMEOUT:-150}" bash custom_ops/gpu_check.sh
  pytest_gpu() { bash -c "timeout 150 $PY -m pytest -q -p no:cacheprovider -rs $* 2>&1 | tee -a '$OUT/pytest_gpu.txt'; exit \${PIPESTATUS[0]}"; }
  step pytest_gpu -m gpu tests/test_fused_adam.py tests/test_training_parity.py tests/test_cuda_graph_training.py
  step pytest_gpu tests/test_symbolic_models.py tests/test_kernel_fuzz.py -k cuda
  step pytest_gpu -m gpu tests/test_flash_attention.py tests/test_flash_attention_half.py
  step pytest_gpu tests/test_*gpu*.py  # every CUDA test file: kernels, fused decode and backward ops, losses, Adam, positions, precision
  step bash -c "make -C custom_ops flash-check >/dev/null && custom_ops/build/flash_check | tee '$OUT/flash_check.txt'; exit \${PIPESTATUS[0]}"
elif [ "$PHASE" = llama ]; then
  wheels=$(ls .whl/onnxruntime_genai_cuda-*.whl .whl/onnx_ir-*.whl 2>/dev/null)
  [ -n "$wheels" ] && step $PY -m pip install -q --no-deps $wheels
  step timeout 570 $PY benchmarks/llama.py --device cuda --sides ours,genai --out-dir "$OUT/llama"
elif [ "$PHASE" = llama-hf ]; then
  first=$(ls -t "$OUT"/llama/llama-cuda-*.json 2>/dev/null | head -1)
  step timeout 570 $PY benchmarks/llama.py --device cuda --sides hf-eager,hf-static ${first:+--merge "$first"} --out-dir "$OUT/llama"
elif [ "$PHASE" = train ]; then
  step timeout 570 $PY benchmarks/train_gpu.py "$OUT/train" --layers 30 --steps 10 --repeats 5
else
  step timeout 200 $PY benchmarks/optimize.py --device cuda --steps 10 --repeat 1 --out "$OUT/optimize-cuda.json"
  step timeout 120 $PY benchmarks/llama.py --device cuda --sides ours,hf-eager --precisions fp32 --batches 1 --out-dir "$OUT"
fi
echo "gpu_suite $PHASE status: $status"
exit $status
