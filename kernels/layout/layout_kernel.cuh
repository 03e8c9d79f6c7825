// Device code of the jagged <-> padded copies.
#ifndef JAGRANK_KERNELS_LAYOUT_LAYOUT_KERNEL_CUH_
#define JAGRANK_KERNELS_LAYOUT_LAYOUT_KERNEL_CUH_

#include "kernels/layout/layout_params.h"

namespace jagrank {
namespace cuda {

// Copies move raw element bits (Bits = uint32_t for fp32, uint16_t for bf16):
// no conversion, NaN payloads kept.
// grid = (batch, ceil(max_len / blockDim.y)); thread (x, y) of block (b, chunk)
// handles padded row i = chunk * blockDim.y + y, features x, x + blockDim.x, ...
template <typename Bits>
__global__ void JaggedToPaddedKernel(const JaggedToPaddedParams params) {
  const int b = blockIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= params.max_len) return;
  const int begin = params.offsets[b];
  const int len = params.offsets[b + 1] - begin;
  Bits* dst = static_cast<Bits*>(params.padded) + (static_cast<int64_t>(b) * params.max_len + i) * params.width;
  if (i < len) {
    const Bits* src = static_cast<const Bits*>(params.values) + (static_cast<int64_t>(begin) + i) * params.width;
    for (int64_t c = threadIdx.x; c < params.width; c += blockDim.x) dst[c] = src[c];
  } else {
    for (int64_t c = threadIdx.x; c < params.width; c += blockDim.x) dst[c] = Bits{0};
  }
}

// Same grid as JaggedToPaddedKernel; rows i >= len(b) are padding, not read.
template <typename Bits>
__global__ void PaddedToJaggedKernel(const PaddedToJaggedParams params) {
  const int b = blockIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int begin = params.offsets[b];
  const int len = params.offsets[b + 1] - begin;
  if (i >= len || i >= params.max_len) return;
  const Bits* src = static_cast<const Bits*>(params.padded) + (static_cast<int64_t>(b) * params.max_len + i) * params.width;
  Bits* dst = static_cast<Bits*>(params.values) + (static_cast<int64_t>(begin) + i) * params.width;
  for (int64_t c = threadIdx.x; c < params.width; c += blockDim.x) dst[c] = src[c];
}

// Same grid as JaggedToPaddedKernel: thread (x, y) of block (b, chunk)
// writes row i = chunk * blockDim.y + y of sequence b (when i < len(b)).
template <typename Bits>
__global__ void RepeatRowsKernel(const RepeatRowsParams params) {
  const int b = blockIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int begin = params.offsets[b];
  const int len = params.offsets[b + 1] - begin;
  if (i >= len || i >= params.max_len) return;
  const Bits* src = static_cast<const Bits*>(params.rows) + static_cast<int64_t>(b) * params.width;
  Bits* dst = static_cast<Bits*>(params.values) + (static_cast<int64_t>(begin) + i) * params.width;
  for (int64_t c = threadIdx.x; c < params.width; c += blockDim.x) dst[c] = src[c];
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LAYOUT_LAYOUT_KERNEL_CUH_
