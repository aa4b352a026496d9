// AVX2 kernel of the int8-activation MatMulInt4 (cpu/int8_activations.h): vpmaddubsw dot products.
// Int4Int8Rows calls it on CPUs that have AVX2 but not AVX512-VNNI (and under PYQUANT_CPU_ISA=avx2).
#define PYQUANT_INT8_ENTRY Int4Int8RowsAvx2
#define PYQUANT_INT8_TARGET "avx2,fma,f16c"
#define PYQUANT_INT8_VNNI 0
#include "cpu/int8_activations_unit.inc"
