#include "model/cuda_elementwise.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/cuda_check.h"

namespace jagrank {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops beyond this

unsigned Blocks(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks));
}

__global__ void AddInPlaceKernel(float* __restrict__ y, const float* __restrict__ x, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void SigmoidInPlaceKernel(float* __restrict__ v, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    v[i] = 1.0f / (1.0f + expf(-v[i]));
  }
}

}  // namespace

Status AddInPlaceCuda(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return Status::Ok();
  AddInPlaceKernel<<<Blocks(count), kThreads, 0, stream>>>(y, x, count);
  return CudaLaunchStatus("AddInPlaceKernel");
}

Status SigmoidInPlaceCuda(float* v, int64_t count, cudaStream_t stream) {
  if (count <= 0) return Status::Ok();
  SigmoidInPlaceKernel<<<Blocks(count), kThreads, 0, stream>>>(v, count);
  return CudaLaunchStatus("SigmoidInPlaceKernel");
}

}  // namespace jagrank
