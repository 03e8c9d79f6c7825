// Runtime head_dim / dtype -> compile-time template arguments, in one place.
// Host-only; included by flash_attention_launch.cu. The cases must match
// kFlashSupportedHeadDims (attention.h; a static_assert below checks it).
//
//   return DispatchHeadDim(params.head_dim, [&](auto head_dim) {
//     return LaunchBf16<decltype(head_dim)::value>(params, stream);
//   });
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_DISPATCH_H_
#define JAGRANK_KERNELS_ATTENTION_FLASH_DISPATCH_H_

#include <string>
#include <type_traits>

#include "common/status.h"
#include "kernels/attention/attention.h"
#include "kernels/dtype.h"

namespace jagrank {

static_assert(sizeof(kFlashSupportedHeadDims) / sizeof(int) == 3 && kFlashSupportedHeadDims[0] == 32 &&
                  kFlashSupportedHeadDims[1] == 64 && kFlashSupportedHeadDims[2] == 128,
              "DispatchHeadDim's cases must be kFlashSupportedHeadDims");

template <typename Fn>
Status DispatchHeadDim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 32: return fn(std::integral_constant<int, 32>{});
    case 64: return fn(std::integral_constant<int, 64>{});
    case 128: return fn(std::integral_constant<int, 128>{});
    default: {
      std::string supported;
      for (int d : kFlashSupportedHeadDims) supported += (supported.empty() ? "" : ", ") + std::to_string(d);
      return Status::Unimplemented("head_dim " + std::to_string(head_dim) +
                                   " is not supported by the CUDA attention (supported: " + supported + ")");
    }
  }
}

template <typename Fn>
Status DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kBFloat16: return fn(std::integral_constant<DType, DType::kBFloat16>{});
    case DType::kFloat32: return fn(std::integral_constant<DType, DType::kFloat32>{});
  }
  return Status::Unimplemented("dtype " + std::to_string(static_cast<int>(dtype)) +
                               " is not supported by the CUDA attention (supported: float32, bfloat16)");
}

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_DISPATCH_H_
