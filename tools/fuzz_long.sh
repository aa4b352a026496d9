#!/usr/bin/env bash
# Long fuzz run of the op property tests (issue: reliability). Default 2,000 examples per test
# (6 tests -> 12,000 cases); the log goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYQUANT_FUZZ_EXAMPLES="${1:-2000}"
echo "pyquant $(git rev-parse --short HEAD), $(date -u +%FT%TZ), ${PYQUANT_FUZZ_EXAMPLES} examples per test"
python3 -m pytest tests/ops/test_fuzz.py -q -p no:cacheprovider --hypothesis-show-statistics "${@:2}"
