#include "kernels/embedding/embedding.h"

#include <algorithm>

#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/layout/jagged.h"

namespace jagrank {

Status EmbeddingBagCpu(const EmbeddingBagParams& params) {
  const EmbeddingBagParams& p = params;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.dim, 1, "dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_rows, 1, "num_rows"));
  RETURN_IF_ERROR(cpu::CheckDType(p.table_dtype, "table_dtype"));
  RETURN_IF_ERROR(ValidateOffsets(p.offsets, p.batch, "offsets"));
  if (p.offsets[p.batch] > 0) {
    RETURN_IF_ERROR(cpu::CheckNotNull(p.ids, "ids"));
    RETURN_IF_ERROR(cpu::CheckNotNull(p.table, "table"));
  }
  if (p.batch > 0) RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));

  for (int b = 0; b < p.batch; ++b) {
    float* out = p.out + int64_t{b} * p.dim;
    for (int i = 0; i < p.dim; ++i) out[i] = 0.0f;
    for (int32_t i = p.offsets[b]; i < p.offsets[b + 1]; ++i) {
      cpu::AddTableRow(p.table, p.table_dtype, IdToRow(p.ids[i], p.num_rows), p.dim, out);
    }
  }
  return Status::Ok();
}

Status GatherRowsCpu(const GatherRowsParams& params) {
  const GatherRowsParams& p = params;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.count, 0, "count"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.dim, 1, "dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_rows, 1, "num_rows"));
  RETURN_IF_ERROR(cpu::CheckDType(p.table_dtype, "table_dtype"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  if (p.count == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.ids, "ids"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.table, "table"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));
  if (p.out_dtype != DType::kFloat32) {
    return Status::InvalidArgument(std::string("out_dtype = ") + DTypeName(p.out_dtype) +
                                   ": the CPU gather writes float32");
  }
  float* out = static_cast<float*>(p.out);

  // Random rows of a large table: each thread keeps its own cache misses in
  // flight. Blocks of rows, a thread per kMinRowsPerThread.
  constexpr double kMinRowsPerThread = 1024;
  const int threads = ThreadsFor(static_cast<double>(p.count), kMinRowsPerThread, p.num_threads);
  const int64_t per_block = (p.count + threads - 1) / threads;
  ParallelFor((p.count + per_block - 1) / per_block, threads, [&](int64_t block) {
    for (int64_t c = block * per_block; c < std::min(p.count, (block + 1) * per_block); ++c) {
      cpu::CopyTableRow(p.table, p.table_dtype, IdToRow(p.ids[c], p.num_rows), p.dim, out + c * p.dim);
    }
  });
  return Status::Ok();
}

}  // namespace jagrank
