// Device code of the dot interaction (docs/model.md, step 7).
#ifndef JAGRANK_KERNELS_INTERACTION_INTERACTION_KERNEL_CUH_
#define JAGRANK_KERNELS_INTERACTION_INTERACTION_KERNEL_CUH_

#include "kernels/cuda_common.cuh"
#include "kernels/interaction/interaction_params.h"

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
// candidates, n = 9 on the H200). One 128-thread block per candidate with
// one warp per pair and a shuffle reduction took 225 us there, 37% of the
// jagged forward pass (ncu), bound by block start-up and single-float
// stores, not by its 32 MB of traffic.
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
      src = static_cast<const float*>(params.u) + static_cast<int64_t>(c) * dim;
    } else {
      src = static_cast<const float*>(params.e) + static_cast<int64_t>(c) * dim;
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

// Register kernel, for n <= InteractionRegisterTraits::kMaxVectors (the
// default model has n = 9): no shared memory. Of a candidate's
// n(n-1)/2 dot products, the m(m-1)/2 among its request's m = n - 2 vectors
// (x_r, p_1..F,r) are the same for every candidate of the request; only the
// 2m + 1 with u_c or e_c are its own (15 of 36 for the default model). So a
// warp takes kCandidatesPerWarp consecutive candidates, computes the request
// pairs when its request changes (candidates are grouped by request, so
// mostly once), and per candidate only the 2m + 1 candidate pairs.
// Lane j holds element k0 + j of every vector and forms partial dot products
// of its pairs over its own elements; a transposing butterfly (31 shuffles)
// then leaves lane j with the sum of partial j. The request pairs (at most
// 28) take one butterfly. The candidate pairs take kCandidatePartials = 16
// partials when 2m + 1 <= 16 (m <= 7), and then one butterfly serves two
// candidates of the same request (partials 0-15 and 16-31: 15.5 shuffles and
// 30 FMAs per lane and candidate at d = 64); otherwise (m = 8) 32 partials
// and one candidate per butterfly.
// Internal orders, so that every register index is a compile-time constant:
// request pair (a, b), a < b < m, is b(b-1)/2 + a; candidate pair 0 is
// (u, e), 1 + 2i is (v_i, u) and 2 + 2i is (v_i, e). Each lane maps its pair
// to docs/model.md's output column once.
// History on the H200 (128 requests, ~31-36k candidates, n = 9): 95 us for
// a first register kernel with the vectors in docs/model.md's order (runtime
// indices); 57 us (ncu; 42.7 us by events) for one that kept all 36 pairs
// per candidate (96 shuffles and 72 FMAs per lane and candidate); with the
// request pairs once per request, 8 candidates per warp and one candidate
// per butterfly: 29.7 us (events); two per butterfly with 16 per warp: 26.2
// us (43.1 for the 36-pair kernel on the same inputs; 24.3 -> 19.1 us at
// ~31k candidates in a harness; kernels/NOTES.md).
struct InteractionRegisterTraits {
  static constexpr int kMaxRequestVectors = 8;  // x and at most 7 pooled features
  static constexpr int kMaxVectors = kMaxRequestVectors + 2;
  static constexpr int kMaxRequestPairs = kMaxRequestVectors * (kMaxRequestVectors - 1) / 2;  // 28
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static_assert(kMaxRequestPairs <= 32, "request pairs must fit in one lane each");
  static_assert(kMaxVectors == 10, "DotInteractionCudaHasRegisterKernel (interaction.h) states this limit");
  static_assert(2 * kMaxRequestVectors + 1 <= 32, "candidate pairs must fit in one lane each");
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

// Sums 32 partials per lane across the warp; returns the sum of partial `lane`.
__device__ __forceinline__ float WarpTransposeSum(float (&part)[32], int lane) {
  ButterflyStep<16>(part, lane);
  ButterflyStep<8>(part, lane);
  ButterflyStep<4>(part, lane);
  ButterflyStep<2>(part, lane);
  ButterflyStep<1>(part, lane);
  return part[0];
}

// Output column (after the d columns of x) of pair (a, b), a < b, of n
// vectors in docs/model.md's order.
__device__ __forceinline__ int InteractionPairColumn(int a, int b, int n) {
  return a * (2 * n - a - 1) / 2 + (b - a - 1);
}

template <int kCandidatePartials, int kCandidatesPerWarp>
__global__ void __launch_bounds__(InteractionRegisterTraits::kThreads)
    DotInteractionRegisterKernel(const DotInteractionParams params) {
  static_assert(kCandidatePartials == 16 || kCandidatePartials == 32, "16 or 32 partials per candidate");
  constexpr int kSlots = 32 / kCandidatePartials;  // candidates per butterfly
  constexpr int kMaxM = InteractionRegisterTraits::kMaxRequestVectors;
  const int lane = threadIdx.x % 32;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t c_begin = warp * kCandidatesPerWarp;
  if (c_begin >= params.num_candidates) return;  // whole warps leave
  const int c_end = static_cast<int>(
      c_begin + kCandidatesPerWarp < params.num_candidates ? c_begin + kCandidatesPerWarp : params.num_candidates);
  const int dim = params.dim;
  const int num_requests = params.num_requests;
  const int m = params.num_sparse + 1;  // request vectors: x, p_1..F
  const int n = m + 2;
  const int num_pairs = n * (n - 1) / 2;
  const int request_pairs = m * (m - 1) / 2;
  const int candidate_pairs = 2 * m + 1;
  const int64_t feature_stride = static_cast<int64_t>(num_requests) * dim;
  const int64_t row_width = dim + num_pairs;

  // This lane's output columns: request pair `lane`, and candidate pair
  // `lane % kCandidatePartials` of the round's candidate `lane / kCandidatePartials`.
  int request_column = -1;
  if (lane < request_pairs) {
    int b = 1;
    while ((b + 1) * b / 2 <= lane) ++b;
    request_column = InteractionPairColumn(lane - b * (b - 1) / 2, b, n);
  }
  const int pair = lane % kCandidatePartials;
  const int slot = lane / kCandidatePartials;
  int candidate_column = -1;
  if (pair == 0) {
    candidate_column = InteractionPairColumn(n - 2, n - 1, n);
  } else if (pair < candidate_pairs) {
    candidate_column = InteractionPairColumn((pair - 1) / 2, n - 2 + (pair - 1) % 2, n);
  }

  // Vector i < m of request r: x_r, then p_i,r.
  auto request_vector = [&](int64_t r, int i) -> const float* {
    return i == 0 ? params.x + r * dim : params.pooled + (i - 1) * feature_stride + r * dim;
  };

  int64_t r = RequestOfCandidate(params.candidate_offsets, num_requests, static_cast<int>(c_begin));
  int64_t pairs_of = -1;  // the request whose pairs `request_dot` holds
  float request_dot = 0.0f;
  for (int c = static_cast<int>(c_begin); c < c_end;) {
    while (__ldg(params.candidate_offsets + r + 1) <= c) ++r;  // skips requests without candidates
    if (r != pairs_of) {
      float part[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) part[i] = 0.0f;
      for (int k0 = 0; k0 < dim; k0 += 32) {
        const int k = k0 + lane;
        float v[kMaxM];
#pragma unroll
        for (int i = 0; i < kMaxM; ++i) v[i] = k < dim && i < m ? __ldg(request_vector(r, i) + k) : 0.0f;
#pragma unroll
        for (int b = 1; b < kMaxM; ++b) {
#pragma unroll
          for (int a = 0; a < b; ++a) part[b * (b - 1) / 2 + a] = fmaf(v[a], v[b], part[b * (b - 1) / 2 + a]);
        }
      }
      request_dot = WarpTransposeSum(part, lane);
      pairs_of = r;
    }

    // This round's candidates: c and, with two slots, c + 1 if it is in the
    // warp's range and of the same request (then the request pairs and x are
    // shared). Slots past `count` keep zero partials and store nothing.
    const int request_end = __ldg(params.candidate_offsets + r + 1);
    const int count = kSlots == 2 && c + 1 < c_end && c + 1 < request_end ? 2 : 1;
    float part[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) part[i] = 0.0f;
    for (int k0 = 0; k0 < dim; k0 += 32) {
      const int k = k0 + lane;
      const bool in = k < dim;
      float uk[kSlots], ek[kSlots];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int64_t at = static_cast<int64_t>(c + s) * dim + k;
        uk[s] = in && s < count ? __ldg(static_cast<const float*>(params.u) + at) : 0.0f;
        ek[s] = in && s < count ? __ldg(static_cast<const float*>(params.e) + at) : 0.0f;
        part[s * kCandidatePartials] = fmaf(uk[s], ek[s], part[s * kCandidatePartials]);
      }
#pragma unroll
      for (int i = 0; i < kMaxM && 2 + 2 * i < kCandidatePartials; ++i) {
        const float vk = in && i < m ? __ldg(request_vector(r, i) + k) : 0.0f;
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
          if (i == 0 && in && s < count) params.out[(c + s) * row_width + k] = vk;
          part[s * kCandidatePartials + 1 + 2 * i] = fmaf(vk, uk[s], part[s * kCandidatePartials + 1 + 2 * i]);
          part[s * kCandidatePartials + 2 + 2 * i] = fmaf(vk, ek[s], part[s * kCandidatePartials + 2 + 2 * i]);
        }
      }
    }
    const float candidate_dot = WarpTransposeSum(part, lane);
    if (candidate_column >= 0 && slot < count)
      params.out[(c + slot) * row_width + dim + candidate_column] = candidate_dot;
    if (request_column >= 0) {
      for (int s = 0; s < count; ++s) params.out[(c + s) * row_width + dim + request_column] = request_dot;
    }
    c += count;
  }
}


