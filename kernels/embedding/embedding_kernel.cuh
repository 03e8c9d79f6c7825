// Device code of the embedding families: bag sums, row gathers, history
// gathers with positions. Row-per-threadIdx.y, feature-per-threadIdx.x
// blocks (RowBlock): a warp reads consecutive features of one table row, so
// every table read is coalesced.
#ifndef JAGRANK_KERNELS_EMBEDDING_EMBEDDING_KERNEL_CUH_
#define JAGRANK_KERNELS_EMBEDDING_EMBEDDING_KERNEL_CUH_

#include "kernels/cuda_common.cuh"
#include "kernels/embedding/embedding_params.h"

namespace jagrank {
namespace cuda {

// Bag b = blockIdx.x * blockDim.y + threadIdx.y of `params`: out[b, c] =
// sum over the bag of table[row, c], summed in id order like the CPU
// reference. The rows of kLoadsInFlight ids are loaded before any is added
// (a bag's loads are independent; only the adds are ordered).
template <typename T>
__device__ __forceinline__ void EmbeddingBagRows(const EmbeddingBagParams& params) {
  constexpr int kLoadsInFlight = 4;
  const int b = blockIdx.x * blockDim.y + threadIdx.y;
  if (b >= params.batch) return;
  const T* table = static_cast<const T*>(params.table);
  const int begin = params.offsets[b];
  const int end = params.offsets[b + 1];
  float* out = params.out + static_cast<int64_t>(b) * params.dim;
  for (int c = threadIdx.x; c < params.dim; c += blockDim.x) {
    float sum = 0.0f;
    int i = begin;
    for (; i + kLoadsInFlight <= end; i += kLoadsInFlight) {
      float v[kLoadsInFlight];
#pragma unroll
      for (int j = 0; j < kLoadsInFlight; ++j) {
        v[j] = ToFloat(table[IdToRow(params.ids[i + j], params.num_rows) * params.dim + c]);
      }
#pragma unroll
      for (int j = 0; j < kLoadsInFlight; ++j) sum += v[j];
    }
    for (; i < end; ++i) sum += ToFloat(table[IdToRow(params.ids[i], params.num_rows) * params.dim + c]);
    out[c] = sum;
  }
}

// grid.x * blockDim.y >= batch.
template <typename T>
__global__ void EmbeddingBagKernel(const EmbeddingBagParams params) {
  EmbeddingBagRows<T>(params);
}

// Several bags of one dtype in one launch: bag set blockIdx.y.
// grid.x * blockDim.y >= the largest batch.
template <typename T>
__global__ void EmbeddingBagsKernel(const EmbeddingBagSet set) {
  EmbeddingBagRows<T>(set.bags[blockIdx.y]);
}

// grid.x * blockDim.y >= count.
template <typename T>
__global__ void GatherRowsKernel(const GatherRowsParams params) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (i >= params.count) return;
  const T* src = static_cast<const T*>(params.table) + IdToRow(params.ids[i], params.num_rows) * params.dim;
  float* out = params.out + i * params.dim;
  for (int c = threadIdx.x; c < params.dim; c += blockDim.x) out[c] = ToFloat(src[c]);
}

// grid = (batch, ceil(max_len / blockDim.y)): block (b, y) covers tokens
// j = y * blockDim.y + threadIdx.y of sequence b, so no thread searches the
// offsets. Position row L-1-j < max_len whenever len(b) <= max_len (REQUIRED).
template <typename T, typename OutT>
__global__ void HistoryGatherKernel(const HistoryGatherParams params) {
  const int b = blockIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  const int begin = params.offsets[b];
  const int len = params.offsets[b + 1] - begin;
  if (j >= len) return;
  const int position = len - 1 - j;
  if (position >= params.max_len) return;  // broken REQUIRES: stay in bounds
  const int64_t t = static_cast<int64_t>(begin) + j;
  const T* item = static_cast<const T*>(params.item_table) + IdToRow(params.ids[t], params.item_rows) * params.dim;
  const T* pos = static_cast<const T*>(params.position_table) + static_cast<int64_t>(position) * params.dim;
  OutT* out = static_cast<OutT*>(params.out) + t * params.dim;
  for (int c = threadIdx.x; c < params.dim; c += blockDim.x) out[c] = FromFloat<OutT>(ToFloat(item[c]) + ToFloat(pos[c]));
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_EMBEDDING_EMBEDDING_KERNEL_CUH_
