#!/usr/bin/env bash
# Device side: Nsight Compute speed-of-light of pyquant's M = 1 kernels (after build.sh).
cd "$(dirname "$0")/../.."
timeout 240 ncu --clock-control none --kernel-name regex:"int4_smallm|fp8_mma|quantize_rows" --launch-skip 2 --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section LaunchStats python3 bench/device/profile_m1.py > "$OUT/ncu-m1.txt" 2>&1
echo "ncu rc=$?"
grep -E "int4_smallm|fp8_mma|quantize_rows|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size" "$OUT/ncu-m1.txt" | head -60
# Stall reasons of the M = 1 INT4 kernel on 4096 x 14336 for two small-M variants (PROFILE_SHAPE,
# PYQUANT_INT4_GEMV_VARIANT), when NCU_STALLS=1.
if [ "${NCU_STALLS:-0}" = 1 ]; then
  for v in 0 2; do
    PYQUANT_INT4_GEMV_VARIANT=$v PROFILE_METHODS=pyquant_int4 PROFILE_SHAPE=4096x14336 timeout 200 ncu --clock-control none \
      --kernel-name regex:"int4_smallm" --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section MemoryWorkloadAnalysis python3 bench/device/profile_m1.py > "$OUT/ncu-stalls-v$v.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|Stall|stall" "$OUT/ncu-stalls-v$v.txt" | head -30
  done
fi
