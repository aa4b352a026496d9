#!/usr/bin/env bash
# Device side, one call, no GPU used: the int8-activation MatMulInt4 kernels on the device host's CPU
# (an AVX512-VNNI Xeon, which this repository's development machine lacks). Builds the CPU-only
# library twice -- this tree, and this tree with ort_ops/cpu/ files replaced by those under
# $OLD_CPU_DIR (the baseline) -- then: the CPU op tests with the new build, the bit-identity check of
# the two builds (tools/int8_bitid.py), and bench/cpu_ab.py (old vs new, 1 thread, CPU time).
# Usage: OLD_CPU_DIR=.devcarry/oldcpu TAG=h100host-s27 bash bench/device/cpu_int8_ab.sh
# Needs the ORT headers (.deps/onnxruntime, e.g. from the carried deps.tgz); onnxruntime (CPU) installed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/out}"
tag="${TAG:-h100host-int8}"
day="${DAY:-$(date -u +%F)}"
mkdir -p "$OUT"
t0=$(date +%s)
build() {  # build <source dir> <build dir>
  cmake -S "$1" -B "$2" -G Ninja -DPYQUANT_CUDA=OFF -DCMAKE_BUILD_TYPE=Release \
    -DONNXRUNTIME_INCLUDE_DIR="$PWD/.deps/onnxruntime/include" > "$2.cfg.log" 2>&1 && ninja -C "$2" > "$2.log" 2>&1
}
rm -rf /tmp/int8old_src && mkdir -p /tmp/int8old_src
tar --exclude=./.git --exclude=./.device --exclude=./.devcarry -cf - . | tar -xf - -C /tmp/int8old_src
cp "${OLD_CPU_DIR:?}"/* /tmp/int8old_src/ort_ops/cpu/
build . /tmp/int8new_build & build /tmp/int8old_src /tmp/int8old_build & wait
ls -la /tmp/int8new_build/libpyquant_ops.so /tmp/int8old_build/libpyquant_ops.so || { tail -20 /tmp/int8*_build.log; exit 1; }
echo "builds done ($(( $(date +%s) - t0 )) s)"
lscpu | grep "Model name"; grep -o -w -E "avx512_vnni|avx2|avx512f" /proc/cpuinfo | sort -u | tr "\n" " "; echo
export PYQUANT_LIBRARY=/tmp/int8new_build/libpyquant_ops.so
log="$OUT/${day}-${tag}-cpu-tests.log"
{ echo "# commit ${PYQUANT_COMMIT:-unknown}; $(lscpu | grep 'Model name')"; echo "# pytest tests/ops/test_matmul_int4_int8.py tests/ops/test_cpu_isa.py tests/ops/test_matmul_int4.py"; } > "$log"
timeout 300 python3 -m pytest tests/ops/test_matmul_int4_int8.py tests/ops/test_cpu_isa.py tests/ops/test_matmul_int4.py \
  -q -p no:cacheprovider >> "$log" 2>&1
echo "pytest rc=$?" >> "$log"; tail -3 "$log"
PYQUANT_LIBRARY=/tmp/int8old_build/libpyquant_ops.so python3 tools/int8_bitid.py /tmp/old.npz > /dev/null &&
  python3 tools/int8_bitid.py /tmp/new.npz > /dev/null && python3 tools/int8_bitid.py cmp /tmp/old.npz /tmp/new.npz |
  tee "$OUT/${day}-${tag}-bitid.log"
echo "checks done ($(( $(date +%s) - t0 )) s)"
timeout "${BENCH_TIMEOUT:-400}" python3 bench/cpu_ab.py --lib-a /tmp/int8old_build/libpyquant_ops.so \
  --lib-b /tmp/int8new_build/libpyquant_ops.so --rounds "${ROUNDS:-3}" --threads 1 --clock thread \
  --methods "${METHODS:-pyquant_int4_b128_a8,pyquant_int4_b32_a8,nbits_b128_acc4,nbits_b32_acc4}" \
  --shapes "${SHAPES:-2048x8192,4096x4096}" --m "${M_LIST:-1,4,16,64,256}" --out "$OUT/${day}-${tag}-ab" 2>&1 | tail -30
echo "total $(( $(date +%s) - t0 )) s"
