#!/usr/bin/env bash
# Device side: the CUDA op tests (log to $OUT) and compute-sanitizer on a small script.
# Usage: bash bench/device/tests.sh <device-tag>
#   PYTEST_SEL: what pytest runs (default tests/cuda), e.g. "tests/cuda/test_cuda_int4_sm90.py -k shuffled"
#   PYTEST_GROUPS: instead, ";"-separated groups of test files run as parallel pytest processes
#     (on one H100 each group ran about 4x slower than alone, session 17: no gain there)
#   SAN_PARALLEL=1: the compute-sanitizer sections run at once (one process each), not in turn;
#   SAN_TOOLS: the compute-sanitizer tools (default "memcheck racecheck")
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
# Straight into the log (not through tail): a run stopped by its timeout keeps what it printed.
if [ -z "${PYTEST_GROUPS:-}" ]; then
  PYTHONUNBUFFERED=1 timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest $sel -q -rs -p no:cacheprovider >> "$log" 2>&1
  echo "pytest rc=$?" >> "$log"
else
  # PYTEST_GROUPS="files A;files B;...": one pytest process per group, all at once on the one GPU
  # (the tests spend most of their time on the CPU: session creation, numpy references); each
  # group's output is appended to the log in order after all have finished.
  IFS=';' read -ra groups <<< "$PYTEST_GROUPS"
  for i in "${!groups[@]}"; do
    ( PYTHONUNBUFFERED=1 timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest ${groups[$i]} -q -rs -p no:cacheprovider \
        > "$log.part$i" 2>&1; echo "pytest rc=$?" >> "$log.part$i" ) &
  done
  wait
  for i in "${!groups[@]}"; do
    { echo "# group $i: python3 -m pytest ${groups[$i]} -q -rs -p no:cacheprovider"; cat "$log.part$i"; } >> "$log"
    rm -f "$log.part$i"
  done
fi
grep -E "passed|failed|rc=" "$log" | tail -n 20
# compute-sanitizer, one smoke section per run (SAN_SECTIONS; the whole smoke took over 200 s under
# memcheck on an H100 in session 10), each with its own SAN_TIMEOUT, appended to one log per tool.
if [ "${SANITIZE:-1}" = 1 ]; then
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    log_t="$OUT/${day}-${tag}-${tool}.log"
    : > "$log_t"
    extra=""; [ "$tool" = racecheck ] && extra="--racecheck-report hazard"
    for section in ${SAN_SECTIONS:-int4 mid shuffled knobs fp8}; do
      one() {
        echo "# compute-sanitizer --tool $tool python3 tests/cuda/memcheck_smoke.py --only $section"
        timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool $tool $extra --print-limit 20 \
          python3 tests/cuda/memcheck_smoke.py --only "$section" 2>&1
        echo "$tool $section rc=$?"
      }
      if [ "${SAN_PARALLEL:-0}" = 1 ]; then one > "$log_t.$section" & else one >> "$log_t"; fi
    done
    if [ "${SAN_PARALLEL:-0}" = 1 ]; then
      wait
      for section in ${SAN_SECTIONS:-int4 mid shuffled knobs fp8}; do cat "$log_t.$section" >> "$log_t"; rm -f "$log_t.$section"; done
    fi
    grep -E "rc=|ERROR SUMMARY|RACECHECK SUMMARY|matched" "$log_t" | tail -n 15
  done
fi
