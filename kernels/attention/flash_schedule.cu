// Longest-first schedule of the bf16 flash attention: the one-CTA ordering
// kernel and its workspace, kept per (device, stream) so that no call
// allocates on the hot path.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/attention/flash_kernel.cuh"
#include "kernels/attention/flash_launch.h"

namespace jagrank {
namespace flash {
namespace {

// Sequences are bucketed by valid key count (kOrderKeysPerBucket keys per
// bucket, the last bucket open-ended) and written to order[] longest bucket
// first (order inside a bucket is arbitrary: each CTA's result does not
// depend on it). One CTA; the attention kernel then starts the CTAs of the
// longest sequences first, so that they do not form the tail of the launch.
constexpr int kOrderThreads = 1024;  // = the number of buckets
constexpr int kOrderKeysPerBucket = 16;

__global__ void __launch_bounds__(kOrderThreads) LongestFirstOrderKernel(const AttentionParams p, int* order) {
  __shared__ int s_next[kOrderThreads];  // bucket counts, then each bucket's next slot
  __shared__ int s_warp[kOrderThreads / 32];
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  auto bucket_of = [&](int b) {
    const int k_len = ValidKeyCount(p, b, p.k_offsets[b + 1] - p.k_offsets[b]);
    const int key_blocks = min((max(k_len, 0) + kOrderKeysPerBucket - 1) / kOrderKeysPerBucket, kOrderThreads - 1);
    return kOrderThreads - 1 - key_blocks;  // bucket 0: the longest
  };
  s_next[tid] = 0;
  __syncthreads();
  for (int b = tid; b < p.batch; b += kOrderThreads) atomicAdd(&s_next[bucket_of(b)], 1);
  __syncthreads();
  // Exclusive prefix sum of the counts: within each warp, then over warps.
  const int count = s_next[tid];
  int inclusive = count;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, inclusive, off);
    if (lane >= off) inclusive += y;
  }
  if (lane == 31) s_warp[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int total = s_warp[lane];
    int warp_inclusive = total;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, warp_inclusive, off);
      if (lane >= off) warp_inclusive += y;
    }
    s_warp[lane] = warp_inclusive - total;
  }
  __syncthreads();
  s_next[tid] = inclusive - count + s_warp[warp];
  __syncthreads();
  for (int b = tid; b < p.batch; b += kOrderThreads) order[atomicAdd(&s_next[bucket_of(b)], 1)] = b;
}

struct OrderWorkspace {
  int* data = nullptr;
  int64_t capacity = 0;  // ints
};

std::mutex& WorkspaceMutex() {
  static std::mutex mutex;
  return mutex;
}

// Never destroyed: buffers stay for the process's lifetime (a few KiB per
// stream), like a BLAS handle's workspace.
std::map<std::pair<int, cudaStream_t>, OrderWorkspace>& Workspaces() {
  static auto* workspaces = new std::map<std::pair<int, cudaStream_t>, OrderWorkspace>();
  return *workspaces;
}

}  // namespace

Status LaunchWithLongestFirstOrder(const AttentionParams& params, cudaStream_t stream, FlashOrderedLaunch launch) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  // Held until both kernels are queued: a caller that grows the buffer frees
  // the old one in stream order, after every kernel queued before it.
  std::lock_guard<std::mutex> lock(WorkspaceMutex());
  OrderWorkspace& workspace = Workspaces()[{device, stream}];
  if (workspace.capacity < params.batch) {
    int64_t capacity = 4096;
    while (capacity < params.batch) capacity *= 2;
    if (workspace.data != nullptr) {
      RETURN_IF_CUDA_ERROR(cudaFreeAsync(workspace.data, stream));
      workspace = OrderWorkspace{};
    }
    void* data = nullptr;
    RETURN_IF_CUDA_ERROR(cudaMallocAsync(&data, capacity * sizeof(int), stream));
    workspace.data = static_cast<int*>(data);
    workspace.capacity = capacity;
  }
  LongestFirstOrderKernel<<<1, kOrderThreads, 0, stream>>>(params, workspace.data);
  RETURN_IF_ERROR(CudaLaunchStatus("LongestFirstOrderKernel"));
  return launch(params, stream, workspace.data);
}

}  // namespace flash
}  // namespace jagrank
