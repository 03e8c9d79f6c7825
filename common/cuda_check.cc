#include "common/cuda_check.h"

#include <string>

namespace jagrank {

bool CudaDeviceAvailable() {
  // Function-local static: initialised once, thread-safe. A failed query
  // (no driver, no device) counts as "no device"; clear the sticky error it
  // may leave so that it does not surface in a later launch check.
  static const bool available = [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return available;
}

Status CudaErrorStatus(cudaError_t error, const char* what, const char* file, int line) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorName(error) + " (" +
                          cudaGetErrorString(error) + ") at " + file + ":" + std::to_string(line));
}

Status CudaLaunchStatus(const char* kernel_name) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string("launch of ") + kernel_name + " failed: " + cudaGetErrorName(error) +
                          " (" + cudaGetErrorString(error) + ")");
}

}  // namespace jagrank
