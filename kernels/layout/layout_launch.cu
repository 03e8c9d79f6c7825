// Launchers of the jagged <-> padded copies (declared in layout.h).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "kernels/cuda_common.cuh"
#include "kernels/layout/layout.h"
#include "kernels/layout/layout_kernel.cuh"

namespace jagrank {
namespace {

// Checks `p` (either direction: both carry values, offsets, batch, max_len,
// width, dtype and padded), then runs `launch(bits_tag, grid, block)` with the
// element bits type of p.dtype; nothing to copy: OK without a launch.
template <typename Params, typename Launch>
Status LaunchConversion(const Params& p, Launch&& launch) {
  if (p.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(p.batch) + ", must be >= 0");
  if (p.max_len < 0) return Status::InvalidArgument("max_len = " + std::to_string(p.max_len) + ", must be >= 0");
  if (p.width <= 0) return Status::InvalidArgument("width = " + std::to_string(p.width) + ", must be > 0");
  if (p.batch == 0 || p.max_len == 0) return Status::Ok();
  if (p.offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
  if (p.padded == nullptr) return Status::InvalidArgument("padded: null");
  // p.values may be null when every sequence is empty (the kernels then never touch it).
  const dim3 block = cuda::RowBlock(p.width > (1 << 20) ? (1 << 20) : static_cast<int>(p.width));
  const int64_t chunks = (int64_t{p.max_len} + block.y - 1) / block.y;
  if (chunks > cuda::kMaxGridYZ) {
    return Status::InvalidArgument("max_len = " + std::to_string(p.max_len) + " is above the grid limit " +
                                   std::to_string(int64_t{cuda::kMaxGridYZ} * block.y));
  }
  const dim3 grid(p.batch, static_cast<unsigned>(chunks));
  switch (p.dtype) {
    case DType::kFloat32: return launch(uint32_t{}, grid, block);
    case DType::kBFloat16: return launch(uint16_t{}, grid, block);
  }
  return Status::Unimplemented("dtype: unsupported value " + std::to_string(static_cast<int>(p.dtype)));
}

}  // namespace

Status JaggedToPaddedCuda(const JaggedToPaddedParams& params, cudaStream_t stream) {
  return LaunchConversion(params, [&](auto tag, dim3 grid, dim3 block) {
    cuda::JaggedToPaddedKernel<decltype(tag)><<<grid, block, 0, stream>>>(params);
    return CudaLaunchStatus("JaggedToPaddedKernel");
  });
}

Status PaddedToJaggedCuda(const PaddedToJaggedParams& params, cudaStream_t stream) {
  return LaunchConversion(params, [&](auto tag, dim3 grid, dim3 block) {
    cuda::PaddedToJaggedKernel<decltype(tag)><<<grid, block, 0, stream>>>(params);
    return CudaLaunchStatus("PaddedToJaggedKernel");
  });
}

Status RepeatRowsCuda(const RepeatRowsParams& params, cudaStream_t stream) {
  const RepeatRowsParams& p = params;
  if (p.batch < 0) return Status::InvalidArgument("batch = " + std::to_string(p.batch) + ", must be >= 0");
  if (p.max_len < 0) return Status::InvalidArgument("max_len = " + std::to_string(p.max_len) + ", must be >= 0");
  if (p.width <= 0) return Status::InvalidArgument("width = " + std::to_string(p.width) + ", must be > 0");
  if (p.batch == 0 || p.max_len == 0) return Status::Ok();
  if (p.offsets == nullptr) return Status::InvalidArgument("offsets: null (needs batch + 1 entries)");
  if (p.rows == nullptr) return Status::InvalidArgument("rows: null");
  if (p.values == nullptr) return Status::InvalidArgument("values: null");
  const dim3 block = cuda::RowBlock(p.width > (1 << 20) ? (1 << 20) : static_cast<int>(p.width));
  const int64_t chunks = (int64_t{p.max_len} + block.y - 1) / block.y;
  if (chunks > cuda::kMaxGridYZ) {
    return Status::InvalidArgument("max_len = " + std::to_string(p.max_len) + " is above the grid limit " +
                                   std::to_string(int64_t{cuda::kMaxGridYZ} * block.y));
  }
  const dim3 grid(p.batch, static_cast<unsigned>(chunks));
  // Rows of whole 16-byte words at 16-byte aligned addresses: copied as
  // uint4 (a 1024-wide bf16 row: 128 words instead of 1024 two-byte copies).
  const int64_t row_bytes = p.width * static_cast<int64_t>(DTypeSize(p.dtype));
  if (row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p.rows) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(p.values) % 16 == 0) {
    RepeatRowsParams words = p;
    words.width = row_bytes / 16;
    const dim3 word_block = cuda::RowBlock(words.width > (1 << 20) ? (1 << 20) : static_cast<int>(words.width));
    const int64_t word_chunks = (int64_t{p.max_len} + word_block.y - 1) / word_block.y;
    if (word_chunks <= cuda::kMaxGridYZ) {
      cuda::RepeatRowsKernel<uint4>
          <<<dim3(p.batch, static_cast<unsigned>(word_chunks)), word_block, 0, stream>>>(words);
      return CudaLaunchStatus("RepeatRowsKernel");
    }
  }
  switch (p.dtype) {
    case DType::kFloat32:
      cuda::RepeatRowsKernel<uint32_t><<<grid, block, 0, stream>>>(p);
      return CudaLaunchStatus("RepeatRowsKernel");
    case DType::kBFloat16:
      cuda::RepeatRowsKernel<uint16_t><<<grid, block, 0, stream>>>(p);
      return CudaLaunchStatus("RepeatRowsKernel");
  }
  return Status::Unimplemented("dtype: unsupported value " + std::to_string(static_cast<int>(p.dtype)));
}

}  // namespace jagrank