// ---- The split form (DotInteractionSplitColumns in interaction.h): the
// request rows once per request, the candidate rows per candidate; the top
// MLP's first layer then runs on each part separately.

// Request row r = [x_r, v_a . v_b for a < b < m] (m = F + 1 request
// vectors), then zeros up to `stride`. One block per request: its m vectors
// staged in shared memory (row stride 1 mod 32, as DotInteractionKernel's),
// each thread whole dot products. R blocks of m(m-1)/2 dots: a few us.
template <typename OutT>
__global__ void RequestPairsKernel(const DotInteractionParams params, OutT* out, int stride) {
  extern __shared__ float smem[];
  const int r = blockIdx.x;
  const int dim = params.dim;
  const int m = params.num_sparse + 1;
  const int s = InteractionSmemStride(dim);
  const int64_t feature_stride = static_cast<int64_t>(params.num_requests) * dim;
  OutT* row = out + static_cast<int64_t>(r) * stride;
  for (int a = 0; a < m; ++a) {
    const float* src = a == 0 ? params.x + static_cast<int64_t>(r) * dim
                              : params.pooled + (a - 1) * feature_stride + static_cast<int64_t>(r) * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x) {
      const float value = __ldg(src + k);
      smem[a * s + k] = value;
      if (a == 0) row[k] = FromFloat<OutT>(value);
    }
  }
  __syncthreads();
  const int num_pairs = m * (m - 1) / 2;
  for (int q = threadIdx.x; q < num_pairs; q += blockDim.x) {
    // Pair q in row-major order: row a holds pairs first(a) .. first(a) + m - 2 - a.
    int a = 0, first = 0;
    while (q >= first + (m - 1 - a)) {
      first += m - 1 - a;
      ++a;
    }
    const int b = a + 1 + (q - first);
    const float* va = smem + a * s;
    const float* vb = smem + b * s;
    float dot0 = 0.0f, dot1 = 0.0f;
    int k = 0;
    for (; k + 1 < dim; k += 2) {
      dot0 = fmaf(va[k], vb[k], dot0);
      dot1 = fmaf(va[k + 1], vb[k + 1], dot1);
    }
    if (k < dim) dot0 = fmaf(va[k], vb[k], dot0);
    row[dim + q] = FromFloat<OutT>(dot0 + dot1);
  }
  for (int k = dim + num_pairs + threadIdx.x; k < stride; k += blockDim.x) row[k] = FromFloat<OutT>(0.0f);
}

