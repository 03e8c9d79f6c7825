// Definitions of the launchers declared in flash_launch.h: grid shape,
// shared memory, launch error check. Included by the per-instantiation .cu
// files only.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_CUH_
#define JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <cmath>

#include "common/cuda_check.h"
#include "kernels/flash/flash_kernel.cuh"
#include "kernels/flash/flash_launch.h"
#include "kernels/flash/flash_traits.h"

namespace jagrank {
namespace flash {

// One CTA per (sequence, head, query tile of the longest sequence), in one
// flattened x dimension (the kernel decodes it with the tile fastest).
inline dim3 FlashGrid(const AttentionParams& params, int block_m) {
  const int64_t m_blocks = (params.max_q_len + block_m - 1) / block_m;
  return dim3(static_cast<unsigned>(m_blocks * params.batch * params.num_heads), 1, 1);
}

inline float ScaleLog2(const AttentionParams& params) {
  return params.softmax_scale * 1.4426950408889634f;  // log2(e): exp(x) = 2^(x log2 e)
}

template <typename Traits>
Status LaunchFlashBf16Kernel(const AttentionParams& params, cudaStream_t stream, const int* maybe_order) {
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  auto* kernel = &FlashAttentionBf16Kernel<Traits>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; cheap, so it
  // is done per call instead of caching per-device state.
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params), maybe_order);
  return CudaLaunchStatus("FlashAttentionBf16Kernel");
}

// Upper bound of the work (batch x heads x max_q_len x max_k_len x head_dim)
// above which the longest-first order is used (its extra one-CTA launch costs
// a few microseconds). 3e10 in v5; lowered to 3e9 in v6 so that the three
// smaller target-attention shapes (bounds of at most 8.6e9-1.7e10) are
// ordered too: target Lmax 2048, whose tile did not change, 0.075 -> 0.057
// ms (1.02x -> 1.35x varlen FA2, same H200 call, bench/NOTES.md v6). It also
// orders self D = 32 N = 256 (at most 8.6e9), where it neither won nor lost
// (0.115 -> 0.117 ms, within the spread). Launches of less work (< 3e9,
// ~0.05 ms and shorter) stay in batch order.
constexpr double kLongestFirstMinWork = 3e9;

inline bool UseLongestFirst(const AttentionParams& params) {
  const double work_bound = static_cast<double>(params.batch) * params.num_heads * params.max_q_len *
                            params.max_k_len * params.head_dim;
  return params.batch > 1 && work_bound >= kLongestFirstMinWork;
}

// Any FlashBf16Traits instantiation (the benchmark compares tile choices
// through this); LaunchFlashBf16<kHeadDim> uses FlashBf16Config<kHeadDim>.
template <typename Traits>
Status LaunchFlashBf16WithTraits(const AttentionParams& params, cudaStream_t stream, bool longest_first) {
  if (longest_first) return LaunchWithLongestFirstOrder(params, stream, &LaunchFlashBf16Kernel<Traits>);
  return LaunchFlashBf16Kernel<Traits>(params, stream, nullptr);
}

template <int kHeadDim>
Status LaunchFlashBf16(const AttentionParams& params, cudaStream_t stream) {
  using Config = FlashBf16Config<kHeadDim>;
  const bool longest_first = UseLongestFirst(params);
  if (params.max_k_len > Config::kLongKeysAbove) {
    return LaunchFlashBf16WithTraits<typename Config::LongTraits>(params, stream, longest_first);
  }
  return LaunchFlashBf16WithTraits<typename Config::Traits>(params, stream, longest_first);
}

template <int kHeadDim, typename... Candidates>
Status LaunchBf16CandidateOf(FlashBf16List<Candidates...>, int index, const AttentionParams& params,
                             cudaStream_t stream) {
  if constexpr (sizeof...(Candidates) > 0) {
    using Launch = Status (*)(const AttentionParams&, cudaStream_t, bool);
    constexpr Launch kLaunches[] = {&LaunchFlashBf16WithTraits<Candidates>...};
    if (index >= 0 && index < static_cast<int>(sizeof...(Candidates))) {
      return kLaunches[index](params, stream, UseLongestFirst(params));
    }
  }
  return LaunchFlashBf16<kHeadDim>(params, stream);
}

template <int kHeadDim>
Status LaunchFlashBf16Candidate(const AttentionParams& params, cudaStream_t stream, int candidate) {
  return LaunchBf16CandidateOf<kHeadDim>(typename FlashBf16Config<kHeadDim>::Candidates{}, candidate, params, stream);
}

template <int kHeadDim>
Status LaunchFlashFp32(const AttentionParams& params, cudaStream_t stream) {
  using Traits = FlashFp32Traits<kHeadDim>;
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  FlashAttentionFp32Kernel<Traits><<<grid, Traits::kThreads, 0, stream>>>(params, ScaleLog2(params));
  return CudaLaunchStatus("FlashAttentionFp32Kernel");
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_CUH_
