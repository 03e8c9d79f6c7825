// Device code of the dot interaction (DESIGN.md step 7).
#ifndef JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_
#define JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_

#include "kernels/cuda/common.cuh"
#include "kernels/interaction.h"

namespace jagrank {
namespace cuda {

struct InteractionTraits {
  // Candidates per block, one warp each (the launcher uses fewer when their
  // vectors would not fit in shared memory).
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
};

// Row stride of the staged vectors: dim rounded up to whole warps, plus one
// float, so the stride is 1 mod 32. Lanes working on different pairs (a, b)
// read element k of row a (and b) at bank (a + k) % 32: distinct rows (up
// to 32 of them) never share a bank.
__host__ __device__ inline int InteractionSmemStride(int dim) { return (dim + 31) / 32 * 32 + 1; }

// Shared memory of one warp: its candidate's n vectors.
__host__ __device__ inline int64_t InteractionWarpSmemBytes(int n, int dim) {
  return 4 * static_cast<int64_t>(n) * InteractionSmemStride(dim);
}

// One warp per candidate c = blockIdx.x * warps + warp (grid.x = ceil(C /
// warps)). The warp finds c's request r by binary search in
// candidate_offsets, stages the n vectors (x_r, p_1..F,r, u_c, e_c) in its
// slice of shared memory with coalesced loads, writes x_r to the output row,
// and then each lane computes whole dot products: lane j takes pairs j,
// j + 32, ..., so the 32 results of a round are stored to 32 consecutive
// floats. The earlier kernel ran one 128-thread block per candidate with one
// warp per pair and a shuffle reduction: 225 us for 128 requests (~35k
// candidates) on the H200, 37% of the jagged forward pass (ncu, session 6),
// bound by block start-up and single-float stores, not by its 32 MB of traffic.
__global__ void __launch_bounds__(InteractionTraits::kThreads) DotInteractionKernel(const DotInteractionParams params) {
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * warps + warp;
  if (c >= params.num_candidates) return;  // whole warps leave; nothing below syncs the block
  const int dim = params.dim;
  const int num_requests = params.num_requests;
  const int num_sparse = params.num_sparse;
  const int n = num_sparse + 3;
  const int stride = InteractionSmemStride(dim);
  float* vectors = smem + static_cast<int64_t>(warp) * n * stride;

  // Invariant offsets[lo] <= c < offsets[hi]; empty requests are skipped over.
  const int32_t* offsets = params.candidate_offsets;
  int lo = 0;
  int hi = num_requests;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldg(offsets + mid) <= c) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t r = lo;

  const int width = dim + n * (n - 1) / 2;
  float* out = params.out + static_cast<int64_t>(c) * width;
  for (int a = 0; a < n; ++a) {
    const float* src;
    if (a == 0) {
      src = params.x + r * dim;
    } else if (a <= num_sparse) {
      src = params.pooled + (static_cast<int64_t>(a - 1) * num_requests + r) * dim;
    } else if (a == n - 2) {
      src = params.u + static_cast<int64_t>(c) * dim;
    } else {
      src = params.e + static_cast<int64_t>(c) * dim;
    }
    for (int k = lane; k < dim; k += 32) {
      const float value = __ldg(src + k);
      vectors[a * stride + k] = value;
      if (a == 0) out[k] = value;
    }
  }
  __syncwarp();

  // Pairs in the order a = 0..n-2, b = a+1..n-1; row a's pairs start at
  // `first`. A lane's pairs only grow, so (a, first) carry over.
  const int num_pairs = n * (n - 1) / 2;
  int a = 0;
  int first = 0;
  for (int pair = lane; pair < num_pairs; pair += 32) {
    while (pair >= first + (n - 1 - a)) {
      first += n - 1 - a;
      ++a;
    }
    const int b = a + 1 + (pair - first);
    const float* va = vectors + a * stride;
    const float* vb = vectors + b * stride;
    float dot0 = 0.0f, dot1 = 0.0f;  // two chains: half the dependent FMA latency
    int k = 0;
    for (; k + 1 < dim; k += 2) {
      dot0 = fmaf(va[k], vb[k], dot0);
      dot1 = fmaf(va[k + 1], vb[k + 1], dot1);
    }
    if (k < dim) dot0 = fmaf(va[k], vb[k], dot0);
    out[dim + pair] = dot0 + dot1;
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_
