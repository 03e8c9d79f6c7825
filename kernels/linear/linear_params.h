// Parameters of the fully connected layer y = x W^T + b, optionally followed
// by ReLU (PyTorch Linear layout).
#ifndef JAGRANK_KERNELS_LINEAR_LINEAR_PARAMS_H_
#define JAGRANK_KERNELS_LINEAR_LINEAR_PARAMS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace jagrank {

struct LinearParams {
  const void* x;             // [m, k] of in_dtype, row-major
  const void* weight;        // [n, k] of in_dtype (out_features, in_features)
  const void* maybe_bias;    // optional [n] of out_dtype
  bool relu;                 // apply max(0, .) after the bias
  int m;                     // rows, >= 0 (m == 0 is a no-op)
  int n;                     // out features, > 0
  int k;                     // in features, > 0
  void* y;                   // [m, n] of out_dtype; must not alias x
  bool accumulate;           // y += x W^T (+ b) instead of y = ...; ReLU on the sum
  // CUDA only: kBFloat16 in_dtype = bf16 x and weight with float32
  // accumulation; out_dtype of y and the bias. Zero-initialised params: both
  // float32 (the CPU functions take only that).
  DType in_dtype;
  DType out_dtype;
  // CUDA only, optional: cuBLASLt workspace on the device, used in stream
  // order (one per stream). 0 bytes limits cuBLASLt to kernels that need none.
  void* workspace;
  size_t workspace_bytes;
  // CPU only: most threads, the caller's included (workers from
  // CpuThreadPool::Shared()); 0 = all cores, >= 0.
  int num_threads;
};

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LINEAR_LINEAR_PARAMS_H_
