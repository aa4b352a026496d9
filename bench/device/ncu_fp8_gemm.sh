#!/usr/bin/env bash
# Device side (after build.sh): Nsight Compute on our FP8 Hopper GEMM (the LinearFp8 node, its
# quantizer included) and cuBLASLt's (torch._scaled_mm) at the same shape, one node alone:
# duration, tensor-pipe activity, DRAM / L2 traffic, grid, block, cluster and registers.
# PROFILE_SHAPE (K x N), PROFILE_M; writes $OUT/ncu-fp8-gemm-<shape>-m<M>.txt.
cd "$(dirname "$0")/../.."
shape=${PROFILE_SHAPE:-14336x4096}
m=${PROFILE_M:-2048}
out="$OUT/ncu-fp8-gemm-$shape-m$m.txt"
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_bytes.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y,\
launch__registers_per_thread,launch__shared_mem_per_block_dynamic,sm__warps_active.avg.pct_of_peak_sustained_active
{
  echo "# ours: PROFILE_METHODS=pyquant_fp8 PROFILE_M=$m PROFILE_SHAPE=$shape python3 bench/device/profile_m1.py"
  PROFILE_METHODS=pyquant_fp8 PROFILE_M=$m PROFILE_SHAPE=$shape timeout 200 ncu --clock-control none \
    --kernel-name regex:'quantize|device_kernel' --launch-skip 4 --launch-count 2 --metrics "$metrics" \
    python3 bench/device/profile_m1.py
  echo "# cuBLASLt: PROFILE_M=$m PROFILE_SHAPE=$shape python3 bench/device/profile_scaled_mm.py"
  PROFILE_M=$m PROFILE_SHAPE=$shape timeout 200 ncu --clock-control none --launch-skip 2 --launch-count 1 \
    --kernel-name regex:'gemm|xmma|nvjet|sm90' --metrics "$metrics" python3 bench/device/profile_scaled_mm.py
} > "$out" 2>&1
echo "ncu rc=$?"
grep -vE "^==PROF==|WARNING" "$out" | grep -E "^#|^  [a-zA-Z_]|Kernel|kernel|[a-z_]+__" | head -80
