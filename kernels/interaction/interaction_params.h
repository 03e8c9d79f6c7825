// Parameters of the dot interaction producing the top-MLP input (docs/model.md, step 7).
//
// For candidate c of request r (candidate_offsets[r] <= c < candidate_offsets[r+1]),
// with v = [x_r, p_1,r .. p_F,r, u_c, e_c] (n = F + 3 vectors of dim d):
//   out[c, :] = [x_r (d values), v_a . v_b for a = 0..n-2, b = a+1..n-1]
// Request-level vectors (x, pooled) are read through candidate_offsets; they
// are never copied per candidate.
#ifndef JAGRANK_KERNELS_INTERACTION_INTERACTION_PARAMS_H_
#define JAGRANK_KERNELS_INTERACTION_INTERACTION_PARAMS_H_

#include <cstdint>

#include "kernels/dtype.h"

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
  const void* u;                    // [num_candidates, dim] of vector_dtype: target-attention output
  const void* e;                    // [num_candidates, dim] of vector_dtype: candidate embeddings
  const int32_t* candidate_offsets; // [num_requests + 1], ends at num_candidates
  int num_requests;                 // R >= 0
  int num_candidates;               // C >= 0
  int dim;                          // d > 0
  float* out;                       // [num_candidates, DotInteractionOutputWidth(num_sparse, dim)]
  int num_threads;                  // DotInteractionSplitCpu only: most threads incl. the caller's; 0 = all cores
  int max_candidates;               // DotInteractionSplitCuda, optional: > 0 = no request has more candidates
  // u and e: float32 everywhere; bfloat16 in DotInteractionSplitCuda only
  // (the CUDA model's attention output and bf16 item rows as they are).
  DType vector_dtype;
};

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_INTERACTION_INTERACTION_PARAMS_H_
