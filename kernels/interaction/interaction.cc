#include "kernels/interaction/interaction.h"

#include <vector>

#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/layout/jagged.h"

namespace jagrank {

namespace {

// Eight partial sums, so that the compiler can keep them in one vector
// register (a single running sum is a serial chain of dependent adds: the
// compiler may not reorder float additions).
float Dot(const float* a, const float* b, int d) {
  float part[8] = {};
  int i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; ++j) part[j] += a[i + j] * b[i + j];
  }
  float dot = 0.0f;
  for (; i < d; ++i) dot += a[i] * b[i];
  for (int j = 0; j < 8; ++j) dot += part[j];
  return dot;
}

// Every check but `out`'s; true when there is nothing to compute.
Status ValidateInputs(const DotInteractionParams& p, bool* empty) {
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_requests, 0, "num_requests"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_candidates, 0, "num_candidates"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_sparse, 0, "num_sparse"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.dim, 1, "dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  RETURN_IF_ERROR(ValidateOffsets(p.candidate_offsets, p.num_requests, "candidate_offsets", p.num_candidates));
  *empty = p.num_candidates == 0;
  if (*empty) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.x, "x"));
  if (p.num_sparse > 0) RETURN_IF_ERROR(cpu::CheckNotNull(p.pooled, "pooled"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.u, "u"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.e, "e"));
  if (p.vector_dtype != DType::kFloat32) {
    return Status::InvalidArgument(std::string("vector_dtype = ") + DTypeName(p.vector_dtype) +
                                   ": the CPU interaction takes float32 u and e");
  }
  return Status::Ok();
}

// Points v[0..F] at request r's vectors: x_r, then the pooled features.
void RequestVectors(const DotInteractionParams& p, int r, std::vector<const float*>* v) {
  (*v)[0] = p.x + int64_t{r} * p.dim;
  for (int f = 0; f < p.num_sparse; ++f) (*v)[1 + f] = p.pooled + (int64_t{f} * p.num_requests + r) * p.dim;
}

}  // namespace

Status DotInteractionCpu(const DotInteractionParams& params) {
  const DotInteractionParams& p = params;
  bool empty = false;
  RETURN_IF_ERROR(ValidateInputs(p, &empty));
  if (empty) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));

  const int d = p.dim;
  const int n = p.num_sparse + 3;
  const int64_t width = DotInteractionOutputWidth(p.num_sparse, d);
  std::vector<const float*> v(n);
  for (int r = 0; r < p.num_requests; ++r) {
    RequestVectors(p, r, &v);
    for (int32_t c = p.candidate_offsets[r]; c < p.candidate_offsets[r + 1]; ++c) {
      v[n - 2] = static_cast<const float*>(p.u) + int64_t{c} * d;
      v[n - 1] = static_cast<const float*>(p.e) + int64_t{c} * d;
      float* out = p.out + c * width;
      for (int i = 0; i < d; ++i) out[i] = v[0][i];
      float* t = out + d;
      for (int a = 0; a < n - 1; ++a) {
        for (int b = a + 1; b < n; ++b) *t++ = Dot(v[a], v[b], d);
      }
    }
  }
  return Status::Ok();
}

void DotInteractionSplitColumns(int num_sparse, int dim, std::vector<int>* request_columns,
                                std::vector<int>* candidate_columns) {
  const int n = num_sparse + 3, u = n - 2;  // vectors 0..F are the request's, u and e the candidate's
  request_columns->clear();
  candidate_columns->clear();
  for (int i = 0; i < dim; ++i) request_columns->push_back(i);
  int column = dim;
  for (int a = 0; a < n - 1; ++a) {
    for (int b = a + 1; b < n; ++b) (b < u ? request_columns : candidate_columns)->push_back(column++);
  }
}

Status DotInteractionSplitCpu(const DotInteractionParams& params, float* request_out, float* candidate_out) {
  const DotInteractionParams& p = params;
  bool empty = false;
  RETURN_IF_ERROR(ValidateInputs(p, &empty));
  if (empty) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(request_out, "request_out"));
  RETURN_IF_ERROR(cpu::CheckNotNull(candidate_out, "candidate_out"));
  const int d = p.dim;
  const int m = p.num_sparse + 1;  // the request's vectors
  const int64_t request_width = d + m * (m - 1) / 2, candidate_width = 2 * m + 1;
  // Requests shared from a counter, a thread per kMinCandidatesPerThread.
  constexpr double kMinCandidatesPerThread = 1024;
  const int threads = ThreadsFor(p.num_candidates, kMinCandidatesPerThread, p.num_threads);
  ParallelFor(p.num_requests, threads, [&](int64_t r) {
    std::vector<const float*> v(m);
    RequestVectors(p, static_cast<int>(r), &v);
    float* row = request_out + r * request_width;
    for (int i = 0; i < d; ++i) row[i] = v[0][i];
    float* t = row + d;
    for (int a = 0; a < m - 1; ++a) {
      for (int b = a + 1; b < m; ++b) *t++ = Dot(v[a], v[b], d);
    }
    for (int32_t c = p.candidate_offsets[r]; c < p.candidate_offsets[r + 1]; ++c) {
      const float* u = static_cast<const float*>(p.u) + int64_t{c} * d;
      const float* e = static_cast<const float*>(p.e) + int64_t{c} * d;
      float* out = candidate_out + c * candidate_width;
      for (int a = 0; a < m; ++a) {
        *out++ = Dot(v[a], u, d);
        *out++ = Dot(v[a], e, d);
      }
      *out = Dot(u, e, d);
    }
  });
  return Status::Ok();
}

}  // namespace jagrank
