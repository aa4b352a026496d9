#!/usr/bin/env bash
# Device side, one call after tests.sh on the same machine (the build is kept): the full
# benchmark of both ops against ORT / torch on the issue's shapes and M, and the INT4 session
# memory. Usage: bash bench/device/final_bench.sh <tag>. Writes under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-h100}"
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
export PYTHONUNBUFFERED=1
timeout ${MEM_TIMEOUT:-90} python3 bench/device/memory_int4.py --out "$OUT" 2>&1 | tail -n 2
timeout ${BENCH_TIMEOUT:-450} python3 bench/bench_cuda.py --out "$OUT" --tag "$tag" \
  --methods "${METHODS:-pyquant_int4,pyquant_int4_portable,ort_matmulnbits,ort_matmul_fp16,torch_fp16,pyquant_fp8,torch_scaled_mm,torch_scaled_mm_q}" \
  2>&1 | grep -E "^\| |^## |^commit"
