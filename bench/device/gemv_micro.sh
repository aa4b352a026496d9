#!/usr/bin/env bash
# Device side: build bench/device/gemv_micro.cu with the decode kernels' sources alone (no ORT
# session, no library build; needs the ORT headers in .deps/onnxruntime) and time kernel variants
# on the benchmark's layers at small M: LinearFp8's fused GEMV variants (linear_fp8_gemv.h) and
# MatMulInt4's shuffled-layout dispatch (-1 = the default; matmul_int4.h's variant numbers).
# Session 46 timed cp.async-ring FP8 variants this way (git show ada8711; removed; its numbers 5 / 6
# are the chunk kernel's since session 47): 64 s to build the FP8 file alone on the H200 machine.
# Writes $OUT/<date>-<tag>-gemvmicro.log. Usage: bash bench/device/gemv_micro.sh <tag>
#   OPS="fp8 int4" (default both); FP8_M1 / FP8_M2 / FP8_M4: FP8 variant lists at M = 1 / 2 / 4;
#   INT4_M1 / INT4_M2 / INT4_M4: INT4 variant lists (M = 4: none by default); SWEEP=1: the FP8 GEMV at M = 1 over N = 1024-28672
#   (K = 4096), for the per-layer fixed cost (time = a + bytes / b), with PDL's early weight loads,
#   PDL alone and no PDL (GEMV_MICRO_PDL, gemv_micro.cu), beside a pure weight stream of the same
#   bytes (op "read", variants READ_VARIANTS: the time any M = 1 kernel could reach in this chain).
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-gpu}"
log="$OUT/$(date -u +%F)-${tag}-gemvmicro.log"
bin=/tmp/gemv_micro
obj=/tmp/gemv_micro_obj
mkdir -p $obj
srcs="bench/device/gemv_micro.cu ort_ops/cuda/linear_fp8_gemv_impl.cu ort_ops/cuda/matmul_int4_shuffled_impl.cu
  ort_ops/cuda/matmul_int4_shuffled_gemv_impl.cu
  ort_ops/cuda/matmul_int4_shuffled_piece_impl.cu ort_ops/cuda/matmul_int4_shuffled_wide_impl.cu
  ort_ops/cuda/matmul_int4_staged_impl.cu ort_ops/cuda/staged_split.cc"
{
  echo "# $(date -u +%FT%TZ) commit ${PYQUANT_COMMIT:-unknown}; bash bench/device/gemv_micro.sh $tag"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  t0=$(date +%s)
  for f in $srcs; do
    nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch=sm_90a -I ort_ops -I .deps/onnxruntime/include \
      -x cu -c -o $obj/$(basename $f).o $f &
  done
  wait
  nvcc -arch=sm_90a -o $bin $obj/*.o || exit 1
  echo "# build: $(( $(date +%s) - t0 )) s"
  for op in ${OPS:-fp8 int4}; do
    for kn in "4096 14336" "14336 4096" "8192 8192" "4096 4096"; do
      if [ $op = fp8 ]; then
        $bin fp8 $kn 1 ${FP8_M1:-0,5,6} 8 200 7
        $bin fp8 $kn 2 ${FP8_M2:-2} 8 200 7
        $bin fp8 $kn 4 ${FP8_M4:-0} 8 200 7
      else
        $bin int4 $kn 1 ${INT4_M1:--1,22} 8 200 7
        $bin int4 $kn 2 ${INT4_M2:--1,11} 8 200 7
        [ -n "${INT4_M4:-}" ] && $bin int4 $kn 4 $INT4_M4 8 200 7
      fi
    done
  done
  if [ "${SWEEP:-0}" = 1 ]; then  # and the same without PDL's overlap, or without its early loads
    for pdl in on late off; do
      for n in 1024 2048 4096 8192 14336 28672; do
        GEMV_MICRO_PDL=$pdl $bin fp8 4096 $n 1 0 8 200 7
        GEMV_MICRO_PDL=$pdl $bin read 4096 $n 1 ${READ_VARIANTS:-0,1,2,10,11,12} 8 200 7
      done
    done
  fi
} > "$log" 2>&1
cat "$log"
