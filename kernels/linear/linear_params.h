// Parameters of the fully connected layer y = x W^T + b, optionally followed
// by ReLU (PyTorch Linear layout).
#ifndef JAGRANK_KERNELS_LINEAR_LINEAR_PARAMS_H_
#define JAGRANK_KERNELS_LINEAR_LINEAR_PARAMS_H_

#include <cstddef>
#include <cstdint>

namespace jagrank {

struct LinearParams {
  const float* x;            // [m, k], row-major
  const float* weight;       // [n, k] (out_features, in_features)
  const float* maybe_bias;   // optional [n]
  bool relu;                 // apply max(0, .) after the bias
  int m;                     // rows, >= 0 (m == 0 is a no-op)
  int n;                     // out features, > 0
  int k;                     // in features, > 0
  float* y;                  // [m, n]; must not alias x
  bool accumulate;           // y += x W^T (+ b) instead of y = ...; ReLU on the sum
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
