// An FP8 wgmma mainloop whose fp32 promotion overlaps the tensor cores, for the Hopper LinearFp8
// GEMM (fp8_gemm_sm90_kernel.cuh). sm_90a only.
//
// Why. FP8 wgmma accumulates in the tensor core with about 13 fraction bits, so the accurate
// mainloop (CUTLASS's MainloopSm90TmaGmmaWarpSpecializedFP8, "promoting") accumulates each
// 128-wide k-block into a temporary fragment and adds it to fp32 registers ("promotion"). It does
// so with warpgroup_wait<0>: each k-block drains the warpgroup's wgmma pipeline, then the adds
// run while its tensor cores have nothing queued. At M = 2048 that costs 13-25 % against the
// FastAccum mainloop (bench/results/2026-11-22-h100-fp8-v2-large-bench-cuda.md), and it is what
// keeps the op below 1.6x fp16 there.
//
// What this mainloop does instead. The warpgroup's tile (64 rows x N_tile tokens) is split
// along N into kParts parts; the work is a stream of "batches" b = (k-block t, part p), each a
// chain of 4 wgmma (k = 32 each) into a temporary fragment of 64 x (N_tile / kParts). Two
// temporaries alternate (batch b uses temporary b % 2):
//
//   issue batch b into tmp[b % 2]            (wgmma.commit_group: in flight)
//   warpgroup_wait<1>                         batch b - 1 is complete, b still runs
//   acc[part of b - 1] += tmp[(b - 1) % 2]    fp32 adds on the CUDA cores, under batch b's wgmmas
//   release k-block t - 1's smem stage        once all its parts are promoted
//
// Same numerics as the promoting mainloop at its default interval (each tensor-core chain covers
// one 128-wide k-block of one output element; fp32 adds in k order), so the error limit of
// docs/ops.md holds unchanged.
//
// Registers per consumer thread: acc (64 x N_tile / 128 threads) plus two temporaries of
// 1 / kParts of that. 128 x 128 tiles with kParts = 1: 64 + 2 x 64 = 192; 128 x 256 with
// kParts = 4: 128 + 2 x 32 = 192; both under the kernel's 232-register consumer budget. Smaller
// parts issue narrower wgmmas, which read the W (A) tile from shared memory once per part.
//
// Contract with CUTLASS's warp-specialized kernels (cooperative and ping-pong), which call
// mma(pipeline, read_state, accum, k_tile_count, ...) then the inherited mma_tail(): mma releases
// the smem stages of all but the last k-block (as the base mainloop with K_PIPE_MMAS = 1 does),
// mma_tail waits for every wgmma and releases the last one. Loads, TMA descriptors, shared
// storage and arguments are the base collective's.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace pyquant {
namespace sm90 {
namespace detail {

// Base: the CollectiveMma that CUTLASS's builder makes for the promoting FP8 schedule (same
// TileShape, stages and smem layouts). kParts: N-parts per warpgroup tile (1, 2, 4; N_tile /
// kParts a multiple of 8). kStagger: the second consumer warpgroup starts with a single k-block,
// so that the two warpgroups drain at different k-blocks and one keeps the tensor cores busy
// while the other's pipeline is empty.
template <class Base, int kParts, bool kStagger = false>
struct Fp8OverlappedPromotionMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;

  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kPartN = kTileN / kParts;
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  static_assert(kParts == 1 || kParts == 2 || kParts == 4, "kParts: 1, 2 or 4");
  static_assert(kTileN % kParts == 0 && kPartN % 8 == 0 && kPartN <= 256, "wgmma N: a multiple of 8, <= 256");
  static_assert(kTileM == 64 * kWarpGroups, "one 64-row wgmma atom per consumer warpgroup along M");

