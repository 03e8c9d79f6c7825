// Launchers of the jagged <-> padded copies (declared in layout.h).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda_check.h"
#include "kernels/cuda_common.cuh"
#include "kernels/layout/layout.h"
#include "kernels/layout/layout_kernel.cuh"

namespace jagrank {
namespace {

Status CheckConversion(const void* values, const int32_t* offsets, int batch, int max_len, int64_t width,
                       const void* padded) {
  if (batch < 0) return Status::InvalidArgument("batch = " + std::to_string(batch) + ", must be >= 0");
  if (max_len < 0) return Status::InvalidArgument("max_len = " + std::to_string(max_len) + ", must be >= 0");
  if (width <= 0) return Status::InvalidArgument("width = " + std::to_string(width) + ", must be > 0");
  if (batch == 0 || max_len == 0) return Status::Ok();
  if (offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
  if (padded == nullptr) return Status::InvalidArgument("padded: null");
  (void)values;  // may be null when every sequence is empty
  return Status::Ok();
}

// Runs `launch(bits_tag, grid, block)` with the element bits type of `dtype`.
template <typename Launch>
Status LaunchConversion(DType dtype, int batch, int max_len, int64_t width, Launch&& launch) {
  const dim3 block = cuda::RowBlock(width > (1 << 20) ? (1 << 20) : static_cast<int>(width));
  const int64_t chunks = (int64_t{max_len} + block.y - 1) / block.y;
  if (chunks > cuda::kMaxGridYZ) {
    return Status::InvalidArgument("max_len = " + std::to_string(max_len) + " is above the grid limit " +
                                   std::to_string(int64_t{cuda::kMaxGridYZ} * block.y));
  }
  const dim3 grid(batch, static_cast<unsigned>(chunks));
  switch (dtype) {
    case DType::kFloat32: return launch(uint32_t{}, grid, block);
    case DType::kBFloat16: return launch(uint16_t{}, grid, block);
  }
  return Status::Unimplemented("dtype: unsupported value " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

Status JaggedToPaddedCuda(const JaggedToPaddedParams& params, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckConversion(params.values, params.offsets, params.batch, params.max_len, params.width,
                                  params.padded));
  if (params.batch == 0 || params.max_len == 0) return Status::Ok();
  return LaunchConversion(params.dtype, params.batch, params.max_len, params.width,
                          [&](auto tag, dim3 grid, dim3 block) {
                            using Bits = decltype(tag);
                            cuda::JaggedToPaddedKernel<Bits><<<grid, block, 0, stream>>>(params);
                            return CudaLaunchStatus("JaggedToPaddedKernel");
                          });
}

Status PaddedToJaggedCuda(const PaddedToJaggedParams& params, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckConversion(params.values, params.offsets, params.batch, params.max_len, params.width,
                                  params.padded));
  if (params.batch == 0 || params.max_len == 0) return Status::Ok();
  return LaunchConversion(params.dtype, params.batch, params.max_len, params.width,
                          [&](auto tag, dim3 grid, dim3 block) {
                            using Bits = decltype(tag);
                            cuda::PaddedToJaggedKernel<Bits><<<grid, block, 0, stream>>>(params);
                            return CudaLaunchStatus("PaddedToJaggedKernel");
                          });
}

}  // namespace jagrank
