// The model YAML loader (ParseModelConfig) on arbitrary text. An accepted
// config must pass ValidateModelConfig, its weight shapes must be computable,
// and ModelConfigToYaml must read back to the same config.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/config.h"
#include "model/weights.h"

namespace {

bool SameConfig(const jagrank::ModelConfig& a, const jagrank::ModelConfig& b) {
  if (a.sparse_features.size() != b.sparse_features.size()) return false;
  for (size_t i = 0; i < a.sparse_features.size(); ++i) {
    if (a.sparse_features[i].name != b.sparse_features[i].name ||
        a.sparse_features[i].num_rows != b.sparse_features[i].num_rows) {
      return false;
    }
  }
  return a.name == b.name && a.embedding_dim == b.embedding_dim && a.num_dense_features == b.num_dense_features &&
         a.item_rows == b.item_rows && a.max_history_len == b.max_history_len &&
         a.attention_heads == b.attention_heads && a.bottom_mlp == b.bottom_mlp && a.top_mlp == b.top_mlp &&
         a.seed == b.seed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jagrank;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig config;
  const Status parsed = ParseModelConfig(text, &config);
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.message().empty(), "error without a message");
    return 0;
  }
  FUZZ_CHECK(ValidateModelConfig(config).ok(), "accepted config does not validate");
  FUZZ_CHECK(!ExpectedWeightShapes(config).empty(), "no weight shapes");
  ModelConfig again;
  const std::string yaml = ModelConfigToYaml(config);
  const Status reparsed = ParseModelConfig(yaml, &again);
  FUZZ_CHECK(reparsed.ok(), "ModelConfigToYaml output refused: %s\n%s", reparsed.ToString().c_str(), yaml.c_str());
  FUZZ_CHECK(SameConfig(config, again), "ModelConfigToYaml does not read back to the same config:\n%s", yaml.c_str());
  return 0;
}
