// Definitions of the launchers declared in flash_launch.h for the mma.sync
// and float32 kernels, and the launch helpers the wgmma launcher shares:
// grid shape, shared memory, schedule, launch error check. Included by the
// instantiation files only.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "kernels/attention/flash_kernel.cuh"
#include "kernels/attention/flash_launch.h"
#include "kernels/attention/flash_traits.h"

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

// An mma.sync kernel: (params, scale_log2, maybe_order).
using FlashBf16KernelFn = void (*)(const AttentionParams, const float, const int*);

// Launches kKernel with Traits' block and dynamic shared memory; a
// FlashOrderedLaunch.
template <typename Traits, FlashBf16KernelFn kKernel>
Status LaunchFlashTiles(const AttentionParams& params, cudaStream_t stream, const FlashSchedule& schedule) {
  const dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  // Above 48 KiB of dynamic shared memory a kernel must opt in; cheap, so it
  // is done per call instead of caching per-device state.
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kKernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params), schedule.maybe_order);
  return CudaLaunchStatus(Traits::kKernelName);
}

// Lower bound of the work (batch x heads x max_q_len x max_k_len x head_dim)
// from which the longest-first order is used (its extra one-CTA launch costs
// a few microseconds). 3e9 orders the smaller target-attention shapes (work
// bounds 8.6e9-1.7e10): target Lmax 2048 0.075 -> 0.057 ms on an unchanged
// tile (1.02x -> 1.35x varlen FA2). It also orders self D = 32 N = 256
// (8.6e9), where it neither won nor lost (0.115 vs 0.117 ms, within the
// spread). Launches of less work (~0.05 ms and shorter) stay in batch order.
constexpr double kLongestFirstMinWork = 3e9;

inline bool UseLongestFirst(const AttentionParams& params) {
  const double work_bound = static_cast<double>(params.batch) * params.num_heads * params.max_q_len *
                            params.max_k_len * params.head_dim;
  return params.batch > 1 && work_bound >= kLongestFirstMinWork;
}

// `launch` in longest-first order where UseLongestFirst (with the tile list
// where tile_block_m > 0), else in batch order.
inline Status LaunchFlashScheduled(const AttentionParams& params, cudaStream_t stream, int tile_block_m,
                                   FlashOrderedLaunch launch) {
  if (UseLongestFirst(params)) return LaunchWithLongestFirstOrder(params, stream, tile_block_m, launch);
  return launch(params, stream, FlashSchedule{});
}

template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm80(const AttentionParams& params, cudaStream_t stream) {
  static_assert(!kLongKeys || FlashHasLongKeysTile(FlashArch::kSm80, kHeadDim), "no long-keys tile here");
  using Traits = FlashBf16Traits<kHeadDim, kLongKeys>;
  return LaunchFlashScheduled(params, stream, 0, &LaunchFlashTiles<Traits, &FlashAttentionBf16Kernel<Traits>>);
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

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_CUH_
