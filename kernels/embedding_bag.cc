#include "kernels/embedding_bag.h"

#include "kernels/cpu_common.h"
#include "kernels/jagged.h"

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
  if (p.count == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.ids, "ids"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.table, "table"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.out, "out"));

  for (int64_t c = 0; c < p.count; ++c) {
    cpu::CopyTableRow(p.table, p.table_dtype, IdToRow(p.ids[c], p.num_rows), p.dim, p.out + c * p.dim);
  }
  return Status::Ok();
}

}  // namespace jagrank
