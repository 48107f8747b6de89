#!/usr/bin/env bash
# Where a CUDA decode step's time goes, on a lent GPU (docs/cuda.md): builds strata with CUDA as
# gpu_check.sh does, writes the same two model shapes (gpu_models.py), then per shape: wall ms per decode
# step (one row: as built, CUDA graphs off, programmatic launch off; four rows), the steps under
# torch.profiler (per-kernel device time, busy time against wall time), and ncu's per-kernel summary
# of two decode steps (--clock-control none).
#
#   # with the device tool, from the repo root (carry [".whl"], timeout_s ~300):
#   bash benchmarks/gpu_decode_profile.sh
#
# $OUT gets summary.txt (one line per step: rc, seconds) and log.txt (everything). TORCH=0 skips the
# torch.profiler step, NCU=0 ncu;
# NCU_DETAIL=0 skips ncu's speed-of-light / occupancy / warp-state sections of the first decode product
# launches. SKIP_BUILD=1 (after gpu_check.sh on the same machine) and SMOL= / BIGM= (its model files)
# reuse what is there.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/strata-gpu-profile}
MODELS=${MODELS:-/tmp/strata-models}
ARCH=${ARCH:-90}
STEP_LIMIT=${STEP_LIMIT:-90}
mkdir -p "$OUT" "$MODELS"
: > "$OUT/summary.txt"; : > "$OUT/log.txt"
step() {   # step NAME COMMAND...: output to the terminal and $OUT/log.txt; rc and seconds to summary.txt
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$OUT/log.txt"
  timeout -k 5 "$STEP_LIMIT" "$@" 2>&1 | tee -a "$OUT/log.txt"
  echo "$name rc=${PIPESTATUS[0]} $((SECONDS - t0))s" >> "$OUT/summary.txt"
  return 0
}
if ls .whl/*.whl > /dev/null 2>&1; then
  step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  step build "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir -e . \
    -Ccmake.define.STRATA_CUDA=ON -Ccmake.define.STRATA_CUDA_ARCHITECTURES="$ARCH"
fi
SMOL=${SMOL:-$MODELS/smol-shape.Q4_1.gguf}   # gpu_check.sh's files when it ran before on this machine
BIGM=${BIGM:-$MODELS/llama1b-shape.Q4_K.gguf}
[ -f "$SMOL" ] && [ -f "$BIGM" ] || step models "$PY" benchmarks/gpu_models.py "$SMOL" "$BIGM"
P=benchmarks/gpu_decode_profile.py
for m in "$BIGM" "$SMOL"; do
  tag=$(basename "$m" .gguf)
  step "time_$tag" "$PY" $P time "$m"
  STRATA_CUDA_GRAPHS=0 step "time_nographs_$tag" "$PY" $P time "$m"
  STRATA_CUDA_PDL=0 step "time_nopdl_$tag" "$PY" $P time "$m"
  step "time_rows4_$tag" "$PY" $P time "$m" --rows 4
  [ "${TORCH:-1}" = 1 ] && step "torch_$tag" "$PY" $P torch "$m"
  if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
    step "ncu_$tag" ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
      --print-summary per-kernel "$PY" $P ncu "$m"
  fi
done
if [ "${NCU_DETAIL:-1}" = 1 ] && command -v ncu > /dev/null; then
  step ncu_detail ncu --clock-control none --profile-from-start off -k regex:decode_kernel --launch-count 5 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis "$PY" $P ncu "$BIGM" --steps 1
fi
cat "$OUT/summary.txt"
