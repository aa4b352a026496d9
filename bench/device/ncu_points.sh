#!/usr/bin/env bash
# Device side (after build.sh): Nsight Compute on every kernel of one node run alone, at the points
# where a goal of issues #4 / #5 is missed, plus the fp16 / MatMulNBits kernels they are compared
# with. One compact set of metrics per kernel (time, DRAM, occupancy, issue rate, eligible warps,
# the warp-stall breakdown), as CSV; bench/ncu_table.py turns the files into one table.
# Usage: bash bench/device/ncu_points.sh [points-file]   (default: the list below)
#   a point is "method KxN M" (bench_cuda.py method names); writes $OUT/ncu-points/<method>-<KxN>-m<M>.csv
# Only the last of four runs is profiled (profile_m1.py, PROFILE_RANGE=1): the warm-up runs and the
# node's one-time weight preparation stay out.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
mkdir -p "$OUT/ncu-points"
default_points="
pyquant_int4 4096x4096 1
pyquant_int4 8192x8192 1
pyquant_int4 14336x4096 1
pyquant_int4 4096x14336 1
pyquant_int4 4096x4096 16
pyquant_int4 4096x14336 16
pyquant_int4 14336x4096 16
pyquant_int4 8192x8192 16
ort_matmul_fp16 4096x14336 16
pyquant_int4 4096x4096 64
ort_matmul_fp16 4096x4096 64
pyquant_int4 4096x4096 256
ort_matmul_fp16 4096x4096 256
pyquant_int4 14336x4096 256
ort_matmul_fp16 14336x4096 256
pyquant_int4 14336x4096 2048
ort_matmul_fp16 14336x4096 2048
pyquant_int4 4096x4096 2048
pyquant_int4 14336x4096 4096
ort_matmulnbits 14336x4096 4096
pyquant_fp8 4096x4096 1
pyquant_fp8 14336x4096 1
pyquant_fp8 4096x4096 2048
ort_matmul_fp16 4096x4096 2048
pyquant_fp8 14336x4096 2048
"
if [ $# -ge 1 ]; then points=$(cat "$1"); else points=$default_points; fi
metrics="gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_active.avg,dram__bytes_read.sum"
metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",launch__grid_size,launch__block_size,launch__registers_per_thread,launch__waves_per_multiprocessor"
metrics+=",sm__warps_active.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active"
metrics+=",smsp__warps_eligible.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active,smsp__inst_executed.sum"
metrics+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
tensor="regex:^sm__pipe_tensor_op_[hg]mma_cycles_active\.avg\.pct_of_peak_sustained_active$"
# PIPES=1: also the instructions each pipe executed, in % of its peak (which pipe bounds a kernel
# that is neither DRAM- nor tensor-bound: e.g. the e4m3 -> fp16 conversions of the FP8 mma kernels)
[ "${PIPES:-0}" = 1 ] && tensor+=",regex:^sm__inst_executed_pipe_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active$"
echo "$points" | while read -r method shape m; do
  [ -z "$method" ] && continue
  out="$OUT/ncu-points/$method-$shape-m$m.csv"
  run() {
    PROFILE_RANGE=1 PROFILE_METHODS=$method PROFILE_M=$m PROFILE_SHAPE=$shape timeout 300 ncu --clock-control none --print-units base \
      --profile-from-start off --csv --page raw --log-file "$out" --metrics "$1" python3 bench/device/profile_m1.py \
      > "$out.stdout" 2>&1
  }
  t0=$(date +%s)
  run "$metrics,$tensor"; rc=$?
  if [ $rc -ne 0 ] || ! grep -q gpu__time_duration "$out" 2>/dev/null; then run "$metrics"; rc=$?; fi
  # kernel rows of the CSV start with a quoted launch ID (ncu's own lines and the header do not)
  echo "== $method $shape M=$m rc=$rc $(( $(date +%s) - t0 )) s, kernels: $(grep -c '^"[0-9]' "$out" 2>/dev/null)"
done
