#!/usr/bin/env bash
# Device side (after build.sh): Nsight Compute on the INT4 Hopper GEMM at mid M, where it is
# slowest against fp16 (4096 x 4096, M = 64 ... 256), one node alone, with the warp-stall
# breakdown (WarpStateStats) and where the stalls sit (SourceCounters). Configurations:
#   sk     the default (stream-K heuristic)          dp    PYQUANT_INT4_SM90_DECOMP=dp
#   shuf   the shuffled weight copy                  fp8   the LinearFp8 node's GEMM, same shape
# PROFILE_SHAPE (K x N, default 4096x4096), PROFILE_MS (default "64 256"), PROFILE_CONFIGS;
# writes $OUT/ncu-int4-mid-<config>-m<M>.txt and prints the headline lines.
cd "$(dirname "$0")/../.."
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
shape=${PROFILE_SHAPE:-4096x4096}
for m in ${PROFILE_MS:-64 256}; do
  for cfg in ${PROFILE_CONFIGS:-sk dp shuf fp8}; do
    method=pyquant_int4
    env_args=()
    case $cfg in
      dp) env_args=(PYQUANT_INT4_SM90_DECOMP=dp) ;;
      shuf) env_args=(PYQUANT_INT4_SM90_TILE=shuf) ;;
      fp8) method=pyquant_fp8 ;;
    esac
    out="$OUT/ncu-int4-mid-$cfg-m$m.txt"
    echo "# $cfg: ${env_args[*]} PROFILE_METHODS=$method PROFILE_M=$m PROFILE_SHAPE=$shape python3 bench/device/profile_m1.py" > "$out"
    env "${env_args[@]}" PROFILE_METHODS=$method PROFILE_M=$m PROFILE_SHAPE=$shape timeout 240 ncu --clock-control none \
      --kernel-name regex:device_kernel --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
      --metrics sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,dram__bytes_read.sum,lts__t_bytes.sum \
      python3 bench/device/profile_m1.py >> "$out" 2>&1
    echo "== $cfg M=$m rc=$?"
    grep -E "Duration|Elapsed Cycles|SM Active|DRAM Throughput|Grid Size|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|sm__cycles_active|dram__bytes|stall|Stall" "$out" | head -30
  done
done
