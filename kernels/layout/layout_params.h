// Parameters of the jagged <-> padded copies (the padded layouts the padded
// attention strategies run on).
#ifndef JAGRANK_KERNELS_LAYOUT_LAYOUT_PARAMS_H_
#define JAGRANK_KERNELS_LAYOUT_LAYOUT_PARAMS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace jagrank {

// padded[b, i, :] = values[offsets[b] + i, :] for i < len(b), zeros for
// len(b) <= i < max_len. Every len(b) <= max_len.
struct JaggedToPaddedParams {
  const void* values;        // [offsets[batch], width] of dtype
  const int32_t* offsets;    // [batch + 1]
  int batch;                 // B >= 0
  int max_len;               // N >= 0
  int64_t width;             // elements per token, > 0
  DType dtype;
  void* padded;              // [batch, max_len, width]; every element written
};

// values[offsets[b] + i, :] = padded[b, i, :] for i < len(b); padding ignored.
struct PaddedToJaggedParams {
  const void* padded;        // [batch, max_len, width] of dtype
  const int32_t* offsets;    // [batch + 1]
  int batch;
  int max_len;
  int64_t width;
  DType dtype;
  void* values;              // [offsets[batch], width]
};

// values[offsets[b] + i, :] = rows[b, :] for i < len(b): each row repeated
// over its sequence (a request's vector for each of its candidates). Every
// len(b) <= max_len.
struct RepeatRowsParams {
  const void* rows;          // [batch, width] of dtype
  const int32_t* offsets;    // [batch + 1]
  int batch;                 // B >= 0
  int max_len;               // the longest sequence, >= 0
  int64_t width;             // elements per row, > 0
  DType dtype;
  void* values;              // [offsets[batch], width]
};

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LAYOUT_LAYOUT_PARAMS_H_
