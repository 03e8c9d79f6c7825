#include "kernels/embedding/embedding.h"

#include <algorithm>

#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/layout/jagged.h"

namespace jagrank {

Status HistoryGatherCpu(const HistoryGatherParams& params) {
  const HistoryGatherParams& p = params;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.dim, 1, "dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.item_rows, 1, "item_rows"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_len, 1, "max_len"));
  RETURN_IF_ERROR(cpu::CheckDType(p.table_dtype, "table_dtype"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  RETURN_IF_ERROR(ValidateOffsets(p.offsets, p.batch, "offsets", -1, p.max_len));
  if (p.offsets[p.batch] == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.ids, "ids"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.item_table, "item_table"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.position_table, "position_table"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));
  if (p.out_dtype != DType::kFloat32) return Status::InvalidArgument("out_dtype: the CPU function writes float32 only");

  // Requests shared from a counter (their lengths vary), a thread per
  // kMinRowsPerThread rows of the batch.
  constexpr double kMinRowsPerThread = 1024;
  const int threads = ThreadsFor(p.offsets[p.batch], kMinRowsPerThread, p.num_threads);
  ParallelFor(p.batch, threads, [&](int64_t b) {
    const int32_t begin = p.offsets[b];
    const int32_t len = JaggedLen(p.offsets, static_cast<int>(b));
    for (int32_t j = 0; j < len; ++j) {
      float* out = static_cast<float*>(p.out) + int64_t{begin + j} * p.dim;
      cpu::CopyTableRow(p.item_table, p.table_dtype, IdToRow(p.ids[begin + j], p.item_rows), p.dim, out);
      cpu::AddTableRow(p.position_table, p.table_dtype, len - 1 - j, p.dim, out);  // P row 0 = most recent
    }
  });
  return Status::Ok();
}

}  // namespace jagrank
