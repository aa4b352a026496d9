#!/usr/bin/env bash
# Obtain ONNX Runtime's C/C++ API headers on a Debian-like machine that has no ORT dev package.
#
# No PyPI package ships these headers. Debian ships them in libonnxruntime-dev (suite trixie).
# This script downloads that one .deb with apt, using the mirror this machine's own apt sources
# already point at (so nothing here names a registry host), and unpacks only the headers into
#   <dest>/include/onnxruntime_c_api.h ...
# Usage: tools/fetch_ort_headers.sh <dest>      (CMake calls it when no headers were found)
set -euo pipefail
dest="${1:?usage: fetch_ort_headers.sh DEST}"
suite="${PYQUANT_ORT_DEB_SUITE:-trixie}"
command -v apt-get >/dev/null || { echo "apt-get not found: not a Debian-like machine" >&2; exit 2; }
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri=$(awk '/^URIs:/{print $2; exit}' "$f")
  case "$uri" in *security*) uri="";; esac
  [ -n "$uri" ] && break
done
if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
  uri=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
[ -n "$uri" ] || { echo "could not find a Debian mirror in this machine's apt sources" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/archives/partial"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""; [ -f "$keyring" ] && signed="Signed-By: $keyring"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n%s\n' "$uri" "$suite" "$signed" > "$work/parts/ort.sources"
opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/parts"
      -o Dir::State::Lists="$work/lists" -o Dir::Cache::Archives="$work/archives"
      -o APT::Sandbox::User=root -o Debug::NoLocking=1)
echo "-- pyquant: downloading Debian '$suite' libonnxruntime-dev (headers only) via this machine's apt mirror"
apt-get "${opts[@]}" -qq update
(cd "$work" && apt-get "${opts[@]}" -qq download libonnxruntime-dev)
dpkg -x "$work"/libonnxruntime-dev_*.deb "$work/x"
mkdir -p "$dest/include"
cp -r "$work"/x/usr/include/onnxruntime/* "$dest/include/"
ls "$work"/libonnxruntime-dev_*.deb | sed 's|.*/||' > "$dest/SOURCE"
echo "-- pyquant: ORT headers from $(cat "$dest/SOURCE") unpacked into $dest/include"
