// Launchers of the Hopper (wgmma) flash attention kernel declared in
// flash_launch.h. Included by the sm_90a instantiation files only.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_
#define JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"
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

// AltTraits (64-row tiles at D = 64) where each sequence has at most half as
// many queries as keys: target attention over long histories, where the
// longest histories' few query tiles otherwise form the launch's tail (v7:
// Lmax 4096 0.096 -> 0.071 ms, same call; self-attention keeps Traits).
inline bool PreferAltWgmmaTile(const AttentionParams& params) {
  return static_cast<int64_t>(params.max_q_len) * 2 <= params.max_k_len;
}

template <int kHeadDim>
Status LaunchFlashWgmmaBf16(const AttentionParams& params, cudaStream_t stream, WgmmaTile tile) {
  using Config = FlashWgmmaConfig<kHeadDim>;
  const bool alt = tile == WgmmaTile::kAlt || (tile == WgmmaTile::kAuto && PreferAltWgmmaTile(params));
  if (alt) return LaunchFlashWgmmaWithTraits<typename Config::AltTraits>(params, stream);
  return LaunchFlashWgmmaWithTraits<typename Config::Traits>(params, stream);
}

template <int kHeadDim>
bool WgmmaIsDefault() {
  return FlashWgmmaConfig<kHeadDim>::kDefault;
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_FLASH_FLASH_WGMMA_LAUNCH_CUH_
