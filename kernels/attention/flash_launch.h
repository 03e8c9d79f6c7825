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

// Longest-first schedule (flash_schedule.cu): writes the sequences' order,
// longest valid key count first, into a workspace kept per (device, stream)
// and launches `launch` with it, both on `stream`. The workspace grows with
// the batch and is reused by later calls on the same stream (stream order
// keeps them apart); a lock spans the two launches.
using FlashOrderedLaunch = Status (*)(const AttentionParams& params, cudaStream_t stream, const int* maybe_order);
Status LaunchWithLongestFirstOrder(const AttentionParams& params, cudaStream_t stream, FlashOrderedLaunch launch);

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_LAUNCH_H_
