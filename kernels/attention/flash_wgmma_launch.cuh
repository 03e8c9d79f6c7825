// Launcher of the Hopper (wgmma) flash attention kernel declared in
// flash_launch.h. Included by the sm_90a instantiation files only.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_

#include "kernels/attention/flash_launch.cuh"
#include "kernels/attention/flash_traits.h"
#include "kernels/attention/flash_wgmma_kernel.cuh"

namespace jagrank {
namespace flash {

template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm90(const AttentionParams& params, cudaStream_t stream) {
  static_assert(!kLongKeys || FlashHasLongKeysTile(FlashArch::kSm90, kHeadDim), "no long-keys tile here");
  using Traits = FlashWgmmaTraits<kHeadDim, kLongKeys>;
  return LaunchFlashScheduled<Traits, &FlashAttentionWgmmaKernel<Traits>>(params, stream);
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
