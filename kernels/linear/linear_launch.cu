// Linear layer through cuBLASLt (declared in linear.h).
//
// Building the cuBLASLt descriptors and asking its heuristic for an algorithm
// costs tens of microseconds of host time per call, more than many of the
// model's GEMMs take on the GPU. Each thread therefore keeps a plan per
// problem class -- n, k, epilogue, precision, operand alignments and m rounded
// up to a power of two -- and per call only sets m and the bias pointer. The
// algorithm is chosen by the heuristic for the first m seen in its class; a
// later m of the class that the algorithm does not support (cuBLASLt says so
// before launching anything) gets the heuristic's answer for its own m.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "kernels/cublas_handles.h"
#include "common/cuda_check.h"
#include "kernels/linear/linear.h"

namespace jagrank {
namespace {

// The cuBLASLt descriptors of one problem class and the algorithm chosen for it.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // W^T [k, n]
  cublasLtMatrixLayout_t b = nullptr;  // x^T [k, m]; m set per call
  cublasLtMatrixLayout_t c = nullptr;  // y^T [n, m]; m set per call
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  bool has_algo = false;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

struct PlanKey {
  int device;
  int m_class;  // m rounded up to a power of two
  int n;
  int k;
  int epilogue;
  bool tf32;
  DType in_dtype, out_dtype;
  uint32_t align_a, align_b, align_c;
  size_t workspace_bytes;
  bool operator==(const PlanKey& o) const {
    return std::tie(device, m_class, n, k, epilogue, tf32, in_dtype, out_dtype, align_a, align_b, align_c,
                    workspace_bytes) == std::tie(o.device, o.m_class, o.n, o.k, o.epilogue, o.tf32, o.in_dtype,
                                                 o.out_dtype, o.align_a, o.align_b, o.align_c, o.workspace_bytes);
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t(key.device), uint64_t(key.m_class), uint64_t(key.n), uint64_t(key.k),
                       uint64_t(key.epilogue), uint64_t(key.tf32), uint64_t(key.in_dtype),
                       uint64_t(key.out_dtype), uint64_t(key.align_a), uint64_t(key.align_b),
                       uint64_t(key.align_c), uint64_t(key.workspace_bytes)}) {
      h = (h ^ v) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// Plans kept per thread; a server's model sees a few dozen classes, so the
// bound only matters for callers that sweep shapes.
constexpr size_t kMaxPlansPerThread = 512;

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic
// assumes 256-byte aligned operands unless told otherwise.
uint32_t Alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

int RoundUpToPowerOfTwo(int m) {
  int p = 1;
  while (p < m && p < (1 << 30)) p *= 2;
  return p;
}

Status CreatePlan(const PlanKey& key, int m, LtPlan* plan) {
  // Column-major view: y^T [n, m] = (W^T)^T [n, k] . x^T [k, m], where W^T
  // ([k, n], ld k) and x^T ([k, m], ld k) are the row-major buffers as they lie.
  // The bias then runs along the rows of y^T, which is what the epilogue adds.
  // bf16 operands accumulate in float32 (CUBLAS_COMPUTE_32F); the bias is
  // of y's dtype (cuBLASLt's default for these types).
  const bool bf16_in = key.in_dtype == DType::kBFloat16;
  const cublasComputeType_t compute = key.tf32 && !bf16_in ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t in_type = bf16_in ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t out_type = key.out_dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  const auto epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
  RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&plan->a, in_type, key.k, key.n, key.k));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&plan->b, in_type, key.k, m, key.k));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&plan->c, out_type, key.n, m, key.n));

  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceCreate(&plan->preference));
  // The caller's workspace (one per stream, so calls on different streams stay independent).
  const uint64_t workspace_bytes = key.workspace_bytes;
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      plan->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
  const struct {
    cublasLtMatmulPreferenceAttributes_t attribute;
    uint32_t value;
  } alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& a : alignments) {
    RETURN_IF_CUBLAS_ERROR(
        cublasLtMatmulPreferenceSetAttribute(plan->preference, a.attribute, &a.value, sizeof(a.value)));
  }
  return Status::Ok();
}

// Sets the plan's algorithm to the heuristic's first choice for its layouts as they are now.
Status ChooseAlgorithm(cublasLtHandle_t handle, const PlanKey& key, int m, LtPlan* plan) {
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  RETURN_IF_CUBLAS_ERROR(cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->c, plan->c,
                                                        plan->preference, 1, &heuristic, &found));
  if (found == 0) {
    return Status::Internal("cuBLASLt found no algorithm for linear m=" + std::to_string(m) +
                            " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k));
  }
  plan->algo = heuristic.algo;
  plan->has_algo = true;
  return Status::Ok();
}

Status GetPlan(const PlanKey& key, int m, LtPlan** out) {
  thread_local std::unordered_map<PlanKey, std::unique_ptr<LtPlan>, PlanKeyHash> plans;
  auto it = plans.find(key);
  if (it == plans.end()) {
    if (plans.size() >= kMaxPlansPerThread) plans.clear();
    auto plan = std::make_unique<LtPlan>();
    RETURN_IF_ERROR(CreatePlan(key, m, plan.get()));
    it = plans.emplace(key, std::move(plan)).first;
  }
  *out = it->second.get();
  return Status::Ok();
}

Status SetRows(LtPlan* plan, int m) {
  const uint64_t cols = static_cast<uint64_t>(m);
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutSetAttribute(plan->b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutSetAttribute(plan->c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  return Status::Ok();
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

  PlanKey key = {};
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&key.device));
  key.m_class = RoundUpToPowerOfTwo(params.m);
  key.n = params.n;
  key.k = params.k;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (params.maybe_bias != nullptr) {
    epilogue = params.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  } else if (params.relu) {
    epilogue = CUBLASLT_EPILOGUE_RELU;
  }
  key.epilogue = static_cast<int>(epilogue);
  key.tf32 = allow_tf32;
  key.in_dtype = params.in_dtype;
  key.out_dtype = params.out_dtype;
  key.align_a = Alignment(params.weight);
  key.align_b = Alignment(params.x);
  key.align_c = Alignment(params.y);
  key.workspace_bytes = params.workspace != nullptr ? params.workspace_bytes : 0;

  LtPlan* plan = nullptr;
  RETURN_IF_ERROR(GetPlan(key, params.m, &plan));
  RETURN_IF_ERROR(SetRows(plan, params.m));
  if (params.maybe_bias != nullptr) {
    RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &params.maybe_bias, sizeof(params.maybe_bias)));
  }
  if (!plan->has_algo) RETURN_IF_ERROR(ChooseAlgorithm(handle, key, params.m, plan));

  // D = epilogue(x W^T + beta y (+ b)), in place over y.
  const float one = 1.0f;
  const float beta = params.accumulate ? 1.0f : 0.0f;
  cublasStatus_t status =
      cublasLtMatmul(handle, plan->op, &one, params.weight, plan->a, params.x, plan->b, &beta, params.y, plan->c,
                     params.y, plan->c, &plan->algo, params.workspace, key.workspace_bytes, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    // The class's algorithm does not cover this m: nothing was launched; ask for this m.
    RETURN_IF_ERROR(ChooseAlgorithm(handle, key, params.m, plan));
    status = cublasLtMatmul(handle, plan->op, &one, params.weight, plan->a, params.x, plan->b, &beta, params.y,
                            plan->c, params.y, plan->c, &plan->algo, params.workspace, key.workspace_bytes, stream);
  }
  RETURN_IF_CUBLAS_ERROR(status);
  return Status::Ok();
}

}  // namespace jagrank
