// Jagged tensors: values packed over `offsets` (int32_t, B+1 entries,
// offsets[0] = 0, non-decreasing, offsets[B] = total count). Ids are int64_t
// and map to embedding rows by row = uint64_t(id) % num_rows (docs/model.md).
// Host-side helpers shared by every CPU kernel and by callers that assemble
// batches; CUDA code keeps its own device copies of these one-liners.
#ifndef JAGRANK_KERNELS_LAYOUT_JAGGED_H_
#define JAGRANK_KERNELS_LAYOUT_JAGGED_H_

#include <cstdint>

#include "common/status.h"

namespace jagrank {

// len(b) = offsets[b+1] - offsets[b].
inline int32_t JaggedLen(const int32_t* offsets, int b) { return offsets[b + 1] - offsets[b]; }

// The embedding row of `id`: the two's-complement cast, then modulo.
inline int64_t IdToRow(int64_t id, int64_t num_rows) {
  return static_cast<int64_t>(static_cast<uint64_t>(id) % static_cast<uint64_t>(num_rows));
}

// Checks a host offsets array of batch+1 entries: not null, offsets[0] = 0,
// non-decreasing; when expected_total >= 0, offsets[batch] == expected_total;
// when max_len >= 0, every len(b) <= max_len. The error (InvalidArgument)
// names `field` and the first bad entry. REQUIRES: batch >= 0.
Status ValidateOffsets(const int32_t* offsets, int batch, const char* field,
                       int64_t expected_total = -1, int64_t max_len = -1);

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LAYOUT_JAGGED_H_
