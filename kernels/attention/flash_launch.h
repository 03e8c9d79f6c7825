// Host-side launchers of the flash attention kernels, one explicit
// instantiation per (kernel family, head dim, tile) in instantiations/.
// Called only from flash_attention_launch.cu after the arguments were
// validated and ChooseFlashKernel (flash_tile_size.h) picked the kernel.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_H_
#define JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_H_

#include "common/status.h"
#include "kernels/attention/attention_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {
namespace flash {

// REQUIRES: params validated by JaggedAttentionCuda; head_dim == kHeadDim;
// kLongKeys only where FlashHasLongKeysTile.
// mma.sync kernel (FlashArch::kSm80), every build.
template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm80(const AttentionParams& params, cudaStream_t stream);
// wgmma kernel (FlashArch::kSm90): compiled for sm_90a when the build's CUDA
// architectures include 90 (JAGRANK_FLASH_WGMMA defined); runs on compute
// capability 9.0 devices only.
template <int kHeadDim, bool kLongKeys>
Status LaunchFlashSm90(const AttentionParams& params, cudaStream_t stream);
// float32 kernel (CUDA cores).
template <int kHeadDim>
Status LaunchFlashFp32(const AttentionParams& params, cudaStream_t stream);

// Where a launch finds its CTAs' work (flash_wgmma_kernel.cuh has the tile
// list's layout): maybe_order, the sequences longest first (null: batch
// order), one CTA per FlashGrid tile; maybe_tiles (null: none), the tiles
// with rows, longest first, for a persistent launch.
struct FlashSchedule {
  const int* maybe_order = nullptr;
  int* maybe_tiles = nullptr;
};

// Longest-first schedule (flash_schedule.cu): writes the sequences' order,
// longest valid key count first, and where tile_block_m > 0 the list of
// query tiles of tile_block_m rows in that order, into a workspace kept per
// (device, stream), and launches `launch` with it, both on `stream`. The
// workspace grows with the batch and is reused by later calls on the same
// stream (stream order keeps them apart); a lock spans the two launches.
using FlashOrderedLaunch = Status (*)(const AttentionParams& params, cudaStream_t stream,
                                      const FlashSchedule& schedule);
Status LaunchWithLongestFirstOrder(const AttentionParams& params, cudaStream_t stream, int tile_block_m,
                                   FlashOrderedLaunch launch);

// How the wgmma kernel's CTAs find their tiles, from JAGRANK_FLASH_SCHEDULE
// (read per launch, for same-process A/B runs): unset or "auto" lets the
// launcher choose (ChooseFlashPersistent in flash_tile_size.h), "grid"
// keeps one CTA per FlashGrid tile, "persistent" runs persistent CTAs over
// the longest-first tile list wherever the list fits the workspace. Any
// other value is INVALID_ARGUMENT, so a misspelt A/B run fails instead of
// timing the automatic choice twice.
enum class FlashScheduleMode { kAuto, kGrid, kPersistent };
Status FlashScheduleFromEnv(FlashScheduleMode* mode);

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_H_
