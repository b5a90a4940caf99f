#!/bin/bash
# One-shot GPU verification of the com.meganeura CUDA kernels (run from the repository root on the
# GPU machine, onnxruntime-gpu already installed). Writes everything under ${OUT:-out/gpu_check}:
#   pytest_gpu.txt / junit_gpu.xml   GPU + CPU kernel tests (placement, parity, in-place, bad input)
#   memcheck.txt                     compute-sanitizer --tool memcheck over the GPU tests
#   fuzz_memcheck.txt                tests/kernel_fuzz.py (hostile models) on CUDA under memcheck
#   attn_check.txt                   build/attn_check (when built): CUDA attention vs host reference, event timing
#   bench_cuda.json / bench_cuda.txt benchmarks/custom_ops.py on the GPU (extra arguments: BENCH_ARGS)
# The libraries are normally built on the dev machine and carried (custom_ops/build); if they are
# missing and nvcc + headers are available here, they are built.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python}
status=0
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
} 2>&1 | tee "$OUT/env.txt"
if [ ! -f custom_ops/build/libmeganeura_ops_cuda.so ]; then
  make -C custom_ops all 2>&1 | tee "$OUT/build.txt" || status=1
fi
ls -la custom_ops/build/*.so 2>&1 | tee -a "$OUT/env.txt"

if [ -x custom_ops/build/attn_check ]; then
  timeout 120 custom_ops/build/attn_check 2>&1 | tee "$OUT/attn_check.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

$PY -m pytest -q -p no:cacheprovider -rs tests/test_kernels_gpu.py tests/test_kernels_cpu.py \
  --junitxml="$OUT/junit_gpu.xml" 2>&1 | tee "$OUT/pytest_gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

if command -v compute-sanitizer >/dev/null 2>&1; then
  SAN=compute-sanitizer
else
  SAN=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
fi
if [ -n "${SAN:-}" ]; then
  # GPU tests only; --target-processes all follows pytest's children; errors -> nonzero exit code.
  timeout ${MEMCHECK_TIMEOUT:-240} "$SAN" --tool memcheck --error-exitcode 99 --target-processes all \
    $PY -m pytest -q -p no:cacheprovider -x tests/test_kernels_gpu.py -k "not 4096" 2>&1 | tail -n 200 > "$OUT/memcheck.txt"
  rc=${PIPESTATUS[0]}
  echo "compute-sanitizer exit code: $rc" | tee -a "$OUT/memcheck.txt"
  grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.txt"
  [ "$rc" -eq 0 ] || status=1
  # The hostile-model fuzz on the CUDA kernels: every model refused or run, no memory error.
  timeout ${MEMCHECK_TIMEOUT:-240} "$SAN" --tool memcheck --error-exitcode 99 \
    $PY tests/kernel_fuzz.py --device cuda --count ${FUZZ_COUNT:-300} --seed 1 2>"$OUT/fuzz_memcheck.log" | tee "$OUT/fuzz_memcheck.txt"
  rc=${PIPESTATUS[0]}
  grep -E "ERROR SUMMARY" "$OUT/fuzz_memcheck.log" | tee -a "$OUT/fuzz_memcheck.txt"
  echo "fuzz compute-sanitizer exit code: $rc" | tee -a "$OUT/fuzz_memcheck.txt"
  [ "$rc" -eq 0 ] || status=1
else
  echo "compute-sanitizer not found" | tee "$OUT/memcheck.txt"
fi

$PY benchmarks/custom_ops.py --device cuda --json "$OUT/bench_cuda.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_cuda.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "gpu_check status: $status"
exit $status
