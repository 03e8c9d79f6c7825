// Device code of padded dense attention: the masked softmax between its two
// cuBLAS GEMMs.
#ifndef JAGRANK_KERNELS_ATTENTION_PADDED_DENSE_ATTENTION_KERNEL_CUH_
#define JAGRANK_KERNELS_ATTENTION_PADDED_DENSE_ATTENTION_KERNEL_CUH_

#include <cfloat>
#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace jagrank {
namespace cuda {

struct SoftmaxTraits {
  static constexpr int kThreads = 256;
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
};

struct MaskedSoftmaxArgs {
  float* scores;          // [batch, heads, max_q_len, max_k_len], already scaled
  const int32_t* q_len;   // [batch]
  const int32_t* k_len;   // [batch]
  int heads;
  int max_q_len;
  int max_k_len;
};

// Block-wide reduction; every thread gets the result. `scratch` holds one
// float per warp. Ends with a barrier, so scratch can be reused at once.
template <bool kMax>
__device__ __forceinline__ float BlockReduce(float value, float* scratch) {
  for (int delta = 16; delta > 0; delta /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, delta);
    value = kMax ? fmaxf(value, other) : value + other;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  value = kMax ? -FLT_MAX : 0.0f;
  for (int w = 0; w < num_warps; ++w) value = kMax ? fmaxf(value, scratch[w]) : value + scratch[w];
  __syncthreads();
  return value;
}

// One block per score row (b, h, i); grid.x = batch * heads * max_q_len.
// Writes P in place: element type P = float (same slots) or __nv_bfloat16 (the
// first max_k_len bf16 slots of the row's bytes, i.e. row stride 2 * max_k_len
// in bf16 elements). Keys j >= k_len[b] get 0; rows i >= q_len[b] and rows of
// a sequence with k_len[b] == 0 are all zeros.
template <typename P>
__global__ void __launch_bounds__(SoftmaxTraits::kThreads) MaskedSoftmaxKernel(const MaskedSoftmaxArgs args) {
  __shared__ float scratch[SoftmaxTraits::kThreads / 32];
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % args.max_q_len);
  const int b = static_cast<int>(row / (static_cast<int64_t>(args.heads) * args.max_q_len));
  const int n = args.max_k_len;
  const float* s = args.scores + row * n;
  P* p = reinterpret_cast<P*>(args.scores + row * n);
  const int valid = min(max(args.k_len[b], 0), n);
  const bool live = i < args.q_len[b] && valid > 0;

  float row_max = -FLT_MAX;
  float inv_sum = 0.0f;
  if (live) {  // uniform across the block
    for (int j = threadIdx.x; j < valid; j += blockDim.x) row_max = fmaxf(row_max, s[j]);
    row_max = BlockReduce<true>(row_max, scratch);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(s[j] - row_max);
    inv_sum = 1.0f / BlockReduce<false>(sum, scratch);
  }
  // bf16 writes land on fp32 slots j/2 <= j: all reads of a chunk finish
  // (barrier) before its writes, and later chunks read only slots >= their
  // start, which no earlier write reaches.
  for (int base = 0; base < n; base += blockDim.x) {
    const int j = base + threadIdx.x;
    const float value = (live && j < valid) ? expf(s[j] - row_max) * inv_sum : 0.0f;
    if constexpr (sizeof(P) < sizeof(float)) __syncthreads();
    if (j < n) p[j] = FromFloat<P>(value);
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_PADDED_DENSE_ATTENTION_KERNEL_CUH_
