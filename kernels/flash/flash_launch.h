// Host-side launchers of the flash attention kernels, one explicit
// instantiation per (dtype, head dim) in flash_*_hdim*.cu. Called only from
// flash_attention.cu after the arguments were validated.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_
#define JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_

#include "kernels/attention.h"
#include "common/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {
namespace flash {

// REQUIRES: params validated by JaggedAttentionCuda; head_dim == kHeadDim.
template <int kHeadDim>
Status LaunchFlashBf16(const AttentionParams& params, cudaStream_t stream);
// FlashBf16Config<kHeadDim>::Candidates[candidate] (A/B runs); out of range:
// LaunchFlashBf16.
template <int kHeadDim>
Status LaunchFlashBf16Candidate(const AttentionParams& params, cudaStream_t stream, int candidate);
// Hopper path (flash_wgmma_*.cu): compiled for sm_90a when the build's CUDA
// architectures include 90 (JAGRANK_FLASH_WGMMA defined); runs on compute
// capability 9.0 devices only. kAuto: FlashWgmmaConfig's choice of tile by
// the batch's shape; kMain / kAlt: its Traits / AltTraits for every batch.
// kCandidate: FlashWgmmaConfig's Candidates[candidate] (A/B runs; out of
// range: Traits).
enum class WgmmaTile { kAuto, kMain, kAlt, kCandidate };
template <int kHeadDim>
Status LaunchFlashWgmmaBf16(const AttentionParams& params, cudaStream_t stream, WgmmaTile tile, int candidate);
// Whether the default path runs wgmma for this batch where it can:
// FlashWgmmaConfig<kHeadDim>::kDefault, and more than kWgmmaMinQueries
// queries in the longest sequence.
template <int kHeadDim>
bool WgmmaIsDefault(const AttentionParams& params);
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

#endif  // JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_
