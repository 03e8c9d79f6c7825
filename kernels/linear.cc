#include "kernels/linear.h"

#include <cblas.h>

#include <algorithm>

#include "kernels/cpu_common.h"

namespace jagrank {
namespace {

Status ValidateLinear(const LinearParams& p) {
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.m, 0, "m"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.n, 1, "n"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.k, 1, "k"));
  if (p.m == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.x, "x"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.weight, "weight"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.y, "y"));
  if (p.x == p.y) return Status::InvalidArgument("y: must not alias x");
  return Status::Ok();
}

void ApplyRelu(const LinearParams& p) {
  const int64_t count = int64_t{p.m} * p.n;
  for (int64_t i = 0; i < count; ++i) p.y[i] = std::max(p.y[i], 0.0f);
}

}  // namespace

Status LinearCpu(const LinearParams& params) {
  const LinearParams& p = params;
  RETURN_IF_ERROR(ValidateLinear(p));
  if (p.m == 0) return Status::Ok();
  float beta = 0.0f;
  if (p.maybe_bias != nullptr) {  // y starts as the broadcast bias; sgemm adds x W^T to it
    for (int r = 0; r < p.m; ++r) std::copy(p.maybe_bias, p.maybe_bias + p.n, p.y + int64_t{r} * p.n);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p.m, p.n, p.k, 1.0f, p.x, p.k, p.weight, p.k, beta, p.y, p.n);
  if (p.relu) ApplyRelu(p);
  return Status::Ok();
}

Status LinearReferenceCpu(const LinearParams& params) {
  const LinearParams& p = params;
  RETURN_IF_ERROR(ValidateLinear(p));
  for (int r = 0; r < p.m; ++r) {
    const float* x = p.x + int64_t{r} * p.k;
    for (int c = 0; c < p.n; ++c) {
      const float* w = p.weight + int64_t{c} * p.k;
      float acc = p.maybe_bias != nullptr ? p.maybe_bias[c] : 0.0f;
      for (int i = 0; i < p.k; ++i) acc += x[i] * w[i];
      p.y[int64_t{r} * p.n + c] = acc;
    }
  }
  if (p.relu) ApplyRelu(p);
  return Status::Ok();
}

}  // namespace jagrank
