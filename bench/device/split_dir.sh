#!/usr/bin/env bash
# Ships a directory larger than the device tool's 64 MiB carry limit (e.g. the exported models of
# bench/cuda_ep_smollm2.py) in several back-to-back device calls, like the onnxruntime-gpu wheel.
#
#   bash bench/device/split_dir.sh .device/smollm2 .device/smp [44m]
#
# writes <out>/p0, p1, ...: each a chunk of a tar of <dir> and stash.sh, which copies the chunk to
# /tmp/<name of out>/ on the device. After the last part's call, on the same warm machine:
#   bash <out>/unpack.sh /tmp/models     (unpack.sh is in the last part)
# Parts of 44 MiB leave room for the ~17 MB tracked tree in each call.
set -euo pipefail
src="$1"
out="$2"
size="${3:-44m}"
name="$(basename "$out")"
rm -rf "$out"
mkdir -p "$out"
tmp="$(mktemp -d)"
tar -C "$(dirname "$src")" -cf "$tmp/all.tar" "$(basename "$src")"
sha256sum "$tmp/all.tar" | cut -c1-64 > "$tmp/sha"
split -b "$size" -d -a 2 "$tmp/all.tar" "$tmp/chunk"
last=""
for f in "$tmp"/chunk*; do
  i="$((10#${f##*chunk}))"
  mkdir -p "$out/p$i"
  mv "$f" "$out/p$i/"
  cat > "$out/p$i/stash.sh" <<STASH
#!/usr/bin/env bash
set -euo pipefail
mkdir -p /tmp/$name
cp "\$(dirname "\$0")"/chunk* /tmp/$name/
echo "stashed part $i: \$(ls /tmp/$name | wc -l) chunk(s) in /tmp/$name"
STASH
  last="$out/p$i"
done
cp "$tmp/sha" "$last/sha"
cat > "$last/unpack.sh" <<UNPACK
#!/usr/bin/env bash
# Joins the stashed chunks, checks the tar's sha256 and unpacks it into \$1.
set -euo pipefail
dest="\$1"
mkdir -p "\$dest"
cat /tmp/$name/chunk* > /tmp/$name.tar
echo "\$(cat "\$(dirname "\$0")/sha")  /tmp/$name.tar" | sha256sum -c -
tar -C "\$dest" -xf /tmp/$name.tar
rm -f /tmp/$name.tar
ls -la "\$dest"/*
UNPACK
rm -rf "$tmp"
du -sh "$out"/p*
