#!/usr/bin/env bash
# Obtain the CUTLASS C++ headers (cute/, cutlass/) from the PyPI package nvidia-cutlass, which ships
# them under cutlass_library/source/include. Only that wheel is downloaded (--no-deps: its Python
# dependencies are not needed for headers), through pip's own configured index.
# Usage: tools/fetch_cutlass.sh <dest> [version]   ->  <dest>/include/{cute,cutlass}
# CMake calls it when neither PYQUANT_CUTLASS_DIR nor an installed nvidia-cutlass is found.
set -euo pipefail
dest="${1:?usage: fetch_cutlass.sh DEST [VERSION]}"
ver="${2:-4.2.0.0}"
py="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip_cmd=("$py" -m pip)
if ! "${pip_cmd[@]}" --version > /dev/null 2>&1; then
  # Under pip's build isolation (pip install .), PYTHONPATH points at an overlay that hides the
  # interpreter's own site-packages, pip included: without this the fetch failed there, and the
  # library was built without the sm_90a kernels.
  pip_cmd=(env -u PYTHONPATH -u PYTHONNOUSERSITE "$py" -m pip)
fi
"${pip_cmd[@]}" download -q --no-deps --only-binary=:all: -d "$work" "nvidia-cutlass==$ver"
whl="$(ls "$work"/nvidia_cutlass-*.whl)"
"$py" - "$whl" "$dest" <<'PY'
import sys, zipfile, pathlib
whl, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "cutlass_library/source/include/"
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = dest / "include" / name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
            n += 1
if n == 0:
    sys.exit(f"{whl} holds no {prefix}")
print(f"fetch_cutlass: {n} headers from {pathlib.Path(whl).name} -> {dest / 'include'}")
PY
