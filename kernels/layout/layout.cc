#include "kernels/layout/layout.h"

#include <cstring>

#include "kernels/cpu_common.h"
#include "kernels/layout/jagged.h"

namespace jagrank {
namespace {

template <typename P>
Status ValidateConversion(const P& p, const void* jagged, const char* jagged_field, const void* padded,
                          const char* padded_field) {
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_len, 0, "max_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.width, 1, "width"));
  RETURN_IF_ERROR(cpu::CheckDType(p.dtype, "dtype"));
  RETURN_IF_ERROR(ValidateOffsets(p.offsets, p.batch, "offsets", -1, p.max_len));
  if (p.offsets[p.batch] > 0) RETURN_IF_ERROR(cpu::CheckNotNull(jagged, jagged_field));
  if (int64_t{p.batch} * p.max_len > 0) RETURN_IF_ERROR(cpu::CheckNotNull(padded, padded_field));
  return Status::Ok();
}

}  // namespace

Status JaggedToPaddedCpu(const JaggedToPaddedParams& params) {
  const JaggedToPaddedParams& p = params;
  RETURN_IF_ERROR(ValidateConversion(p, p.values, "values", p.padded, "padded"));
  const size_t token_bytes = static_cast<size_t>(p.width) * DTypeSize(p.dtype);
  const char* src = static_cast<const char*>(p.values);
  char* dst = static_cast<char*>(p.padded);
  for (int b = 0; b < p.batch; ++b) {
    const size_t len = JaggedLen(p.offsets, b);
    char* row = dst + static_cast<size_t>(b) * p.max_len * token_bytes;
    if (len > 0) std::memcpy(row, src + static_cast<size_t>(p.offsets[b]) * token_bytes, len * token_bytes);
    std::memset(row + len * token_bytes, 0, (p.max_len - len) * token_bytes);  // zero bits = 0.0 in both dtypes
  }
  return Status::Ok();
}

Status PaddedToJaggedCpu(const PaddedToJaggedParams& params) {
  const PaddedToJaggedParams& p = params;
  RETURN_IF_ERROR(ValidateConversion(p, p.values, "values", p.padded, "padded"));
  const size_t token_bytes = static_cast<size_t>(p.width) * DTypeSize(p.dtype);
  const char* src = static_cast<const char*>(p.padded);
  char* dst = static_cast<char*>(p.values);
  for (int b = 0; b < p.batch; ++b) {
    const size_t len = JaggedLen(p.offsets, b);
    if (len == 0) continue;
    std::memcpy(dst + static_cast<size_t>(p.offsets[b]) * token_bytes,
                src + static_cast<size_t>(b) * p.max_len * token_bytes, len * token_bytes);
  }
  return Status::Ok();
}

Status RepeatRowsCpu(const RepeatRowsParams& params) {
  const RepeatRowsParams& p = params;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_len, 0, "max_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.width, 1, "width"));
  RETURN_IF_ERROR(cpu::CheckDType(p.dtype, "dtype"));
  RETURN_IF_ERROR(ValidateOffsets(p.offsets, p.batch, "offsets", -1, p.max_len));
  if (p.offsets[p.batch] == 0) return Status::Ok();
  RETURN_IF_ERROR(cpu::CheckNotNull(p.rows, "rows"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.values, "values"));
  const size_t row_bytes = static_cast<size_t>(p.width) * DTypeSize(p.dtype);
  const char* src = static_cast<const char*>(p.rows);
  char* dst = static_cast<char*>(p.values);
  for (int b = 0; b < p.batch; ++b) {
    for (int32_t i = p.offsets[b]; i < p.offsets[b + 1]; ++i) {
      std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(b) * row_bytes, row_bytes);
    }
  }
  return Status::Ok();
}

}  // namespace jagrank
