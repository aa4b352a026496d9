#!/usr/bin/env bash
# Runs the op tests against several onnxruntime releases (the library must load in 1.20 .. 1.31).
# Usage: tools/check_ort_versions.sh [VERSION ...]   (default: one release per minor, 1.20-1.31)
# Each version gets a venv under ${TMPDIR:-/tmp}/pyquant-ort-<ver> that sees the system packages
# (torch, numpy, the installed pyquant) and overrides only onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1.20.1 1.21.1 1.22.1 1.23.2 1.24.1 1.31.1)
echo "pyquant $(git rev-parse --short HEAD) on $(uname -m), $(date -u +%F)"
for v in "${versions[@]}"; do
  venv="${TMPDIR:-/tmp}/pyquant-ort-$v"
  [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q "onnxruntime==$v" >/dev/null
  got=$("$venv/bin/python" -c 'import onnxruntime as o; print(o.__version__)')
  res=$("$venv/bin/python" -m pytest tests/ops -q -p no:cacheprovider 2>&1 | tail -1)
  echo "onnxruntime $got: $res"
done
