#include "kernels/linear/linear.h"

#include <cblas.h>

#include <algorithm>

#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"

namespace jagrank {
namespace {

Status ValidateLinear(const LinearParams& p) {
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.m, 0, "m"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.n, 1, "n"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.k, 1, "k"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  if (p.m == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.x, "x"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.weight, "weight"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.y, "y"));
  if (p.x == p.y) return Status::InvalidArgument("y: must not alias x");
  if (p.in_dtype != DType::kFloat32) return Status::InvalidArgument("in_dtype: the CPU functions take float32 only");
  if (p.out_dtype != DType::kFloat32) return Status::InvalidArgument("out_dtype: the CPU functions take float32 only");
  return Status::Ok();
}

// The float32 views of p's operands (ValidateLinear checked the dtypes).
const float* X(const LinearParams& p) { return static_cast<const float*>(p.x); }
const float* W(const LinearParams& p) { return static_cast<const float*>(p.weight); }
float* Y(const LinearParams& p) { return static_cast<float*>(p.y); }
const float* Bias(const LinearParams& p) { return static_cast<const float*>(p.maybe_bias); }

void ApplyRelu(const LinearParams& p) {
  const int64_t count = int64_t{p.m} * p.n;
  float* y = Y(p);
  for (int64_t i = 0; i < count; ++i) y[i] = std::max(y[i], 0.0f);
}

// Rows [row, row + rows) of y = x W^T (+ b) (ReLU): one single-threaded sgemm.
void LinearRows(const LinearParams& p, int row, int rows) {
  float* y = Y(p) + int64_t{row} * p.n;
  float beta = p.accumulate ? 1.0f : 0.0f;
  if (p.maybe_bias != nullptr) {  // y starts as (or gains) the broadcast bias; sgemm adds x W^T to it
    for (int r = 0; r < rows; ++r) {
      float* out = y + int64_t{r} * p.n;
      if (p.accumulate) {
        for (int c = 0; c < p.n; ++c) out[c] += Bias(p)[c];
      } else {
        std::copy(Bias(p), Bias(p) + p.n, out);
      }
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, p.n, p.k, 1.0f, X(p) + int64_t{row} * p.k, p.k, W(p), p.k,
              beta, y, p.n);
  if (p.relu) {
    for (int64_t i = 0, count = int64_t{rows} * p.n; i < count; ++i) y[i] = std::max(y[i], 0.0f);
  }
}

}  // namespace

Status LinearCpu(const LinearParams& params) {
  const LinearParams& p = params;
  RETURN_IF_ERROR(ValidateLinear(p));
  if (p.m == 0) return Status::Ok();
  UseSingleThreadedBlas();
  // One block of rows per thread (each sgemm packs all of W again, so few,
  // large blocks), and a thread only per kMinFlopsPerThread of work (~40 us
  // of one core's sgemm), so that small layers stay on the caller.
  constexpr double kMinFlopsPerThread = 4e6;
  const double flops = 2.0 * p.m * p.n * p.k;
  int64_t threads = std::min<int64_t>(CpuThreads(p.num_threads), static_cast<int64_t>(flops / kMinFlopsPerThread) + 1);
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, p.m));
  if (threads == 1) {
    LinearRows(p, 0, p.m);
    return Status::Ok();
  }
  const int rows_per_block = static_cast<int>((p.m + threads - 1) / threads);
  const int blocks = (p.m + rows_per_block - 1) / rows_per_block;
  ParallelFor(blocks, static_cast<int>(threads), [&](int64_t block) {
    const int row = static_cast<int>(block) * rows_per_block;
    LinearRows(p, row, std::min(rows_per_block, p.m - row));
  });
  return Status::Ok();
}

Status LinearReferenceCpu(const LinearParams& params) {
  const LinearParams& p = params;
  RETURN_IF_ERROR(ValidateLinear(p));
  for (int r = 0; r < p.m; ++r) {
    const float* x = X(p) + int64_t{r} * p.k;
    for (int c = 0; c < p.n; ++c) {
      const float* w = W(p) + int64_t{c} * p.k;
      float acc = p.maybe_bias != nullptr ? Bias(p)[c] : 0.0f;
      if (p.accumulate) acc += Y(p)[int64_t{r} * p.n + c];
      for (int i = 0; i < p.k; ++i) acc += x[i] * w[i];
      Y(p)[int64_t{r} * p.n + c] = acc;
    }
  }
  if (p.relu) ApplyRelu(p);
  return Status::Ok();
}

}  // namespace jagrank
