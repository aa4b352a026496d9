#!/usr/bin/env bash
# Style gate (CI runs it when the linters install): ruff lint + ruff format for Python, clang-format
# (.clang-format: Google style, 120 columns) for the C++ / CUDA sources of ort_ops/ and tools/.
# Fix what it reports with: ruff check --fix . && ruff format . && clang-format -i <files>
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mapfile -t sources < <(git ls-files 'ort_ops/*.h' 'ort_ops/*.cc' 'ort_ops/*.cu' 'ort_ops/*.cuh' 'tools/*.cc')
clang-format --dry-run --Werror "${sources[@]}"
echo "format check: ${#sources[@]} C++ / CUDA files and the Python sources are clean"
