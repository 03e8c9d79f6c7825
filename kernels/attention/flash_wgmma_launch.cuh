// Launcher of the Hopper (wgmma) flash attention kernel declared in
// flash_launch.h. Included by the sm_90a instantiation files only.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_

#include <atomic>
#include <cstring>

#include "kernels/attention/flash_launch.cuh"
#include "kernels/attention/flash_tensor_maps.h"
#include "kernels/attention/flash_traits.h"
#include "kernels/attention/flash_wgmma_kernel.cuh"

namespace jagrank {
namespace flash {

// CTAs of kKernel resident at once on the current device (the persistent
// launch's grid), found once per kernel and device.
template <typename Traits>
Status ResidentCtas(const void* kernel, int* ctas) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0: not found yet; racing callers store the same value
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  if (device < kMaxDevices && cached[device].load(std::memory_order_relaxed) > 0) {
    *ctas = cached[device].load(std::memory_order_relaxed);
    return Status::Ok();
  }
  int per_sm = 0, sms = 0;
  // The query assumes the kernel's dynamic shared memory attribute is set.
  RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  RETURN_IF_CUDA_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Traits::kThreads, Traits::kSmemBytes));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  *ctas = per_sm * sms > 0 ? per_sm * sms : 1;
  if (device < kMaxDevices) cached[device].store(*ctas, std::memory_order_relaxed);
  return Status::Ok();
}

// A FlashOrderedLaunch of the wgmma kernel: encodes the K/V tensor maps
// where Traits::kTmaKv (none are read when no sequence has keys); with a
// tile list, a persistent launch of the CTAs resident at once.
template <typename Traits>
Status LaunchFlashWgmmaTiles(const AttentionParams& params, cudaStream_t stream, const FlashSchedule& schedule) {
  dim3 grid = FlashGrid(params, Traits::kBlockM);
  if (grid.x == 0) return Status::Ok();
  FlashKvMaps maps;
  std::memset(&maps, 0, sizeof(maps));
  if (Traits::kTmaKv && params.max_k_len > 0) {
    RETURN_IF_ERROR(
        EncodeFlashKvMaps(params, Traits::kSwizzleBytes / 2, Traits::kBlockN, Traits::kSwizzleBytes, &maps));
  }
  const bool persistent = schedule.maybe_tiles != nullptr;
  const auto kernel = persistent ? &FlashAttentionWgmmaKernel<Traits, true> : &FlashAttentionWgmmaKernel<Traits, false>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in.
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  if (persistent) {
    int resident = 0;
    RETURN_IF_ERROR(ResidentCtas<Traits>(reinterpret_cast<const void*>(kernel), &resident));
    if (static_cast<unsigned>(resident) < grid.x) grid.x = static_cast<unsigned>(resident);
  }
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, ScaleLog2(params), schedule.maybe_order,
                                                                 schedule.maybe_tiles, maps);
  return CudaLaunchStatus(Traits::kKernelName);
}

// Whether this launch runs persistent CTAs (the tile list is then built):
// JAGRANK_FLASH_SCHEDULE, else ChooseFlashPersistent (flash_tile_size.h).
template <typename Traits>
Status UsePersistentTiles(const AttentionParams& params, bool* persistent) {
  FlashScheduleMode mode = FlashScheduleMode::kAuto;
  RETURN_IF_ERROR(FlashScheduleFromEnv(&mode));
  *persistent = mode == FlashScheduleMode::kPersistent;
  if (mode != FlashScheduleMode::kAuto) return Status::Ok();
  int resident = 0;
  RETURN_IF_ERROR(
      ResidentCtas<Traits>(reinterpret_cast<const void*>(&FlashAttentionWgmmaKernel<Traits, true>), &resident));
  const int64_t rows = static_cast<int64_t>(params.batch) * params.max_q_len;
  const double fill = params.q_tokens_hint > 0 && rows > 0 ? static_cast<double>(params.q_tokens_hint) / rows : -1.0;
  *persistent = ChooseFlashPersistent(static_cast<int64_t>(FlashGrid(params, Traits::kBlockM).x), resident,
                                      Traits::kMinBlocksPerSm > Traits::kPersistentMinBlocksPerSm, fill);
  return Status::Ok();
}

template <int kHeadDim, bool kLongKeys, bool kTmaKv>
Status LaunchFlashSm90Variant(const AttentionParams& params, cudaStream_t stream) {
  using Traits = FlashWgmmaTraits<kHeadDim, kLongKeys, kTmaKv>;
  bool persistent = false;
  RETURN_IF_ERROR(UsePersistentTiles<Traits>(params, &persistent));
  return LaunchFlashScheduled(params, stream, persistent ? Traits::kBlockM : 0, &LaunchFlashWgmmaTiles<Traits>);
}

template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm90(const AttentionParams& params, cudaStream_t stream) {
  static_assert(!kLongKeys || FlashHasLongKeysTile(FlashArch::kSm90, kHeadDim), "no long-keys tile here");
  if (FlashKvCopyByTma()) return LaunchFlashSm90Variant<kHeadDim, kLongKeys, true>(params, stream);
  return LaunchFlashSm90Variant<kHeadDim, kLongKeys, false>(params, stream);
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_LAUNCH_CUH_
