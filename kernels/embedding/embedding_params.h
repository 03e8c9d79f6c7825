// Parameters of the embedding family: pooled bags (step 2 of docs/model.md),
// plain row gathers (candidate embeddings e_c, step 5) and history embeddings
// with positions (step 3). Plain structs, filled by the caller (`params = {}`
// first) and passed by const reference to the CPU and CUDA functions of
// kernels/embedding/embedding.h.
#ifndef JAGRANK_KERNELS_EMBEDDING_EMBEDDING_PARAMS_H_
#define JAGRANK_KERNELS_EMBEDDING_EMBEDDING_PARAMS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace jagrank {

// out[b, :] = sum over i in [offsets[b], offsets[b+1]) of table[row(ids[i]), :]
// with row(id) = uint64_t(id) % num_rows; an empty bag gives zeros.
// Accumulation in float32 whatever table_dtype is.
struct EmbeddingBagParams {
  const int64_t* ids;       // [offsets[batch]]
  const int32_t* offsets;   // [batch + 1]
  int batch;                // B >= 0
  const void* table;        // [num_rows, dim] of table_dtype, row-major
  DType table_dtype;
  int64_t num_rows;         // > 0
  int dim;                  // > 0
  float* out;               // [batch, dim]; every element written
};

// Up to kMaxBagsPerLaunch EmbeddingBagParams of one table dtype and dim,
// run by one launch (EmbeddingBagsCuda): a model's pooled features.
constexpr int kMaxBagsPerLaunch = 32;
struct EmbeddingBagSet {
  EmbeddingBagParams bags[kMaxBagsPerLaunch];
  int count;
};

// e[c, :] = table[row(ids[c]), :] converted to float32.
struct GatherRowsParams {
  const int64_t* ids;       // [count]
  int64_t count;            // >= 0
  const void* table;        // [num_rows, dim] of table_dtype
  DType table_dtype;
  int64_t num_rows;         // > 0
  int dim;                  // > 0
  void* out;                // [count, dim] of out_dtype
  DType out_dtype;          // float32; bfloat16 on CUDA only (from a bfloat16 table: exact)
  int num_threads;          // CPU only: most threads incl. the caller's; 0 = all cores
};

// History embeddings with positions: for request b with L = len(b) kept ids
// (oldest first), token j of it gets
//   h_j = E_item[row(id_j)] + P[L-1-j]      (P row 0 = the most recent item)
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
  void* out;                     // [T, dim] of out_dtype
  DType out_dtype;               // CUDA: float32 or bf16 (the sum rounded once); CPU: float32
  int longest;                   // CUDA, optional: > 0 = no history is longer (the grid's extent)
  int num_threads;               // CPU only: most threads incl. the caller's; 0 = all cores
};

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_EMBEDDING_EMBEDDING_PARAMS_H_
