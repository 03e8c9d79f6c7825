// CUDA backend (placeholder until the CUDA kernels land).
#include "model/backends.h"

namespace jagrank {

Status CreateCudaModel(const ModelConfig&, ModelWeights, const ModelOptions& options, int,
                       std::unique_ptr<Model>*) {
  return Status::Unimplemented("device = '" + options.device + "': CUDA backend not built yet");
}

}  // namespace jagrank
