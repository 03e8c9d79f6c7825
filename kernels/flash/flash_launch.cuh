// Definitions of the launchers declared in flash_launch.h: grid shape,
// shared memory, launch error check. Included by the per-instantiation .cu
// files only.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_CUH_
#define JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <cmath>

#include "kernels/cuda_check.h"
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

// Any FlashBf16Traits instantiation (the benchmark compares tile choices
// through this); LaunchFlashBf16<kHeadDim> uses FlashBf16Config<kHeadDim>.
template <typename Traits>
Status LaunchFlashBf16WithTraits(const AttentionParams& params, cudaStream_t stream) {
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  auto* kernel = &FlashAttentionBf16Kernel<Traits>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; cheap, so it
  // is done per call instead of caching per-device state.
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params));
  return CudaLaunchStatus("FlashAttentionBf16Kernel");
}

template <int kHeadDim>
Status LaunchFlashBf16(const AttentionParams& params, cudaStream_t stream) {
  using Config = FlashBf16Config<kHeadDim>;
  if (params.max_k_len > Config::kLongKeysAbove) {
    return LaunchFlashBf16WithTraits<typename Config::LongTraits>(params, stream);
  }
  return LaunchFlashBf16WithTraits<typename Config::Traits>(params, stream);
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
