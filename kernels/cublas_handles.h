// cuBLAS / cuBLASLt handles for the launchers of kernels/, and the
// cuBLAS error -> Status macro. Internal to kernels/.
#ifndef JAGRANK_KERNELS_CUBLAS_HANDLES_H_
#define JAGRANK_KERNELS_CUBLAS_HANDLES_H_

#include <cublasLt.h>
#include <cublas_v2.h>

#include "common/status.h"

namespace jagrank {
namespace cuda {

// The calling thread's handle for the current device, created on first use
// and kept until the process exits (destroying handles from thread-exit
// destructors can run after the CUDA runtime is torn down). One per
// (thread, device), so concurrent callers never share a handle.
Status GetCublasHandle(cublasHandle_t* out);
Status GetCublasLtHandle(cublasLtHandle_t* out);

// Status::Internal naming `what` and the cuBLAS status; OK on success.
Status CublasErrorStatus(cublasStatus_t status, const char* what, const char* file, int line);

}  // namespace cuda
}  // namespace jagrank

#define RETURN_IF_CUBLAS_ERROR(expr)                                                       \
  do {                                                                                     \
    const cublasStatus_t jagrank_cublas_status_ = (expr);                                  \
    if (jagrank_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                 \
      return ::jagrank::cuda::CublasErrorStatus(jagrank_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#endif  // JAGRANK_KERNELS_CUBLAS_HANDLES_H_