struct CandidatePairsTraits {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kVectorsPerRound = 16;  // 2 x 16 partials: one transposing butterfly
  static constexpr int kMinBlocksPerSm = 3;    // 24 warps per SM (at most 85 registers)
};

// RequestOfCandidate for a whole warp (every lane gets the answer): each
// level probes 32 evenly spaced offsets at once and keeps the segment
// between the last probe <= c and the next, so R = 512 takes two dependent
// loads instead of nine.
__device__ __forceinline__ int WarpRequestOfCandidate(const int32_t* offsets, int num_requests, int c, int lane) {
  int lo = 0;
  int hi = num_requests;  // offsets[lo] <= c < offsets[hi]
  while (hi - lo > 1) {
    const int step = (hi - lo + 31) / 32;
    const int probe = lo + lane * step;
    const bool below = probe < hi && __ldg(offsets + probe) <= c;  // lane 0's probe is lo: always true
    const unsigned mask = __ballot_sync(0xffffffffu, below);
    const int last = 31 - __clz(mask);
    const int new_lo = lo + last * step;
    hi = min(hi, new_lo + step);
    lo = new_lo;
  }
  return lo;
}

// Candidate row c = [v_a . u_c, v_a . e_c for a < m, u_c . e_c], then zeros
// up to `stride`. One warp per candidate; lane j holds elements j, j + 32,
// .. of u_c and e_c (kChunks of them in registers, loaded once; 0: dim above
// 128, read per round) and forms partial dot products with the request's
// vectors (read through the cache: a block's candidates mostly share a
// request), 16 request vectors (32 dots) per round, which one transposing
// butterfly (31 shuffles) leaves one dot per lane: lane j's is column
// 2 * first + j, already the row's order.
template <int kChunks, typename VecT, typename OutT>
__global__ void __launch_bounds__(CandidatePairsTraits::kThreads, CandidatePairsTraits::kMinBlocksPerSm)
    CandidatePairsKernel(const DotInteractionParams params, OutT* out, int stride) {
  constexpr int kRound = CandidatePairsTraits::kVectorsPerRound;
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * CandidatePairsTraits::kWarps + threadIdx.x / 32;
  if (c >= params.num_candidates) return;  // whole warps leave
  const int dim = params.dim;
  const int m = params.num_sparse + 1;
  const int64_t r = WarpRequestOfCandidate(params.candidate_offsets, params.num_requests, c, lane);
  const int64_t feature_stride = static_cast<int64_t>(params.num_requests) * dim;
  const VecT* u = static_cast<const VecT*>(params.u) + static_cast<int64_t>(c) * dim;
  const VecT* e = static_cast<const VecT*>(params.e) + static_cast<int64_t>(c) * dim;
  OutT* row = out + static_cast<int64_t>(c) * stride;
  constexpr int kHeld = kChunks > 0 ? kChunks : 1;
  float u_held[kHeld], e_held[kHeld];
  float ue = 0.0f;
  if (kChunks > 0) {
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const int k = i * 32 + lane;
      u_held[i] = k < dim ? ToFloat(__ldg(u + k)) : 0.0f;
      e_held[i] = k < dim ? ToFloat(__ldg(e + k)) : 0.0f;
      ue = fmaf(u_held[i], e_held[i], ue);
    }
  }
  for (int first = 0; first < m; first += kRound) {
    float part[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) part[i] = 0.0f;
    const int chunks = kChunks > 0 ? kChunks : (dim + 31) / 32;
#pragma unroll
    for (int i = 0; i < chunks; ++i) {
      const int k = i * 32 + lane;
      const bool in = k < dim;
      float uk, ek;
      if (kChunks > 0) {
        uk = u_held[i < kHeld ? i : 0];
        ek = e_held[i < kHeld ? i : 0];
      } else {
        uk = in ? ToFloat(__ldg(u + k)) : 0.0f;
        ek = in ? ToFloat(__ldg(e + k)) : 0.0f;
        if (first == 0) ue = fmaf(uk, ek, ue);
      }
#pragma unroll
      for (int j = 0; j < kRound; ++j) {
        const int a = first + j;
        const float* v = a == 0 ? params.x + r * dim : params.pooled + (a - 1) * feature_stride + r * dim;
        const float vk = in && a < m ? __ldg(v + k) : 0.0f;
        part[2 * j] = fmaf(vk, uk, part[2 * j]);
        part[2 * j + 1] = fmaf(vk, ek, part[2 * j + 1]);
      }
    }
    const float dot = WarpTransposeSum(part, lane);
    if (first + lane / 2 < m) row[2 * first + lane] = FromFloat<OutT>(dot);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) ue += __shfl_xor_sync(0xffffffffu, ue, offset);
  if (lane == 0) row[2 * m] = FromFloat<OutT>(ue);
  for (int k = 2 * m + 1 + lane; k < stride; k += 32) row[k] = FromFloat<OutT>(0.0f);
}

