// Internal to model/: the backend factories Model::Create dispatches to.
#ifndef JAGRANK_MODEL_BACKENDS_H_
#define JAGRANK_MODEL_BACKENDS_H_

#include <memory>

#include "model/model.h"

namespace jagrank {

// REQUIRES: config and weights validated against each other.
Status CreateCpuModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                      std::unique_ptr<Model>* out);

#if JAGRANK_WITH_CUDA
// device_index: N of "cuda:N". Same REQUIRES.
Status CreateCudaModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                       int device_index, std::unique_ptr<Model>* out);
#endif

// Bytes a padded [R, N, *] layout of the per-token self-attention activations
// (h, q, k, v, attention output, z: 6 x d floats per token) needs beyond the
// jagged [T, *] one, N = the batch's longest history. Counted per batch by the
// jagged strategy into ModelMemory::padding_saved_bytes.
int64_t PaddingSavedBytes(const Batch& batch, int embedding_dim);

}  // namespace jagrank

#endif  // JAGRANK_MODEL_BACKENDS_H_
