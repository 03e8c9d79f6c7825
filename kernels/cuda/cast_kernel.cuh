// Device code of the element-wise dtype casts.
#ifndef JAGRANK_KERNELS_CUDA_CAST_KERNEL_CUH_
#define JAGRANK_KERNELS_CUDA_CAST_KERNEL_CUH_

#include "kernels/cuda/common.cuh"

namespace jagrank {
namespace cuda {

struct CastTraits {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill 132 SMs
};

// Grid-stride loop over count elements.
template <typename In, typename Out>
__global__ void CastKernel(const In* in, Out* out, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    out[i] = FromFloat<Out>(ToFloat(in[i]));
  }
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CUDA_CAST_KERNEL_CUH_
