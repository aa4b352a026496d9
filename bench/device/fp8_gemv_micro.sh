#!/usr/bin/env bash
# Device side: build bench/device/fp8_gemv_micro.cu with the fused GEMV's source alone (no ORT
# session, no library build: 64 s on the H200 machine; needs the ORT headers in .deps/onnxruntime)
# and time its variants (linear_fp8_gemv.h) on the benchmark's layers at M = 1-4. Session 46 timed
# variants 5 / 6 (a cp.async ring, git show ada8711; removed) this way.
# Writes $OUT/<date>-<tag>-fp8micro.log. Usage: bash bench/device/fp8_gemv_micro.sh <tag>
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-gpu}"
log="$OUT/$(date -u +%F)-${tag}-fp8micro.log"
bin=/tmp/fp8_gemv_micro
{
  echo "# $(date -u +%FT%TZ) commit ${PYQUANT_COMMIT:-unknown}; bash bench/device/fp8_gemv_micro.sh $tag"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  t0=$(date +%s)
  nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch=sm_90a -I ort_ops -I .deps/onnxruntime/include -o $bin \
    bench/device/fp8_gemv_micro.cu ort_ops/cuda/linear_fp8_gemv_impl.cu || exit 1
  echo "# build: $(( $(date +%s) - t0 )) s"
  for kn in "4096 14336" "14336 4096" "8192 8192" "4096 4096" "2048 8192"; do
    $bin $kn 1 ${M1_VARIANTS:-0,4} 8 200 7
    $bin $kn 2 ${M2_VARIANTS:-2,0} 8 200 7
    $bin $kn 4 ${M4_VARIANTS:-0,3} 8 200 7
  done
  # the fixed cost per layer at M = 1: K = 4096, N from 1024 to 28672 (time = a + bytes / b)
  if [ "${SWEEP:-0}" = 1 ]; then
    for n in 1024 2048 4096 8192 14336 28672; do $bin 4096 $n 1 0 8 200 7; done
  fi
} > "$log" 2>&1
cat "$log"
