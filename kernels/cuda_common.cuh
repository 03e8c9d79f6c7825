// Device helpers shared by the CUDA kernels of kernels/ (not the flash
// kernels): element conversion, id -> row, and the one dtype dispatch.
// Included only from .cu files.
#ifndef JAGRANK_KERNELS_CUDA_COMMON_CUH_
#define JAGRANK_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "common/status.h"

namespace jagrank {
namespace cuda {

__device__ __forceinline__ float ToFloat(float value) { return value; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename T>
__device__ __forceinline__ T FromFloat(float value);
template <>
__device__ __forceinline__ float FromFloat<float>(float value) { return value; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// The embedding row of `id` (docs/model.md): two's-complement cast, then modulo.
__device__ __forceinline__ int64_t IdToRow(int64_t id, int64_t num_rows) {
  return static_cast<int64_t>(static_cast<uint64_t>(id) % static_cast<uint64_t>(num_rows));
}

// Runtime dtype -> element type. `fn` is a generic lambda taking a value of
// the element type as a tag: `[&](auto tag) { using T = decltype(tag); ... }`.
// The only place where DType becomes a C++ type for these kernels; the
// default case reports the unsupported value, naming `field`.
template <typename Fn>
Status DispatchDType(DType dtype, const char* field, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kBFloat16: return fn(__nv_bfloat16{});
  }
  return Status::Unimplemented(std::string(field) + ": unsupported dtype value " +
                               std::to_string(static_cast<int>(dtype)));
}

// Threads along the feature dimension for row-copy style kernels: a warp
// multiple covering `dim` up to 128; more rows per block fill it to 256.
struct RowBlockTraits {
  static constexpr int kMaxThreadsX = 128;
  static constexpr int kThreadsPerBlock = 256;
  static_assert(kThreadsPerBlock % kMaxThreadsX == 0, "rows per block must be a whole number");
};

inline dim3 RowBlock(int dim) {
  int x = ((dim + 31) / 32) * 32;
  if (x > RowBlockTraits::kMaxThreadsX) x = RowBlockTraits::kMaxThreadsX;
  return dim3(x, RowBlockTraits::kThreadsPerBlock / x, 1);
}

// Largest grid.y / grid.z the hardware accepts.
constexpr int kMaxGridYZ = 65535;

}  // namespace cuda
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CUDA_COMMON_CUH_
