// Linear layer through cuBLASLt (declared in kernels/cuda_ops.h).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cublas_handles.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace jagrank {
namespace {

// RAII owners of the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic
// assumes 256-byte aligned operands unless told otherwise.
uint32_t Alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace

Status LinearCuda(const LinearParams& params, cudaStream_t stream, bool allow_tf32) {
  if (params.m < 0) return Status::InvalidArgument("m = " + std::to_string(params.m) + ", must be >= 0");
  if (params.n <= 0) return Status::InvalidArgument("n = " + std::to_string(params.n) + ", must be > 0");
  if (params.k <= 0) return Status::InvalidArgument("k = " + std::to_string(params.k) + ", must be > 0");
  if (params.weight == nullptr) return Status::InvalidArgument("weight: null");
  if (params.m == 0) return Status::Ok();
  if (params.x == nullptr) return Status::InvalidArgument("x: null");
  if (params.y == nullptr) return Status::InvalidArgument("y: null");
  if (static_cast<const void*>(params.x) == static_cast<const void*>(params.y)) {
    return Status::InvalidArgument("y: aliases x");
  }

  cublasLtHandle_t handle = nullptr;
  RETURN_IF_ERROR(cuda::GetCublasLtHandle(&handle));

  // Column-major view: y^T [n, m] = (W^T)^T [n, k] . x^T [k, m], where W^T
  // ([k, n], ld k) and x^T ([k, m], ld k) are the row-major buffers as they lie.
  // The bias then runs along the rows of y^T, which is what the epilogue adds.
  LtDescriptors d;
  const cublasComputeType_t compute = allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (params.maybe_bias != nullptr) {
    epilogue = params.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &params.maybe_bias, sizeof(params.maybe_bias)));
  } else if (params.relu) {
    epilogue = CUBLASLT_EPILOGUE_RELU;
  }
  RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, params.k, params.n, params.k));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, params.k, params.m, params.k));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, params.n, params.m, params.n));

  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceCreate(&d.preference));
  const size_t workspace_bytes = 0;  // no shared workspace: calls on different streams stay independent
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
  const uint32_t align_a = Alignment(params.weight);
  const uint32_t align_b = Alignment(params.x);
  const uint32_t align_c = Alignment(params.y);
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.preference, 1, &heuristic, &found));
  if (found == 0) {
    return Status::Internal("cuBLASLt found no algorithm for linear m=" + std::to_string(params.m) +
                            " n=" + std::to_string(params.n) + " k=" + std::to_string(params.k));
  }
  const float one = 1.0f;
  const float zero = 0.0f;
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmul(handle, d.op, &one, params.weight, d.a, params.x, d.b, &zero, params.y, d.c,
                                        params.y, d.c, &heuristic.algo, nullptr, 0, stream));
  return Status::Ok();
}

}  // namespace jagrank
