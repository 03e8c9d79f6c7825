// Model-level helpers shared by the model tests.
#ifndef JAGRANK_TESTS_MODEL_TEST_UTIL_H_
#define JAGRANK_TESTS_MODEL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace jagrank {
namespace testing {

// The random model of `config` with every tensor multiplied by `scale` (1 =
// the default init, whose scores sit close to 0.5; 2 spreads them over (0, 1)).
inline ModelWeights ScaledWeights(const ModelConfig& config, float scale) {
  ModelWeights random;
  EXPECT_TRUE(MakeRandomWeights(config, &random).ok());
  ModelWeights w;
  for (const auto& kv : random.tensors()) {
    std::vector<float> values(kv.second.data, kv.second.data + kv.second.num_elements());
    for (float& v : values) v *= scale;
    w.Add(kv.first, kv.second.shape, std::move(values));
  }
  w.ComputeVersion();
  return w;
}

}  // namespace testing
}  // namespace jagrank

#endif  // JAGRANK_TESTS_MODEL_TEST_UTIL_H_
