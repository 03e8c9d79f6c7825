// Parameters of the element-wise family.
#ifndef JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_PARAMS_H_
#define JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_PARAMS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace jagrank {

// Element-wise dtype conversion: out[i] = in[i] for i < count; fp32 -> bf16
// rounds to nearest even. Same dtypes: a device copy. in and out must not overlap.
struct CastParams {
  const void* in;     // [count] of in_dtype
  DType in_dtype;
  void* out;          // [count] of out_dtype
  DType out_dtype;
  int64_t count;      // >= 0
};

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_PARAMS_H_
