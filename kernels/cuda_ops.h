// CUDA launchers of the non-attention kernel families (the flash attention
// launcher is kernels/flash/flash_attention.h). Each takes the family's params
// struct (kernels/<family>.h) by const reference, with every pointer on the
// device, and enqueues its work on `stream`; nothing is synchronised.
//
// Errors: InvalidArgument naming the field for what the host can check
// (sizes, null pointers, dtypes); Internal for a failed CUDA/cuBLAS call or
// launch. Offsets, lengths and ids live on the device and are NOT read by the
// launchers: REQUIRES they satisfy the family's contract (the same one the CPU
// function checks). The kernels stay in bounds where they can (lengths are
// clamped to max_len), but the result of breaking a REQUIRES is unspecified.
//
// cuBLAS / cuBLASLt handles: one per (calling thread, device), created on the
// first call that needs one and kept until the process exits.
//
// Only declared when the build has CUDA (JAGRANK_WITH_CUDA).
#ifndef JAGRANK_KERNELS_CUDA_OPS_H_
#define JAGRANK_KERNELS_CUDA_OPS_H_

#if JAGRANK_WITH_CUDA

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/embedding_bag.h"
#include "kernels/history_gather.h"
#include "kernels/interaction.h"
#include "kernels/linear.h"
#include "kernels/padded.h"
#include "common/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

// Embedding bag sum, fp32 or bf16 table, fp32 out, float accumulation.
// One thread per output element, ids of a bag summed in order (the CPU order).
// H200: 4096 bags, 264k ids, d = 64, bf16 table of 1M rows: 0.10 ms, 358 GB/s
// of rows + ids: latency-bound (one row load in flight per thread).
Status EmbeddingBagCuda(const EmbeddingBagParams& params, cudaStream_t stream);

// Candidate embeddings e_c = table[row(ids[c])] as fp32.
Status GatherRowsCuda(const GatherRowsParams& params, cudaStream_t stream);

// h_j = E_item[row(id_j)] + P[L-1-j]. REQUIRES every len(b) <= max_len
// (tokens beyond max_len are not written).
Status HistoryGatherCuda(const HistoryGatherParams& params, cudaStream_t stream);

// Dot interaction; each candidate finds its request by binary search in
// candidate_offsets (request vectors are read, never copied per candidate).
// n = num_sparse + 3 <= 10 vectors: a register kernel (57 us for ~36k
// candidates at n = 9, d = 64 on the H200); more: a shared-memory kernel (95 us).
Status DotInteractionCuda(const DotInteractionParams& params, cudaStream_t stream);

// Jagged <-> padded copies, fp32 or bf16 (bits copied, no conversion).
// JaggedToPadded writes every element of `padded` (zeros past len(b)).
Status JaggedToPaddedCuda(const JaggedToPaddedParams& params, cudaStream_t stream);
Status PaddedToJaggedCuda(const PaddedToJaggedParams& params, cudaStream_t stream);

// Padded dense attention: per head, a cuBLAS strided-batched GEMM writes the
// scaled scores S = scale Q K^T [B, H, Nq, Nk] (fp32) into params.workspace, a
// masked-softmax kernel turns them into P in place (bf16 inputs: P is stored
// as bf16 in the first half of each fp32 score row), and a second GEMM forms
// O = P V. fp32 or bf16 operands, fp32 accumulation (no TF32).
// REQUIRES workspace of PaddedDenseAttentionWorkspaceBytes(params) bytes and
// finite k/v padding (padding rows get weight 0, and 0 * NaN is NaN).
// H200, bf16, B = 1024, N = 256, H = 4, D = 32, lengths uniform in [1, N]:
// 2.32 ms with a 1 GiB workspace (torch's dense baseline in ANCHORS.md: 3.05 ms).
Status PaddedDenseAttentionCuda(const PaddedDenseAttentionParams& params, cudaStream_t stream);

// y = x W^T + b (+ReLU) through cuBLASLt, bias and ReLU fused as the GEMM's
// epilogue. Full fp32 compute unless allow_tf32 (faster on tensor cores,
// about 1e-3 relative error). H200, m = 16384, n = 512, k = 1024, bias+ReLU:
// fp32 0.352 ms (48.8 TFLOP/s), TF32 0.090 ms (192 TFLOP/s) without a
// workspace. With one (LinearParams::workspace; kLinearWorkspaceBytes is
// NVIDIA's recommended size for Hopper) cuBLASLt can choose its sm90 kernels:
// TF32 0.050 ms (344 TFLOP/s) there, and the top MLP at ~35k candidates
// (100 -> 512 -> 256) 51 + 62 us -> 36 + 39 us.
Status LinearCuda(const LinearParams& params, cudaStream_t stream, bool allow_tf32 = false);
constexpr size_t kLinearWorkspaceBytes = size_t{32} << 20;

// Element-wise dtype conversion: out[i] = in[i] for i < count; fp32 -> bf16
// rounds to nearest even. Same dtypes: a device copy. in and out must not overlap.
struct CastParams {
  const void* in;     // [count] of in_dtype
  DType in_dtype;
  void* out;          // [count] of out_dtype
  DType out_dtype;
  int64_t count;      // >= 0
};
Status CastCuda(const CastParams& params, cudaStream_t stream);

}  // namespace jagrank

#endif  // JAGRANK_WITH_CUDA

#endif  // JAGRANK_KERNELS_CUDA_OPS_H_
