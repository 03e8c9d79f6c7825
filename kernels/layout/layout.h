// Jagged <-> padded copies (parameters in layout_params.h), fp32 or bf16 (bits
// copied, no conversion): CPU versions and CUDA launchers.
#ifndef JAGRANK_KERNELS_LAYOUT_LAYOUT_H_
#define JAGRANK_KERNELS_LAYOUT_LAYOUT_H_

#include "common/status.h"
#include "kernels/layout/layout_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

// CPU versions, both dtypes; InvalidArgument naming the field on bad input.
Status JaggedToPaddedCpu(const JaggedToPaddedParams& params);
Status PaddedToJaggedCpu(const PaddedToJaggedParams& params);
Status RepeatRowsCpu(const RepeatRowsParams& params);

#if JAGRANK_WITH_CUDA
// CUDA launchers (conventions: kernels/cuda_ops.h). JaggedToPadded writes
// every element of `padded` (zeros past len(b)).
Status JaggedToPaddedCuda(const JaggedToPaddedParams& params, cudaStream_t stream);
Status PaddedToJaggedCuda(const PaddedToJaggedParams& params, cudaStream_t stream);
Status RepeatRowsCuda(const RepeatRowsParams& params, cudaStream_t stream);
#endif  // JAGRANK_WITH_CUDA

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_LAYOUT_LAYOUT_H_
