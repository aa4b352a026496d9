// AVX512-VNNI kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): vpdpbusd dot
// products, on 512-bit vectors below the GEMM's M for blocks of >= 32 codes (TileNarrow512), else on
// 256-bit ones (AVX512VL) in the AVX2 kernel's lanes and tiles. Int4Int8Rows
// calls it on CPUs that have AVX512-VNNI (Ice Lake / Zen 4 and later) unless PYQUANT_CPU_ISA caps the
// ISA below avx512.
#define PYQUANT_INT8_ENTRY Int4Int8RowsVnni
#define PYQUANT_INT8_PACKED_ENTRY Int4Int8PackedRowsVnni
#define PYQUANT_INT8_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define PYQUANT_INT8_VNNI 1
#include "cpu/int8_activations_unit.inc"
