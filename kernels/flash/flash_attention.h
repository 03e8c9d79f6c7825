// Jagged flash attention on CUDA: the fast path behind AttentionParams
// (kernels/attention.h). One kernel serves self-attention, target attention
// (q_offsets != k_offsets) and the padded-flash strategy (maybe_k_valid_len).
//
//   AttentionParams params = {};
//   ... fill device pointers, strides, offsets, sizes ...
//   RETURN_IF_ERROR(JaggedAttentionCuda(params, stream));
//
// Supported: dtype kBFloat16 (tensor cores, float32 accumulation: mma.sync,
// or wgmma on compute capability 9.0 where it measured faster; the
// environment variable JAGRANK_FLASH_KERNEL=mma_sync|mma_sync_v<i>|wgmma|
// wgmma_alt|wgmma_v<i> forces one, read per call, for A/B runs) and
// kFloat32 (CUDA cores, float32 throughout); head_dim in
// kFlashSupportedHeadDims; any num_heads; softmax_scale >= 0. bf16 operands
// need 16-byte aligned rows: base pointers 16-byte aligned and row strides a
// multiple of 8 elements (4 for float32). Never materialises the score matrix
// and uses no workspace. All pointers are device pointers; the call only
// enqueues work on `stream` (no synchronisation, no allocation).
//
// Errors: InvalidArgument naming the field (null pointers, bad sizes, stride
// or alignment), Unimplemented for an unsupported head_dim, Internal when
// the launch fails.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_ATTENTION_H_
#define JAGRANK_KERNELS_FLASH_FLASH_ATTENTION_H_

// Only declared when the build has CUDA (JAGRANK_WITH_CUDA).
#if JAGRANK_WITH_CUDA

#include "kernels/attention.h"
#include "common/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

// The one list of head dims the CUDA kernels are compiled for (the dispatch
// in flash_dispatch.h switches over exactly these).
inline constexpr int kFlashSupportedHeadDims[] = {32, 64, 128};

Status JaggedAttentionCuda(const AttentionParams& params, cudaStream_t stream);

}  // namespace jagrank

#endif  // JAGRANK_WITH_CUDA

#endif  // JAGRANK_KERNELS_FLASH_FLASH_ATTENTION_H_
