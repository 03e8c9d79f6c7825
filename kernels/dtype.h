// Element types of kernel operands. Strides and sizes everywhere count
// elements of the operand's DType, never bytes.
#ifndef JAGRANK_KERNELS_DTYPE_H_
#define JAGRANK_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace jagrank {

enum class DType { kFloat32, kBFloat16 };

// Bytes per element: 4 for kFloat32, 2 for kBFloat16.
inline size_t DTypeSize(DType dtype) { return dtype == DType::kBFloat16 ? 2 : 4; }

// "float32" / "bfloat16" (for error messages and logs).
inline const char* DTypeName(DType dtype) { return dtype == DType::kBFloat16 ? "bfloat16" : "float32"; }

// Host-side bfloat16 conversions (bits in a uint16_t), used by the CPU
// kernels to read bf16 tables and by tests to build bf16 inputs.
inline float BFloat16ToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t FloatToBFloat16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((word >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_DTYPE_H_
