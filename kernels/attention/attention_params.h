// Parameters of the attention family.
//
// AttentionParams: jagged multi-head attention forward (docs/model.md, steps 4 and 6).
//
// Sequence b has queries q_offsets[b] .. q_offsets[b+1]-1 and keys/values
// k_offsets[b] .. k_offsets[b+1]-1. For each query token t of b and head h:
//   o[t, h] = sum_j softmax_j(scale * q[t, h] . k[j, h]) v[j, h]
// over the keys j of b that are valid (all of them, or the first
// maybe_k_valid_len[b]). No causal mask. A sequence with zero valid keys gets
// zero output rows. Head h of token t lives at ptr + t * row_stride + h * head_dim.
//
// Uses:
//   self-attention:   q_offsets == k_offsets == history offsets, q/k/v are
//                     column blocks of one [T, 3d] projection (row stride 3d)
//                     or separate [T, d] tensors (row stride d); H heads,
//                     head_dim = d / H, scale = 1/sqrt(head_dim).
//   target attention: q = candidate embeddings [C, d], q_offsets = candidate
//                     offsets; k = v = z [T, d], k_offsets = history offsets;
//                     one head, head_dim = d, scale = 1/sqrt(d).
//   padded flash:     q_offsets = k_offsets = {0, N, 2N, ...}, maybe_k_valid_len
//                     = the true lengths (the padded work is done, then masked).
#ifndef JAGRANK_KERNELS_ATTENTION_ATTENTION_PARAMS_H_
#define JAGRANK_KERNELS_ATTENTION_ATTENTION_PARAMS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace jagrank {

struct AttentionParams {
  const void* q;                  // [Tq, *] of dtype, Tq = q_offsets[batch]
  const void* k;                  // [Tk, *], Tk = k_offsets[batch]
  const void* v;                  // [Tk, *]
  void* o;                        // [Tq, *]; every (token, head) slot written, nothing else; must not alias q, k, v
  DType dtype;                    // operands and output; accumulation is float32
  int64_t q_row_stride;           // elements between consecutive tokens, >= num_heads * head_dim
  int64_t k_row_stride;
  int64_t v_row_stride;
  int64_t o_row_stride;
  const int32_t* q_offsets;       // [batch + 1]
  const int32_t* k_offsets;       // [batch + 1]
  int batch;                      // B >= 0
  int num_heads;                  // H >= 1
  int head_dim;                   // dh >= 1 (CUDA supports a fixed list, see flash/)
  int max_q_len;                  // >= every query length in the batch
  int max_k_len;                  // >= every key length in the batch
  float softmax_scale;            // usually 1/sqrt(head_dim)
  const int32_t* maybe_k_valid_len;  // optional [batch]: keys at position >= it are masked
  int64_t q_tokens_hint;          // Tq when the caller knows it on the host, 0 if not: CUDA reads it as the
                                  // batch's fill to pick the launch schedule (flash_tile_size.h); any value
                                  // gives the same output
  int num_threads;                // CPU only: most threads incl. the caller's (workers from CpuThreadPool::Shared()),
                                  // 0 = hardware concurrency; small batches use fewer
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

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_ATTENTION_PARAMS_H_
