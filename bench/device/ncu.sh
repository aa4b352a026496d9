#!/usr/bin/env bash
# Device side: Nsight Compute speed-of-light of pyquant's M = 1 kernels (after build.sh).
cd "$(dirname "$0")/../.."
timeout 240 ncu --clock-control none --kernel-name regex:"int4_smallm|fp8_mma|quantize_rows" --launch-skip 2 --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section LaunchStats python3 bench/device/profile_m1.py > "$OUT/ncu-m1.txt" 2>&1
echo "ncu rc=$?"
grep -E "int4_smallm|fp8_mma|quantize_rows|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size" "$OUT/ncu-m1.txt" | head -60
