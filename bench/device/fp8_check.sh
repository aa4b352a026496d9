#!/usr/bin/env bash
# Device side, one call (< 8 min): build (sm_90a), the FP8 CUDA tests, then a short FP8 benchmark.
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
timeout ${BUILD_TIMEOUT:-270} bash bench/device/build.sh > "$OUT/build.log" 2>&1
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
  echo "# python3 -m pytest tests/cuda -q -k fp8 -x -rs"
} > "$log" 2>&1
timeout ${PYTEST_TIMEOUT:-150} python3 -m pytest tests/cuda -q -k fp8 -x -rs -p no:cacheprovider 2>&1 | tail -n 60 >> "$log"
echo "pytest rc=${PIPESTATUS[0]}" >> "$log"
tail -n 8 "$log"

if [ "${BENCH:-1}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-90} python3 bench/bench_cuda.py --out "$OUT" --tag "$tag" --layers 8 \
    --shapes "${SHAPES:-4096x4096,4096x14336}" --m "${MS:-1,16,64,256,2048,4096}" \
    --methods pyquant_fp8,pyquant_fp8_portable,torch_fp16,torch_scaled_mm,torch_scaled_mm_q 2>&1 | tail -n 40
fi
echo "total $(( $(date +%s) - t0 )) s"
