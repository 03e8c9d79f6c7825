// Launchers of the embedding family (declared in embedding.h).
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/embedding/embedding_kernel.cuh"
#include "common/cuda_check.h"
#include "kernels/embedding/embedding.h"

namespace jagrank {
namespace {

Status CheckTable(const void* table, int64_t num_rows, int dim, const char* table_field, const char* rows_field) {
  if (table == nullptr) return Status::InvalidArgument(std::string(table_field) + ": null");
  if (num_rows <= 0) {
    return Status::InvalidArgument(std::string(rows_field) + " = " + std::to_string(num_rows) + ", must be > 0");
  }
  if (dim <= 0) return Status::InvalidArgument("dim = " + std::to_string(dim) + ", must be > 0");
  return Status::Ok();
}

}  // namespace

Status EmbeddingBagCuda(const EmbeddingBagParams& params, cudaStream_t stream) {
  if (params.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(params.batch) + ", must be >= 0");
  RETURN_IF_ERROR(CheckTable(params.table, params.num_rows, params.dim, "table", "num_rows"));
  if (params.batch == 0) return Status::Ok();
  if (params.offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
  if (params.out == nullptr) return Status::InvalidArgument("out: null");
  // ids may be null only when every bag is empty; the kernel then never reads it.
  const dim3 block = cuda::RowBlock(params.dim);
  const dim3 grid((params.batch + block.y - 1) / block.y);
  return cuda::DispatchDType(params.table_dtype, "table_dtype", [&](auto tag) {
    using T = decltype(tag);
    cuda::EmbeddingBagKernel<T><<<grid, block, 0, stream>>>(params);
    return CudaLaunchStatus("EmbeddingBagKernel");
  });
}

Status EmbeddingBagsCuda(const EmbeddingBagParams* bags, int count, cudaStream_t stream) {
  if (count < 0) return Status::InvalidArgument("count = " + std::to_string(count) + ", must be >= 0");
  if (count > 0 && bags == nullptr) return Status::InvalidArgument("bags: null");
  bool uniform = true;
  for (int i = 0; i < count; ++i) {
    const EmbeddingBagParams& p = bags[i];
    if (p.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(p.batch) + ", must be >= 0");
    RETURN_IF_ERROR(CheckTable(p.table, p.num_rows, p.dim, "table", "num_rows"));
    if (p.batch > 0 && p.offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
    if (p.batch > 0 && p.out == nullptr) return Status::InvalidArgument("out: null");
    uniform = uniform && p.table_dtype == bags[0].table_dtype && p.dim == bags[0].dim;
  }
  if (!uniform) {
    for (int i = 0; i < count; ++i) RETURN_IF_ERROR(EmbeddingBagCuda(bags[i], stream));
    return Status::Ok();
  }
  for (int first = 0; first < count; first += kMaxBagsPerLaunch) {
    EmbeddingBagSet set = {};
    set.count = std::min(kMaxBagsPerLaunch, count - first);
    int max_batch = 0;
    for (int i = 0; i < set.count; ++i) {
      set.bags[i] = bags[first + i];
      max_batch = std::max(max_batch, set.bags[i].batch);
    }
    if (max_batch == 0) continue;
    const dim3 block = cuda::RowBlock(bags[0].dim);
    const dim3 grid((max_batch + block.y - 1) / block.y, set.count);
    RETURN_IF_ERROR(cuda::DispatchDType(bags[0].table_dtype, "table_dtype", [&](auto tag) {
      using T = decltype(tag);
      cuda::EmbeddingBagsKernel<T><<<grid, block, 0, stream>>>(set);
      return CudaLaunchStatus("EmbeddingBagsKernel");
    }));
  }
  return Status::Ok();
}

Status GatherRowsCuda(const GatherRowsParams& params, cudaStream_t stream) {
  if (params.count < 0) return Status::InvalidArgument("count = " + std::to_string(params.count) + ", must be >= 0");
  RETURN_IF_ERROR(CheckTable(params.table, params.num_rows, params.dim, "table", "num_rows"));
  if (params.count == 0) return Status::Ok();
  if (params.ids == nullptr) return Status::InvalidArgument("ids: null");
  if (params.out == nullptr) return Status::InvalidArgument("out: null");
  const dim3 block = cuda::RowBlock(params.dim);
  const int64_t blocks = (params.count + block.y - 1) / block.y;
  if (blocks > 0x7fffffff) {
    return Status::InvalidArgument("count = " + std::to_string(params.count) + " is above the grid limit");
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  return cuda::DispatchDType(params.table_dtype, "table_dtype", [&](auto tag) {
    using T = decltype(tag);
    return cuda::DispatchDType(params.out_dtype, "out_dtype", [&](auto out_tag) {
      using OutT = decltype(out_tag);
      cuda::GatherRowsKernel<T, OutT><<<grid, block, 0, stream>>>(params);
      return CudaLaunchStatus("GatherRowsKernel");
    });
  });
}

Status HistoryGatherCuda(const HistoryGatherParams& params, cudaStream_t stream) {
  if (params.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(params.batch) + ", must be >= 0");
  RETURN_IF_ERROR(CheckTable(params.item_table, params.item_rows, params.dim, "item_table", "item_rows"));
  if (params.position_table == nullptr) return Status::InvalidArgument("position_table: null");
  if (params.max_len < 1) {
    return Status::InvalidArgument("max_len = " + std::to_string(params.max_len) + ", must be >= 1");
  }
  if (params.batch == 0) return Status::Ok();
  if (params.offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
  // ids and out hold T = offsets[batch] rows, unknown here: both may be null
  // (an empty tensor) when every history is empty; the kernel then reads and
  // writes nothing.
  if (params.longest < 0 || params.longest > params.max_len) {
    return Status::InvalidArgument("longest = " + std::to_string(params.longest) + ", must be in [0, max_len = " +
                                   std::to_string(params.max_len) + "]");
  }
  const int extent = params.longest > 0 ? params.longest : params.max_len;
  // Eight elements per thread where rows are whole 16-byte words (a warp per
  // two 128-wide tokens); else one element per thread.
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool vec8 = params.dim % 8 == 0 && params.dim / 8 <= 256 && aligned(params.item_table) &&
                    aligned(params.position_table) && aligned(params.out);
  const dim3 block = vec8 ? dim3(params.dim / 8, std::max(1, 256 / (params.dim / 8))) : cuda::RowBlock(params.dim);
  const int chunks = static_cast<int>((int64_t{extent} + block.y - 1) / block.y);
  if (chunks > cuda::kMaxGridYZ) {
    return Status::InvalidArgument("max_len = " + std::to_string(params.max_len) + " is above the grid limit " +
                                   std::to_string(int64_t{cuda::kMaxGridYZ} * block.y));
  }
  const dim3 grid(params.batch, chunks);
  return cuda::DispatchDType(params.table_dtype, "table_dtype", [&](auto tag) {
    using T = decltype(tag);
    return cuda::DispatchDType(params.out_dtype, "out_dtype", [&](auto out_tag) {
      if (vec8) {
        cuda::HistoryGatherVec8Kernel<T, decltype(out_tag)><<<grid, block, 0, stream>>>(params);
      } else {
        cuda::HistoryGatherKernel<T, decltype(out_tag)><<<grid, block, 0, stream>>>(params);
      }
      return CudaLaunchStatus("HistoryGatherKernel");
    });
  });
}

}  // namespace jagrank
