#!/usr/bin/env bash
# Device side, one call (give it timeout_s=600): build (sm_90a), the staged-kernel tests of
# MatMulInt4 (tests/cuda/test_cuda_int4_mid.py -k staged), then a benchmark of the staged kernel
# (mid variants 11 / 12 / 13) against the default dispatch and torch fp16 on narrow and square
# layers at M = 5-64. Usage: bash bench/device/staged_check.sh <tag>
# Needs .deps (ORT headers + CUTLASS) carried; onnxruntime-gpu installed (source /tmp/ortsite/env.sh).
# Switches: BUILD=0 (reuse the build), TESTS=0, BENCH=0, TEST_SEL (pytest -k), SHAPES_A / SHAPES_B (none: skip),
# M_LIST, METHODS.
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-h100-staged}"
day="${DAY:-$(date -u +%F)}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
[ -f /tmp/ortsite/env.sh ] && source /tmp/ortsite/env.sh
export PYTHONUNBUFFERED=1
t0=$(date +%s)
if [ "${BUILD:-1}" = 1 ]; then
  timeout ${BUILD_TIMEOUT:-330} bash bench/device/build.sh > "$OUT/build.log" 2>&1
  echo "build rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 "$OUT/build.log"
fi
if [ "${TESTS:-1}" = 1 ]; then
  log="$OUT/${day}-${tag}-cuda-tests.log"
  sel="${TEST_SEL:-staged}"
  {
    echo "# $(date -u +%FT%TZ) commit ${PYQUANT_COMMIT:-unknown}"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import onnxruntime as o, torch, pyquant; print('onnxruntime', o.__version__, o.get_available_providers(), 'torch', torch.__version__, pyquant.build_info())"
    echo "# python3 -m pytest ${TEST_FILES:-tests/cuda/test_cuda_int4_mid.py} -q -rs -k '$sel' --maxfail=20"
  } > "$log" 2>&1
  timeout ${PYTEST_TIMEOUT:-200} python3 -m pytest ${TEST_FILES:-tests/cuda/test_cuda_int4_mid.py} -q -rs -k "$sel" \
    --maxfail=20 -p no:cacheprovider >> "$log" 2>&1
  echo "pytest rc=$?" >> "$log"
  grep -E "passed|failed|rc=|Error|assert" "$log" | tail -n 25
  echo "tests done ($(( $(date +%s) - t0 )) s)"
fi
if [ "${BENCH:-1}" = 1 ]; then
  methods="${METHODS:-pyquant_int4,pyquant_int4_mid11,pyquant_int4_mid12,pyquant_int4_mid13,torch_fp16}"
  timeout ${BENCH_TIMEOUT:-200} python3 bench/bench_cuda.py --out "$OUT" --tag "${tag}-narrow" \
    --shapes "${SHAPES_A:-4096x1024,8192x1024,14336x1024,14336x512,4096x512}" --m "${M_LIST:-5,8,16,32,48,64}" \
    --methods "$methods" 2>&1 | grep -E "^\||^## |Error|error" | tail -n 60
  [ "${SHAPES_B:-}" = none ] || timeout ${BENCH_TIMEOUT:-200} python3 bench/bench_cuda.py --out "$OUT" --tag "${tag}-square" \
    --shapes "${SHAPES_B:-4096x4096,14336x4096}" --m "${M_LIST:-5,8,16,32,48,64}" \
    --methods "$methods" 2>&1 | grep -E "^\||^## |Error|error" | tail -n 30
fi
echo "total $(( $(date +%s) - t0 )) s"
