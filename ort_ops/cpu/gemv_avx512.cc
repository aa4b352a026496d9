// AVX-512 (F/BW/VL/DQ) instantiation of the small-M kernels (cpu/gemv.h, cpu/gemv_kernels.inc):
// the 512-bit Ops policy (cpu/gemv_ops_avx512.inc).
//
// Up to 8 rows of X share each decoded chunk. (16 fits the 32 zmm registers in the folded form and
// gemv_kernels.inc supports it, but measured no better: the K chunk that keeps 16 rows of X in L1
// is half as long, so the per-chunk horizontal sums double, and the 32 X row pointers spill.)
#define PYQUANT_GEMV_ISA Avx512
#define PYQUANT_GEMV_ISA_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define PYQUANT_GEMV_OPS OpsAvx512
#define PYQUANT_GEMV_OPS_INC "cpu/gemv_ops_avx512.inc"
#define PYQUANT_GEMV_ROWS 8
#include "cpu/gemv_isa_unit.inc"
