// Element-wise CUDA kernels (conventions: kernels/cuda_ops.h): the dtype cast
// and the two element-wise steps of the forward pass that no other family
// covers. Only declared when the build has CUDA.
#ifndef JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#if JAGRANK_WITH_CUDA

#include <cstdint>

#include "common/status.h"
#include "kernels/elementwise/elementwise_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace jagrank {

Status CastCuda(const CastParams& params, cudaStream_t stream);

// y[i] += x[i] for i < count (the residual z = h + O Wo^T). Device pointers.
Status AddInPlaceCuda(float* y, const float* x, int64_t count, cudaStream_t stream);

// v[i] = 1 / (1 + exp(-v[i])) for i < count (logits to scores).
Status SigmoidInPlaceCuda(float* v, int64_t count, cudaStream_t stream);

}  // namespace jagrank

#endif  // JAGRANK_WITH_CUDA

#endif  // JAGRANK_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
