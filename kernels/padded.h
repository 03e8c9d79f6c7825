// Padded baselines (the layouts the paper measures against): jagged <->
// padded conversion and padded dense attention (materialised scores).
// CUDA launchers: kernels/cuda_ops.h.
#ifndef JAGRANK_KERNELS_PADDED_H_
#define JAGRANK_KERNELS_PADDED_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "common/status.h"

namespace jagrank {

// padded[b, i, :] = values[offsets[b] + i, :] for i < len(b), zeros for
// len(b) <= i < max_len. Every len(b) <= max_len.
struct JaggedToPaddedParams {
  const void* values;        // [offsets[batch], width] of dtype
  const int32_t* offsets;    // [batch + 1]
  int batch;                 // B >= 0
  int max_len;               // N >= 0
  int64_t width;             // elements per token, > 0
  DType dtype;
  void* padded;              // [batch, max_len, width]; every element written
};

// values[offsets[b] + i, :] = padded[b, i, :] for i < len(b); padding ignored.
struct PaddedToJaggedParams {
  const void* padded;        // [batch, max_len, width] of dtype
  const int32_t* offsets;    // [batch + 1]
  int batch;
  int max_len;
  int64_t width;
  DType dtype;
  void* values;              // [offsets[batch], width]
};

// Padded dense attention: for each b, head h, query i < q_len[b]:
//   S = scale * q[b, i, h] . k[b, j, h] for all j < max_k_len (materialised),
//   P = softmax over j < k_len[b] (masked keys get weight 0),
//   o[b, i, h] = sum_j P_j v[b, j, h].
// Query rows i >= q_len[b], and all rows of a b with k_len[b] == 0, are zeros.
struct PaddedDenseAttentionParams {
  const void* q;             // [batch, max_q_len, num_heads, head_dim] of dtype
  const void* k;             // [batch, max_k_len, num_heads, head_dim]
  const void* v;             // [batch, max_k_len, num_heads, head_dim]
  const int32_t* q_len;      // [batch], 0 <= q_len[b] <= max_q_len
  const int32_t* k_len;      // [batch], 0 <= k_len[b] <= max_k_len
  int batch;                 // B >= 0
  int max_q_len;             // Nq >= 0
  int max_k_len;             // Nk >= 0
  int num_heads;             // H >= 1
  int head_dim;              // dh >= 1
  float softmax_scale;
  DType dtype;               // of q, k, v, o; scores are float32
  void* o;                   // [batch, max_q_len, num_heads, head_dim]; every element written
  float* workspace;          // PaddedDenseAttentionWorkspaceBytes(params) bytes:
                             // the [batch, num_heads, max_q_len, max_k_len] scores.
                             // Required by CUDA; the CPU reference uses it when not null.
  int num_threads;           // CPU only: most threads incl. the caller's; 0 = all cores
};

// Bytes of the materialised score matrix: 4 * B * H * Nq * Nk.
inline int64_t PaddedDenseAttentionWorkspaceBytes(const PaddedDenseAttentionParams& params) {
  return int64_t{4} * params.batch * params.num_heads * params.max_q_len * params.max_k_len;
}

// CPU versions; InvalidArgument naming the field on bad input. The
// conversions accept both dtypes; the attentions are float32 only.
Status JaggedToPaddedCpu(const JaggedToPaddedParams& params);
Status PaddedToJaggedCpu(const PaddedToJaggedParams& params);

// The CPU padded-dense baseline: per (b, h) an OpenBLAS sgemm for the full
// [Nq, Nk] scores, masked softmax, an sgemm for P V, as the GPU baseline
// does with batched GEMMs; the (b, h) pairs shared over up to num_threads
// threads. Uses the workspace when given, else allocates per thread.
Status PaddedDenseAttentionCpu(const PaddedDenseAttentionParams& params);

// Plain loops, float accumulation: the oracle for both padded-dense paths.
Status PaddedDenseAttentionReferenceCpu(const PaddedDenseAttentionParams& params);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_PADDED_H_
