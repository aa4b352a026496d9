// MatMulInt4 on the CPU execution provider (see docs/ops.md, cpu/gemv.h for small M and
// cpu/blocked_gemm.h otherwise).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cpu/blocked_gemm.h"
#include "cpu/cpu_types.h"
#include "cpu/gemv.h"
#include "cpu/int8_activations.h"
#include "cpu/register_cpu.h"
#include "ops/matmul_int4.h"

namespace pyquant {

namespace {

template <ONNXTensorElementDataType kType>
class MatMulInt4Cpu final : public Kernel {
  using T = typename CpuType<kType>::type;

 public:
  explicit MatMulInt4Cpu(const OrtKernelInfo* info) : attrs_(ReadMatMulInt4Attrs(info)) {
    const MatMulInt4Constants constants = CheckMatMulInt4Constants(info, attrs_, kType);
    if (attrs_.int8_activations()) PackForInt8(constants);
  }

  void Compute(OrtKernelContext* ctx) override {
    const MatMulInt4Problem p = BindMatMulInt4(ctx, attrs_, kType);
    if (attrs_.int8_activations()) return ComputeInt8(ctx, p);
    if (p.m > 0 && p.m <= GemvMaxM(kInt4GemvMaxM)) return ComputeGemv(ctx, p);
    const int64_t k = attrs_.k, n = attrs_.n, bs = attrs_.block_size, nb = attrs_.n_blocks();
    const int64_t row_bytes = Int4RowBytes(k, bs);
    const int64_t zp_row_bytes = Int4ZeroPointRowBytes(k, bs);
    std::vector<float> x_storage;
    const float* a = AsFloat<T>(ctx, p.x, p.m * k, x_storage);
    const T* scales = static_cast<const T*>(p.scales);
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);

    // Per panel: the 16 row pointers and the chunk's scales / zero points as float columns, so the
    // ISA-specific decoder (cpu/blocked_gemm.cc) only does the vectorizable part.
    static const uint8_t kZeroRow[kKc] = {};
    auto decode = [&](int64_t n0, int cols, int64_t k0, int64_t kc, float* bt) {
      constexpr int64_t kMaxBlocks = kKc / kInt4MinBlock;
      const uint8_t* rows[kNr];
      alignas(64) float sc[kMaxBlocks * kNr];
      alignas(64) float zf[kMaxBlocks * kNr];
      const int64_t blk0 = k0 / bs;  // k0 is a multiple of bs (kKc is)
      const int64_t nblk = (kc + bs - 1) / bs;
      for (int j = 0; j < kNr; ++j) {
        if (j < cols) {
          const int64_t row = n0 + j;
          rows[j] = p.b + row * row_bytes + k0 / 2;
          const uint8_t* zp_row = p.zero_points ? p.zero_points + row * zp_row_bytes : nullptr;
          for (int64_t b = 0; b < nblk; ++b) {
            sc[b * kNr + j] = ToFloat(scales[row * nb + blk0 + b]);
            zf[b * kNr + j] = static_cast<float>(zp_row ? Int4ZeroPointAt(zp_row, blk0 + b) : kInt4SymmetricZeroPoint);
          }
        } else {
          // Columns past N: zero codes, zero point and scale -> exact zeros, never stored.
          rows[j] = kZeroRow;
          for (int64_t b = 0; b < nblk; ++b) sc[b * kNr + j] = zf[b * kNr + j] = 0.0f;
        }
      }
      DecodeInt4Panel(rows, sc, zf, bs, kc, bt);
    };
    auto epilogue = [&](int64_t r, int64_t n0, int cols, const float* acc) {
      T* out = y + r * n + n0;
      for (int j = 0; j < cols; ++j) {
        const float b = bias ? ToFloat(bias[n0 + j]) : 0.0f;
        out[j] = FromFloat<T>(acc[j] + b);
      }
    };
    DecodeGemm(ctx, a, p.m, k, n, decode, epilogue);
  }

 private:
  // Small M: split X by k parity (zero padded to whole blocks) so that the low / high nibbles of
  // consecutive bytes meet consecutive floats, then one parallel task per range of output rows.
  void ComputeGemv(OrtKernelContext* ctx, const MatMulInt4Problem& p) {
    const int64_t m = p.m, k = attrs_.k, n = attrs_.n, bs = attrs_.block_size, nb = attrs_.n_blocks();
    const int64_t half_k = nb * bs / 2;  // padded K / 2
    // Row stride: one cache line more than a multiple of 64 bytes, so that the 2 * m rows the
    // kernel streams side by side do not all map to the same L1 set (K = 4096 gives 8 KiB rows:
    // 16 streams in one 12-way set thrashed and made M = 8 2.5x slower than M = 4).
    const int64_t ld = (half_k + 15) / 16 * 16 + 16;
    const T* x = static_cast<const T*>(p.x);
    std::vector<float> split(static_cast<size_t>(2 * m * ld));
    float* xe = split.data();           // [m, ld]: x[., 2j] for j < half_k
    float* xo = split.data() + m * ld;  // [m, ld]: x[., 2j + 1]
    for (int64_t mi = 0; mi < m; ++mi) {
      const T* xr = x + mi * k;
      float* e = xe + mi * ld;
      float* o = xo + mi * ld;
      int64_t j = 0;
      for (; 2 * j + 1 < k; ++j) {
        e[j] = ToFloat(xr[2 * j]);
        o[j] = ToFloat(xr[2 * j + 1]);
      }
      for (; j < half_k; ++j) {  // odd K: last even element; then zeros over the padding codes
        e[j] = 2 * j < k ? ToFloat(xr[2 * j]) : 0.0f;
        o[j] = 0.0f;
      }
    }
    Int4GemvParams gp;
    gp.xe = xe;
    gp.xo = xo;
    gp.x_stride = ld;
    gp.m = m;
    gp.b = p.b;
    gp.scales = p.scales;
    gp.scale_type = kScaleType;
    gp.zp = p.zero_points;
    gp.n_blocks = nb;
    gp.block_size = bs;
    RunGemvTasks(
        ctx, m, n, Int4RowBytes(k, bs),
        [&](int64_t n0, int64_t n1, float* acc, int64_t ld_acc) { Int4GemvRows(gp, n0, n1, acc, ld_acc); },
        BiasStore(p));
  }

