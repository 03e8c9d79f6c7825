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

// The request r of candidate c: offsets[r] <= c < offsets[r + 1]. Binary
// search with the invariant offsets[lo] <= c < offsets[hi]; empty requests
// are skipped over.
__device__ __forceinline__ int RequestOfCandidate(const int32_t* offsets, int num_requests, int c) {
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
  return lo;
}

// Shared-memory kernel, for n > InteractionRegisterTraits::kMaxVectors (the
// register kernel below takes smaller n). One warp per candidate c =
// blockIdx.x * warps + warp (grid.x = ceil(C / warps)). The warp finds c's
// request r by binary search in candidate_offsets, stages the n vectors
// (x_r, p_1..F,r, u_c, e_c) in its slice of shared memory with coalesced
// loads, writes x_r to the output row, and then each lane computes whole
// dot products: lane j takes pairs j, j + 32, ..., so the 32 results of a
// round are stored to 32 consecutive floats (95 us for 128 requests, ~36k
// candidates, n = 9 on the H200). The earlier kernel ran one 128-thread block per candidate with one
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

  const int64_t r = RequestOfCandidate(params.candidate_offsets, num_requests, c);

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

// Register kernel, for n <= kMaxVectors (the default model has n = 9): no
// shared memory. One warp per candidate as above, but lane j holds element
// k0 + j of every vector, so each lane forms partial dot products of all the
// pairs over its own elements:
// - The vectors are taken internally as w = [u_c, e_c, x_r, p_1 .. p_F], and
//   internal pair (a, b), a < b, has index b(b-1)/2 + a. Neither depends on
//   n, so with the loops unrolled every register index is a constant; the
//   vectors past n read as zeros and their pairs are never stored.
// - The first 32 pairs are summed across the warp by a transposing butterfly
//   (31 shuffles), which leaves lane j with pair j's sum; the rest (at most
//   kTailPairs) by one shuffle reduction each.
// - Each lane then maps its pair back to the output order of DESIGN.md
//   (v = [x, p_1 .. p_F, u, e]) and stores it.
// ncu at 128 requests (~36k candidates), n = 9, on the H200: a first version
// with the vectors in DESIGN.md's order (u, e at runtime indices, so every
// load picked its source at runtime) and four butterfly groups was issue-bound
// at 95 us, no faster than the shared-memory kernel; this one takes 57 us.
struct InteractionRegisterTraits {
  static constexpr int kMaxVectors = 10;
  static constexpr int kMaxPairs = kMaxVectors * (kMaxVectors - 1) / 2;  // 45
  static constexpr int kTailPairs = kMaxPairs - 32;                      // 13
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
};

// One step of the register kernel's transposing butterfly: a lane keeps the
// half of its 2 * kWidth sums whose pairs have bit kWidth of the lane's index
// and adds its partner's (lane ^ kWidth) partials of the same pairs.
template <int kWidth>
__device__ __forceinline__ void ButterflyStep(float* part, int lane) {
  const bool upper = (lane & kWidth) != 0;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) {
    const float send = upper ? part[i] : part[i + kWidth];
    const float keep = upper ? part[i + kWidth] : part[i];
    part[i] = keep + __shfl_xor_sync(0xffffffffu, send, kWidth);
  }
}

// Output column (after the d columns of x) of internal pair p for n vectors.
__device__ __forceinline__ int InteractionOutputPair(int p, int n) {
  int b = 1;
  while ((b + 1) * b / 2 <= p) ++b;
  const int a = p - b * (b - 1) / 2;
  // Internal -> DESIGN.md order: u -> n-2, e -> n-1, x -> 0, p_f -> f.
  auto original = [n](int i) { return i < 2 ? n - 2 + i : i - 2; };
  int oa = original(a);
  int ob = original(b);
  if (oa > ob) {
    const int t = oa;
    oa = ob;
    ob = t;
  }
  return oa * (2 * n - oa - 1) / 2 + (ob - oa - 1);
}

__global__ void __launch_bounds__(InteractionRegisterTraits::kThreads, 3)
    DotInteractionRegisterKernel(const DotInteractionParams params) {
  using Traits = InteractionRegisterTraits;
  constexpr int kMaxN = Traits::kMaxVectors;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * (blockDim.x / 32) + warp;
  if (c >= params.num_candidates) return;  // whole warps leave
  const int dim = params.dim;
  const int num_requests = params.num_requests;
  const int num_sparse = params.num_sparse;
  const int n = num_sparse + 3;
  const int num_pairs = n * (n - 1) / 2;
  const int64_t r = RequestOfCandidate(params.candidate_offsets, num_requests, c);
  float* out = params.out + static_cast<int64_t>(c) * (dim + num_pairs);
  const float* u = params.u + static_cast<int64_t>(c) * dim;
  const float* e = params.e + static_cast<int64_t>(c) * dim;
  const float* x = params.x + r * dim;
  // Feature f's row is f * feature_stride past this one (no features: null).
  const float* pooled = num_sparse > 0 ? params.pooled + r * dim : nullptr;
  const int64_t feature_stride = static_cast<int64_t>(num_requests) * dim;

  float part[32];
  float tail[Traits::kTailPairs];
#pragma unroll
  for (int i = 0; i < 32; ++i) part[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < Traits::kTailPairs; ++i) tail[i] = 0.0f;
  for (int k0 = 0; k0 < dim; k0 += 32) {
    const int k = k0 + lane;
    const bool in = k < dim;
    float w[kMaxN];
    w[0] = in ? __ldg(u + k) : 0.0f;
    w[1] = in ? __ldg(e + k) : 0.0f;
    w[2] = in ? __ldg(x + k) : 0.0f;
#pragma unroll
    for (int f = 0; f + 3 < kMaxN; ++f) w[f + 3] = in && f < num_sparse ? __ldg(pooled + f * feature_stride + k) : 0.0f;
    if (in) out[k] = w[2];
#pragma unroll
    for (int b = 1; b < kMaxN; ++b) {
#pragma unroll
      for (int a = 0; a < b; ++a) {
        const int p = b * (b - 1) / 2 + a;
        if (p < 32) {
          part[p] = fmaf(w[a], w[b], part[p]);
        } else {
          tail[p - 32] = fmaf(w[a], w[b], tail[p - 32]);
        }
      }
    }
  }

  ButterflyStep<16>(part, lane);
  ButterflyStep<8>(part, lane);
  ButterflyStep<4>(part, lane);
  ButterflyStep<2>(part, lane);
  ButterflyStep<1>(part, lane);
  if (lane < num_pairs) out[dim + InteractionOutputPair(lane, n)] = part[0];

  float mine = 0.0f;  // lane t keeps tail pair t
#pragma unroll
  for (int t = 0; t < Traits::kTailPairs; ++t) {
    if (32 + t >= num_pairs) break;  // the same for the whole warp
    float sum = tail[t];
#pragma unroll
    for (int width = 16; width >= 1; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
    if (lane == t) mine = sum;
  }
  if (32 + lane < num_pairs) out[dim + InteractionOutputPair(32 + lane, n)] = mine;
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CUDA_INTERACTION_KERNEL_CUH_
