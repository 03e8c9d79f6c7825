// Device code of the dot interaction (DESIGN.md step 7).
#ifndef JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_
#define JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_

#include "kernels/cuda/common.cuh"
#include "kernels/interaction.h"

namespace jagrank {
namespace cuda {

struct InteractionTraits {
  static constexpr int kThreads = 128;
  static_assert(kThreads % 32 == 0, "whole warps");
};

// Row stride of the staged vectors: dim + 1 floats, so that threads reading
// element k of consecutive vectors hit consecutive banks.
__host__ __device__ inline int InteractionSmemStride(int dim) { return dim + 1; }

// Offsets up to this many entries (num_requests + 1) are staged in shared
// memory with one coalesced load, so the per-candidate binary search does not
// chain log2(R) dependent global loads; longer offset arrays are searched in
// global memory.
constexpr int kInteractionSmemOffsets = 1025;

// Shared memory of one block: the n vectors, then the staged offsets.
__host__ __device__ inline int64_t InteractionSmemBytes(int n, int dim, int num_requests) {
  const int64_t offsets = num_requests + 1 <= kInteractionSmemOffsets ? num_requests + 1 : 0;
  return 4 * (static_cast<int64_t>(n) * InteractionSmemStride(dim) + offsets);
}

// One block per candidate c; grid.x = num_candidates. The request r of c is
// found by binary search in candidate_offsets; x_r and p_f,r are read from the
// request-level tensors. Shared memory: [n, dim + 1] floats, the n vectors,
// then (when short enough) candidate_offsets.
__global__ void __launch_bounds__(InteractionTraits::kThreads) DotInteractionKernel(const DotInteractionParams params) {
  extern __shared__ float vectors[];
  const int c = blockIdx.x;
  const int dim = params.dim;
  const int num_requests = params.num_requests;
  const int n = params.num_sparse + 3;
  const int stride = InteractionSmemStride(dim);
  const int32_t* offsets = params.candidate_offsets;
  if (num_requests + 1 <= kInteractionSmemOffsets) {
    int32_t* staged = reinterpret_cast<int32_t*>(vectors + n * stride);
    for (int i = threadIdx.x; i <= num_requests; i += blockDim.x) staged[i] = offsets[i];
    __syncthreads();
    offsets = staged;
  }

  // Invariant offsets[lo] <= c < offsets[hi]; empty requests are skipped over.
  int lo = 0;
  int hi = num_requests;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= c) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t r = lo;

  const int width = dim + n * (n - 1) / 2;
  float* out = params.out + static_cast<int64_t>(c) * width;
  for (int idx = threadIdx.x; idx < n * dim; idx += blockDim.x) {
    const int a = idx / dim;
    const int k = idx - a * dim;
    float value;
    if (a == 0) {
      value = params.x[r * dim + k];
      out[k] = value;
    } else if (a <= params.num_sparse) {
      value = params.pooled[(static_cast<int64_t>(a - 1) * num_requests + r) * dim + k];
    } else if (a == n - 2) {
      value = params.u[static_cast<int64_t>(c) * dim + k];
    } else {
      value = params.e[static_cast<int64_t>(c) * dim + k];
    }
    vectors[a * stride + k] = value;
  }
  __syncthreads();

  // One warp per pair: the lanes split the dim products (consecutive k,
  // conflict-free) and sum them with shuffles. (One thread per pair left 92
  // of 128 threads idle and ran dim dependent FMAs serially: 28 us for 10.6k
  // candidates on the H200.)
  const int num_pairs = n * (n - 1) / 2;
  const int lane = threadIdx.x % 32;
  for (int pair = threadIdx.x / 32; pair < num_pairs; pair += blockDim.x / 32) {
    // pair -> (a, b), a < b, in the order a = 0..n-2, b = a+1..n-1.
    int a = 0;
    int rest = pair;
    while (rest >= n - 1 - a) {
      rest -= n - 1 - a;
      ++a;
    }
    const int b = a + 1 + rest;
    const float* va = vectors + a * stride;
    const float* vb = vectors + b * stride;
    float dot = 0.0f;
    for (int k = lane; k < dim; k += 32) dot += va[k] * vb[k];
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) out[dim + pair] = dot;
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_
