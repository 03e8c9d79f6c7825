// JaggedAttentionCuda: argument checks, then the (dtype, head_dim) dispatch
// to the kernel flash_tile_size.h chooses among the compiled instantiations.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/attention/flash_dispatch.h"
#include "kernels/attention/flash_launch.h"
#include "kernels/attention/flash_tile_size.h"

namespace jagrank {
namespace {

Status CheckStride(int64_t stride, const char* field, const AttentionParams& params) {
  const int64_t needed = static_cast<int64_t>(params.num_heads) * params.head_dim;
  if (stride < needed) {
    return Status::InvalidArgument(std::string(field) + " " + std::to_string(stride) +
                                   " is below num_heads * head_dim = " + std::to_string(needed));
  }
  // bf16 tiles move in 16-byte cp.async chunks: rows must start 16-byte aligned.
  if (params.dtype == DType::kBFloat16 && stride % 8 != 0) {
    return Status::InvalidArgument(std::string(field) + " " + std::to_string(stride) +
                                   " must be a multiple of 8 elements for bfloat16 (16-byte rows)");
  }
  return Status::Ok();
}

Status CheckPointer(const void* ptr, const char* field, const AttentionParams& params) {
  if (ptr == nullptr) return Status::InvalidArgument(std::string(field) + " is null");
  if (params.dtype == DType::kBFloat16 && reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return Status::InvalidArgument(std::string(field) + " must be 16-byte aligned for bfloat16");
  }
  return Status::Ok();
}

Status ValidateParams(const AttentionParams& params) {
  if (params.batch < 0) return Status::InvalidArgument("batch " + std::to_string(params.batch) + " < 0");
  if (params.num_heads < 1) {
    return Status::InvalidArgument("num_heads " + std::to_string(params.num_heads) + " < 1");
  }
  if (params.max_q_len < 0 || params.max_k_len < 0) {
    return Status::InvalidArgument("max_q_len / max_k_len must be >= 0");
  }
  if (params.q_tokens_hint < 0) {
    return Status::InvalidArgument("q_tokens_hint " + std::to_string(params.q_tokens_hint) +
                                   " < 0 (the query token count, or 0 if unknown)");
  }
  if (!(params.softmax_scale >= 0.f) || !std::isfinite(params.softmax_scale)) {
    return Status::InvalidArgument("softmax_scale must be finite and >= 0 for the CUDA attention");
  }
  // Nothing to read or write (no sequences, or no queries in any): every
  // pointer may be null, as PyTorch's are for empty tensors.
  if (params.batch == 0 || params.max_q_len == 0) return Status::Ok();
  if (params.q_offsets == nullptr) return Status::InvalidArgument("q_offsets is null");
  if (params.k_offsets == nullptr) return Status::InvalidArgument("k_offsets is null");
  RETURN_IF_ERROR(CheckPointer(params.q, "q", params));
  RETURN_IF_ERROR(CheckPointer(params.o, "o", params));
  // No keys in any sequence: k and v are never read (the rows are zeros).
  if (params.max_k_len > 0) {
    RETURN_IF_ERROR(CheckPointer(params.k, "k", params));
    RETURN_IF_ERROR(CheckPointer(params.v, "v", params));
  }
  RETURN_IF_ERROR(CheckStride(params.q_row_stride, "q_row_stride", params));
  RETURN_IF_ERROR(CheckStride(params.k_row_stride, "k_row_stride", params));
  RETURN_IF_ERROR(CheckStride(params.v_row_stride, "v_row_stride", params));
  RETURN_IF_ERROR(CheckStride(params.o_row_stride, "o_row_stride", params));
  // One CTA per (sequence, head, 16-row query tile at most) must fit the grid.
  const int64_t max_ctas = static_cast<int64_t>(params.batch) * params.num_heads * ((params.max_q_len + 15) / 16);
  if (max_ctas > INT32_MAX) {
    return Status::InvalidArgument("batch * num_heads * max_q_len / 16 exceeds the CUDA grid (2^31 - 1)");
  }
  return Status::Ok();
}

#if JAGRANK_FLASH_WGMMA

// True when the current device has compute capability 9.0 (sm_90a code runs
// there only). Cached per device ordinal.
bool CurrentDeviceIsSm90() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0 unknown, 1 yes, 2 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return false;
  if (device < kMaxDevices) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known == 1;
  }
  int major = 0, minor = 0;
  const bool sm90 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                    major == 9 && minor == 0;
  if (device < kMaxDevices) cache[device].store(sm90 ? 1 : 2, std::memory_order_relaxed);
  return sm90;
}
#endif

// The bf16 kernel ChooseFlashKernel names, among the compiled instantiations.
template <int kHeadDim>
Status LaunchBf16(const AttentionParams& params, cudaStream_t stream) {
  using flash::FlashArch;
  using flash::FlashHasLongKeysTile;
  const flash::FlashKernel kernel =
      flash::ChooseFlashKernel(FlashWgmmaAvailable(), kHeadDim, params.max_q_len, params.max_k_len);
#if JAGRANK_FLASH_WGMMA
  if (kernel.arch == FlashArch::kSm90) {
    if constexpr (FlashHasLongKeysTile(FlashArch::kSm90, kHeadDim)) {
      if (kernel.long_keys) return flash::LaunchFlashSm90<kHeadDim, true>(params, stream);
    }
    return flash::LaunchFlashSm90<kHeadDim, false>(params, stream);
  }
#endif
  if constexpr (FlashHasLongKeysTile(FlashArch::kSm80, kHeadDim)) {
    if (kernel.long_keys) return flash::LaunchFlashSm80<kHeadDim, true>(params, stream);
  }
  return flash::LaunchFlashSm80<kHeadDim, false>(params, stream);
}

}  // namespace

bool FlashWgmmaAvailable() {
#if JAGRANK_FLASH_WGMMA
  return CurrentDeviceIsSm90();
#else
  return false;
#endif
}

Status JaggedAttentionCuda(const AttentionParams& params, cudaStream_t stream) {
  // The head dim is checked first so that an unsupported one reads as such
  // even when other fields are also off.
  RETURN_IF_ERROR(DispatchHeadDim(params.head_dim, [](auto) { return Status::Ok(); }));
  RETURN_IF_ERROR(ValidateParams(params));
  if (params.batch == 0 || params.max_q_len == 0) return Status::Ok();
  return DispatchDType(params.dtype, [&](auto dtype) {
    return DispatchHeadDim(params.head_dim, [&](auto head_dim) {
      constexpr int kHeadDim = decltype(head_dim)::value;
      if constexpr (decltype(dtype)::value == DType::kBFloat16) {
        return LaunchBf16<kHeadDim>(params, stream);
      } else {
        return flash::LaunchFlashFp32<kHeadDim>(params, stream);
      }
    });
  });
}

}  // namespace jagrank
