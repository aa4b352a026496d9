// Device-side micro-benchmark of the decode kernels without ORT: LinearFp8's fused GEMV variants
// (LaunchFp8GemvFused) or MatMulInt4's shuffled-layout kernels (LaunchMatMulInt4Shuffled, block 128,
// symmetric; variant -1 = the default dispatch, else an Int4ShufKnobs variant). A chain of L layers
// (distinct weights, one X, one Y each) is captured in a CUDA graph with programmatic dependent
// launch and early weight loads, as the ops run in ORT's CUDA graphs; the variants are timed in
// interleaved rounds; it prints us per layer and the share of the HBM floor (weight + scale + X +
// Y bytes over a device-to-device copy's bandwidth measured in the same run).
//
// Build and run on the device (needs only nvcc and the ORT headers): bash bench/device/gemv_micro.sh
// Use: gemv_micro fp8|int4|read K N M variant[,variant...] [layers] [replays] [rounds]
// GEMV_MICRO_PDL=late: PDL without early weight loads; =off: no PDL (the kernel boundary's cost).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/linear_fp8_gemv.h"
#include "cuda/matmul_int4.h"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

__global__ void FillBytes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const uint8_t v = uint8_t(h);
    p[i] = (v & 0x7F) == 0x7F ? uint8_t(v & 0xF0) : v;  // no NaN codes
  }
}

__global__ void FillHalf(__half* p, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __float2half(scale * float(int(i * 7919u % 2001u) - 1000) / 1000.0f);
  }
}

__global__ void FillFloat(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

// The "read" op: a pure weight stream launched as the GEMVs are (PDL, loads before the wait), the
// per-layer time any M = 1 kernel could reach in this chain. 128 threads; each thread keeps kLoads
// 16-byte streaming loads in flight; CTA b reads 16-byte vectors [b * per_cta, (b + 1) * per_cta).
// Variants (ReadStreamLaunch): 0 one wave of 8 CTAs per SM, each a contiguous share; 1 16 KB per
// CTA (the FP8 GEMV's many short CTAs); 2 64 KB per CTA; +10: the same with 28 KB of shared memory
// per CTA, so at most 7 CTAs of any layer fit an SM (28 KB + the 1 KB reserved per CTA: no room for
// the next layer's CTAs until this layer's exit, as with the GEMVs' register caps; variant 10's
// grid of 8 per SM then runs in two rounds). Nothing is written unless a checksum hits a
// magic value.
template <int kLoads>
__global__ void __launch_bounds__(128)
    ReadStream(const uint4* __restrict__ w, int64_t n16, int64_t per_cta, uint32_t* out, bool weights_early) {
  pyquant::PdlAllowDependents();
  if (!weights_early) pyquant::PdlWaitPrimary();
  const int64_t begin = int64_t(blockIdx.x) * per_cta, end = begin + per_cta < n16 ? begin + per_cta : n16;
  uint32_t acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += 128 * kLoads) {
    uint4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) v[u] = i + u * 128 < end ? __ldcs(w + i + u * 128) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) acc ^= (v[u].x + 3 * v[u].y) ^ (v[u].z + 5 * v[u].w);
  }
  if (weights_early) pyquant::PdlWaitPrimary();
  if (acc == 0x9E3779B9u) out[blockIdx.x] = acc;
}

cudaError_t ReadStreamLaunch(const uint8_t* w, size_t bytes, int variant, uint32_t* out, pyquant::PdlMode pdl,
                             cudaStream_t s) {
  const int64_t n16 = int64_t(bytes / 16);
  const size_t smem = variant >= 10 ? 28 * 1024 : 0;
  const int sms = pyquant::CurrentDeviceSmCount();
  int64_t per_cta = 128 * 8;  // 16 KB
  if (variant % 10 == 0) per_cta = ((n16 + 8 * sms - 1) / (8 * sms) + 127) / 128 * 128;
  if (variant % 10 == 2) per_cta = 4 * 128 * 8;
  const dim3 grid(unsigned((n16 + per_cta - 1) / per_cta));
  return pyquant::LaunchWithPdlSmem(ReadStream<8>, grid, dim3(128), smem, s, pdl.launch,
                                    reinterpret_cast<const uint4*>(w), n16, per_cta, out, pdl.weights_early);
}

