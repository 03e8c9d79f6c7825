#include "kernels/interaction.h"

#include <vector>

#include "kernels/cpu_common.h"
#include "kernels/jagged.h"

namespace jagrank {

Status DotInteractionCpu(const DotInteractionParams& params) {
  const DotInteractionParams& p = params;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_requests, 0, "num_requests"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_candidates, 0, "num_candidates"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_sparse, 0, "num_sparse"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.dim, 1, "dim"));
  RETURN_IF_ERROR(ValidateOffsets(p.candidate_offsets, p.num_requests, "candidate_offsets", p.num_candidates));
  if (p.num_candidates == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.x, "x"));
  if (p.num_sparse > 0) RETURN_IF_ERROR(cpu::CheckNotNull(p.pooled, "pooled"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.u, "u"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.e, "e"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));

  const int d = p.dim;
  const int n = p.num_sparse + 3;
  const int64_t width = DotInteractionOutputWidth(p.num_sparse, d);
  std::vector<const float*> v(n);
  for (int r = 0; r < p.num_requests; ++r) {
    v[0] = p.x + int64_t{r} * d;
    for (int f = 0; f < p.num_sparse; ++f) v[1 + f] = p.pooled + (int64_t{f} * p.num_requests + r) * d;
    for (int32_t c = p.candidate_offsets[r]; c < p.candidate_offsets[r + 1]; ++c) {
      v[n - 2] = p.u + int64_t{c} * d;
      v[n - 1] = p.e + int64_t{c} * d;
      float* out = p.out + c * width;
      for (int i = 0; i < d; ++i) out[i] = v[0][i];
      float* t = out + d;
      for (int a = 0; a < n - 1; ++a) {
        for (int b = a + 1; b < n; ++b) {
          float dot = 0.0f;
          for (int i = 0; i < d; ++i) dot += v[a][i] * v[b][i];
          *t++ = dot;
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace jagrank
