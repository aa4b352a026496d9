#!/usr/bin/env bash
# Here (not on the device): the onnxruntime-gpu wheel split into parts for the device tool, with
# parts small enough that one part plus this repository's tree stays under the 64 MiB carry limit.
# Wraps the workplace's ../shared/device/ort-gpu-parts.sh (52 MB parts: over the limit once the
# tree passed ~12 MB, session 40) with another part size. Output: .device/ort/p0 .. pN (git-ignored);
# the calls to make are in that script's header: one `run` per part, carry [".device/ort/pI"],
# command `bash .device/ort/pI/stash.sh`, the last one followed by `&& bash .device/ort/pN/install.sh`;
# then `.deps` (ORT headers, CUTLASS) in a call of its own (bench/device/build.sh).
# Usage: bash bench/device/ort_parts.sh [PART_MB]   (default 36)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mb="${1:-36}"
src="../shared/device/ort-gpu-parts.sh"
[ -f "$src" ] || { echo "no $src (this workplace's ORT GPU splitter)"; exit 1; }
grep -q 'split -b 52m' "$src" || { echo "$src no longer splits with 'split -b 52m': check it by hand"; exit 1; }
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
sed "s/split -b 52m/split -b ${mb}m/" "$src" > "$tmp"
bash "$tmp"
tree_mb=$(( $( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1048576 ))
echo "tree ~${tree_mb} MiB + the largest part $(du -sm .device/ort/p0 | cut -f1) MiB (limit 64 MiB a call)"
