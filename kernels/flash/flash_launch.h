// Host-side launchers of the flash attention kernels, one explicit
// instantiation per (dtype, head dim) in flash_*_hdim*.cu. Called only from
// flash_attention.cu after the arguments were validated.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_
#define JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_

#include "kernels/attention.h"
#include "kernels/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {
namespace flash {

// REQUIRES: params validated by JaggedAttentionCuda; head_dim == kHeadDim.
template <int kHeadDim>
Status LaunchFlashBf16(const AttentionParams& params, cudaStream_t stream);
template <int kHeadDim>
Status LaunchFlashFp32(const AttentionParams& params, cudaStream_t stream);

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_FLASH_FLASH_LAUNCH_H_