  // The wgmma of one part: 64 x kPartN x 32, e4m3 x e4m3 -> f32, both operands K-major from smem;
  // the consumer warpgroups tile M as in the base TiledMma.
  using PartMma =
      decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<cutlass::float_e4m3_t, cutlass::float_e4m3_t, float,
                                                               cute::Shape<cute::_64, cute::Int<kPartN>, cute::_32>,
                                                               cute::GMMA::Major::K, cute::GMMA::Major::K>(),
                                    cute::Layout<cute::Shape<cute::Int<kWarpGroups>, cute::_1, cute::_1>>{}));

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "accumulators in registers");

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)

    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    PartMma part_mma;
    auto thread_mma =
        part_mma.get_slice(make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{})(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, 1, MMA_K, PIPE) descriptors
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA, kParts, MMA_K, PIPE)
    static_assert(decltype(size<1>(tCrA))::value == 1, "one wgmma atom per warpgroup along M");
    static_assert(decltype(size<1>(tCrB))::value == kParts, "one wgmma atom per part along N");

    // Temporaries: the accumulator fragment of one part (64 x kPartN per warpgroup).
    using PartFragment = decltype(partition_fragment_C(part_mma, Shape<Int<kTileM>, Int<kPartN>>{}));
    PartFragment tmp0, tmp1;
    // The wgmma C fragment of a 64 x N atom holds, per thread, values ordered (2 columns, 2 rows,
    // N / 8 column groups), so part p of the whole tile is the contiguous value range
    // [p * size(part), (p + 1) * size(part)) of accum.
    static_assert(decltype(size(accum))::value == kParts * decltype(size(tmp0))::value, "accumulator split");

    PipelineState smem_pipe_release = smem_pipe_read;

    // Waits for k-block smem_pipe_read's stage and issues part p's 4 wgmma into tmp (zeroed by
    // the first one).
    auto issue = [&](auto& tmp, int p) {
      const int stage = smem_pipe_read.index();
      part_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(tmp);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        // Part p's B descriptors as a rank-2 (MMA, 1) view, which cute::gemm pairs with
        // tmp's (MMA, 1, 1).
        Tensor tCrB_k = tCrB(_, _, k_block, stage);  // (MMA, kParts)
        Tensor tCrB_p =
            make_tensor(tCrB_k.data() + tCrB_k.layout()(0, p), make_layout(get<0>(tCrB_k.layout()), Layout<_1, _0>{}));
        cute::gemm(part_mma, tCrA(_, _, k_block, stage), tCrB_p, tmp);
        part_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
    };
    auto wait_stage = [&]() {
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
    };
    // acc[part p] += tmp once tmp's batch is complete (the caller has waited for it; the fence
    // keeps the compiler from reading tmp before that wait).
    auto promote = [&](auto& tmp, int p) {
      warpgroup_fence_operand(tmp);
      constexpr int kPartSize = decltype(size(tmp))::value;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kPartSize; ++i) accum(p * kPartSize + i) += tmp(i);
    };

    clear(accum);
    if (k_tile_count <= 0) return;

    // Stages go back to the producer as their k-blocks complete, all but the last (mma_tail's).
    int to_release = k_tile_count - 1;
    auto release = [&]() {
      if (to_release > 0) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
        --to_release;
      }
    };
    // kTiles k-blocks as kTiles * kParts batches; batch i is (k-block i / kParts, part
    // i % kParts) in tmp[i % 2]. Unrolled, so every temporary is a fixed register set. The group
    // ends with nothing in flight: a wgmma still running across the loop's back edge makes
    // ptxas serialize every wgmma of the kernel (C7514: the loop-carried temporaries are copied).
    auto run_tiles = [&](auto tiles) {
      constexpr int kBatches = decltype(tiles)::value * kParts;
      CUTLASS_PRAGMA_UNROLL
      for (int b = 0; b < kBatches; ++b) {
        if (b % kParts == 0) wait_stage();
        if (b % 2 == 0) {
          issue(tmp0, b % kParts);
        } else {
          issue(tmp1, b % kParts);
        }
        if (b % kParts == kParts - 1) ++smem_pipe_read;
        if (b > 0) {
          warpgroup_wait<1>();  // batch b - 1 is complete; b runs under the adds
          if (b % 2 == 0) {
            promote(tmp1, (b - 1) % kParts);
          } else {
            promote(tmp0, (b - 1) % kParts);
          }
          if ((b - 1) % kParts == kParts - 1) release();
        }
      }
      warpgroup_wait<0>();
      if (kBatches % 2 == 0) {
        promote(tmp1, kParts - 1);
      } else {
        promote(tmp0, kParts - 1);
      }
      release();
    };

    // Groups of two k-blocks, so that even kParts = 1 has a batch to overlap. (Groups of four
    // drain half as often but spilled 3.5 KB per thread at 128 x 256, CUTLASS 4.2 / nvcc 13.0.)
    int k_tile = 0;
    if constexpr (kStagger && kWarpGroups == 2) {
      if (warp_group == 1 && k_tile_count >= 2) {
        run_tiles(Int<1>{});
        k_tile = 1;
      }
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile + 1 < k_tile_count; k_tile += 2) run_tiles(Int<2>{});
    if (k_tile < k_tile_count) run_tiles(Int<1>{});
    warpgroup_fence_operand(accum);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace pyquant
