// Jagged multi-head attention forward (DESIGN.md steps 4 and 6).
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
//
// The CUDA launcher (kernels/flash/flash_attention.h) is
//   Status JaggedAttentionCuda(const AttentionParams&, cudaStream_t);
#ifndef JAGRANK_KERNELS_ATTENTION_H_
#define JAGRANK_KERNELS_ATTENTION_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "common/status.h"

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
  int num_threads;                // CPU only: most threads incl. the caller's (workers from CpuThreadPool::Shared()),
                                  // 0 = hardware concurrency; small batches use fewer
};

// CPU backend: float32 only. (sequence, head) items are spread over up to
// num_threads threads; each runs scale Q K^T and P V as two single-threaded
// OpenBLAS sgemm calls over that sequence only (no padding: a [Lq, Lk]
// float32 score buffer per thread, never the whole batch's scores) with a
// vectorised softmax between them. One thread, B=64, N=1024, H=2, dh=32 on
// the 2-core dev box: 242 ms = 71 GFLOP/s with OpenBLAS's AVX2 kernels,
// 171 ms with its AVX-512 ones (the hand-tiled version before: 355 ms).
// InvalidArgument naming the field on bad input (dtype, null pointers,
// strides too small, offsets, lengths above max_q_len/max_k_len, ...).
Status JaggedAttentionCpu(const AttentionParams& params);

// Plain single-threaded loops, float accumulation: the oracle the fast path
// is tested against. Same contract as JaggedAttentionCpu.
Status JaggedAttentionReferenceCpu(const AttentionParams& params);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_H_
