// Dot interaction producing the top-MLP input (DESIGN.md step 7).
//
// For candidate c of request r (candidate_offsets[r] <= c < candidate_offsets[r+1]),
// with v = [x_r, p_1,r .. p_F,r, u_c, e_c] (n = F + 3 vectors of dim d):
//   out[c, :] = [x_r (d values), v_a . v_b for a = 0..n-2, b = a+1..n-1]
// Request-level vectors (x, pooled) are read through candidate_offsets; they
// are never copied per candidate. CUDA launcher: kernels/cuda_ops.h.
#ifndef JAGRANK_KERNELS_INTERACTION_H_
#define JAGRANK_KERNELS_INTERACTION_H_

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace jagrank {

// n = num_sparse + 3 vectors; the output row width d + n(n-1)/2.
inline int DotInteractionOutputWidth(int num_sparse, int dim) {
  const int n = num_sparse + 3;
  return dim + n * (n - 1) / 2;
}

struct DotInteractionParams {
  const float* x;                   // [num_requests, dim]: bottom-MLP output
  const float* pooled;              // [num_sparse, num_requests, dim] (feature-major); may be null if num_sparse == 0
  int num_sparse;                   // F >= 0
  const float* u;                   // [num_candidates, dim]: target-attention output
  const float* e;                   // [num_candidates, dim]: candidate embeddings
  const int32_t* candidate_offsets; // [num_requests + 1], ends at num_candidates
  int num_requests;                 // R >= 0
  int num_candidates;               // C >= 0
  int dim;                          // d > 0
  float* out;                       // [num_candidates, DotInteractionOutputWidth(num_sparse, dim)]
  int num_threads;                  // DotInteractionSplitCpu only: most threads incl. the caller's; 0 = all cores
};

// CPU reference; InvalidArgument naming the field on bad input.
Status DotInteractionCpu(const DotInteractionParams& params);

// The same row split by what each column depends on, so that the top MLP's
// first layer can do the request's share once per request (W x = W_req
// x_req + W_cand x_cand). Of the n vectors the first F + 1 (x, p_1..p_F) are
// the request's; u_c and e_c are the candidate's.
//   request row   [d + (F+1)F/2]: x_r, then v_a . v_b for a < b <= F
//   candidate row [2(F+1) + 1]:   v_a . u_c, v_a . e_c for a = 0..F, then u_c . e_c
// each in DotInteraction's column order. *request_columns and
// *candidate_columns receive where each entry sits in DotInteraction's row.
void DotInteractionSplitColumns(int num_sparse, int dim, std::vector<int>* request_columns,
                                std::vector<int>* candidate_columns);

// DotInteractionParams' inputs; `out` unused. Writes request_out
// [num_requests, request width] and candidate_out [num_candidates, candidate
// width]. CPU backend; InvalidArgument naming the field on bad input.
Status DotInteractionSplitCpu(const DotInteractionParams& params, float* request_out, float* candidate_out);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_INTERACTION_H_
