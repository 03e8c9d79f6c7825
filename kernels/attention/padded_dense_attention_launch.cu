// Launcher of padded dense attention (declared in attention.h): two cuBLAS
// strided-batched GEMMs around the masked softmax kernel.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda_check.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/padded_dense_attention_kernel.cuh"
#include "kernels/cublas_handles.h"

namespace jagrank {
namespace {

Status CheckDenseAttention(const PaddedDenseAttentionParams& p) {
  if (p.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(p.batch) + ", must be >= 0");
  if (p.max_q_len < 0) return Status::InvalidArgument("max_q_len = " + std::to_string(p.max_q_len) + ", must be >= 0");
  if (p.max_k_len < 0) return Status::InvalidArgument("max_k_len = " + std::to_string(p.max_k_len) + ", must be >= 0");
  if (p.num_heads < 1) return Status::InvalidArgument("num_heads = " + std::to_string(p.num_heads) + ", must be >= 1");
  if (p.head_dim < 1) return Status::InvalidArgument("head_dim = " + std::to_string(p.head_dim) + ", must be >= 1");
  if (p.dtype != DType::kFloat32 && p.dtype != DType::kBFloat16) {
    return Status::Unimplemented("dtype: unsupported value " + std::to_string(static_cast<int>(p.dtype)));
  }
  if (p.batch == 0 || p.max_q_len == 0) return Status::Ok();
  if (p.o == nullptr) return Status::InvalidArgument("o: null");
  if (p.max_k_len == 0) return Status::Ok();
  if (p.q == nullptr) return Status::InvalidArgument("q: null");
  if (p.k == nullptr) return Status::InvalidArgument("k: null");
  if (p.v == nullptr) return Status::InvalidArgument("v: null");
  if (p.q_len == nullptr) return Status::InvalidArgument("q_len: null");
  if (p.k_len == nullptr) return Status::InvalidArgument("k_len: null");
  if (p.workspace == nullptr) {
    return Status::InvalidArgument("workspace: null (needs PaddedDenseAttentionWorkspaceBytes = " +
                                   std::to_string(PaddedDenseAttentionWorkspaceBytes(p)) + " bytes)");
  }
  const int64_t rows = int64_t{p.batch} * p.num_heads * p.max_q_len;
  if (rows > 0x7fffffff) {
    return Status::InvalidArgument("batch * num_heads * max_q_len = " + std::to_string(rows) +
                                   " is above the grid limit 2^31 - 1");
  }
  if (int64_t{p.num_heads} * p.head_dim > 0x7fffffff) {
    return Status::InvalidArgument("num_heads * head_dim is above the cuBLAS leading-dimension limit 2^31 - 1");
  }
  if (p.max_k_len > 0x7fffffff / 2) {  // bf16 probabilities use a leading dimension of 2 * max_k_len
    return Status::InvalidArgument("max_k_len = " + std::to_string(p.max_k_len) + " is above 2^30 - 1");
  }
  return Status::Ok();
}

}  // namespace

Status PaddedDenseAttentionCuda(const PaddedDenseAttentionParams& p, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckDenseAttention(p));
  if (p.batch == 0 || p.max_q_len == 0) return Status::Ok();
  const int64_t token_stride = int64_t{p.num_heads} * p.head_dim;  // elements between tokens (ld of q, k, v, o)
  if (p.max_k_len == 0) {  // no keys anywhere: every output row is zeros
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(p.o, 0, DTypeSize(p.dtype) * p.batch * p.max_q_len * token_stride, stream));
    return Status::Ok();
  }

  cublasHandle_t handle = nullptr;
  RETURN_IF_ERROR(cuda::GetCublasHandle(&handle));
  RETURN_IF_CUBLAS_ERROR(cublasSetStream(handle, stream));

  const bool bf16 = p.dtype == DType::kBFloat16;
  const cudaDataType_t operand_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int nq = p.max_q_len;
  const int nk = p.max_k_len;
  const int dh = p.head_dim;
  const int ld = static_cast<int>(token_stride);
  const int64_t esize = DTypeSize(p.dtype);
  const char* q = static_cast<const char*>(p.q);
  const char* k = static_cast<const char*>(p.k);
  const char* v = static_cast<const char*>(p.v);
  char* o = static_cast<char*>(p.o);
  const int64_t head_scores = int64_t{nq} * nk;               // floats of one (b, h) score block
  const long long q_batch_stride = static_cast<long long>(nq) * token_stride;
  const long long kv_batch_stride = static_cast<long long>(nk) * token_stride;
  const long long s_batch_stride = static_cast<long long>(p.num_heads) * head_scores;

  // cuBLAS is column-major: a row-major [rows, cols] matrix with leading
  // dimension ld is its transpose, column-major. So
  //   S_bh^T [nk, nq] = (K_bh^T)^T . Q_bh^T   (K_bh^T, Q_bh^T: [dh, *], ld = H dh)
  // one strided-batched GEMM per head, batched over b.
  const float alpha_scores = p.softmax_scale;
  const float zero = 0.0f;
  const float one = 1.0f;
  for (int h = 0; h < p.num_heads; ++h) {
    RETURN_IF_CUBLAS_ERROR(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, nk, nq, dh, &alpha_scores,
        k + esize * h * dh, operand_type, ld, kv_batch_stride,
        q + esize * h * dh, operand_type, ld, q_batch_stride, &zero,
        p.workspace + h * head_scores, CUDA_R_32F, nk, s_batch_stride, p.batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  cuda::MaskedSoftmaxArgs args{p.workspace, p.q_len, p.k_len, p.num_heads, nq, nk};
  const unsigned rows = static_cast<unsigned>(int64_t{p.batch} * p.num_heads * nq);
  if (bf16) {
    cuda::MaskedSoftmaxKernel<__nv_bfloat16><<<rows, cuda::SoftmaxTraits::kThreads, 0, stream>>>(args);
  } else {
    cuda::MaskedSoftmaxKernel<float><<<rows, cuda::SoftmaxTraits::kThreads, 0, stream>>>(args);
  }
  RETURN_IF_ERROR(CudaLaunchStatus("MaskedSoftmaxKernel"));

  //   O_bh^T [dh, nq] = V_bh^T [dh, nk] . P_bh^T [nk, nq]
  // P sits in the workspace: fp32 with row stride nk, or bf16 with row stride
  // 2 nk (bf16 elements), both starting where the head's scores start.
  const int p_ld = bf16 ? 2 * nk : nk;
  const long long p_batch_stride = bf16 ? 2 * s_batch_stride : s_batch_stride;
  const char* probabilities = reinterpret_cast<const char*>(p.workspace);
  for (int h = 0; h < p.num_heads; ++h) {
    RETURN_IF_CUBLAS_ERROR(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, dh, nq, nk, &one,
        v + esize * h * dh, operand_type, ld, kv_batch_stride,
        probabilities + sizeof(float) * h * head_scores, operand_type, p_ld, p_batch_stride, &zero,
        o + esize * h * dh, operand_type, ld, q_batch_stride, p.batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return Status::Ok();
}

}  // namespace jagrank
