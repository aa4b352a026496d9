// Device-side micro-benchmark of LinearFp8's fused decode GEMV variants without ORT: a chain of L
// layers (distinct weights, one X, one Y each) captured in a CUDA graph with programmatic dependent
// launch and early weight loads, as the op runs them in ORT's CUDA graphs. Times the variants in
// interleaved rounds and prints us per layer and the share of the HBM floor (weight + X + Y bytes
// over a device-to-device copy's bandwidth measured in the same run).
//
// Build and run on the device (needs only nvcc and the ORT headers):
//   bash bench/device/fp8_gemv_micro.sh
// Use: fp8_gemv_micro K N M variant[,variant...] [layers] [replays] [rounds]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/linear_fp8_gemv.h"

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
  if (argc < 5) {
    std::fprintf(stderr, "use: %s K N M variant[,variant...] [layers] [replays] [rounds]\n", argv[0]);
    return 2;
  }
  const int64_t k = std::atoll(argv[1]), n = std::atoll(argv[2]), m = std::atoll(argv[3]);
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
  uint8_t* w = nullptr;
  float* ws = nullptr;
  __half *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&w, size_t(layers) * n * k));
  CHECK(cudaMalloc(&ws, size_t(n) * sizeof(float)));
  CHECK(cudaMalloc(&x, size_t(m) * k * sizeof(__half)));
  CHECK(cudaMalloc(&y, size_t(layers) * m * n * sizeof(__half)));
  FillBytes<<<1024, 256, 0, s>>>(w, size_t(layers) * n * k, 12345u);
  FillFloat<<<64, 256, 0, s>>>(ws, n, 1e-3f);
  FillHalf<<<64, 256, 0, s>>>(x, size_t(m) * k, 2.0f);
  CHECK(cudaStreamSynchronize(s));

  std::vector<cudaGraphExec_t> graphs;
  std::vector<std::vector<__half>> outs;
  for (int v : variants) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < layers; ++l) {
      pyquant::LinearFp8Problem p;
      p.m = m, p.k = k, p.n = n, p.x = x, p.w = w + size_t(l) * n * k, p.w_scale = ws, p.y = y + size_t(l) * m * n;
      pyquant::PdlMode pdl;
      pdl.launch = true, pdl.weights_early = true;
      CHECK(pyquant::LaunchFp8GemvFused<__half>(p, v, pdl, s));
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
  for (size_t i = 1; i < outs.size(); ++i) {
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
  const double bytes = double(n) * k + 2.0 * m * k + 2.0 * m * n;
  const double floor_us = bytes / bw * 1e6;
  std::printf("K=%lld N=%lld M=%lld layers=%d copy bandwidth %.2f TB/s floor %.2f us\n", (long long)k, (long long)n,
              (long long)m, layers, bw / 1e12, floor_us);
  for (size_t i = 0; i < variants.size(); ++i) {
    std::sort(us[i].begin(), us[i].end());
    const float med = us[i][us[i].size() / 2];
    std::printf("variant %d: %.2f us per layer (%.0f%% of the floor; min %.2f max %.2f)\n", variants[i], med,
                100.0 * floor_us / med, us[i].front(), us[i].back());
  }
  return 0;
}
