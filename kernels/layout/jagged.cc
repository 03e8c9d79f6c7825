#include "kernels/layout/jagged.h"

#include <string>

namespace jagrank {

Status ValidateOffsets(const int32_t* offsets, int batch, const char* field, int64_t expected_total,
                       int64_t max_len) {
  const std::string name(field);
  if (offsets == nullptr) return Status::InvalidArgument(name + ": null (needs batch + 1 entries)");
  if (offsets[0] != 0) {
    return Status::InvalidArgument(name + "[0] = " + std::to_string(offsets[0]) + ", must be 0");
  }
  for (int b = 0; b < batch; ++b) {
    const int64_t len = int64_t{offsets[b + 1]} - offsets[b];
    if (len < 0) {
      return Status::InvalidArgument(name + " not non-decreasing: " + name + "[" + std::to_string(b + 1) +
                                     "] = " + std::to_string(offsets[b + 1]) + " < " + name + "[" +
                                     std::to_string(b) + "] = " + std::to_string(offsets[b]));
    }
    if (max_len >= 0 && len > max_len) {
      return Status::InvalidArgument(name + ": sequence " + std::to_string(b) + " has length " +
                                     std::to_string(len) + " > max " + std::to_string(max_len));
    }
  }
  if (expected_total >= 0 && offsets[batch] != expected_total) {
    return Status::InvalidArgument(name + "[" + std::to_string(batch) + "] = " + std::to_string(offsets[batch]) +
                                   ", must equal the value count " + std::to_string(expected_total));
  }
  return Status::Ok();
}

}  // namespace jagrank
