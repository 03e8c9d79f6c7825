// Fully connected layer (parameters in linear_params.h): CPU through OpenBLAS
// cblas_sgemm, CUDA through cuBLASLt with bias and ReLU as the epilogue.
#ifndef JAGRANK_KERNELS_LINEAR_LINEAR_H_
#define JAGRANK_KERNELS_LINEAR_LINEAR_H_

#include <cstddef>

#include "common/status.h"
#include "kernels/linear/linear_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

// CPU backend: blocks of rows, each an OpenBLAS sgemm on one thread, shared
// over up to num_threads threads (OpenBLAS's own pool is off: see
// UseSingleThreadedBlas). InvalidArgument naming the field on bad input.
Status LinearCpu(const LinearParams& params);

// Plain loops, float accumulation: the oracle for LinearCpu and the CUDA path.
Status LinearReferenceCpu(const LinearParams& params);

#if JAGRANK_WITH_CUDA
// y = x W^T + b (+ReLU) through cuBLASLt (conventions: kernels/cuda_ops.h),
// bias and ReLU fused as the GEMM's epilogue, accumulate as beta = 1 over y.
// float32 operands: full fp32 compute unless allow_tf32 (faster on tensor
// cores, about 1e-3 relative error); bf16 operands (in_dtype): float32
// accumulation, y and the bias in out_dtype. H200,
// m = 16384, n = 512, k = 1024, bias+ReLU: fp32 0.352 ms (48.8 TFLOP/s), TF32
// 0.090 ms (192 TFLOP/s) without a workspace. With one
// (LinearParams::workspace; kLinearWorkspaceBytes is NVIDIA's recommended
// size for Hopper) cuBLASLt can choose its sm90 kernels: TF32 0.050 ms
// (344 TFLOP/s) there, and the top MLP at ~35k candidates (100 -> 512 -> 256)
// 51 + 62 us -> 36 + 39 us.
Status LinearCuda(const LinearParams& params, cudaStream_t stream, bool allow_tf32 = false);
constexpr size_t kLinearWorkspaceBytes = size_t{32} << 20;
#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LINEAR_LINEAR_H_
