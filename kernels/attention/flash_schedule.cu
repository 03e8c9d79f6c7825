// Longest-first schedule of the bf16 flash attention: the one-CTA ordering
// kernel (the sequences' order, and the wgmma kernel's tile list) and its workspace, kept per (device, stream) so that no call
// allocates on the hot path.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
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
constexpr int kOrderWarps = kOrderThreads / 32;
constexpr int kOrderKeysPerBucket = 16;

// Exclusive prefix sum of `value` over the CTA's kOrderThreads threads in
// thread order; *total: the sum. s_scan: kOrderWarps + 1 ints. Every thread
// of the CTA calls it.
__device__ int OrderBlockExclusiveSum(int value, int* s_scan, int* total) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int inclusive = value;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, inclusive, off);
    if (lane >= off) inclusive += y;
  }
  if (lane == 31) s_scan[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int warp_total = s_scan[lane];
    int warp_inclusive = warp_total;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, warp_inclusive, off);
      if (lane >= off) warp_inclusive += y;
    }
    s_scan[lane] = warp_inclusive - warp_total;
    if (lane == 31) s_scan[kOrderWarps] = warp_inclusive;
  }
  __syncthreads();
  const int exclusive = inclusive - value + s_scan[warp];
  *total = s_scan[kOrderWarps];
  __syncthreads();  // s_scan may be reused
  return exclusive;
}

// Writes order[] and, where tiles is not null, the tile list of the wgmma
// kernel's persistent launch (flash_wgmma_kernel.cuh): tiles[0] the count,
// tiles[1] = 0 (none taken), from tiles[2] each query tile of tile_block_m
// rows of each head of each sequence, in order[], as its FlashGrid index.
__global__ void __launch_bounds__(kOrderThreads)
    LongestFirstOrderKernel(const AttentionParams p, int* order, int tile_block_m, int* tiles) {
  static_assert(kOrderWarps == 32, "the warp totals are scanned by one warp");
  __shared__ int s_next[kOrderThreads];  // bucket counts, then each bucket's next slot
  __shared__ int s_scan[kOrderWarps + 1];
  const int tid = threadIdx.x;
  auto bucket_of = [&](int b) {
    const int k_len = ValidKeyCount(p, b, p.k_offsets[b + 1] - p.k_offsets[b]);
    const int key_blocks = min((max(k_len, 0) + kOrderKeysPerBucket - 1) / kOrderKeysPerBucket, kOrderThreads - 1);
    return kOrderThreads - 1 - key_blocks;  // bucket 0: the longest
  };
  s_next[tid] = 0;
  __syncthreads();
  for (int b = tid; b < p.batch; b += kOrderThreads) atomicAdd(&s_next[bucket_of(b)], 1);
  __syncthreads();
  const int count = s_next[tid];
  int unused_total = 0;
  s_next[tid] = OrderBlockExclusiveSum(count, s_scan, &unused_total);
  __syncthreads();
  for (int b = tid; b < p.batch; b += kOrderThreads) order[atomicAdd(&s_next[bucket_of(b)], 1)] = b;
  if (tiles == nullptr) return;
  __syncthreads();  // order[] is written (and visible to the CTA)
  // Thread tid lists the tiles of ranks [first, last) of order[]; a
  // sequence's query blocks past max_q_len are not listed (nor launched by
  // the grid launch), whatever its length.
  const int m_blocks = (p.max_q_len + tile_block_m - 1) / tile_block_m;
  const int per_thread = (p.batch + kOrderThreads - 1) / kOrderThreads;
  const int first = min(tid * per_thread, p.batch);
  const int last = min(first + per_thread, p.batch);
  auto q_blocks = [&](int b) {
    const int q_len = p.q_offsets[b + 1] - p.q_offsets[b];
    return min((max(q_len, 0) + tile_block_m - 1) / tile_block_m, m_blocks);
  };
  int mine = 0;
  for (int r = first; r < last; ++r) mine += q_blocks(order[r]) * p.num_heads;
  int total = 0;
  int pos = 2 + OrderBlockExclusiveSum(mine, s_scan, &total);
  for (int r = first; r < last; ++r) {
    const int b = order[r];
    const int blocks = q_blocks(b);
    for (int h = 0; h < p.num_heads; ++h) {
      for (int m = 0; m < blocks; ++m) tiles[pos++] = (b * p.num_heads + h) * m_blocks + m;
    }
  }
  if (tid == 0) {
    tiles[0] = total;
    tiles[1] = 0;
  }
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

// Grids of more tiles keep one CTA per tile: the list would take more than
// 16 MiB of workspace.
constexpr int64_t kMaxListedTiles = int64_t{1} << 22;

}  // namespace

Status FlashScheduleFromEnv(FlashScheduleMode* mode) {
  const char* schedule = std::getenv("JAGRANK_FLASH_SCHEDULE");
  *mode = FlashScheduleMode::kAuto;
  if (schedule == nullptr || std::strcmp(schedule, "auto") == 0) return Status::Ok();
  if (std::strcmp(schedule, "grid") == 0) {
    *mode = FlashScheduleMode::kGrid;
  } else if (std::strcmp(schedule, "persistent") == 0) {
    *mode = FlashScheduleMode::kPersistent;
  } else {
    return Status::InvalidArgument(std::string("JAGRANK_FLASH_SCHEDULE='") + schedule +
                                   "': expected auto, grid or persistent (or unset)");
  }
  return Status::Ok();
}

Status LaunchWithLongestFirstOrder(const AttentionParams& params, cudaStream_t stream, int tile_block_m,
                                   FlashOrderedLaunch launch) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  int64_t listed_tiles = 0;
  if (tile_block_m > 0) {
    listed_tiles = static_cast<int64_t>((params.max_q_len + tile_block_m - 1) / tile_block_m) * params.batch *
                   params.num_heads;
    if (listed_tiles > kMaxListedTiles) listed_tiles = 0;
  }
  // order[batch], then the tile list (2 + listed_tiles ints) where listed.
  const int64_t needed = params.batch + (listed_tiles > 0 ? 2 + listed_tiles : 0);
  // Held until both kernels are queued: a caller that grows the buffer frees
  // the old one in stream order, after every kernel queued before it.
  std::lock_guard<std::mutex> lock(WorkspaceMutex());
  OrderWorkspace& workspace = Workspaces()[{device, stream}];
  if (workspace.capacity < needed) {
    int64_t capacity = 4096;
    while (capacity < needed) capacity *= 2;
    if (workspace.data != nullptr) {
      RETURN_IF_CUDA_ERROR(cudaFreeAsync(workspace.data, stream));
      workspace = OrderWorkspace{};
    }
    void* data = nullptr;
    RETURN_IF_CUDA_ERROR(cudaMallocAsync(&data, capacity * sizeof(int), stream));
    workspace.data = static_cast<int*>(data);
    workspace.capacity = capacity;
  }
  FlashSchedule schedule;
  schedule.maybe_order = workspace.data;
  schedule.maybe_tiles = listed_tiles > 0 ? workspace.data + params.batch : nullptr;
  LongestFirstOrderKernel<<<1, kOrderThreads, 0, stream>>>(params, workspace.data, tile_block_m,
                                                           schedule.maybe_tiles);
  RETURN_IF_ERROR(CudaLaunchStatus("LongestFirstOrderKernel"));
  return launch(params, stream, schedule);
}

}  // namespace flash
}  // namespace jagrank
