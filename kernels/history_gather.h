// History embeddings with positions (DESIGN.md step 3): for request b with
// L = len(b) kept ids (oldest first), token j of it gets
//   h_j = E_item[row(id_j)] + P[L-1-j]      (P row 0 = the most recent item)
// CUDA launcher: kernels/cuda_ops.h.
#ifndef JAGRANK_KERNELS_HISTORY_GATHER_H_
#define JAGRANK_KERNELS_HISTORY_GATHER_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "common/status.h"

namespace jagrank {

struct HistoryGatherParams {
  const int64_t* ids;            // [T], T = offsets[batch]; histories already truncated
  const int32_t* offsets;        // [batch + 1]; every len(b) <= max_len
  int batch;                     // B >= 0
  const void* item_table;        // [item_rows, dim] of table_dtype
  DType table_dtype;             // of item_table and position_table
  int64_t item_rows;             // > 0
  const void* position_table;    // [max_len, dim] of table_dtype
  int max_len;                   // >= 1: rows of position_table (max_history_len)
  int dim;                       // > 0
  float* out;                    // [T, dim]
  int num_threads;               // CPU only: most threads incl. the caller's; 0 = all cores
};

// CPU reference and backend; InvalidArgument naming the field on bad input
// (including a history longer than max_len).
Status HistoryGatherCpu(const HistoryGatherParams& params);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_HISTORY_GATHER_H_
