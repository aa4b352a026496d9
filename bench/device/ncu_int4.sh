#!/usr/bin/env bash
# Device side (after build.sh): Nsight Compute on the MatMulInt4 kernels where issue #4's goals
# are missed, one node run alone (no CUDA graph, no PDL overlap: per-kernel behaviour):
#   m1    M = 1,   4096 x 4096  (K x N): the CUDA-core decode GEMV (56 % of the floor in the bench)
#   m16   M = 16,  4096 x 4096:  the small-M mma.sync kernel (variant 3)
#   m16w  M = 16,  4096 x 14336: the cp.async ring kernel
#   m256  M = 256, 4096 x 4096:  the CUTLASS mixed-input GEMM (0.67x ORT fp16)
# NCU_SPECS="tag:M:KxN ..." replaces that list (e.g. "m1w:1:4096x14336" for the shuffled-order GEMV
# of the wide layer, the H200's M = 1 miss).
# Writes $OUT/ncu-int4-<tag>.txt and prints the headline metrics.
cd "$(dirname "$0")/../.."
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
for spec in ${NCU_SPECS:-m1:1:4096x4096 m16:16:4096x4096 m16w:16:4096x14336 m256:256:4096x4096}; do
  IFS=: read -r tag m shape <<< "$spec"
  PROFILE_METHODS=pyquant_int4 PROFILE_M=$m PROFILE_SHAPE=$shape timeout 150 ncu --clock-control none \
    --kernel-name regex:"int4_gemv|int4_shuffled|int4_smallm|int4_ring|int4_staged|device_kernel" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats python3 bench/device/profile_m1.py \
    > "$OUT/ncu-int4-$tag.txt" 2>&1
  echo "== $tag (M = $m, $shape): ncu rc=$?"
  grep -E "^  [a-z_:<>, 0-9A-Za-z]+\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Eligible Warps|Issued Warp|No Eligible|Stall" \
    "$OUT/ncu-int4-$tag.txt" | head -24
done
