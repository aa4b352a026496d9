#!/usr/bin/env bash
# Device side, one call (~8 min; give it timeout_s=600): build (sm_90a), the FP8 CUDA tests, FP8
# benchmarks of the default and the environment-selected variants, the accumulation-error script.
# Usage: bash bench/device/fp8_check.sh [tag]
# Needs .deps (ORT headers + CUTLASS) carried; onnxruntime-gpu installed (source /tmp/ortsite/env.sh).
# Logs in $OUT: build.log, res-usage-fp8.txt, <date>-<tag>-cuda-tests-fp8.log, the bench .md/.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-h100-fp8}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-330} bash bench/device/build.sh > "$OUT/build.log" 2>&1
echo "build rc=$? ($(( $(date +%s) - t0 )) s)"; tail -3 "$OUT/build.log"
lib="$(python3 -c 'import pyquant;print(pyquant.get_library_path())' 2>/dev/null)"
# Registers / stack / local memory of the FP8 kernels (cuobjdump is in the CUDA toolkit).
cuobjdump -res-usage "$lib" 2>/dev/null | grep -A1 -E "fp8|Fp8|float_e4m3" \
  | grep -oE "Function [^ :]{1,160}|REG:[0-9]+|STACK:[0-9]+|SHARED:[0-9]+|LOCAL:[0-9]+" > "$OUT/res-usage-fp8.txt"
cuobjdump -sass "$lib" 2>/dev/null | grep -oE "QGMMA[^ ]*" | sort | uniq -c >> "$OUT/res-usage-fp8.txt"

log="$OUT/$(date -u +%F)-${tag}-cuda-tests-fp8.log"
{
  echo "# $(date -u +%FT%TZ) commit ${PYQUANT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import onnxruntime as o, torch, pyquant; print('onnxruntime', o.__version__, o.get_available_providers(), 'torch', torch.__version__, pyquant.build_info())"
  echo "# python3 -m pytest tests/cuda -q -k fp8 --maxfail=10 -rs"
} > "$log" 2>&1
timeout ${PYTEST_TIMEOUT:-170} python3 -m pytest tests/cuda -q -k fp8 --maxfail=10 -rs -p no:cacheprovider 2>&1 | tail -n 60 >> "$log"
echo "pytest rc=${PIPESTATUS[0]}" >> "$log"
tail -n 8 "$log"

# Benchmarks (µs per layer, ORT CUDA graphs); variants are environment switches read at kernel
# creation (bench_cuda.py METHOD_ENV, ort_ops/cuda/linear_fp8.h Fp8Options).
bench() {  # bench <tag-suffix> <timeout s> <layers> <M list> <methods> [shapes]
  timeout "$2" python3 bench/bench_cuda.py --out "$OUT" --tag "${tag}-$1" --layers "$3" \
    --shapes "${6:-${SHAPES:-4096x4096,4096x14336}}" --m "$4" --methods "$5" 2>&1 | grep -E "^\||^#|Error|error|FAILED" | tail -n 30
}
if [ "${BENCH:-1}" = 1 ]; then
  # M <= 8: current small-M kernel vs the swapped-operand FP8-MMA kernel.
  bench gemv 40 8 1,2,4,8 pyquant_fp8,pyquant_fp8_swap,torch_fp16
  # Mid M on the GEMM: scheduler decompositions vs the portable kernels (the crossover for min M).
  bench mid 70 8 17,32,48,64,128,256 \
    pyquant_fp8,pyquant_fp8_portable,pyquant_fp8_dp,pyquant_fp8_split2,pyquant_fp8_split4,torch_fp16
  # Large M: tiles / clusters / FastAccum / promotion interval / raster. N = 16: the GEMM is
  # nearly free there (it still reads Xq once), so pyquant_fp8's time ~ the quantizer's share.
  bench large 100 4 2048,4096 \
    pyquant_fp8,pyquant_fp8_f128,pyquant_fp8_f256,pyquant_fp8_c2,pyquant_fp8_f256c2,pyquant_fp8_p8,pyquant_fp8_rm2,torch_fp16,torch_scaled_mm
  bench quant 25 4 2048,4096 pyquant_fp8,torch_fp16 4096x16
fi
if [ "${ACCURACY:-1}" = 1 ]; then
  timeout 40 python3 bench/device/fp8_accum_error.py 2>&1 | tee "$OUT/fp8-accum-error.txt" | tail -n 30
fi
echo "total $(( $(date +%s) - t0 )) s"
