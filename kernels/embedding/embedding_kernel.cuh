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
template <typename T, typename OutT>
__global__ void GatherRowsKernel(const GatherRowsParams params) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (i >= params.count) return;
  const T* src = static_cast<const T*>(params.table) + IdToRow(params.ids[i], params.num_rows) * params.dim;
  OutT* out = static_cast<OutT*>(params.out) + i * params.dim;
  for (int c = threadIdx.x; c < params.dim; c += blockDim.x) out[c] = FromFloat<OutT>(ToFloat(src[c]));
}

// grid = (batch, ceil(max_len / blockDim.y)): block (b, y) covers tokens
// j = y * blockDim.y + threadIdx.y of sequence b, so no thread searches the
// offsets. Position row L-1-j < max_len whenever len(b) <= max_len (REQUIRED).
// Eight consecutive elements as float32: one 16-byte load of bf16, two of
// float32 (REQUIRES 16-byte aligned p).
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 word = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&word);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Load8(const float* p, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void Store8(__nv_bfloat16* p, const float (&v)[8]) {
  uint4 word;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&word);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = word;
}
__device__ __forceinline__ void Store8(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// HistoryGatherKernel's work with eight elements per thread (dim % 8 == 0,
// 16-byte aligned tables and out): blockDim.x = dim / 8 threads per token,
// blockDim.y tokens; the same grid. A 128-wide bf16 row is 16 threads of one
// 16-byte load from each table, against 128 two-byte loads.
template <typename T, typename OutT>
__global__ void HistoryGatherVec8Kernel(const HistoryGatherParams params) {
  const int b = blockIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  const int begin = params.offsets[b];
  const int len = params.offsets[b + 1] - begin;
  if (j >= len) return;
  const int position = len - 1 - j;
  if (position >= params.max_len) return;  // broken REQUIRES: stay in bounds
  const int64_t t = static_cast<int64_t>(begin) + j;
  const int c = threadIdx.x * 8;
  const T* item = static_cast<const T*>(params.item_table) + IdToRow(params.ids[t], params.item_rows) * params.dim;
  const T* pos = static_cast<const T*>(params.position_table) + static_cast<int64_t>(position) * params.dim;
  float a[8], p[8];
  Load8(item + c, a);
  Load8(pos + c, p);
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] += p[i];
  Store8(static_cast<OutT*>(params.out) + t * params.dim + c, a);
}

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
  for (int c = threadIdx.x; c < params.dim; c += blockDim.x)
    out[c] = FromFloat<OutT>(ToFloat(item[c]) + ToFloat(pos[c]));
}

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_EMBEDDING_EMBEDDING_KERNEL_CUH_