float CopyBandwidth(cudaStream_t s) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaEventRecord(e0, s));
  for (int i = 0; i < 10; ++i) CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaEventRecord(e1, s));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return float(2.0 * bytes * 10 / (ms * 1e-3));  // read + write, bytes / s
}

}  // namespace

int main(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "";
  if (argc < 6 || (op != "fp8" && op != "int4" && op != "read")) {
    std::fprintf(stderr, "use: %s fp8|int4|read K N M variant[,variant...] [layers] [replays] [rounds]\n", argv[0]);
    return 2;
  }
  const bool int4 = op == "int4", read = op == "read";
  ++argv, --argc;  // the rest as before the op argument
  const int64_t k = std::atoll(argv[1]), n = std::atoll(argv[2]), m = std::atoll(argv[3]);
  constexpr int64_t kBlock = 128;  // INT4
  const int64_t nb = (k + kBlock - 1) / kBlock;
  std::vector<int> variants;
  for (std::string v = argv[4]; !v.empty();) {
    const size_t c = v.find(',');
    variants.push_back(std::atoi(v.substr(0, c).c_str()));
    v = c == std::string::npos ? "" : v.substr(c + 1);
  }
  const int layers = argc > 5 ? std::atoi(argv[5]) : 8;
  const int replays = argc > 6 ? std::atoi(argv[6]) : 100;
  const int rounds = argc > 7 ? std::atoi(argv[7]) : 5;

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const float bw = CopyBandwidth(s);
  // FP8: w [L][N, K] e4m3, ws [N] float. INT4: w [L] shuffled codes of [N, K / 2], scales [N, nb] fp16.
  const size_t w_bytes = int4 ? pyquant::Int4ShuffledWeightBytes(n, k) : size_t(n) * k;
  if (w_bytes == 0) {
    std::fprintf(stderr, "the shuffled INT4 layout does not take N = %lld, K = %lld\n", (long long)n, (long long)k);
    return 2;
  }
  uint8_t* w = nullptr;
  float* ws = nullptr;
  __half *x = nullptr, *y = nullptr, *scales = nullptr;
  CHECK(cudaMalloc(&w, size_t(layers) * w_bytes));
  CHECK(cudaMalloc(&ws, size_t(n) * sizeof(float)));
  CHECK(cudaMalloc(&scales, size_t(n) * nb * sizeof(__half)));
  CHECK(cudaMalloc(&x, size_t(m) * k * sizeof(__half)));
  CHECK(cudaMalloc(&y, size_t(layers) * m * n * sizeof(__half)));
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&sink, size_t(1) << 20));
  FillBytes<<<1024, 256, 0, s>>>(w, size_t(layers) * w_bytes, 12345u);
  FillFloat<<<64, 256, 0, s>>>(ws, n, 1e-3f);
  FillHalf<<<64, 256, 0, s>>>(scales, size_t(n) * nb, 0.01f);
  if (int4) {  // row-major random codes -> the shuffled layout, layer by layer
    uint8_t* rm = nullptr;
    CHECK(cudaMalloc(&rm, size_t(n) * k / 2));
    for (int l = 0; l < layers; ++l) {
      FillBytes<<<1024, 256, 0, s>>>(rm, size_t(n) * k / 2, 777u + l);
      CHECK(pyquant::ShuffleInt4Weights(rm, k / 2, n, k, w + size_t(l) * w_bytes, s));
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(rm));
  }
  FillHalf<<<64, 256, 0, s>>>(x, size_t(m) * k, 2.0f);
  CHECK(cudaStreamSynchronize(s));

  const char* pdl_env = std::getenv("GEMV_MICRO_PDL");
  const std::string pdl_mode = pdl_env != nullptr ? pdl_env : "on";
  std::vector<cudaGraphExec_t> graphs;
  std::vector<std::vector<__half>> outs;
  for (int v : variants) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    pyquant::PdlMode pdl;
    pdl.launch = pdl_mode != "off", pdl.weights_early = pdl_mode == "on";
    for (int l = 0; l < layers; ++l) {
      if (read) {
        CHECK(ReadStreamLaunch(w + size_t(l) * w_bytes, w_bytes, v, sink, pdl, s));
      } else if (int4) {
        pyquant::MatMulInt4Problem p;
        p.m = m, p.attrs.k = k, p.attrs.n = n, p.attrs.block_size = kBlock;
        p.x = x, p.b = w + size_t(l) * w_bytes, p.scales = scales, p.y = y + size_t(l) * m * n;
        pyquant::Int4ShufKnobs knobs;
        knobs.variant = v;
        CHECK(pyquant::LaunchMatMulInt4Shuffled<__half>(p, s, pdl, knobs));
      } else {
        pyquant::LinearFp8Problem p;
        p.m = m, p.k = k, p.n = n, p.x = x, p.w = w + size_t(l) * w_bytes, p.w_scale = ws;
        p.y = y + size_t(l) * m * n;
        CHECK(pyquant::LaunchFp8GemvFused<__half>(p, v, pdl, s));
      }
    }
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    graphs.push_back(ge);
    CHECK(cudaMemsetAsync(y, 0xFF, size_t(layers) * m * n * sizeof(__half), s));
    CHECK(cudaGraphLaunch(ge, s));
    std::vector<__half> h(size_t(layers) * m * n);
    CHECK(cudaMemcpyAsync(h.data(), y, h.size() * sizeof(__half), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    outs.push_back(h);
  }
  // every variant must give the same outputs up to fp32 summation order
  for (size_t i = 1; !read && i < outs.size(); ++i) {
    double worst = 0;
    for (size_t j = 0; j < outs[0].size(); ++j) {
      const double a = __half2float(outs[0][j]), b = __half2float(outs[i][j]);
      worst = std::max(worst, std::abs(a - b) / (std::abs(a) + 1e-2));
    }
    std::printf("variant %d vs %d: max relative difference %.3g\n", variants[i], variants[0], worst);
  }
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<std::vector<float>> us(variants.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < variants.size(); ++i) {
      for (int q = 0; q < replays / 4; ++q) CHECK(cudaGraphLaunch(graphs[i], s));
      CHECK(cudaEventRecord(e0, s));
      for (int q = 0; q < replays; ++q) CHECK(cudaGraphLaunch(graphs[i], s));
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      us[i].push_back(ms * 1e3f / float(replays * layers));
    }
  }
  const double w_floor_bytes = int4 ? double(n) * k / 2 + 2.0 * n * nb : double(n) * k + 4.0 * n;
  const double bytes = read ? double(w_bytes) : w_floor_bytes + 2.0 * m * k + 2.0 * m * n;
  const double floor_us = bytes / bw * 1e6;
  std::printf("%s (PDL %s) K=%lld N=%lld M=%lld layers=%d copy bandwidth %.2f TB/s floor %.2f us\n",
              int4   ? "int4 b128"
              : read ? "read (N x K bytes)"
                     : "fp8",
              pdl_mode.c_str(), (long long)k, (long long)n, (long long)m, layers, bw / 1e12, floor_us);
  for (size_t i = 0; i < variants.size(); ++i) {
    std::sort(us[i].begin(), us[i].end());
    const float med = us[i][us[i].size() / 2];
    std::printf("variant %d: %.2f us per layer (%.0f%% of the floor; min %.2f max %.2f)\n", variants[i], med,
                100.0 * floor_us / med, us[i].front(), us[i].back());
  }
  return 0;
}