  // The small-M paths' store: Y[mi, j] = sum + bias[j], rounded once to T.
  auto BiasStore(const MatMulInt4Problem& p) const {
    const T* bias = static_cast<const T*>(p.bias);
    T* y = static_cast<T*>(p.y);
    const int64_t n = attrs_.n;
    return [bias, y, n](int64_t mi, int64_t j, float sum) {
      y[mi * n + j] = FromFloat<T>(sum + (bias ? ToFloat(bias[j]) : 0.0f));
    };
  }

  // accuracy_level 4 with B, its scales and zero points constant initializers, on an AVX2 / AVX512
  // CPU: B prepacked in 16-row panels (Int4Int8Packed) for every call, a copy of the node's codes
  // held for the session's life. PYQUANT_CPU_INT8_PACK=0 (read at session creation) keeps to the
  // lane-parallel tiles / GEMM and no copy.
  void PackForInt8(const MatMulInt4Constants& c) {
    const char* env = std::getenv("PYQUANT_CPU_INT8_PACK");
    if ((env != nullptr && std::string(env) == "0") || !Int4Int8PackedAvailable()) return;
    const TensorView& b = c.view[kI4B];
    const TensorView& s = c.view[kI4Scales];
    const TensorView& zp = c.view[kI4ZeroPoints];
    if (!c.constant[kI4B] || !c.constant[kI4Scales] || (zp.present() && !c.constant[kI4ZeroPoints]) ||
        b.data == nullptr || s.data == nullptr) {
      return;
    }
    packed_ = std::make_unique<Int4Int8Packed>();
    PackInt4Int8(static_cast<const uint8_t*>(b.data), s.data, kScaleType,
                 zp.present() ? static_cast<const uint8_t*>(zp.data) : nullptr, attrs_.n, attrs_.n_blocks(),
                 attrs_.block_size, packed_.get());
  }

  // accuracy_level 4 (cpu/int8_activations.h): X to int8 per row and block, then integer dot
  // products per block: the packed kernel at every M where B was packed; else lane-parallel tiles at
  // small M and a GEMM whose lanes are output columns from M = 12 / 16 (int8_activations_unit.inc).
  void ComputeInt8(OrtKernelContext* ctx, const MatMulInt4Problem& p) {
    if (p.m == 0) return;
    thread_local Int8Activations xq;  // reused between calls: no allocation per token at M = 1
    // ... but not kept after a large call (a prefill of M x K codes), which allocates little
    // against its work: a thread would otherwise hold its largest M x K bytes for good.
    struct Release {
      Int8Activations& x;
      ~Release() {
        if (x.codes.capacity() > kKeepInt8Bytes) x = Int8Activations{};
      }
    } release{xq};
    // The copy answers only for the zero points it was packed with: a node whose zero points are
    // fed at run time (not constant, so not packed) keeps to the tiles.
    const bool packed = packed_ != nullptr && (p.zero_points != nullptr) == !packed_->zp.empty();
    QuantizeActivationsInt8(static_cast<const T*>(p.x), p.m, attrs_.k, attrs_.block_size, &xq, /*lanes=*/!packed);
    Int4Int8Params ip;
    ip.x = &xq;
    ip.b = p.b;
    ip.scales = p.scales;
    ip.scale_type = kScaleType;
    ip.zp = p.zero_points;
    ip.block_size = attrs_.block_size;
    if (packed) {
      // through ip.x, not xq: a lambda names the running thread's own thread_local, and the tasks
      // run on the pool's threads
      RunGemvTasks(
          ctx, p.m, attrs_.n, Int4RowBytes(attrs_.k, attrs_.block_size),
          [&](int64_t n0, int64_t n1, float* acc, int64_t ld_acc) {
            Int4Int8PackedRows(*packed_, *ip.x, n0, n1, acc, ld_acc);
          },
          BiasStore(p), /*align=*/16);
      return;
    }
    RunGemvTasks(
        ctx, p.m, attrs_.n, Int4RowBytes(attrs_.k, attrs_.block_size),
        [&](int64_t n0, int64_t n1, float* acc, int64_t ld_acc) { Int4Int8Rows(ip, n0, n1, acc, ld_acc); },
        BiasStore(p));
  }

  static constexpr size_t kKeepInt8Bytes = size_t{1} << 20;  // e.g. 256 rows of K = 4096
  static constexpr ScaleType kScaleType = std::is_same_v<T, float>  ? ScaleType::kFloat32
                                          : std::is_same_v<T, Half> ? ScaleType::kFloat16
                                                                    : ScaleType::kBFloat16;
  MatMulInt4Attrs attrs_;
  std::unique_ptr<Int4Int8Packed> packed_;  // PackForInt8; null: the tiles / GEMM serve every M
};

template <ONNXTensorElementDataType kType>
OpDef MakeDef() {
  OpDef d = MatMulInt4OpDef(kType, nullptr);
  d.create = [](const OrtKernelInfo* info, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<MatMulInt4Cpu<kType>>(info);
  };
  return d;
}

}  // namespace

void AppendMatMulInt4CpuOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16>());
  defs.push_back(MakeDef<ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16>());
}

}  // namespace pyquant
