// Embedding lookups: pooled bags (DESIGN.md step 2) and plain row gathers
// (candidate embeddings e_c, step 5). CUDA launchers: kernels/cuda_ops.h.
#ifndef JAGRANK_KERNELS_EMBEDDING_BAG_H_
#define JAGRANK_KERNELS_EMBEDDING_BAG_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "common/status.h"

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

// e[c, :] = table[row(ids[c]), :] converted to float32.
struct GatherRowsParams {
  const int64_t* ids;       // [count]
  int64_t count;            // >= 0
  const void* table;        // [num_rows, dim] of table_dtype
  DType table_dtype;
  int64_t num_rows;         // > 0
  int dim;                  // > 0
  float* out;               // [count, dim]
  int num_threads;          // CPU only: most threads incl. the caller's; 0 = all cores
};

// CPU reference and backend. InvalidArgument naming the field on bad input
// (null pointers where data is needed, batch < 0, dim <= 0, num_rows <= 0,
// offsets not starting at 0 or decreasing).
Status EmbeddingBagCpu(const EmbeddingBagParams& params);
Status GatherRowsCpu(const GatherRowsParams& params);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_EMBEDDING_BAG_H_
