// Device code of the element-wise kernels: grid-stride loops over `count`
// elements.
#ifndef JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_KERNEL_CUH_
#define JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_KERNEL_CUH_

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace jagrank {
namespace cuda {

struct ElementwiseTraits {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill 132 SMs
};

template <typename In, typename Out>
__global__ void CastKernel(const In* in, Out* out, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    out[i] = FromFloat<Out>(ToFloat(in[i]));
  }
}

__global__ void AddInPlaceKernel(float* __restrict__ y, const float* __restrict__ x, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    y[i] += x[i];
  }
}

__global__ void SigmoidInPlaceKernel(float* __restrict__ v, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    v[i] = 1.0f / (1.0f + expf(-v[i]));
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_KERNEL_CUH_
