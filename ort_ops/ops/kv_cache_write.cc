#include "ops/kv_cache_write.h"

#include <string>

namespace pyquant {

namespace {
int64_t ElementBytes(ONNXTensorElementDataType t) { return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT ? 4 : 2; }
}  // namespace

KvCacheWriteProblem BindKvCacheWrite(OrtKernelContext* ctx, ONNXTensorElementDataType t) {
  const TensorView past = GetInput(ctx, kKvPast);
  const TensorView fresh = GetInput(ctx, kKvNew);
  const TensorView slots = GetInput(ctx, kKvSlots);
  if (past.shape.size() != 4 || fresh.shape.size() != 4) {
    throw OpError("past and new must be 4-D [batch, heads, slots, head_dim], got " + past.ShapeString() + " and " +
                  fresh.ShapeString());
  }
  if (past.shape[0] != fresh.shape[0] || past.shape[1] != fresh.shape[1] || past.shape[3] != fresh.shape[3]) {
    throw OpError("new " + fresh.ShapeString() + " must match past " + past.ShapeString() +
                  " in batch, heads and head_dim");
  }
  if (slots.shape.size() != 1 || slots.shape[0] != fresh.shape[2]) {
    throw OpError("cache_position must be 1-D with one slot per new entry (" + std::to_string(fresh.shape[2]) +
                  "), got " + slots.ShapeString());
  }
  if (fresh.shape[2] > past.shape[2]) {
    throw OpError("new has " + std::to_string(fresh.shape[2]) + " entries per row but the cache only " +
                  std::to_string(past.shape[2]) + " slots");
  }
  KvCacheWriteProblem p;
  p.rows = past.shape[0] * past.shape[1];
  p.length = past.shape[2];
  p.steps = fresh.shape[2];
  p.slot_bytes = past.shape[3] * ElementBytes(t);
  p.past = static_cast<const uint8_t*>(past.data);
  p.fresh = static_cast<const uint8_t*>(fresh.data);
  p.slots = static_cast<const int64_t*>(slots.data);
  p.present = static_cast<uint8_t*>(AllocateOutput(ctx, 0, past.shape));
  return p;
}

OpDef KvCacheWriteOpDef(ONNXTensorElementDataType t, const char* execution_provider) {
  OpDef d;
  d.name = kKvCacheWriteName;
  d.execution_provider = execution_provider;
  d.input_types = {t, t, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64};
  d.input_optional = {false, false, false};
  d.input_on_cpu = {false, false, false};
  d.output_type = t;
  d.infer_shape = [](OrtShapeInferContext* ctx) { InferOutputLikeX(ctx, InferInputDim(ctx, kKvPast, 3)); };
  return d;
}

}  // namespace pyquant
