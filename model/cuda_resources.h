// Internal to model/: CUDA resources as small RAII owners, so that the CUDA
// backend frees streams, events, pools and buffers by destruction order
// instead of a hand-written destructor. Only declared when the build has
// CUDA. None is copyable; all are movable. Creation returns a Status.
#ifndef JAGRANK_MODEL_CUDA_RESOURCES_H_
#define JAGRANK_MODEL_CUDA_RESOURCES_H_

#if JAGRANK_WITH_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "common/cuda_check.h"
#include "common/status.h"

namespace jagrank {

// A non-blocking stream; the destructor waits for its work, then destroys it.
class CudaStream {
 public:
  CudaStream() = default;
  CudaStream(CudaStream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~CudaStream() {
    if (s_ != nullptr) {
      cudaStreamSynchronize(s_);
      cudaStreamDestroy(s_);
    }
  }
  Status Create() {
    RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    return Status::Ok();
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() = default;
  CudaEvent(CudaEvent&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~CudaEvent() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Status Create(unsigned flags = cudaEventDefault) {
    RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&e_, flags));
    return Status::Ok();
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// A stream-ordered memory pool on one device that keeps what it was given
// (release threshold: everything), so per-batch allocations stop calling
// cudaMalloc once the largest batch has been seen.
class CudaMemPool {
 public:
  CudaMemPool() = default;
  CudaMemPool(CudaMemPool&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  CudaMemPool& operator=(CudaMemPool&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~CudaMemPool() {
    if (p_ != nullptr) cudaMemPoolDestroy(p_);
  }
  Status Create(int device) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    RETURN_IF_CUDA_ERROR(cudaMemPoolCreate(&p_, &props));
    uint64_t keep_everything = ~uint64_t{0};  // never trimmed at synchronisation
    RETURN_IF_CUDA_ERROR(cudaMemPoolSetAttribute(p_, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    return Status::Ok();
  }
  cudaMemPool_t get() const { return p_; }

 private:
  cudaMemPool_t p_ = nullptr;
};

// Device memory (cudaMalloc) or pinned host memory (cudaHostAlloc) that
// only grows: Reserve keeps the contents' room, never the contents.
template <bool kPinnedHost>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(CudaBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~CudaBuffer() { Free(); }
  // At least `bytes` (at least doubling when it grows). The old memory must
  // be idle: freeing may wait for the device.
  Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return Status::Ok();
    const size_t grown = std::max(bytes, bytes_ * 2);
    Free();
    if (kPinnedHost) {
      RETURN_IF_CUDA_ERROR(cudaHostAlloc(&p_, grown, cudaHostAllocDefault));
    } else {
      RETURN_IF_CUDA_ERROR(cudaMalloc(&p_, grown));
    }
    bytes_ = grown;
    return Status::Ok();
  }
  char* data() const { return static_cast<char*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void Free() {
    if (p_ == nullptr) return;
    if (kPinnedHost) {
      cudaFreeHost(p_);
    } else {
      cudaFree(p_);
    }
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = CudaBuffer<false>;
using PinnedBuffer = CudaBuffer<true>;

}  // namespace jagrank

#endif  // JAGRANK_WITH_CUDA

#endif  // JAGRANK_MODEL_CUDA_RESOURCES_H_
