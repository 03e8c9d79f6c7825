// ModelConfig: the contract keys of config/model.yaml (docs/model.md), parsed once.
#ifndef JAGRANK_MODEL_CONFIG_H_
#define JAGRANK_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace jagrank {

struct SparseFeatureConfig {
  std::string name;      // also the weight name suffix: embeddings.{name}
  int64_t num_rows = 0;  // rows of its embedding table; row = uint64(id) % num_rows
};

struct ModelConfig {
  std::string name = "jagrank-dlrm";
  int embedding_dim = 64;                      // d
  int num_dense_features = 13;
  std::vector<SparseFeatureConfig> sparse_features;  // interaction order
  int64_t item_rows = 1000000;
  int max_history_len = 1024;
  int attention_heads = 2;                     // H; d % H == 0
  std::vector<int> bottom_mlp = {256, 128, 64};  // last == d
  std::vector<int> top_mlp = {512, 256, 1};      // last == 1
  uint64_t seed = 42;                          // random model when no weights file

  int num_interaction_vectors() const { return static_cast<int>(sparse_features.size()) + 3; }  // n = F + 3
  int top_mlp_input_width() const {            // d + n(n-1)/2
    const int n = num_interaction_vectors();
    return embedding_dim + n * (n - 1) / 2;
  }
};

// Checks every key; the error names the bad key and the limit.
Status ValidateModelConfig(const ModelConfig& config);
// Parses YAML text / a YAML file and validates it.
Status ParseModelConfig(const std::string& yaml_text, ModelConfig* out);
Status LoadModelConfig(const std::string& path, ModelConfig* out);
// Writes `config` as YAML that ParseModelConfig reads back to an equal config.
std::string ModelConfigToYaml(const ModelConfig& config);

// config/model.yaml as embedded at build time, and that text parsed.
const char* DefaultModelConfigYaml();
Status DefaultModelConfig(ModelConfig* out);

}  // namespace jagrank

#endif  // JAGRANK_MODEL_CONFIG_H_
