// The C ABI of jagrank_c.h over the C++ launchers. Status -> int code
// and a per-thread message; no C++ exception crosses the boundary.
#include "kernels/c_api/jagrank_c.h"

#include <cuda_runtime_api.h>

#include <exception>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "common/status.h"

namespace jagrank {
namespace {

std::string& LastError() {
  thread_local std::string message;
  return message;
}

static_assert(JAGRANK_ERROR_INVALID_ARGUMENT == static_cast<int>(Status::Code::kInvalidArgument) &&
                  JAGRANK_ERROR_UNIMPLEMENTED == static_cast<int>(Status::Code::kUnimplemented) &&
                  JAGRANK_ERROR_INTERNAL == static_cast<int>(Status::Code::kInternal),
              "the C codes mirror Status::Code");

// Runs `body` (returning Status), records its message, returns its code.
template <typename Body>
int Call(const char* function, Body&& body) {
  try {
    const Status status = body();
    if (status.ok()) return JAGRANK_OK;
    LastError() = std::string(function) + ": " + status.ToString();
    return static_cast<int>(status.code());
  } catch (const std::exception& e) {
    LastError() = std::string(function) + ": exception: " + e.what();
  } catch (...) {
    LastError() = std::string(function) + ": unknown exception";
  }
  return JAGRANK_ERROR_INTERNAL;
}

Status ToDType(int32_t value, const char* field, DType* out) {
  switch (value) {
    case JAGRANK_DTYPE_FLOAT32: *out = DType::kFloat32; return Status::Ok();
    case JAGRANK_DTYPE_BFLOAT16: *out = DType::kBFloat16; return Status::Ok();
    default:
      return Status::InvalidArgument(std::string(field) + " = " + std::to_string(value) +
                                     ", must be JAGRANK_DTYPE_FLOAT32 (0) or JAGRANK_DTYPE_BFLOAT16 (1)");
  }
}

// q, k, v, o as contiguous [T, row_stride] tensors.
void SetContiguousAttention(const void* q, const void* k, const void* v, void* o, int64_t row_stride,
                            AttentionParams* params) {
  params->q = q;
  params->k = k;
  params->v = v;
  params->o = o;
  params->q_row_stride = params->k_row_stride = params->v_row_stride = params->o_row_stride = row_stride;
}

// The C ABI's own names for the pointers whose launcher field is named
// otherwise (offsets -> q_offsets and k_offsets, z -> k and v): an offsets
// array describes the batch and is required whenever batch > 0 (PyTorch never
// hands out a null pointer for a non-empty tensor, so a null one there is a
// caller's bug even when max_len = 0 means nothing would be read).
Status CheckOffsets(const int32_t* offsets, int32_t batch, const char* argument) {
  if (batch > 0 && offsets == nullptr) {
    return Status::InvalidArgument(std::string(argument) + " is null (batch = " + std::to_string(batch) +
                                   " needs batch + 1 entries)");
  }
  return Status::Ok();
}

// A token count passed as a schedule hint: 0 (unknown) or the count.
Status CheckTokenHint(int64_t hint, const char* argument) {
  if (hint < 0) {
    return Status::InvalidArgument(std::string(argument) + " = " + std::to_string(hint) +
                                   " is negative (pass the token count, or 0 if unknown)");
  }
  return Status::Ok();
}

}  // namespace
}  // namespace jagrank

extern "C" {

int jagrank_c_api_version(void) { return JAGRANK_C_API_VERSION; }

const char* jagrank_last_error(void) { return jagrank::LastError().c_str(); }

int jagrank_embedding_bag(const int64_t* ids, const int32_t* offsets, int32_t batch, const void* table,
                          int32_t table_dtype, int64_t num_rows, int32_t dim, float* out,
                          struct CUstream_st* stream) {
  return jagrank::Call("jagrank_embedding_bag", [&] {
    jagrank::EmbeddingBagParams params = {};
    RETURN_IF_ERROR(jagrank::ToDType(table_dtype, "table_dtype", &params.table_dtype));
    params.ids = ids;
    params.offsets = offsets;
    params.batch = batch;
    params.table = table;
    params.num_rows = num_rows;
    params.dim = dim;
    params.out = out;
    return jagrank::EmbeddingBagCuda(params, stream);
  });
}

int jagrank_jagged_self_attention(const void* q, const void* k, const void* v, void* o, int32_t dtype,
                                  const int32_t* offsets, int32_t batch, int32_t num_heads, int32_t head_dim,
                                  int32_t max_len, int64_t total_len, float softmax_scale,
                                  struct CUstream_st* stream) {
  return jagrank::Call("jagrank_jagged_self_attention", [&] {
    jagrank::AttentionParams params = {};
    RETURN_IF_ERROR(jagrank::ToDType(dtype, "dtype", &params.dtype));
    RETURN_IF_ERROR(jagrank::CheckOffsets(offsets, batch, "offsets"));
    RETURN_IF_ERROR(jagrank::CheckTokenHint(total_len, "total_len"));
    jagrank::SetContiguousAttention(q, k, v, o, int64_t{num_heads} * head_dim, &params);
    params.q_offsets = offsets;
    params.k_offsets = offsets;
    params.batch = batch;
    params.num_heads = num_heads;
    params.head_dim = head_dim;
    params.max_q_len = max_len;
    params.max_k_len = max_len;
    params.q_tokens_hint = total_len;
    params.softmax_scale = softmax_scale;
    return jagrank::JaggedAttentionCuda(params, stream);
  });
}

int jagrank_jagged_target_attention(const void* q, const int32_t* candidate_offsets, int32_t max_candidates,
                                    int64_t total_candidates, const void* z, const int32_t* history_offsets,
                                    int32_t max_history_len, int32_t batch, int32_t dim, int32_t dtype,
                                    float softmax_scale, void* o, struct CUstream_st* stream) {
  return jagrank::Call("jagrank_jagged_target_attention", [&] {
    jagrank::AttentionParams params = {};
    RETURN_IF_ERROR(jagrank::ToDType(dtype, "dtype", &params.dtype));
    RETURN_IF_ERROR(jagrank::CheckOffsets(candidate_offsets, batch, "candidate_offsets"));
    RETURN_IF_ERROR(jagrank::CheckOffsets(history_offsets, batch, "history_offsets"));
    RETURN_IF_ERROR(jagrank::CheckTokenHint(total_candidates, "total_candidates"));
    // z is read (as keys and values) only when some candidate meets some history.
    if (z == nullptr && batch > 0 && max_candidates > 0 && max_history_len > 0) {
      return jagrank::Status::InvalidArgument("z is null (max_candidates and max_history_len > 0)");
    }
    jagrank::SetContiguousAttention(q, z, z, o, dim, &params);
    params.q_offsets = candidate_offsets;
    params.k_offsets = history_offsets;
    params.batch = batch;
    params.num_heads = 1;
    params.head_dim = dim;
    params.max_q_len = max_candidates;
    params.max_k_len = max_history_len;
    params.q_tokens_hint = total_candidates;
    params.softmax_scale = softmax_scale;
    return jagrank::JaggedAttentionCuda(params, stream);
  });
}

}  // extern "C"
