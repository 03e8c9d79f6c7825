// Launcher of the dtype casts (declared in kernels/cuda_ops.h).
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/cast_kernel.cuh"
#include "common/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace jagrank {

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
  int64_t blocks = (params.count + cuda::CastTraits::kThreads - 1) / cuda::CastTraits::kThreads;
  if (blocks > cuda::CastTraits::kMaxBlocks) blocks = cuda::CastTraits::kMaxBlocks;
  return cuda::DispatchDType(params.in_dtype, "in_dtype", [&](auto in_tag) {
    using In = decltype(in_tag);
    return cuda::DispatchDType(params.out_dtype, "out_dtype", [&](auto out_tag) {
      using Out = decltype(out_tag);
      cuda::CastKernel<In, Out><<<static_cast<unsigned>(blocks), cuda::CastTraits::kThreads, 0, stream>>>(
          static_cast<const In*>(params.in), static_cast<Out*>(params.out), params.count);
      return CudaLaunchStatus("CastKernel");
    });
  });
}

}  // namespace jagrank
