#!/usr/bin/env bash
# Device side: build pyquant with the CUDA kernels for sm_90a only (the device is an H100/H200),
# into the device's Python. Needs .deps (ORT headers) and, if present, .cutlass carried.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYQUANT_CUDA=ON
export CMAKE_ARGS="-DPYQUANT_CUDA_ARCHS=90a ${CMAKE_ARGS:-}"
export CMAKE_BUILD_PARALLEL_LEVEL=16
t0=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -20
echo "build: $(( $(date +%s) - t0 )) s"
python3 -c "import pyquant; print('pyquant build', pyquant.build_info(), pyquant.get_library_path())"
