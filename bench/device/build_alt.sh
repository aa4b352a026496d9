#!/usr/bin/env bash
# Device side: a second build of the op library, from this tree with a patch applied (another
# commit's kernels, e.g. `git format-patch -1 <commit> --stdout > x.patch` here), into DEST without
# touching the installed library. The benchmark's *_alt methods load it (PYQUANT_ALT_LIBRARY), so
# two builds are timed in one process with interleaved rounds: the fair A / B for a kernel
# rewrite that replaces code instead of adding a variant.
# Usage: bash bench/device/build_alt.sh PATCH [DEST]   (DEST default /tmp/pyquant-alt)
#   then: export PYQUANT_ALT_LIBRARY=DEST/build/libpyquant_ops.so (printed at the end)
# PYQUANT_CUDA (default ON) and PYQUANT_CUDA_ARCHS (default 90a) as for bench/device/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
patch_file="$(realpath "${1:?usage: build_alt.sh PATCH [DEST]}")"
dest="$(realpath -m "${2:-/tmp/pyquant-alt}")"
src="$dest/src"
rm -rf "$src" "$dest/build"
mkdir -p "$src"
# The sources without build outputs or carried parts; the headers in .deps are linked, not copied.
tar --exclude=./build --exclude=./.deps --exclude=./.git --exclude=./.device -cf - . | tar -xf - -C "$src"
[ -d .deps ] && ln -s "$PWD/.deps" "$src/.deps"
(cd "$src" && patch -p1 --quiet --forward < "$patch_file")
t0=$(date +%s)
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S "$src" -B "$dest/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPYQUANT_CUDA="${PYQUANT_CUDA:-ON}" \
  -DPYQUANT_CUDA_ARCHS="${PYQUANT_CUDA_ARCHS:-90a}" > "$dest/build.log" 2>&1
cmake --build "$dest/build" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-16}" >> "$dest/build.log" 2>&1 \
  || { tail -30 "$dest/build.log"; exit 1; }
lib="$dest/build/libpyquant_ops.so"
[ -f "$lib" ] || { echo "no $lib (see $dest/build.log)"; exit 1; }
echo "alt build: $(( $(date +%s) - t0 )) s"
echo "export PYQUANT_ALT_LIBRARY=$lib"
