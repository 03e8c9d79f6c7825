// TMA descriptors (tensor maps) of a batch's K and V for the Hopper flash
// kernel: 2D views [rows, num_heads * head_dim] of the key and value tensors
// with their row strides, read in boxes of one key tile by one column block
// (the kernel's swizzled shared-memory layout). Encoded on the host per
// launch (a few microseconds, no device work) through the driver's
// cuTensorMapEncodeTiled, reached from the runtime so that nothing links
// libcuda directly.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_TENSOR_MAPS_H_
#define JAGRANK_KERNELS_ATTENTION_FLASH_TENSOR_MAPS_H_

#include <cuda.h>

#include "common/status.h"
#include "kernels/attention/attention_params.h"

namespace jagrank {
namespace flash {

// Passed to the kernel by value as a __grid_constant__ parameter: the TMA
// unit reads the descriptors from parameter space.
struct FlashKvMaps {
  CUtensorMap k;
  CUtensorMap v;
};

// REQUIRES: params validated by JaggedAttentionCuda (bf16, 16-byte aligned k
// and v, row strides multiples of 8 elements). box_cols * 2 == swizzle_bytes
// (64 or 128). The maps address every row an int32 offset can name: the
// kernel reads only whole key tiles that lie inside a sequence, so no read
// goes past the tensor.
Status EncodeFlashKvMaps(const AttentionParams& params, int box_cols, int box_rows, int swizzle_bytes,
                         FlashKvMaps* maps);

// How the wgmma kernel copies K/V tiles to shared memory: TMA (the default)
// or one cp.async per 16 bytes from every thread. JAGRANK_FLASH_KV_COPY=cp_async
// selects the latter, to compare the two on one device; read per launch.
bool FlashKvCopyByTma();

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_TENSOR_MAPS_H_
