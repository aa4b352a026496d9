// KVCacheWrite: one step's keys or values written into a fixed-length cache at given slots
// (docs/ops.md, "KVCacheWrite"). The parts shared by every execution provider: input validation,
// shapes, the op definition.
//
// Why an op: a static KV cache (pyquant/export_lm.py) must write S new entries per step into a
// buffer of L slots. In plain ONNX that is a ScatterND or a Gather + Where over the whole buffer
// into a second buffer, so every step reads and writes every layer's whole cache (O(L) bytes, ~4x
// what attention reads). This op writes only the S slots when its output is its input's buffer
// (the caller binds one device buffer as both past and present, as pyquant.ort.generate does), and
// copies past first otherwise, so it is correct either way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/custom_op.h"

namespace pyquant {

constexpr const char* kKvCacheWriteName = "KVCacheWrite";

enum KvCacheWriteInput : size_t { kKvPast = 0, kKvNew = 1, kKvSlots = 2, kKvNumInputs = 3 };

// One call, flattened: past / present are [rows, length, slot_bytes] bytes, fresh is
// [rows, steps, slot_bytes], rows = batch * heads, slot_bytes = head_dim * element size.
struct KvCacheWriteProblem {
  int64_t rows = 0;
  int64_t length = 0;      // L
  int64_t steps = 0;       // S
  int64_t slot_bytes = 0;  // one slot of one row
  const uint8_t* past = nullptr;
  const uint8_t* fresh = nullptr;
  const int64_t* slots = nullptr;  // [S]: where entry s goes (device memory on CUDA)
  uint8_t* present = nullptr;
  bool in_place() const { return present == past; }
};

// Validates the three inputs (T [B, H, L, D], T [B, H, S, D], int64 [S]; S <= L) and allocates the
// output [B, H, L, D]. The slot values are not read here (on CUDA they live on the device).
KvCacheWriteProblem BindKvCacheWrite(OrtKernelContext* ctx, ONNXTensorElementDataType t);
OpDef KvCacheWriteOpDef(ONNXTensorElementDataType t, const char* execution_provider);

// Appends the op's definitions for float / float16 / bfloat16 on one execution provider, each
// creating a KernelT(t): the CPU and CUDA registration tables differ only in KernelT and provider.
template <class KernelT, ONNXTensorElementDataType kType>
OpDef KvCacheWriteDefFor(const char* execution_provider) {
  OpDef d = KvCacheWriteOpDef(kType, execution_provider);
  d.create = [](const OrtKernelInfo*, const std::string&) -> std::unique_ptr<Kernel> {
    return std::make_unique<KernelT>(kType);
  };
  return d;
}
template <class KernelT>
void AppendKvCacheWriteDefs(std::vector<OpDef>& defs, const char* execution_provider) {
  defs.push_back(KvCacheWriteDefFor<KernelT, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT>(execution_provider));
  defs.push_back(KvCacheWriteDefFor<KernelT, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16>(execution_provider));
  defs.push_back(KvCacheWriteDefFor<KernelT, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16>(execution_provider));
}

}  // namespace pyquant
