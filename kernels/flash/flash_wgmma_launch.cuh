// Launchers of the Hopper (wgmma) flash attention kernel declared in
// flash_launch.h. Included by the sm_90a instantiation files only.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_
#define JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "kernels/flash/flash_launch.cuh"
#include "kernels/flash/flash_launch.h"
#include "kernels/flash/flash_traits.h"
#include "kernels/flash/flash_wgmma_kernel.cuh"

namespace jagrank {
namespace flash {

template <typename Traits>
Status LaunchFlashWgmmaKernel(const AttentionParams& params, cudaStream_t stream, const int* maybe_order) {
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  auto* kernel = &FlashAttentionWgmmaKernel<Traits>;
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params), maybe_order);
  return CudaLaunchStatus("FlashAttentionWgmmaKernel");
}

template <typename Traits>
Status LaunchFlashWgmmaWithTraits(const AttentionParams& params, cudaStream_t stream) {
  if (UseLongestFirst(params)) return LaunchWithLongestFirstOrder(params, stream, &LaunchFlashWgmmaKernel<Traits>);
  return LaunchFlashWgmmaKernel<Traits>(params, stream, nullptr);
}

// AltTraits for target attention over long histories: more than 1024 keys
// and at most half as many queries per sequence. There the longest
// histories' few query tiles form the launch's tail, and AltTraits' 64-row
// tiles give them twice the CTAs (v7b, D = 64, same call: Lmax 2048 0.054 ->
// 0.045 ms, Lmax 4096 0.094 -> 0.075). At Lmax 1024 Traits measured faster
// or within the spread (C 64-512: 0.031 vs 0.036 ms; C 16-128: 0.041 vs
// 0.042, repeat 0.040 vs 0.037); self-attention keeps Traits.
inline bool PreferAltWgmmaTile(const AttentionParams& params) {
  return params.max_k_len > 1024 && static_cast<int64_t>(params.max_q_len) * 2 <= params.max_k_len;
}

template <typename Fallback, typename First, typename... Rest>
Status LaunchWgmmaCandidate(FlashWgmmaList<First, Rest...>, int index, const AttentionParams& params,
                            cudaStream_t stream) {
  if (index == 0) return LaunchFlashWgmmaWithTraits<First>(params, stream);
  if constexpr (sizeof...(Rest) > 0) {
    return LaunchWgmmaCandidate<Fallback>(FlashWgmmaList<Rest...>{}, index - 1, params, stream);
  } else {
    return LaunchFlashWgmmaWithTraits<Fallback>(params, stream);
  }
}

template <int kHeadDim>
Status LaunchFlashWgmmaBf16(const AttentionParams& params, cudaStream_t stream, WgmmaTile tile, int candidate) {
  using Config = FlashWgmmaConfig<kHeadDim>;
  if (tile == WgmmaTile::kCandidate) {
    return LaunchWgmmaCandidate<typename Config::Traits>(typename Config::Candidates{}, candidate, params, stream);
  }
  const bool alt = tile == WgmmaTile::kAlt || (tile == WgmmaTile::kAuto && PreferAltWgmmaTile(params));
  if (alt) return LaunchFlashWgmmaWithTraits<typename Config::AltTraits>(params, stream);
  return LaunchFlashWgmmaWithTraits<typename Config::Traits>(params, stream);
}

// At most this many queries per sequence: the mma.sync kernel's 64-row tiles
// (4 warps x 16 rows at D = 64) pad less than the wgmma tiles' 128 rows. D = 64
// target attention 1024 x 16-128 candidates (mean 72): mma.sync 0.033 ms vs
// wgmma 0.035 (v7a), 0.033 vs 0.041 and 0.040 vs 0.040 (v7b, full run and
// repeat); never slower.
constexpr int kWgmmaMinQueries = 128;

template <int kHeadDim>
bool WgmmaIsDefault(const AttentionParams& params) {
  return FlashWgmmaConfig<kHeadDim>::kDefault && params.max_q_len > kWgmmaMinQueries &&
         params.max_k_len > FlashWgmmaConfig<kHeadDim>::kMinKeys;
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_
