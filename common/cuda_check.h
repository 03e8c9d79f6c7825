// CUDA error handling for launchers, and a device query for tests and the
// server. Safe to include from plain C++ in every build: without
// JAGRANK_WITH_CUDA it only declares CudaDeviceAvailable() (always false).
//
//   RETURN_IF_CUDA_ERROR(cudaMemsetAsync(out, 0, bytes, stream));
//   Kernel<<<grid, block, 0, stream>>>(params);
//   RETURN_IF_ERROR(CudaLaunchStatus("EmbeddingBagKernel"));
#ifndef JAGRANK_COMMON_CUDA_CHECK_H_
#define JAGRANK_COMMON_CUDA_CHECK_H_

#include "common/status.h"

#if JAGRANK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace jagrank {

#if JAGRANK_WITH_CUDA

// True when the CUDA runtime sees at least one device. Cheap after the first
// call (the answer is cached); never throws, never aborts. Thread-safe.
bool CudaDeviceAvailable();

// Status::Internal naming `what`, the CUDA error name and its text; OK for
// cudaSuccess.
Status CudaErrorStatus(cudaError_t error, const char* what, const char* file, int line);

// Status of the kernel launch just made on this thread (cudaGetLastError):
// launch-configuration errors and earlier sticky errors, not the kernel's
// asynchronous completion.
Status CudaLaunchStatus(const char* kernel_name);

#else

inline bool CudaDeviceAvailable() { return false; }

#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#if JAGRANK_WITH_CUDA
// Evaluates a CUDA runtime call once; returns Status::Internal from the
// caller when it fails.
#define RETURN_IF_CUDA_ERROR(expr)                                                  \
  do {                                                                              \
    const cudaError_t jagrank_cuda_error_ = (expr);                                 \
    if (jagrank_cuda_error_ != cudaSuccess) {                                       \
      return ::jagrank::CudaErrorStatus(jagrank_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)
#endif

#endif  // JAGRANK_COMMON_CUDA_CHECK_H_
