// ModelWeights: the named float32 tensors of the weight contract
// (docs/model.md), loaded from a safetensors file (F32 memory-mapped, BF16
// and F16 converted to float32), or made deterministically from a config's
// seed, and written back to safetensors.
//
// Names (contract): bottom_mlp.{i}.weight [out, in], bottom_mlp.{i}.bias [out],
// top_mlp.{i}.weight / .bias, embeddings.{feature} [num_rows, d],
// embeddings.item [item_rows, d], history.position [max_history_len, d],
// history.attn.{q,k,v,o} [d, d].
#ifndef JAGRANK_MODEL_WEIGHTS_H_
#define JAGRANK_MODEL_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace jagrank {

// One float32 tensor, row-major. `data` points into storage owned by the
// ModelWeights that holds it (a file mapping or a heap buffer).
struct WeightTensor {
  std::vector<int64_t> shape;
  const float* data = nullptr;
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

// Move-only bag of named tensors plus the storage behind them. Read-only
// after construction; safe to read from many threads.
class ModelWeights {
 public:
  ModelWeights() = default;
  ModelWeights(ModelWeights&&) = default;
  ModelWeights& operator=(ModelWeights&&) = default;
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // nullptr when absent.
  const WeightTensor* Find(const std::string& name) const;
  const std::map<std::string, WeightTensor>& tensors() const { return tensors_; }
  bool empty() const { return tensors_.empty(); }
  int64_t total_bytes() const;  // sum of tensor sizes, float32

  // Content hash of names, shapes and values: 16 hex digits. Computed once
  // (on load / random init); two weight sets with equal contents share it.
  const std::string& version() const { return version_; }

  // Adds a tensor that owns its values (used by random init and tests).
  // Replaces a tensor of the same name. Call ComputeVersion() afterwards.
  void Add(const std::string& name, std::vector<int64_t> shape, std::vector<float> values);
  void ComputeVersion();

  // Internal: used by the safetensors loader.
  void AddView(const std::string& name, std::vector<int64_t> shape, const float* data);
  void KeepAlive(std::shared_ptr<void> storage) { storage_.push_back(std::move(storage)); }

 private:
  std::map<std::string, WeightTensor> tensors_;
  std::vector<std::shared_ptr<void>> storage_;
  std::string version_;
};

// The expected name -> shape of every tensor for `config`, in a stable order.
std::map<std::string, std::vector<int64_t>> ExpectedWeightShapes(const ModelConfig& config);

// Checks that `weights` holds exactly the tensors of `config` with the right
// shapes. The error names the missing, extra or mis-shaped tensor.
Status ValidateWeights(const ModelConfig& config, const ModelWeights& weights);

// Loads a safetensors file, checking the header against the file (header
// length, dtypes, shapes, data offsets in range and not overlapping), every
// value (a NaN or Inf is an error naming the tensor and the element) and
// then against `config` (ValidateWeights). Tensors may be F32 (used in place
// when 4-byte aligned), BF16 or F16 (converted to float32 at load, exactly);
// any other dtype is an error naming the tensor. Hostile files are rejected
// with an error naming the problem; nothing is read outside the file.
Status LoadSafetensors(const std::string& path, const ModelConfig& config, ModelWeights* out);

// Writes `weights` as a safetensors file (F32, names sorted), atomically
// (temporary file + rename). `metadata` goes into "__metadata__".
Status WriteSafetensors(const std::string& path, const ModelWeights& weights,
                        const std::map<std::string, std::string>& metadata = {});

// The deterministic random model for `config` (from config.seed): linear
// layers U(-1/sqrt(in), 1/sqrt(in)) like PyTorch's default init, embedding
// and position tables U(-1/sqrt(d), 1/sqrt(d)) so that dot products and
// scores stay unsaturated. Each tensor is seeded from (seed, its name), so
// the values do not depend on the order tensors are made in.
Status MakeRandomWeights(const ModelConfig& config, ModelWeights* out);

}  // namespace jagrank

#endif  // JAGRANK_MODEL_WEIGHTS_H_
