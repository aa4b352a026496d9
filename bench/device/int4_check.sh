#!/usr/bin/env bash
# Device side, one call: build (sm_90a), the INT4 CUDA tests, then an INT4 benchmark subset.
# Usage: bash bench/device/int4_check.sh <tag> [bench args...]
# Needs .deps (ORT headers + CUTLASS) carried; onnxruntime-gpu installed (source /tmp/ortsite/env.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-h100}"; shift || true
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
export PYTHONUNBUFFERED=1
bash bench/device/build.sh 2>&1 | tee "$OUT/build.log" | tail -5
cuobjdump -res-usage "$(python3 -c 'import pyquant;print(pyquant.get_library_path())')" 2>/dev/null \
  | grep -A1 -E "int4|Int4" | grep -E "REG|Function" | head -20 > "$OUT/res-usage.txt"
log="$OUT/2026-11-22-${tag}-cuda-tests-int4.log"
{
  echo "# $(date -u +%FT%TZ) commit ${PYQUANT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import onnxruntime as o, torch, pyquant; print('onnxruntime', o.__version__, o.get_available_providers(), 'torch', torch.__version__, pyquant.build_info())"
  echo "# python3 -m pytest tests/cuda/test_cuda_int4_sm90.py tests/cuda/test_cuda_ops.py -k int4 -q -rs"
} > "$log" 2>&1
timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest tests/cuda/test_cuda_int4_sm90.py tests/cuda/test_cuda_ops.py -k int4 -q -rs -x -p no:cacheprovider 2>&1 | tail -n 60 >> "$log"
echo "pytest rc=${PIPESTATUS[0]}" >> "$log"
tail -n 8 "$log"
if [ "${BENCH:-1}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-240} python3 bench/bench_cuda.py --out "$OUT" --tag "$tag" "$@" 2>&1 | tail -n 40
fi
