// Launcher of the Hopper (wgmma) flash attention kernel declared in
// flash_launch.h. Included by the sm_90a instantiation files only.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_

#include <cstring>

#include "kernels/attention/flash_launch.cuh"
#include "kernels/attention/flash_tensor_maps.h"
#include "kernels/attention/flash_traits.h"
#include "kernels/attention/flash_wgmma_kernel.cuh"

namespace jagrank {
namespace flash {

// A FlashOrderedLaunch of the wgmma kernel: encodes the K/V tensor maps
// where Traits::kTmaKv (none are read when no sequence has keys).
template <typename Traits>
Status LaunchFlashWgmmaTiles(const AttentionParams& params, cudaStream_t stream, const int* maybe_order) {
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  FlashKvMaps maps;
  std::memset(&maps, 0, sizeof(maps));
  if (Traits::kTmaKv && params.max_k_len > 0) {
    RETURN_IF_ERROR(
        EncodeFlashKvMaps(params, Traits::kSwizzleBytes / 2, Traits::kBlockN, Traits::kSwizzleBytes, &maps));
  }
  constexpr auto kKernel = &FlashAttentionWgmmaKernel<Traits>;
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kKernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params), maybe_order, maps);
  return CudaLaunchStatus(Traits::kKernelName);
}

template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm90(const AttentionParams& params, cudaStream_t stream) {
  static_assert(!kLongKeys || FlashHasLongKeysTile(FlashArch::kSm90, kHeadDim), "no long-keys tile here");
  if (FlashKvCopyByTma()) {
    return LaunchFlashScheduled(params, stream, &LaunchFlashWgmmaTiles<FlashWgmmaTraits<kHeadDim, kLongKeys, true>>);
  }
  return LaunchFlashScheduled(params, stream, &LaunchFlashWgmmaTiles<FlashWgmmaTraits<kHeadDim, kLongKeys, false>>);
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
