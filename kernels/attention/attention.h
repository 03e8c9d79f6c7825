// The attention family (parameters in attention_params.h): jagged attention
// on the CPU (fast path and reference) and on CUDA (the flash kernels), and
// the padded dense baseline on both.
#ifndef JAGRANK_KERNELS_ATTENTION_ATTENTION_H_
#define JAGRANK_KERNELS_ATTENTION_ATTENTION_H_

#include "common/status.h"
#include "kernels/attention/attention_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

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

// The CPU padded-dense baseline: per (b, h) an OpenBLAS sgemm for the full
// [Nq, Nk] scores, masked softmax, an sgemm for P V, as the GPU baseline
// does with batched GEMMs; the (b, h) pairs shared over up to num_threads
// threads. Uses the workspace when given, else allocates per thread.
// float32 only; InvalidArgument naming the field on bad input.
Status PaddedDenseAttentionCpu(const PaddedDenseAttentionParams& params);

// Plain loops, float accumulation: the oracle for both padded-dense paths.
Status PaddedDenseAttentionReferenceCpu(const PaddedDenseAttentionParams& params);

#if JAGRANK_WITH_CUDA
// The one list of head dims the CUDA flash kernels are compiled for
// (flash_dispatch.h switches over exactly these).
inline constexpr int kFlashSupportedHeadDims[] = {32, 64, 128};

// Jagged flash attention on CUDA: one kernel family serves self-attention,
// target attention (q_offsets != k_offsets) and the padded-flash strategy
// (maybe_k_valid_len).
//
//   AttentionParams params = {};
//   ... fill device pointers, strides, offsets, sizes ...
//   RETURN_IF_ERROR(JaggedAttentionCuda(params, stream));
//
// Supported: dtype kBFloat16 (tensor cores, float32 accumulation; the kernel
// and its tiles per device and head dim are chosen by flash_tile_size.h) and
// kFloat32 (CUDA cores, float32 throughout); head_dim in
// kFlashSupportedHeadDims; any num_heads; softmax_scale >= 0. bf16 operands
// need 16-byte aligned rows: base pointers 16-byte aligned and row strides a
// multiple of 8 elements (4 for float32). Data pointers may be null where
// nothing is read or written: all of them when batch == 0 or max_q_len == 0,
// k and v when max_k_len == 0. Never materialises the score matrix;
// its only workspace is the longest-first order, kept per (device, stream)
// and grown on demand. The call only enqueues work on `stream` (no
// synchronisation).
//
// Errors: InvalidArgument naming the field (null pointers, bad sizes, stride
// or alignment), Unimplemented for an unsupported head_dim, Internal when
// the launch fails.
Status JaggedAttentionCuda(const AttentionParams& params, cudaStream_t stream);

// Whether JaggedAttentionCuda may run the Hopper (wgmma) kernels on the
// current device: the build has them (CUDA architectures naming 90) and the
// device has compute capability 9.0. The bf16 kernel of a batch is then
// flash::ChooseFlashKernel(FlashWgmmaAvailable(), ...) (flash_tile_size.h).
bool FlashWgmmaAvailable();

// Padded dense attention: per head, a cuBLAS strided-batched GEMM writes the
// scaled scores S = scale Q K^T [B, H, Nq, Nk] (fp32) into params.workspace, a
// masked-softmax kernel turns them into P in place (bf16 inputs: P is stored
// as bf16 in the first half of each fp32 score row), and a second GEMM forms
// O = P V. fp32 or bf16 operands, fp32 accumulation (no TF32).
// REQUIRES workspace of PaddedDenseAttentionWorkspaceBytes(params) bytes and
// finite k/v padding (padding rows get weight 0, and 0 * NaN is NaN).
// H200, bf16, B = 1024, N = 256, H = 4, D = 32, lengths uniform in [1, N]:
// 2.32 ms with a 1 GiB workspace (torch's dense baseline: 3.05 ms).
Status PaddedDenseAttentionCuda(const PaddedDenseAttentionParams& params, cudaStream_t stream);
#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_ATTENTION_H_
