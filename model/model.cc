#include "model/model.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "model/backends.h"

namespace jagrank {

const char* AttentionStrategyName(AttentionStrategy s) {
  switch (s) {
    case AttentionStrategy::kJagged: return "jagged";
    case AttentionStrategy::kPaddedFlash: return "padded_flash";
    case AttentionStrategy::kPaddedDense: return "padded_dense";
  }
  return "unknown";
}

Status ParseAttentionStrategy(const std::string& name, AttentionStrategy* out) {
  for (AttentionStrategy s :
       {AttentionStrategy::kJagged, AttentionStrategy::kPaddedFlash, AttentionStrategy::kPaddedDense}) {
    if (name == AttentionStrategyName(s)) {
      *out = s;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("attention = '" + name + "': expected jagged, padded_flash or padded_dense");
}

int64_t PaddingSavedBytes(const Batch& batch, int embedding_dim) {
  int32_t max_len = 0;
  for (int r = 0; r < batch.num_requests; ++r) {
    max_len = std::max(max_len, batch.history_offsets[r + 1] - batch.history_offsets[r]);
  }
  const int64_t padded_tokens = int64_t{batch.num_requests} * max_len;
  return (padded_tokens - batch.num_history_tokens()) * 6 * embedding_dim * static_cast<int64_t>(sizeof(float));
}

Status Model::CheckSlot(int slot) {
  if (slot < 0 || slot >= kStageSlots) {
    return Status::InvalidArgument("slot = " + std::to_string(slot) + ": must be in [0, " +
                                   std::to_string(kStageSlots) + ")");
  }
  return Status::Ok();
}

Status Model::Stage(const Batch& batch, int slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  staged_[slot] = nullptr;
  RETURN_IF_ERROR(ValidateBatchShape(batch, config().num_dense_features,
                                     static_cast<int>(config().sparse_features.size())));
  staged_[slot] = &batch;
  return Status::Ok();
}

Status Model::Run(int slot, std::vector<float>* scores, ForwardTimings* timings) {
  RETURN_IF_ERROR(CheckSlot(slot));
  if (timings != nullptr) *timings = ForwardTimings();
  const Batch* batch = staged_[slot];
  if (batch == nullptr) {
    return Status::Internal("Run(slot = " + std::to_string(slot) + "): no batch is staged in this slot");
  }
  staged_[slot] = nullptr;
  return Forward(*batch, scores);
}

Status Model::Launch(int slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  launched_[slot] = true;  // Run, in Wait, says whether a batch is staged
  return Status::Ok();
}

Status Model::Wait(int slot, std::vector<float>* scores, ForwardTimings* timings) {
  RETURN_IF_ERROR(CheckSlot(slot));
  if (!launched_[slot]) {
    return Status::Internal("Wait(slot = " + std::to_string(slot) + "): nothing is launched in this slot");
  }
  launched_[slot] = false;
  return Run(slot, scores, timings);
}

Status Model::Create(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                     std::unique_ptr<Model>* out) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  if (weights.empty()) {
    RETURN_IF_ERROR(MakeRandomWeights(config, &weights));
  } else {
    RETURN_IF_ERROR(ValidateWeights(config, weights));
    if (weights.version().empty()) weights.ComputeVersion();
  }
  if (options.cpu_threads < 0) {
    return Status::InvalidArgument("cpu_threads = " + std::to_string(options.cpu_threads) + ": must be >= 0");
  }
  if (options.device == "cpu") return CreateCpuModel(config, std::move(weights), options, out);
  if (options.device == "cuda" || options.device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (options.device.size() > 5) {
      const std::string digits = options.device.substr(5);
      char* end = nullptr;
      const long v = std::strtol(digits.c_str(), &end, 10);
      if (digits.empty() || *end != '\0' || v < 0 || v > 1024) {
        return Status::InvalidArgument("device = '" + options.device + "': expected cuda:N with N >= 0");
      }
      index = static_cast<int>(v);
    }
#if JAGRANK_WITH_CUDA
    return CreateCudaModel(config, std::move(weights), options, index, out);
#else
    (void)index;
    return Status::Unimplemented("device = '" + options.device + "': this build has no CUDA backend");
#endif
  }
  return Status::InvalidArgument("device = '" + options.device + "': expected cpu, cuda or cuda:N");
}

}  // namespace jagrank
