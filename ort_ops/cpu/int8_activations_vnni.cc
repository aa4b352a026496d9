// AVX512-VNNI kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): vpdpbusd dot
// products on 256-bit vectors (AVX512VL), the same lanes and tiles as the AVX2 kernel. Int4Int8Rows
// calls it on CPUs that have AVX512-VNNI (Ice Lake / Zen 4 and later) unless PYQUANT_CPU_ISA caps the
// ISA below avx512.
#define PYQUANT_INT8_ENTRY Int4Int8RowsVnni
#define PYQUANT_INT8_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define PYQUANT_INT8_VNNI 1
#include "cpu/int8_activations_unit.inc"
