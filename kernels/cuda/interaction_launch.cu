// Launcher of the dot interaction (declared in kernels/cuda_ops.h).
#include <string>

#include "kernels/cuda/interaction_kernel.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace jagrank {

Status DotInteractionCuda(const DotInteractionParams& params, cudaStream_t stream) {
  if (params.num_sparse < 0) {
    return Status::InvalidArgument("num_sparse = " + std::to_string(params.num_sparse) + ", must be >= 0");
  }
  if (params.num_requests < 0) {
    return Status::InvalidArgument("num_requests = " + std::to_string(params.num_requests) + ", must be >= 0");
  }
  if (params.num_candidates < 0) {
    return Status::InvalidArgument("num_candidates = " + std::to_string(params.num_candidates) + ", must be >= 0");
  }
  if (params.dim <= 0) return Status::InvalidArgument("dim = " + std::to_string(params.dim) + ", must be > 0");
  if (params.num_candidates == 0) return Status::Ok();
  if (params.num_requests == 0) {
    return Status::InvalidArgument("num_requests = 0 with num_candidates = " +
                                   std::to_string(params.num_candidates) + ": every candidate needs a request");
  }
  if (params.candidate_offsets == nullptr) return Status::InvalidArgument("candidate_offsets: null");
  if (params.x == nullptr) return Status::InvalidArgument("x: null");
  if (params.num_sparse > 0 && params.pooled == nullptr) return Status::InvalidArgument("pooled: null");
  if (params.u == nullptr) return Status::InvalidArgument("u: null");
  if (params.e == nullptr) return Status::InvalidArgument("e: null");
  if (params.out == nullptr) return Status::InvalidArgument("out: null");

  const int n = params.num_sparse + 3;
  const int64_t smem_bytes = cuda::InteractionSmemBytes(n, params.dim, params.num_requests);
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int max_smem = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_bytes > max_smem) {
    return Status::Unimplemented("dot interaction: (num_sparse + 3) * (dim + 1) * 4 bytes of vectors (plus staged "
                                 "offsets) = " + std::to_string(smem_bytes) +
                                 " bytes of shared memory, above the device's " + std::to_string(max_smem));
  }
  if (smem_bytes > 48 * 1024) {
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(cuda::DotInteractionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem_bytes)));
  }
  cuda::DotInteractionKernel<<<params.num_candidates, cuda::InteractionTraits::kThreads, smem_bytes, stream>>>(params);
  return CudaLaunchStatus("DotInteractionKernel");
}

}  // namespace jagrank
