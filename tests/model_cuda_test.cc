// CUDA backend against the CPU backend (float32, itself checked against the
// DESIGN.md math in model_forward_test): scores within 1e-2 with bf16
// tables/attention, 1e-4 in float32 mode, for all three attention strategies.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace jagrank {
namespace {

ModelConfig TestConfig(int d, int heads, int max_history_len, int64_t item_rows) {
  ModelConfig c;
  c.name = "gpu-test";
  c.embedding_dim = d;
  c.num_dense_features = 13;
  c.sparse_features = {{"country", 300}, {"segments", 5000}, {"device", 8}, {"hour", 168}};
  c.item_rows = item_rows;
  c.max_history_len = max_history_len;
  c.attention_heads = heads;
  c.bottom_mlp = {128, d};
  c.top_mlp = {256, 64, 1};
  c.seed = 1234;
  return c;
}

std::vector<int64_t> Ids(std::mt19937_64& rng, int n) {
  std::vector<int64_t> ids(n);
  for (auto& id : ids) {
    const uint64_t kind = rng() % 8;
    id = kind == 0 ? -static_cast<int64_t>(rng() % 1000) - 1
                   : kind == 1 ? std::numeric_limits<int64_t>::max() - int64_t(rng() % 9)
                               : static_cast<int64_t>(rng() % 10000000);
  }
  return ids;
}

// R requests; history lengths include 0, 1, above max_history_len.
Batch RandomBatch(const ModelConfig& c, int num_requests, int max_candidates, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch batch;
  batch.Reset(static_cast<int>(c.sparse_features.size()));
  for (int r = 0; r < num_requests; ++r) {
    std::vector<float> dense(c.num_dense_features);
    for (float& v : dense) v = normal(rng);
    std::vector<std::vector<int64_t>> sparse(c.sparse_features.size());
    for (auto& ids : sparse) ids = Ids(rng, static_cast<int>(rng() % 6));
    int len;
    switch (r % 5) {
      case 0: len = 0; break;
      case 1: len = 1; break;
      case 2: len = c.max_history_len + 7; break;
      default: len = static_cast<int>(rng() % c.max_history_len); break;
    }
    const std::vector<int64_t> history = Ids(rng, len);
    const std::vector<int64_t> candidates = Ids(rng, 1 + static_cast<int>(rng() % max_candidates));
    RequestFeatures f;
    f.dense = dense.data();
    f.num_dense = dense.size();
    for (const auto& ids : sparse) f.sparse.push_back({ids.data(), ids.size()});
    f.history = {history.data(), history.size()};
    f.candidates = {candidates.data(), candidates.size()};
    EXPECT_TRUE(AppendRequestToBatch(c, f, &batch).ok());
  }
  return batch;
}

// The random model of `c` with every tensor multiplied by `scale` (1 = the
// default init, whose scores sit close to 0.5; 2 spreads them over (0, 1)).
ModelWeights ScaledWeights(const ModelConfig& c, float scale) {
  ModelWeights random, w;
  EXPECT_TRUE(MakeRandomWeights(c, &random).ok());
  if (scale == 1.0f) return random;
  for (const auto& kv : random.tensors()) {
    std::vector<float> values(kv.second.data, kv.second.data + kv.second.num_elements());
    for (float& v : values) v *= scale;
    w.Add(kv.first, kv.second.shape, std::move(values));
  }
  w.ComputeVersion();
  return w;
}

std::unique_ptr<Model> MakeModel(const ModelConfig& c, const std::string& device, AttentionStrategy s, bool bf16,
                                 float scale = 1.0f) {
  ModelOptions options;
  options.device = device;
  options.attention = s;
  options.cuda_bf16 = bf16;
  std::unique_ptr<Model> model;
  Status status = Model::Create(c, ScaledWeights(c, scale), options, &model);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return model;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

const AttentionStrategy kStrategies[] = {AttentionStrategy::kJagged, AttentionStrategy::kPaddedFlash,
                                         AttentionStrategy::kPaddedDense};

void CompareToCpu(const ModelConfig& c, const Batch& batch, bool bf16, double tolerance, float scale = 1.0f) {
  std::vector<float> cpu_scores;
  ASSERT_TRUE(MakeModel(c, "cpu", AttentionStrategy::kJagged, false, scale)->Forward(batch, &cpu_scores).ok());
  double lo = 1, hi = 0;
  for (float s : cpu_scores) {
    lo = std::min<double>(lo, s);
    hi = std::max<double>(hi, s);
  }
  for (AttentionStrategy s : kStrategies) {
    std::unique_ptr<Model> gpu = MakeModel(c, "cuda:0", s, bf16, scale);
    ASSERT_NE(gpu, nullptr);
    std::vector<float> scores;
    Status status = gpu->Forward(batch, &scores);
    ASSERT_TRUE(status.ok()) << AttentionStrategyName(s) << ": " << status.ToString();
    ASSERT_EQ(scores.size(), cpu_scores.size());
    for (float v : scores) ASSERT_TRUE(std::isfinite(v));
    const double diff = MaxAbsDiff(scores, cpu_scores);
    std::printf("d=%d H=%d R=%d C=%lld T=%lld %s %s: max |gpu - cpu| = %.3g (scores in [%.3f, %.3f])\n",
                c.embedding_dim, c.attention_heads, batch.num_requests, static_cast<long long>(batch.num_candidates()),
                static_cast<long long>(batch.num_history_tokens()), AttentionStrategyName(s), bf16 ? "bf16" : "fp32",
                diff, lo, hi);
    EXPECT_LT(diff, tolerance) << AttentionStrategyName(s);
    // A second batch through the same model reuses pooled memory and agrees.
    std::vector<float> again;
    ASSERT_TRUE(gpu->Forward(batch, &again).ok());
    EXPECT_EQ(again, scores);
  }
}

class ModelCudaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(ModelCudaTest, MatchesCpuBf16AllStrategies) {
  const ModelConfig c = TestConfig(64, 2, 200, 100000);
  CompareToCpu(c, RandomBatch(c, 24, 40, 1), /*bf16=*/true, 1e-2);
}

TEST_F(ModelCudaTest, MatchesCpuBf16WithSpreadScores) {
  // Larger weights: scores spread over (0, 1), so a wrong step cannot hide
  // behind a near-constant 0.5 (the default init's regime).
  const ModelConfig c = TestConfig(64, 2, 200, 100000);
  CompareToCpu(c, RandomBatch(c, 24, 40, 7), /*bf16=*/true, 1e-2, /*scale=*/2.0f);
}

TEST_F(ModelCudaTest, MatchesCpuFp32AllStrategies) {
  const ModelConfig c = TestConfig(64, 2, 200, 100000);
  CompareToCpu(c, RandomBatch(c, 24, 40, 2), /*bf16=*/false, 1e-4);
}

TEST_F(ModelCudaTest, OtherHeadDimsAndEdgeBatches) {
  const ModelConfig c = TestConfig(128, 2, 64, 5000);  // dh = 64, target head dim 128
  CompareToCpu(c, RandomBatch(c, 7, 5, 3), true, 1e-2);
  const ModelConfig c32 = TestConfig(32, 1, 16, 1000);  // dh = 32
  CompareToCpu(c32, RandomBatch(c32, 1, 1, 4), true, 1e-2);  // one request with no history, one candidate
  CompareToCpu(c32, RandomBatch(c32, 3, 2, 5), true, 1e-2);
}

TEST_F(ModelCudaTest, MemoryReportAndThroughput) {
  ModelConfig c;
  ASSERT_TRUE(DefaultModelConfig(&c).ok());  // d = 64, H = 2, max_history_len 1024, 1M items
  std::unique_ptr<Model> gpu = MakeModel(c, "cuda:0", AttentionStrategy::kJagged, true);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->device(), "cuda:0");
  const Batch batch = RandomBatch(c, 128, 128, 6);
  std::vector<float> scores;
  ASSERT_TRUE(gpu->Forward(batch, &scores).ok());
  const ModelMemory m1 = gpu->Memory();
  EXPECT_GT(m1.weights_bytes, c.item_rows * c.embedding_dim * 2);  // bf16 item table at least
  EXPECT_GT(m1.device_total_bytes, m1.device_used_bytes);
  EXPECT_GT(m1.device_used_bytes, m1.weights_bytes);
  EXPECT_GT(m1.workspace_peak_bytes, 0);
  EXPECT_GT(m1.padding_saved_bytes, 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(gpu->Forward(batch, &scores).ok());
  const ModelMemory m2 = gpu->Memory();
  EXPECT_EQ(m2.workspace_peak_bytes, m1.workspace_peak_bytes);  // same batch, same workspace
  EXPECT_LE(m2.device_used_bytes, m1.device_used_bytes + (64 << 20)) << "device memory grows per batch";
  std::printf("default model on cuda:0: weights %.1f MiB, workspace peak %.1f MiB, device used %.1f / %.1f GiB\n",
              m2.weights_bytes / 1048576.0, m2.workspace_peak_bytes / 1048576.0, m2.device_used_bytes / 1073741824.0,
              m2.device_total_bytes / 1073741824.0);
  for (AttentionStrategy s : kStrategies) {
    std::unique_ptr<Model> model = MakeModel(c, "cuda:0", s, true);
    ASSERT_TRUE(model->Forward(batch, &scores).ok());  // warm-up
    const int iters = 10;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) ASSERT_TRUE(model->Forward(batch, &scores).ok());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
    std::printf("default model, R=%d C=%lld T=%lld, %s: %.3f ms/batch, workspace peak %.1f MiB\n",
                batch.num_requests, static_cast<long long>(batch.num_candidates()),
                static_cast<long long>(batch.num_history_tokens()), AttentionStrategyName(s), ms,
                model->Memory().workspace_peak_bytes / 1048576.0);
  }
}

}  // namespace
}  // namespace jagrank
