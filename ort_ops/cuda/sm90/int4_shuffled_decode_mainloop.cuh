// A mixed-input wgmma mainloop for the INT4 Hopper GEMM on the shuffled weight order
// (Int4ShuffleAtom, int4_gemm_sm90_kernel.cuh; layout/int4_shuffled.h), with a short decode
// path: one 32-bit shared-memory load, 3 shifts, 4 lop3 and 8 half2 operations turn a thread's
// 8 codes of one k16 step into its 4 wgmma A registers. sm_90a only.
//
// Why. Nsight Compute on CUTLASS's mixed-input mainloop (4096 x 4096, M = 64, one node alone:
// bench/results/2026-11-24-h100-s16-ncu-int4-mid-*.txt) counts about 225 warp instructions per
// consumer warp and 64-wide k-tile, i.e. ~56 per k16 step, at 0.3-0.4 issued instructions per
// scheduler cycle: the consumer warpgroups are issue- and latency-bound on the decode, not on
// the tensor cores or on memory. Its converter is generic: it copies a scale and a zero value
// per A element from shared memory (8 + 8 per k16 step, broadcast along K) and applies them per
// element. Here the scale and zero of the thread's two rows are read once per k-tile (a block
// of 64 / 128 / 256 codes never changes inside a 64-wide k-tile), as half2 pairs.
//
// Decode (T = half or bfloat16). A thread's word holds, in nibbles 0..7, the codes
// v0 v2 v4 v6 v1 v3 v5 v7 of its A fragment (layout/int4_shuffled.h), so for i = 0..3
// lop3(word >> 4i, 0x000F000F, magic) is the register pair (v_2i, v_2i+1) as (bias + q) in T:
// bias = 1024 (0x6400) in half, 128 (0x4300) in bfloat16, both exact for q < 16. Then
//   w = (h - bias) * s + z      (hsub2 exact, one rounding in the hfma2),
// which is the value CUTLASS's ConvertAndScaleWithZero path computes (q * s + z, rounded once to
// T; z = -zp * s prepared by the op): the same numerics as the default path.
//   pair 0 (v0, v1) and pair 2 (v4, v5): row g of the thread's m16 slice  -> s_lo, z_lo
//   pair 1 (v2, v3) and pair 3 (v6, v7): row g + 8                       -> s_hi, z_hi
// (lane = 4 g + c; warp w of the warpgroup owns rows 16 w .. 16 w + 15 of its 64-row atom.)
//
// Pipeline. k-tile t's four k16 steps are issued as 4 wgmma (A from the registers frag[kb],
// B = X^T from the stage's shared memory). The tile's 4 code words and scales sit in registers,
// loaded under the previous tile's first wgmma; step kb + 1 is decoded while step kb runs, the
// next k-tile's step 0 while step 3 runs. Before frag[j] is rewritten, warpgroup_wait<3> guarantees
// that its previous reader (3 wgmma back) has completed. Tile t's stage goes back to the
// producer once its last wgmma is complete: after the same wait at tile t + 1's step 2; the
// last tile's stage in mma_tail (the kernels call mma, then mma_tail, as for CUTLASS's
// mainloops). No operand fence on the A registers: a fence "defines" every fragment register,
// including those that wgmma still in flight read, and ptxas then serializes every wgmma
// (C7513).
//
// Contract with CUTLASS's cooperative kernel (sm90_gemm_tma_warpspecialized_cooperative.hpp):
// mma(pipeline, read_state, accum, k_tile_count, thread_idx, tensors, params) with thread_idx in
// [0, 256) selecting the warpgroup (thread_idx / 128) as for the base TiledMma; loads, TMA,
// shared storage and arguments are the base collective's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace pyquant {
namespace sm90 {
namespace detail {

// (bias + q) pairs from the 4 code nibbles i and i + 4 of `word` (bits 0-3 and 16-19).
template <uint32_t kMagic>
CUTLASS_DEVICE uint32_t Int4PairWithBias(uint32_t word) {
  uint32_t out;
  // (word & 0x000F000F) | kMagic
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(out) : "r"(word), "n"(0x000F000F), "n"(kMagic));
  return out;
}

template <typename Element>
struct Int4DecodeMath;

template <>
struct Int4DecodeMath<cutlass::half_t> {
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024.0 in both halves
  using T2 = __half2;
  CUTLASS_DEVICE static T2 Pair(cutlass::half_t v) { return __half2half2(v.to_half()); }
  CUTLASS_DEVICE static uint32_t Decode(uint32_t biased, T2 s, T2 z) {
    const T2 h = *reinterpret_cast<const T2*>(&biased);
    const T2 w = __hfma2(__hsub2(h, __float2half2_rn(1024.0f)), s, z);
    return *reinterpret_cast<const uint32_t*>(&w);
  }
};

template <>
struct Int4DecodeMath<cutlass::bfloat16_t> {
  static constexpr uint32_t kMagic = 0x43004300u;  // 128.0 in both halves
  using T2 = __nv_bfloat162;
  CUTLASS_DEVICE static T2 Pair(cutlass::bfloat16_t v) { return __bfloat162bfloat162(v.to_nv_bfloat16()); }
  CUTLASS_DEVICE static uint32_t Decode(uint32_t biased, T2 s, T2 z) {
    const T2 h = *reinterpret_cast<const T2*>(&biased);
    const T2 w = __hfma2(__hsub2(h, __float2bfloat162_rn(128.0f)), s, z);
    return *reinterpret_cast<const uint32_t*>(&w);
  }
};

// Base: the CollectiveMma that CUTLASS's builder makes for the mixed-input schedule on the
// shuffled A layout, with scales and zeros (ConvertAndScaleWithZero).
template <class Base, class Element>
struct Int4ShuffledDecodeMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutScale;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  using typename Base::TiledMma;
  using Math = Int4DecodeMath<Element>;
  using T2 = typename Math::T2;

  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  static_assert(kTileM == 64 * kWarpGroups, "one 64-row wgmma atom per consumer warpgroup");
  static_assert(cute::size<2>(TileShape{}) == 64, "four k16 steps per k-tile");
  static_assert(Base::KernelConversionMode == cutlass::detail::ConversionMode::ConvertAndScaleWithZero,
                "scales and zeros in shared memory");
  static_assert(std::is_same_v<typename Base::RealSwappedElementA, cutlass::uint4b_t>, "uint4 codes as A");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "accumulators in registers");
    if (k_tile_count <= 0) {
      clear(accum);
      return;
    }

    Tensor sA = as_position_independent_swizzle_tensor(
        make_tensor(make_smem_ptr(shared_tensors.smem_A.begin()), SmemLayoutA{}));          // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.begin()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    Tensor sS = make_tensor(make_smem_ptr(shared_tensors.smem_scale.begin()), SmemLayoutScale{});  // (BLK_M, 1, PIPE)
    Tensor sZ = make_tensor(make_smem_ptr(shared_tensors.smem_zero.begin()), SmemLayoutScale{});   // (BLK_M, 1, PIPE)

    TiledMma tiled_mma;
    auto mma_thread = tiled_mma.get_thread_slice(thread_idx);
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto mma_warp_group = tiled_mma.get_slice(
        make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{})(warp_group));

    Tensor tCsA = mma_thread.partition_A(sA);                         // (MMA, MMA_M, MMA_K, PIPE) codes
    Tensor tCrA = mma_thread.partition_fragment_A(sA(_, _, Int<0>{}));  // (MMA, MMA_M, MMA_K) T registers
    Tensor tCrQ = make_tensor_like<cutlass::uint4b_t>(tCsA(_, _, _, Int<0>{}));  // codes, smem order
    Tensor tCrB = mma_warp_group.make_fragment_B(mma_warp_group.partition_B(sB));  // (MMA, MMA_N, MMA_K, PIPE)
    auto copy_a = make_tiled_copy_A(typename Base::SwappedSmemCopyAtomA{}, tiled_mma);
    Tensor tCrQ_copy = copy_a.get_thread_slice(thread_idx % cutlass::NumThreadsPerWarpGroup).retile_D(tCrQ);
    static_assert(decltype(size<0>(tCrA))::value == 8, "8 A values per thread and k16 step");
    static_assert(decltype(size<1>(tCrA))::value == 1, "one m64 atom per warpgroup");
    static_assert(decltype(size<2>(tCrA))::value == 4, "4 k16 steps per k-tile");

    // The thread's rows in the tile: warpgroup atom, warp's m16 slice, lane's row pair.
    const int lane = thread_idx % 32;
    const int row_lo = 64 * warp_group + 16 * ((thread_idx % cutlass::NumThreadsPerWarpGroup) / 32) + lane / 4;
    const int row_hi = row_lo + 8;
    // A k-tile's inputs in registers: its 4 code words (one per k16 step) and the scale / zero
    // pairs of the thread's two rows. The next tile's are loaded one step after the current
    // tile's first wgmma, so that no shared-memory latency sits between two wgmma.
    struct TileRegs {
      uint32_t words[4];
      T2 s_lo, s_hi, z_lo, z_hi;
    };
    const uint32_t* q_words = reinterpret_cast<const uint32_t*>(raw_pointer_cast(tCrQ.data()));
    auto load_tile = [&](int stage, TileRegs& r) {
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < 4; ++kb) copy(copy_a, tCsA(_, _, kb, stage), tCrQ_copy(_, _, kb));
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < 4; ++kb) r.words[kb] = q_words[tCrQ.layout()(0, 0, kb) / 8];
      r.s_lo = Math::Pair(sS(row_lo, 0, stage));
      r.s_hi = Math::Pair(sS(row_hi, 0, stage));
      r.z_lo = Math::Pair(sZ(row_lo, 0, stage));
      r.z_hi = Math::Pair(sZ(row_hi, 0, stage));
    };
    // k16 step kb of tile r -> the 4 A registers of frag kb.
    uint32_t* a_regs = reinterpret_cast<uint32_t*>(raw_pointer_cast(tCrA.data()));
    auto decode = [&](int kb, const TileRegs& r) {
      const uint32_t word = r.words[kb];
      uint32_t* a = a_regs + tCrA.layout()(0, 0, kb) / 2;
      a[0] = Math::Decode(Int4PairWithBias<Math::kMagic>(word), r.s_lo, r.z_lo);
      a[1] = Math::Decode(Int4PairWithBias<Math::kMagic>(word >> 4), r.s_hi, r.z_hi);
      a[2] = Math::Decode(Int4PairWithBias<Math::kMagic>(word >> 8), r.s_lo, r.z_lo);
      a[3] = Math::Decode(Int4PairWithBias<Math::kMagic>(word >> 12), r.s_hi, r.z_hi);
    };
    auto wait_stage = [&](PipelineState state) {
      auto token = pipeline.consumer_try_wait(state);
      pipeline.consumer_wait(state, token);
    };

    PipelineState smem_pipe_release = smem_pipe_read;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);

    TileRegs cur, nxt;
    wait_stage(smem_pipe_read);
    load_tile(smem_pipe_read.index(), cur);
    decode(0, cur);

    // One k-tile: its 4 wgmma, the decode of the next step under each. kFirst: no earlier
    // tile's stage to return; kNext: a next tile exists (its inputs are loaded under step 1,
    // its step 0 decoded under step 3). The first and last tiles are separate copies of the
    // body, so that no branch sits between a wgmma and the decode of the registers a later one
    // reads: with that branch ptxas copied the fragment registers at the merge and serialized
    // every wgmma (C7513).
    auto k_tile_body = [&](auto first, auto next) {
      constexpr bool kFirst = decltype(first)::value, kNext = decltype(next)::value;
      const int stage = smem_pipe_read.index();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < 4; ++kb) {
        warpgroup_arrive();
        cute::gemm(tiled_mma, tCrA(_, _, kb), tCrB(_, _, kb, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        warpgroup_commit_batch();
        if constexpr (kNext) {
          if (kb == 0) {
            PipelineState next_read = smem_pipe_read;
            ++next_read;
            wait_stage(next_read);
            load_tile(next_read.index(), nxt);
          }
        }
        if (kb < 3) {
          warpgroup_wait<3>();  // frag kb + 1's previous reader is complete
          // At kb == 2 that reader was the previous tile's last wgmma: its stage can go back.
          if (kb == 2 && !kFirst) {
            pipeline.consumer_release(smem_pipe_release);
            ++smem_pipe_release;
          }
          decode(kb + 1, cur);
        } else {
          ++smem_pipe_read;
          if constexpr (kNext) {
            warpgroup_wait<3>();  // frag 0's reader (this tile's first wgmma) is complete
            decode(0, nxt);
            cur = nxt;
          }
        }
      }
    };
    using cute::false_type;
    using cute::true_type;
    if (k_tile_count == 1) {
      k_tile_body(true_type{}, false_type{});
    } else {
      k_tile_body(true_type{}, true_type{});
      CUTLASS_PRAGMA_NO_UNROLL
      for (int k_tile = 1; k_tile + 1 < k_tile_count; ++k_tile) k_tile_body(false_type{}, true_type{});
      k_tile_body(false_type{}, false_type{});
    }
    warpgroup_fence_operand(accum);
  }

  // Waits for every wgmma and returns the last k-tile's stage (the others went back in mma).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    cute::warpgroup_wait<0>();
    if (k_tile_count <= 0) return;
    smem_pipe_release.advance(k_tile_count - 1);
    pipeline.consumer_release(smem_pipe_release);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace pyquant
