// Internal to the CPU kernels (kernels/*.cc): argument checks that name the
// field, and reading table rows of either dtype as float32. Not an API.
#ifndef JAGRANK_KERNELS_CPU_COMMON_H_
#define JAGRANK_KERNELS_CPU_COMMON_H_

#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "common/status.h"

// __attribute__((target_clones(...))) where it is safe: the clones resolve
// through an ifunc that the dynamic loader runs before a sanitizer's runtime
// is up (a ThreadSanitizer build crashes at load), so sanitizer builds
// (CMake JAGRANK_SANITIZER, which defines JAGRANK_NO_TARGET_CLONES, or a
// compiler's own sanitizer macro) get the default version only.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define JAGRANK_NO_TARGET_CLONES 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define JAGRANK_NO_TARGET_CLONES 1
#endif
#endif
#if defined(JAGRANK_NO_TARGET_CLONES)
#define JAGRANK_TARGET_CLONES(...)
#else
#define JAGRANK_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif

namespace jagrank {
namespace cpu {

inline Status CheckNotNull(const void* ptr, const char* field) {
  if (ptr == nullptr) return Status::InvalidArgument(std::string(field) + ": null pointer");
  return Status::Ok();
}

// value >= min_value, else "field = value, must be >= min_value".
inline Status CheckAtLeast(int64_t value, int64_t min_value, const char* field) {
  if (value < min_value) {
    return Status::InvalidArgument(std::string(field) + " = " + std::to_string(value) + ", must be >= " +
                                   std::to_string(min_value));
  }
  return Status::Ok();
}

inline Status CheckFloat32(DType dtype, const char* field) {
  if (dtype != DType::kFloat32) {
    return Status::InvalidArgument(std::string(field) + " = " + DTypeName(dtype) +
                                   ", the CPU kernel supports float32 only");
  }
  return Status::Ok();
}

inline Status CheckDType(DType dtype, const char* field) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    return Status::InvalidArgument(std::string(field) + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  return Status::Ok();
}

// dst[i] += row[i] for row `row` of a [*, dim] table of `dtype`.
inline void AddTableRow(const void* table, DType dtype, int64_t row, int dim, float* dst) {
  if (dtype == DType::kBFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(table) + row * dim;
    for (int i = 0; i < dim; ++i) dst[i] += BFloat16ToFloat(src[i]);
  } else {
    const float* src = static_cast<const float*>(table) + row * dim;
    for (int i = 0; i < dim; ++i) dst[i] += src[i];
  }
}

// dst[i] = row[i].
inline void CopyTableRow(const void* table, DType dtype, int64_t row, int dim, float* dst) {
  for (int i = 0; i < dim; ++i) dst[i] = 0.0f;
  AddTableRow(table, dtype, row, dim, dst);
}

}  // namespace cpu
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CPU_COMMON_H_
