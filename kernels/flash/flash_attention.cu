// JaggedAttentionCuda: argument checks, then the (dtype, head_dim) dispatch
// to one of the compiled launchers.
#include "kernels/flash/flash_attention.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/flash/flash_dispatch.h"
#include "kernels/flash/flash_launch.h"

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
  if (!(params.softmax_scale >= 0.f) || !std::isfinite(params.softmax_scale)) {
    return Status::InvalidArgument("softmax_scale must be finite and >= 0 for the CUDA attention");
  }
  if (params.batch == 0) return Status::Ok();
  if (params.q_offsets == nullptr) return Status::InvalidArgument("q_offsets is null");
  if (params.k_offsets == nullptr) return Status::InvalidArgument("k_offsets is null");
  RETURN_IF_ERROR(CheckPointer(params.q, "q", params));
  RETURN_IF_ERROR(CheckPointer(params.k, "k", params));
  RETURN_IF_ERROR(CheckPointer(params.v, "v", params));
  RETURN_IF_ERROR(CheckPointer(params.o, "o", params));
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

// Which bf16 kernel runs, from JAGRANK_FLASH_KERNEL (read per call, so that
// tests and benchmarks can switch within one process): unset or "auto" =
// on compute capability 9.0 devices of an sm_90a build, wgmma where
// flash::WgmmaIsDefault says so (head dim, queries per sequence), mma.sync
// otherwise; "mma_sync" = always mma.sync; "wgmma" / "wgmma_alt" = the Hopper
// kernel with FlashWgmmaConfig's Traits / AltTraits for every head dim where
// it can run.
// "wgmma_v<i>": FlashWgmmaConfig's Candidates[i], "mma_sync_v<i>":
// FlashBf16Config's Candidates[i] (A/B runs; mma_sync_v<i> in every build).
enum class Bf16Kernel { kAuto, kMmaSync, kWgmma, kWgmmaAlt, kWgmmaCandidate, kMmaSyncCandidate };

Bf16Kernel Bf16KernelFromEnvironment(int* candidate) {
  const char* value = std::getenv("JAGRANK_FLASH_KERNEL");
  if (value == nullptr) return Bf16Kernel::kAuto;
  if (std::strcmp(value, "mma_sync") == 0) return Bf16Kernel::kMmaSync;
  if (std::strcmp(value, "wgmma") == 0) return Bf16Kernel::kWgmma;
  if (std::strcmp(value, "wgmma_alt") == 0) return Bf16Kernel::kWgmmaAlt;
  if (std::strncmp(value, "wgmma_v", 7) == 0 && value[7] >= '0' && value[7] <= '9' && value[8] == '\0') {
    *candidate = value[7] - '0';
    return Bf16Kernel::kWgmmaCandidate;
  }
  if (std::strncmp(value, "mma_sync_v", 10) == 0 && value[10] >= '0' && value[10] <= '9' && value[11] == '\0') {
    *candidate = value[10] - '0';
    return Bf16Kernel::kMmaSyncCandidate;
  }
  return Bf16Kernel::kAuto;
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

template <int kHeadDim>
Status LaunchBf16(const AttentionParams& params, cudaStream_t stream) {
  int candidate = 0;
  const Bf16Kernel kernel = Bf16KernelFromEnvironment(&candidate);
  if (kernel == Bf16Kernel::kMmaSyncCandidate) return flash::LaunchFlashBf16Candidate<kHeadDim>(params, stream, candidate);
#if JAGRANK_FLASH_WGMMA
  const bool wgmma =
      kernel == Bf16Kernel::kAuto ? flash::WgmmaIsDefault<kHeadDim>(params) : kernel != Bf16Kernel::kMmaSync;
  if (wgmma && CurrentDeviceIsSm90()) {
    const flash::WgmmaTile tile = kernel == Bf16Kernel::kWgmma            ? flash::WgmmaTile::kMain
                                  : kernel == Bf16Kernel::kWgmmaAlt       ? flash::WgmmaTile::kAlt
                                  : kernel == Bf16Kernel::kWgmmaCandidate ? flash::WgmmaTile::kCandidate
                                                                          : flash::WgmmaTile::kAuto;
    return flash::LaunchFlashWgmmaBf16<kHeadDim>(params, stream, tile, candidate);
  }
#endif
  return flash::LaunchFlashBf16<kHeadDim>(params, stream);
}

}  // namespace

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
