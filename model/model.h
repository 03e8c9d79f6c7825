// Model: the DLRM-style ranking model of DESIGN.md on one backend.
//
//   std::unique_ptr<Model> model;
//   RETURN_IF_ERROR(Model::Create(config, weights, options, &model));
//   std::vector<float> scores;                 // one per candidate, in (0, 1)
//   RETURN_IF_ERROR(model->Forward(batch, &scores));
//
// Backends: "cpu" (float32, OpenBLAS + the CPU kernels; the weights are used
// in place, e.g. straight from the mmap'ed safetensors file) and "cuda:N"
// (weights uploaded once at Create, tables and attention operands in bf16
// unless ModelOptions::cuda_bf16 is false; per-batch workspace from a
// stream-ordered pool that keeps its memory; one H2D copy of the packed batch
// from pinned memory, one D2H copy of the scores, one stream sync).
//
// Thread safety: Forward is NOT thread-safe (it owns per-backend workspace,
// streams and handles); the server runs one executor thread per Model.
// Info() and Memory() may be called from any thread.
#ifndef JAGRANK_MODEL_MODEL_H_
#define JAGRANK_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"

namespace jagrank {

enum class AttentionStrategy { kJagged, kPaddedFlash, kPaddedDense };
const char* AttentionStrategyName(AttentionStrategy s);  // "jagged", ...
Status ParseAttentionStrategy(const std::string& name, AttentionStrategy* out);

struct ModelOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N" ("auto" is resolved by the caller)
  AttentionStrategy attention = AttentionStrategy::kJagged;
  int cpu_threads = 0;         // 0 = hardware concurrency
  // CUDA only: embedding/position tables and attention operands in bf16
  // (float32 accumulation); false keeps everything float32.
  bool cuda_bf16 = true;
};

struct ModelMemory {
  int64_t weights_bytes = 0;          // model weights as resident on the device
  int64_t device_used_bytes = 0;      // whole device, from cudaMemGetInfo (0 on CPU)
  int64_t device_total_bytes = 0;     // (0 on CPU)
  int64_t workspace_peak_bytes = 0;   // peak per-batch workspace of this model (CUDA: pool allocations of one batch)
  // Cumulative, jagged strategy only: bytes a padded [R, N, d] layout of the
  // six per-token self-attention activations (h, q, k, v, attention output,
  // z) would have needed beyond the jagged [T, d] ones, N = the batch's
  // longest history. 0 for the padded strategies (they pay it).
  int64_t padding_saved_bytes = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Builds the model on options.device. `weights` is consumed (moved onto
  // the device / into the CPU backend); empty weights (a default-constructed
  // ModelWeights) mean the deterministic random model of config.seed
  // (MakeRandomWeights). Errors name the bad input.
  static Status Create(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                       std::unique_ptr<Model>* out);

  // scores->size() == batch.num_candidates() on success.
  // REQUIRES: ValidateBatchShape(batch, ...) is OK (Forward re-checks cheaply).
  virtual Status Forward(const Batch& batch, std::vector<float>* scores) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device() const = 0;          // "cpu", "cuda:0"
  virtual AttentionStrategy attention() const = 0;
  virtual std::string version() const = 0;         // content hash of the weights
  virtual ModelMemory Memory() const = 0;
};

}  // namespace jagrank

#endif  // JAGRANK_MODEL_MODEL_H_
