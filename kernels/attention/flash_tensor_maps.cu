// EncodeFlashKvMaps: the driver's tensor-map encoder, looked up once.
#include "kernels/attention/flash_tensor_maps.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace jagrank {
namespace flash {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

struct Encoder {
  EncodeTiledFn fn = nullptr;
  std::string error;
};

const Encoder& TheEncoder() {
  static const Encoder encoder = [] {
    Encoder e;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &query);
    if (err != cudaSuccess || query != cudaDriverEntryPointSuccess || fn == nullptr) {
      e.error = std::string("cuTensorMapEncodeTiled not found in the CUDA driver: ") + cudaGetErrorString(err);
    } else {
      e.fn = reinterpret_cast<EncodeTiledFn>(fn);
    }
    return e;
  }();
  return encoder;
}

Status EncodeOne(const Encoder& encoder, const void* base, int64_t row_stride, const AttentionParams& params,
                 int box_cols, int box_rows, CUtensorMapSwizzle swizzle, const char* name, CUtensorMap* map) {
  // Innermost first: the head columns of a row, then rows. Offsets are
  // int32, so no row past 2^31 - 1 can be named.
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(params.num_heads) * params.head_dim,
                              static_cast<cuuint64_t>(INT32_MAX)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * 2};  // bytes, rows only
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encoder.fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                                box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::Internal(std::string("cuTensorMapEncodeTiled failed for ") + name + " (CUresult " +
                            std::to_string(static_cast<int>(r)) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status EncodeFlashKvMaps(const AttentionParams& params, int box_cols, int box_rows, int swizzle_bytes,
                         FlashKvMaps* maps) {
  const Encoder& encoder = TheEncoder();
  if (encoder.fn == nullptr) return Status::Internal(encoder.error);
  if (box_cols * 2 != swizzle_bytes || (swizzle_bytes != 64 && swizzle_bytes != 128)) {
    return Status::Internal("flash tensor maps: box of " + std::to_string(box_cols) + " columns for a " +
                            std::to_string(swizzle_bytes) + "-byte swizzle");
  }
  const CUtensorMapSwizzle swizzle = swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  std::memset(maps, 0, sizeof(*maps));
  RETURN_IF_ERROR(
      EncodeOne(encoder, params.k, params.k_row_stride, params, box_cols, box_rows, swizzle, "k", &maps->k));
  return EncodeOne(encoder, params.v, params.v_row_stride, params, box_cols, box_rows, swizzle, "v", &maps->v);
}

bool FlashKvCopyByTma() {
  const char* copy = std::getenv("JAGRANK_FLASH_KV_COPY");
  return copy == nullptr || std::strcmp(copy, "cp_async") != 0;
}

}  // namespace flash
}  // namespace jagrank
