#!/usr/bin/env bash
# Device side: the CUDA op tests (log to $OUT) and compute-sanitizer on a small script.
# Usage: bash bench/device/tests.sh <device-tag>
#   PYTEST_SEL: what pytest runs (default tests/cuda), e.g. "tests/cuda/test_cuda_int4_sm90.py -k shuffled"
set -uo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-gpu}"
day="${DAY:-$(date -u +%F)}"
sel="${PYTEST_SEL:-tests/cuda}"
log="$OUT/${day}-${tag}-cuda-tests.log"
{
  echo "# $(date -u +%FT%TZ) base commit ${PYQUANT_COMMIT:-unknown} + uncommitted working tree"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import onnxruntime as o, torch; print('onnxruntime', o.__version__, o.get_available_providers(), 'torch', torch.__version__)"
  echo "# python3 -m pytest $sel -q -rs -p no:cacheprovider"
} > "$log" 2>&1
PYTHONUNBUFFERED=1 timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest $sel -q -rs -p no:cacheprovider 2>&1 | tail -n 400 >> "$log"
echo "pytest rc=${PIPESTATUS[0]}" >> "$log"
tail -n 15 "$log"
if [ "${SANITIZE:-1}" = 1 ]; then
  slog="$OUT/${day}-${tag}-memcheck.log"
  timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool memcheck --print-limit 20 python3 tests/cuda/memcheck_smoke.py > "$slog" 2>&1
  echo "memcheck rc=$?" >> "$slog"
  tail -n 6 "$slog"
  rlog="$OUT/${day}-${tag}-racecheck.log"
  timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 20 python3 tests/cuda/memcheck_smoke.py > "$rlog" 2>&1
  echo "racecheck rc=$?" >> "$rlog"
  tail -n 6 "$rlog"
fi
