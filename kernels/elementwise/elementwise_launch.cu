// Launchers of the element-wise kernels (declared in elementwise.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/elementwise_kernel.cuh"

namespace jagrank {
namespace {

unsigned Blocks(int64_t count) {
  using Traits = cuda::ElementwiseTraits;
  return static_cast<unsigned>(std::min<int64_t>((count + Traits::kThreads - 1) / Traits::kThreads, Traits::kMaxBlocks));
}

}  // namespace

Status CastCuda(const CastParams& params, cudaStream_t stream) {
  if (params.count < 0) return Status::InvalidArgument("count = " + std::to_string(params.count) + ", must be >= 0");
  if (params.count == 0) return Status::Ok();
  if (params.in == nullptr) return Status::InvalidArgument("in: null");
  if (params.out == nullptr) return Status::InvalidArgument("out: null");
  if (params.in_dtype == params.out_dtype) {
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(params.out, params.in, DTypeSize(params.in_dtype) * params.count,
                                         cudaMemcpyDeviceToDevice, stream));
    return Status::Ok();
  }
  return cuda::DispatchDType(params.in_dtype, "in_dtype", [&](auto in_tag) {
    using In = decltype(in_tag);
    return cuda::DispatchDType(params.out_dtype, "out_dtype", [&](auto out_tag) {
      using Out = decltype(out_tag);
      cuda::CastKernel<In, Out><<<Blocks(params.count), cuda::ElementwiseTraits::kThreads, 0, stream>>>(
          static_cast<const In*>(params.in), static_cast<Out*>(params.out), params.count);
      return CudaLaunchStatus("CastKernel");
    });
  });
}

Status AddInPlaceCuda(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return Status::Ok();
  cuda::AddInPlaceKernel<<<Blocks(count), cuda::ElementwiseTraits::kThreads, 0, stream>>>(y, x, count);
  return CudaLaunchStatus("AddInPlaceKernel");
}

Status SigmoidInPlaceCuda(float* v, int64_t count, cudaStream_t stream) {
  if (count <= 0) return Status::Ok();
  cuda::SigmoidInPlaceKernel<<<Blocks(count), cuda::ElementwiseTraits::kThreads, 0, stream>>>(v, count);
  return CudaLaunchStatus("SigmoidInPlaceKernel");
}

}  // namespace jagrank