// CandidatePairsKernel's rows with the request's vectors staged in shared
// memory: block (r, chunk) takes candidates chunk * kCandidatesPerBlock ..
// of request r (grid = (R, ceil(max_candidates / kCandidatesPerBlock)); past
// the request's end a block leaves), stages x_r, p_1..F,r once ([m, dim]
// floats), then each warp takes every kWarps-th candidate: no search, and the
// request's vectors come from shared memory instead of the cache.
struct CandidatePairsSmemTraits {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kCandidatesPerBlock = 64;
};

template <int kChunks, typename VecT, typename OutT>
__global__ void __launch_bounds__(CandidatePairsSmemTraits::kThreads)
    CandidatePairsSmemKernel(const DotInteractionParams params, OutT* out, int stride) {
  static_assert(kChunks > 0, "dim <= 32 * kChunks held in registers");
  constexpr int kRound = CandidatePairsTraits::kVectorsPerRound;
  extern __shared__ float vectors[];  // [m, dim]
  const int r = blockIdx.x;
  const int begin = __ldg(params.candidate_offsets + r) + blockIdx.y * CandidatePairsSmemTraits::kCandidatesPerBlock;
  const int end = min(__ldg(params.candidate_offsets + r + 1),
                      begin + CandidatePairsSmemTraits::kCandidatesPerBlock);
  if (begin >= end) return;  // the whole block: nothing below syncs after this
  const int dim = params.dim;
  const int m = params.num_sparse + 1;
  const int64_t feature_stride = static_cast<int64_t>(params.num_requests) * dim;
  for (int i = threadIdx.x; i < m * dim; i += blockDim.x) {
    const int a = i / dim, k = i % dim;
    vectors[i] = a == 0 ? __ldg(params.x + static_cast<int64_t>(r) * dim + k)
                        : __ldg(params.pooled + (a - 1) * feature_stride + static_cast<int64_t>(r) * dim + k);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int c = begin + static_cast<int>(threadIdx.x / 32); c < end; c += CandidatePairsSmemTraits::kWarps) {
    const VecT* u = static_cast<const VecT*>(params.u) + static_cast<int64_t>(c) * dim;
    const VecT* e = static_cast<const VecT*>(params.e) + static_cast<int64_t>(c) * dim;
    OutT* row = out + static_cast<int64_t>(c) * stride;
    float u_held[kChunks], e_held[kChunks];
    float ue = 0.0f;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int k = i * 32 + lane;
      u_held[i] = k < dim ? ToFloat(__ldg(u + k)) : 0.0f;
      e_held[i] = k < dim ? ToFloat(__ldg(e + k)) : 0.0f;
      ue = fmaf(u_held[i], e_held[i], ue);
    }
    for (int first = 0; first < m; first += kRound) {
      float part[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) part[i] = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int k = i * 32 + lane;
#pragma unroll
        for (int j = 0; j < kRound; ++j) {
          const int a = first + j;
          const float vk = k < dim && a < m ? vectors[a * dim + k] : 0.0f;
          part[2 * j] = fmaf(vk, u_held[i], part[2 * j]);
          part[2 * j + 1] = fmaf(vk, e_held[i], part[2 * j + 1]);
        }
      }
      const float dot = WarpTransposeSum(part, lane);
      if (first + lane / 2 < m) row[2 * first + lane] = FromFloat<OutT>(dot);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) ue += __shfl_xor_sync(0xffffffffu, ue, offset);
    if (lane == 0) row[2 * m] = FromFloat<OutT>(ue);
    for (int k = 2 * m + 1 + lane; k < stride; k += 32) row[k] = FromFloat<OutT>(0.0f);
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_INTERACTION_INTERACTION_KERNEL_CUH_
