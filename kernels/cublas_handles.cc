#include "kernels/cublas_handles.h"

#include <cuda_runtime_api.h>

#include <string>
#include <unordered_map>

#include "common/cuda_check.h"

namespace jagrank {
namespace cuda {

Status GetCublasHandle(cublasHandle_t* out) {
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasHandle_t handle = nullptr;
    RETURN_IF_CUBLAS_ERROR(cublasCreate(&handle));
    it = handles.emplace(device, handle).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status GetCublasLtHandle(cublasLtHandle_t* out) {
  thread_local std::unordered_map<int, cublasLtHandle_t> handles;
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasLtHandle_t handle = nullptr;
    RETURN_IF_CUBLAS_ERROR(cublasLtCreate(&handle));
    it = handles.emplace(device, handle).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status CublasErrorStatus(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(what) + " failed: " + cublasGetStatusName(status) + " (" +
                          cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace cuda
}  // namespace jagrank
