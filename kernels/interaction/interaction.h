// Dot interaction (parameters and contract in interaction_params.h): the CPU
// reference, the CPU backend's split form, and the CUDA launcher.
#ifndef JAGRANK_KERNELS_INTERACTION_INTERACTION_H_
#define JAGRANK_KERNELS_INTERACTION_INTERACTION_H_

#include <vector>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/interaction/interaction_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

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

// Whether DotInteractionCuda takes its register kernel (n = num_sparse + 3
// <= 10 vectors): then the whole row per candidate is cheap and the full
// first top-MLP layer beats the split one (whose per-request part has to be
// repeated over the candidates); above, the split form.
inline bool DotInteractionCudaHasRegisterKernel(int num_sparse) { return num_sparse + 3 <= 10; }

#if JAGRANK_WITH_CUDA
// Dot interaction on CUDA (conventions: kernels/cuda_ops.h); each candidate
// finds its request by binary search in candidate_offsets (request vectors
// are read, never copied per candidate). n = num_sparse + 3 <= 10 vectors: a
// register kernel (57 us for ~36k candidates at n = 9, d = 64 on the H200);
// more: a shared-memory kernel (95 us).
Status DotInteractionCuda(const DotInteractionParams& params, cudaStream_t stream);

// The split form on CUDA: request_out [num_requests, request_stride] and
// candidate_out [num_candidates, candidate_stride] of out_dtype (float32
// sums, rounded once when bf16), each row as DotInteractionSplitCpu's
// followed by zeros up to the stride (so that a GEMM over the rows can take
// aligned, padded widths). `out` is unused. Strides below the widths are
// InvalidArgument.
Status DotInteractionSplitCuda(const DotInteractionParams& params, void* request_out, int request_stride,
                               void* candidate_out, int candidate_stride, DType out_dtype, cudaStream_t stream);
#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_INTERACTION_INTERACTION_H_
