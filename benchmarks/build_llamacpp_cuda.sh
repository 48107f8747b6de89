#!/usr/bin/env bash
# llama.cpp built for CUDA, packed for the device machine: the reference engine_vs_llamacpp.py and
# long_decode.py run against on a GPU (benchmarks/gpu_check.sh unpacks it there). The device image has
# no llama-cpp-python and reaches no network, so it is built HERE (nvcc 13, no GPU needed) from the
# llama-cpp-python sdist and carried as .lcp/llama_cpp.tar.xz: the package's Python files (ctypes
# bindings) with its shared libraries in llama_cpp/lib, built for one architecture (ARCH, default 90).
#
#   benchmarks/build_llamacpp_cuda.sh        # ~45 minutes on 2 cores; then carry [".whl", ".lcp"]
#
# What it needs here: nvcc and the CUDA runtime (the toolkit); cuBLAS, which the toolkit here lacks, is
# taken from the nvidia-cublas wheel into WORK/cuda (headers and libraries; at run time the device's
# own libcublas.so.13 is used). GGML_CUDA_NO_VMM=ON because no driver (libcuda.so) is here to link:
# llama.cpp's memory pool then uses plain cudaMalloc, not virtual memory (a small cost, if any, on
# its side). Not CI: only a benchmark's reference.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VERSION:-0.3.36}
ARCH=${ARCH:-90}
WORK=${WORK:-/tmp/lcp}
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}
mkdir -p "$WORK" .lcp
grep -qx '/.lcp/' .git/info/exclude 2>/dev/null || echo '/.lcp/' >> .git/info/exclude

cd "$WORK"
[ -f "llama_cpp_python-$VERSION.tar.gz" ] || "$PY" -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d .
[ -d "llama_cpp_python-$VERSION" ] || tar xzf "llama_cpp_python-$VERSION.tar.gz"
# cuBLAS headers and libraries beside the toolkit's own (FindCUDAToolkit looks in the toolkit folder)
TOOLKIT=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")/targets/x86_64-linux
if [ ! -f "$TOOLKIT/include/cublas_v2.h" ]; then
  ls nvidia_cublas-*.whl > /dev/null 2>&1 || "$PY" -m pip download nvidia-cublas --no-deps -d .
  rm -rf cublas && mkdir cublas && (cd cublas && unzip -q ../nvidia_cublas-*.whl)
  cp cublas/nvidia/cu13/include/*.h "$TOOLKIT/include/"
  cp cublas/nvidia/cu13/lib/*.so.13 "$TOOLKIT/lib/"
  ln -sf libcublas.so.13 "$TOOLKIT/lib/libcublas.so"
  ln -sf libcublasLt.so.13 "$TOOLKIT/lib/libcublasLt.so"
fi

cmake -S "llama_cpp_python-$VERSION/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
nice -n 10 cmake --build build -j"$JOBS" --target llama

# the package: Python files from the sdist, libraries into llama_cpp/lib (where it loads them from)
rm -rf pack && mkdir -p pack/llama_cpp/lib
cp -r "llama_cpp_python-$VERSION/llama_cpp/." pack/llama_cpp/
rm -rf pack/llama_cpp/server
find build/bin build -maxdepth 2 -name 'lib*.so*' \( -name 'libllama*' -o -name 'libggml*' \) -exec cp -P {} pack/llama_cpp/lib/ \;   # symlinks kept: sonames and the names ctypes loads
find pack/llama_cpp/lib -type f -exec strip --strip-unneeded {} \;
# (their RPATH names this build folder: gpu_check.sh puts llama_cpp/lib on LD_LIBRARY_PATH instead)
tar -C pack -cJf "$OLDPWD/.lcp/llama_cpp.tar.xz" llama_cpp
ls -la "$OLDPWD/.lcp/llama_cpp.tar.xz"
