// AVX2 + FMA + F16C instantiation of the small-M kernels (cpu/gemv.h, cpu/gemv_kernels.inc):
// the 256-bit Ops policy (cpu/gemv_ops_avx2.inc); 16 ymm registers allow at most 4 rows of X per tile.
#define PYQUANT_GEMV_ISA Avx2
#define PYQUANT_GEMV_ISA_TARGET "avx2,fma,f16c"
#define PYQUANT_GEMV_OPS OpsAvx2
#define PYQUANT_GEMV_ROWS 4
#define PYQUANT_GEMV_MAX_R4 1
#include "cpu/gemv_isa_unit.inc"
