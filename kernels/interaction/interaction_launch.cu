// Launcher of the dot interaction (declared in interaction.h).
#include <algorithm>
#include <string>

#include "kernels/interaction/interaction_kernel.cuh"
#include "common/cuda_check.h"
#include "kernels/interaction/interaction.h"

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
  if (params.vector_dtype != DType::kFloat32) {
    return Status::InvalidArgument(std::string("vector_dtype = ") + DTypeName(params.vector_dtype) +
                                   ": DotInteractionCuda takes float32 u and e (bfloat16: the split form)");
  }

  const int n = params.num_sparse + 3;
  if (n <= cuda::InteractionRegisterTraits::kMaxVectors) {
    // Candidate pairs: 2 (num_sparse + 1) + 1. Up to num_sparse = 6 they fit
    // in 16 partials and one butterfly takes two candidates; 16 candidates
    // per warp (timed on the H200 against 2, 4 and 8: kernels/NOTES.md).
    using Traits = cuda::InteractionRegisterTraits;
    auto blocks_of = [&](int per_warp) {
      const int64_t per_block = static_cast<int64_t>(Traits::kWarps) * per_warp;
      return static_cast<unsigned>((params.num_candidates + per_block - 1) / per_block);
    };
    if (2 * (params.num_sparse + 1) + 1 <= 16) {
      cuda::DotInteractionRegisterKernel<16, 16><<<blocks_of(16), Traits::kThreads, 0, stream>>>(params);
    } else {
      cuda::DotInteractionRegisterKernel<32, 8><<<blocks_of(8), Traits::kThreads, 0, stream>>>(params);
    }
    return CudaLaunchStatus("DotInteractionRegisterKernel");
  }
  const int64_t warp_bytes = cuda::InteractionWarpSmemBytes(n, params.dim);
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int max_smem = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (warp_bytes > max_smem) {
    return Status::Unimplemented("dot interaction: (num_sparse + 3) vectors of dim = " + std::to_string(params.dim) +
                                 " floats (padded) = " + std::to_string(warp_bytes) +
                                 " bytes of shared memory for one candidate's vectors, above the device's " +
                                 std::to_string(max_smem));
  }
  const int warps = static_cast<int>(std::min<int64_t>(cuda::InteractionTraits::kWarps, max_smem / warp_bytes));
  const int64_t smem_bytes = warps * warp_bytes;
  if (smem_bytes > 48 * 1024) {
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(cuda::DotInteractionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem_bytes)));
  }
  const int64_t blocks = (static_cast<int64_t>(params.num_candidates) + warps - 1) / warps;
  cuda::DotInteractionKernel<<<static_cast<unsigned>(blocks), 32 * warps, smem_bytes, stream>>>(params);
  return CudaLaunchStatus("DotInteractionKernel");
}

Status DotInteractionSplitCuda(const DotInteractionParams& params, void* request_out, int request_stride,
                               void* candidate_out, int candidate_stride, DType out_dtype, cudaStream_t stream) {
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
  const int m = params.num_sparse + 1;
  const int64_t request_width = params.dim + int64_t{m} * (m - 1) / 2;
  const int candidate_width = 2 * m + 1;
  if (request_stride < request_width) {
    return Status::InvalidArgument("request_stride = " + std::to_string(request_stride) +
                                   ", must be >= the request width " + std::to_string(request_width));
  }
  if (candidate_stride < candidate_width) {
    return Status::InvalidArgument("candidate_stride = " + std::to_string(candidate_stride) +
                                   ", must be >= the candidate width " + std::to_string(candidate_width));
  }
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
  if (request_out == nullptr) return Status::InvalidArgument("request_out: null");
  if (candidate_out == nullptr) return Status::InvalidArgument("candidate_out: null");

  // The request vectors of one request in shared memory.
  const int64_t smem_bytes = cuda::InteractionWarpSmemBytes(m, params.dim);
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int max_smem = 0;
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_bytes > max_smem) {
    return Status::Unimplemented("dot interaction: num_sparse + 1 = " + std::to_string(m) + " vectors of dim = " +
                                 std::to_string(params.dim) + " floats (padded) = " + std::to_string(smem_bytes) +
                                 " bytes of shared memory, above the device's " + std::to_string(max_smem));
  }
  return cuda::DispatchDType(out_dtype, "out_dtype", [&](auto tag) -> Status {
    using OutT = decltype(tag);
    OutT* request = static_cast<OutT*>(request_out);
    OutT* candidate = static_cast<OutT*>(candidate_out);
    if (smem_bytes > 48 * 1024) {
      RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(cuda::RequestPairsKernel<OutT>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem_bytes)));
    }
    cuda::RequestPairsKernel<OutT><<<params.num_requests, 128, smem_bytes, stream>>>(params, request, request_stride);
    RETURN_IF_ERROR(CudaLaunchStatus("RequestPairsKernel"));
    // u_c and e_c held in registers up to dim = 128 (4 elements per lane).
    const int chunks = (params.dim + 31) / 32;
    // With the most candidates per request known and the request's vectors
    // fitting in 48 KB of shared memory: a block per request chunk.
    using Smem = cuda::CandidatePairsSmemTraits;
    const int64_t vector_bytes = int64_t{m} * params.dim * 4;
    const int64_t request_chunks =
        (int64_t{params.max_candidates} + Smem::kCandidatesPerBlock - 1) / Smem::kCandidatesPerBlock;
    return cuda::DispatchDType(params.vector_dtype, "vector_dtype", [&](auto vector_tag) -> Status {
      using VecT = decltype(vector_tag);
      if (params.max_candidates > 0 && chunks <= 4 && vector_bytes <= 48 * 1024 &&
          request_chunks <= cuda::kMaxGridYZ) {
        const dim3 grid(params.num_requests, static_cast<unsigned>(request_chunks));
        if (chunks == 1) {
          cuda::CandidatePairsSmemKernel<1, VecT, OutT>
              <<<grid, Smem::kThreads, vector_bytes, stream>>>(params, candidate, candidate_stride);
        } else if (chunks == 2) {
          cuda::CandidatePairsSmemKernel<2, VecT, OutT>
              <<<grid, Smem::kThreads, vector_bytes, stream>>>(params, candidate, candidate_stride);
        } else {
          cuda::CandidatePairsSmemKernel<4, VecT, OutT>
              <<<grid, Smem::kThreads, vector_bytes, stream>>>(params, candidate, candidate_stride);
        }
        return CudaLaunchStatus("CandidatePairsSmemKernel");
      }
      using Traits = cuda::CandidatePairsTraits;
      const unsigned blocks = static_cast<unsigned>((params.num_candidates + Traits::kWarps - 1) / Traits::kWarps);
      if (chunks == 1) {
        cuda::CandidatePairsKernel<1, VecT, OutT>
            <<<blocks, Traits::kThreads, 0, stream>>>(params, candidate, candidate_stride);
      } else if (chunks == 2) {
        cuda::CandidatePairsKernel<2, VecT, OutT>
            <<<blocks, Traits::kThreads, 0, stream>>>(params, candidate, candidate_stride);
      } else if (chunks <= 4) {
        cuda::CandidatePairsKernel<4, VecT, OutT>
            <<<blocks, Traits::kThreads, 0, stream>>>(params, candidate, candidate_stride);
      } else {
        cuda::CandidatePairsKernel<0, VecT, OutT>
            <<<blocks, Traits::kThreads, 0, stream>>>(params, candidate, candidate_stride);
      }
      return CudaLaunchStatus("CandidatePairsKernel");
    });
  });
}

}  // namespace jagrank
