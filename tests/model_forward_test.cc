// The CPU forward against the model computed with plain loops straight from
// docs/model.md, written here with no code shared with model/ (only the
// weights are read through ModelWeights). Also: the three attention
// strategies agree, Batch assembly truncates histories, Model::Create errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "model_test_util.h"

namespace jagrank {
namespace {

struct RawRequest {
  std::vector<float> dense;
  std::map<std::string, std::vector<int64_t>> sparse;  // absent name = empty
  std::vector<int64_t> history;                        // full, oldest first
  std::vector<int64_t> candidates;
};

// ---------------------------------------------------------------------------
// Reference: docs/model.md steps 1-8, double accumulation, one request at a time.
class Reference {
 public:
  Reference(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w) {}

  std::vector<double> Scores(const RawRequest& req) const {
    const int d = c_.embedding_dim;
    // 1. bottom MLP, ReLU after every layer.
    std::vector<double> x(req.dense.begin(), req.dense.end());
    for (size_t i = 0; i < c_.bottom_mlp.size(); ++i) {
      x = Dense(x, "bottom_mlp." + std::to_string(i), /*relu=*/true);
    }
    // 2. pooled sparse features.
    std::vector<std::vector<double>> pooled;
    for (const SparseFeatureConfig& f : c_.sparse_features) {
      std::vector<double> p(d, 0.0);
      auto it = req.sparse.find(f.name);
      if (it != req.sparse.end()) {
        for (int64_t id : it->second) {
          const float* row = Row("embeddings." + f.name, id, f.num_rows);
          for (int k = 0; k < d; ++k) p[k] += row[k];
        }
      }
      pooled.push_back(p);
    }
    // 3. history: the last L ids, positions counted from the most recent.
    const size_t len = req.history.size();
    const int L = static_cast<int>(std::min<size_t>(len, c_.max_history_len));
    std::vector<std::vector<double>> h(L, std::vector<double>(d));
    const float* pos = w_.Find("history.position")->data;
    for (int j = 0; j < L; ++j) {
      const float* item = Row("embeddings.item", req.history[len - L + j], c_.item_rows);
      for (int k = 0; k < d; ++k) h[j][k] = double(item[k]) + pos[(L - 1 - j) * d + k];
    }
    // 4. self-attention, z = h + concat_heads(softmax(Q K^T / sqrt(dh)) V) Wo^T.
    const int H = c_.attention_heads, dh = d / H;
    std::vector<std::vector<double>> q(L), kk(L), v(L), o(L, std::vector<double>(d, 0.0)), z(L);
    for (int j = 0; j < L; ++j) {
      q[j] = MatVec("history.attn.q", h[j]);
      kk[j] = MatVec("history.attn.k", h[j]);
      v[j] = MatVec("history.attn.v", h[j]);
    }
    for (int head = 0; head < H; ++head) {
      for (int i = 0; i < L; ++i) {
        std::vector<double> s(L);
        double mx = -1e300;
        for (int j = 0; j < L; ++j) {
          double dot = 0;
          for (int k = head * dh; k < (head + 1) * dh; ++k) dot += q[i][k] * kk[j][k];
          s[j] = dot / std::sqrt(double(dh));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < L; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j < L; ++j) {
          for (int k = head * dh; k < (head + 1) * dh; ++k) o[i][k] += s[j] / sum * v[j][k];
        }
      }
    }
    for (int j = 0; j < L; ++j) {
      z[j] = MatVec("history.attn.o", o[j]);
      for (int k = 0; k < d; ++k) z[j][k] += h[j][k];
    }
    std::vector<double> scores;
    for (int64_t item : req.candidates) {
      // 5. candidate embedding.
      const float* er = Row("embeddings.item", item, c_.item_rows);
      std::vector<double> e(er, er + d);
      // 6. target attention over z.
      std::vector<double> u(d, 0.0);
      if (L > 0) {
        std::vector<double> s(L);
        double mx = -1e300;
        for (int j = 0; j < L; ++j) {
          double dot = 0;
          for (int k = 0; k < d; ++k) dot += e[k] * z[j][k];
          s[j] = dot / std::sqrt(double(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < L; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j < L; ++j) {
          for (int k = 0; k < d; ++k) u[k] += s[j] / sum * z[j][k];
        }
      }
      // 7. interaction over v = [x, p_1..p_F, u, e].
      std::vector<std::vector<double>> vs = {x};
      for (const auto& p : pooled) vs.push_back(p);
      vs.push_back(u);
      vs.push_back(e);
      std::vector<double> in = x;
      for (size_t a = 0; a + 1 < vs.size(); ++a) {
        for (size_t b = a + 1; b < vs.size(); ++b) {
          double dot = 0;
          for (int k = 0; k < d; ++k) dot += vs[a][k] * vs[b][k];
          in.push_back(dot);
        }
      }
      // 8. top MLP, ReLU except after the last layer, then the sigmoid.
      for (size_t i = 0; i < c_.top_mlp.size(); ++i) {
        in = Dense(in, "top_mlp." + std::to_string(i), /*relu=*/i + 1 < c_.top_mlp.size());
      }
      scores.push_back(1.0 / (1.0 + std::exp(-in[0])));
    }
    return scores;
  }

 private:
  const float* Row(const std::string& table, int64_t id, int64_t rows) const {
    const uint64_t row = static_cast<uint64_t>(id) % static_cast<uint64_t>(rows);
    return w_.Find(table)->data + row * c_.embedding_dim;
  }
  // y = W x (W: [out, in]).
  std::vector<double> MatVec(const std::string& name, const std::vector<double>& x) const {
    const WeightTensor* t = w_.Find(name);
    const int64_t out = t->shape[0], in = t->shape[1];
    EXPECT_EQ(in, static_cast<int64_t>(x.size())) << name;
    std::vector<double> y(out, 0.0);
    for (int64_t r = 0; r < out; ++r) {
      for (int64_t k = 0; k < in; ++k) y[r] += double(t->data[r * in + k]) * x[k];
    }
    return y;
  }
  std::vector<double> Dense(const std::vector<double>& x, const std::string& prefix, bool relu) const {
    std::vector<double> y = MatVec(prefix + ".weight", x);
    const float* b = w_.Find(prefix + ".bias")->data;
    for (size_t r = 0; r < y.size(); ++r) {
      y[r] += b[r];
      if (relu && y[r] < 0) y[r] = 0;
    }
    return y;
  }
  const ModelConfig& c_;
  const ModelWeights& w_;
};

// ---------------------------------------------------------------------------

ModelConfig SmallConfig(int d, int heads, int num_features, uint64_t seed) {
  ModelConfig c;
  c.name = "small";
  c.embedding_dim = d;
  c.num_dense_features = 5;
  const char* names[] = {"country", "segments", "device", "hour"};
  const int64_t rows[] = {7, 13, 3, 24};
  for (int f = 0; f < num_features; ++f) c.sparse_features.push_back({names[f], rows[f]});
  c.item_rows = 50;
  c.max_history_len = 6;
  c.attention_heads = heads;
  c.bottom_mlp = {12, d};
  c.top_mlp = {10, 1};
  c.seed = seed;
  return c;
}

using testing::ScaledWeights;

ModelWeights CopyWeights(const ModelWeights& from) {
  ModelWeights w;
  for (const auto& kv : from.tensors()) {
    w.Add(kv.first, kv.second.shape,
          std::vector<float>(kv.second.data, kv.second.data + kv.second.num_elements()));
  }
  w.ComputeVersion();
  return w;
}

Batch BuildBatch(const ModelConfig& config, const std::vector<RawRequest>& requests) {
  std::vector<RankInput> inputs;
  for (const RawRequest& r : requests) {
    RankInput input;
    input.dense = r.dense;
    input.sparse.resize(config.sparse_features.size());
    for (const auto& kv : r.sparse) {
      const int index = SparseFeatureIndex(config, kv.first);
      EXPECT_GE(index, 0) << kv.first;
      if (index >= 0) input.sparse[index] = kv.second;
    }
    input.history = r.history;
    input.candidates = r.candidates;
    inputs.push_back(std::move(input));
  }
  std::vector<const RankInput*> pointers;
  for (const RankInput& input : inputs) pointers.push_back(&input);
  Batch batch;
  Status s = AssembleBatch(pointers, config, &batch);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return batch;
}

std::vector<int64_t> RandomIds(std::mt19937_64& rng, int n) {
  std::vector<int64_t> ids(n);
  for (auto& id : ids) {
    switch (rng() % 5) {
      case 0: id = -static_cast<int64_t>(rng() % 1000) - 1; break;                // negative
      case 1: id = std::numeric_limits<int64_t>::max() - int64_t(rng() % 7); break;  // huge
      case 2: id = std::numeric_limits<int64_t>::min() + int64_t(rng() % 7); break;
      default: id = static_cast<int64_t>(rng() % 100000); break;
    }
  }
  return ids;
}

RawRequest RandomRequest(std::mt19937_64& rng, const ModelConfig& c, int history_len, int num_candidates) {
  RawRequest r;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < c.num_dense_features; ++i) r.dense.push_back(normal(rng));
  for (const SparseFeatureConfig& f : c.sparse_features) {
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) continue;                                  // absent
    r.sparse[f.name] = RandomIds(rng, kind == 1 ? 0 : static_cast<int>(rng() % 5) + 1);  // empty or 1..5
  }
  r.history = RandomIds(rng, history_len);
  r.candidates = RandomIds(rng, num_candidates);
  return r;
}

void ExpectScoresMatch(const ModelConfig& config, const ModelWeights& weights, const std::vector<RawRequest>& reqs,
                       double tolerance, const std::string& label) {
  Reference ref(config, weights);
  std::vector<double> expected;
  for (const RawRequest& r : reqs) {
    std::vector<double> s = ref.Scores(r);
    expected.insert(expected.end(), s.begin(), s.end());
  }
  const Batch batch = BuildBatch(config, reqs);
  for (AttentionStrategy strategy :
       {AttentionStrategy::kJagged, AttentionStrategy::kPaddedFlash, AttentionStrategy::kPaddedDense}) {
    ModelOptions options;
    options.attention = strategy;
    options.cpu_threads = 2;
    std::unique_ptr<Model> model;
    Status s = Model::Create(config, CopyWeights(weights), options, &model);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<float> scores(3, -1.0f);
    s = model->Forward(batch, &scores);
    ASSERT_TRUE(s.ok()) << label << " " << AttentionStrategyName(strategy) << ": " << s.ToString();
    ASSERT_EQ(scores.size(), expected.size());
    for (size_t i = 0; i < scores.size(); ++i) {
      ASSERT_TRUE(std::isfinite(scores[i]));
      EXPECT_NEAR(scores[i], expected[i], tolerance)
          << label << " " << AttentionStrategyName(strategy) << " candidate " << i;
    }
  }
}

TEST(ModelForwardTest, MixedBatchMatchesReferenceForEveryStrategy) {
  const ModelConfig config = SmallConfig(8, 2, 3, 5);
  const ModelWeights weights = ScaledWeights(config, 2.0f);
  std::mt19937_64 rng(1);
  std::vector<RawRequest> reqs;
  reqs.push_back(RandomRequest(rng, config, 0, 3));   // empty history
  reqs.push_back(RandomRequest(rng, config, 15, 1));  // history longer than max (6): most recent kept; one candidate
  reqs.push_back(RandomRequest(rng, config, 6, 40));  // exactly max; many candidates
  reqs.push_back(RandomRequest(rng, config, 1, 2));
  RawRequest no_sparse = RandomRequest(rng, config, 3, 5);
  no_sparse.sparse.clear();  // every feature absent
  reqs.push_back(no_sparse);
  RawRequest empty_lists = RandomRequest(rng, config, 4, 2);
  for (const auto& f : config.sparse_features) empty_lists.sparse[f.name] = {};  // present but empty
  reqs.push_back(empty_lists);
  RawRequest extreme = RandomRequest(rng, config, 5, 4);
  extreme.candidates = {-1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0};
  extreme.history = {-7, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 3, -1};
  extreme.sparse["country"] = {std::numeric_limits<int64_t>::min(), -3, std::numeric_limits<int64_t>::max()};
  reqs.push_back(extreme);
  ExpectScoresMatch(config, weights, reqs, 1e-5, "mixed");
}

TEST(ModelForwardTest, TruncationKeepsTheMostRecentIds) {
  // Two requests whose last max_history_len ids agree score the same; one
  // differing in the kept part does not.
  const ModelConfig config = SmallConfig(8, 2, 1, 9);
  const ModelWeights weights = ScaledWeights(config, 2.0f);
  std::mt19937_64 rng(2);
  RawRequest a = RandomRequest(rng, config, 10, 3);
  RawRequest b = a;
  for (int i = 0; i < 4; ++i) b.history[i] += 17;  // only dropped (oldest) ids change
  RawRequest c = a;
  c.history.back() += 17;                          // the most recent id changes
  const Batch batch = BuildBatch(config, {a, b, c});
  EXPECT_EQ(batch.history_offsets, (std::vector<int32_t>{0, 6, 12, 18}));
  EXPECT_EQ(std::vector<int64_t>(batch.history_ids.begin(), batch.history_ids.begin() + 6),
            std::vector<int64_t>(a.history.end() - 6, a.history.end()));
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Create(config, CopyWeights(weights), ModelOptions(), &model).ok());
  std::vector<float> scores;
  ASSERT_TRUE(model->Forward(batch, &scores).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scores[i], scores[3 + i]);
  bool any_differs = false;
  for (int i = 0; i < 3; ++i) any_differs |= std::abs(scores[i] - scores[6 + i]) > 1e-6;
  EXPECT_TRUE(any_differs);
  ExpectScoresMatch(config, weights, {a, b, c}, 1e-5, "truncation");
}

TEST(ModelForwardTest, RandomModelsAndBatchesMatchReference) {
  std::mt19937_64 rng(3);
  const int shapes[][3] = {{4, 1, 0}, {8, 4, 1}, {16, 2, 2}, {8, 1, 4}, {32, 4, 3}};
  for (int trial = 0; trial < 10; ++trial) {
    const auto& s = shapes[trial % 5];
    const ModelConfig config = SmallConfig(s[0], s[1], s[2], 100 + trial);
    const ModelWeights weights = ScaledWeights(config, trial % 2 ? 1.5f : 2.0f);
    std::vector<RawRequest> reqs;
    const int num_requests = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < num_requests; ++r) {
      reqs.push_back(RandomRequest(rng, config, static_cast<int>(rng() % 10), 1 + static_cast<int>(rng() % 9)));
    }
    ExpectScoresMatch(config, weights, reqs, 1e-5, "trial " + std::to_string(trial));
  }
}

TEST(ModelForwardTest, AllHistoriesEmptyAndSingleRequest) {
  const ModelConfig config = SmallConfig(8, 2, 2, 21);
  const ModelWeights weights = ScaledWeights(config, 2.0f);
  std::mt19937_64 rng(4);
  ExpectScoresMatch(config, weights, {RandomRequest(rng, config, 0, 2), RandomRequest(rng, config, 0, 1)}, 1e-5,
                    "no history");
  ExpectScoresMatch(config, weights, {RandomRequest(rng, config, 3, 1)}, 1e-5, "single");
}

TEST(ModelForwardTest, DefaultModelScoresAreSpreadNotSaturated) {
  ModelConfig config;
  ASSERT_TRUE(DefaultModelConfig(&config).ok());
  config.item_rows = 10000;  // the math does not depend on table sizes; keeps the test fast
  for (auto& f : config.sparse_features) f.num_rows = std::min<int64_t>(f.num_rows, 1000);
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Create(config, ModelWeights(), ModelOptions(), &model).ok());
  std::mt19937_64 rng(5);
  std::vector<RawRequest> reqs;
  for (int r = 0; r < 8; ++r) reqs.push_back(RandomRequest(rng, config, 20 + 30 * r, 16));
  std::vector<float> scores;
  ASSERT_TRUE(model->Forward(BuildBatch(config, reqs), &scores).ok());
  float lo = 1, hi = 0;
  for (float s : scores) {
    EXPECT_GT(s, 0.01f);
    EXPECT_LT(s, 0.99f);
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  EXPECT_GT(hi - lo, 1e-3f) << "scores do not depend on the inputs";
  ModelMemory mem = model->Memory();
  EXPECT_GT(mem.weights_bytes, config.item_rows * config.embedding_dim * 4);
  EXPECT_GT(mem.workspace_peak_bytes, 0);
  EXPECT_GT(mem.padding_saved_bytes, 0);  // lengths differ, so padding would have cost memory
  EXPECT_EQ(model->device(), "cpu");
  EXPECT_EQ(model->version().size(), 16u);
}

TEST(ModelForwardTest, AssembleBatchRejectsBadInputNamingRequestAndField) {
  const ModelConfig config = SmallConfig(8, 2, 2, 1);
  std::mt19937_64 rng(6);
  const RawRequest raw = RandomRequest(rng, config, 3, 2);
  RankInput good;
  good.dense = raw.dense;
  good.history = raw.history;
  good.candidates = raw.candidates;
  Batch batch;
  RankInput bad = good;
  bad.dense.pop_back();
  Status s = AssembleBatch({&good, &bad}, config, &batch);
  EXPECT_NE(s.message().find("request 1: dense"), std::string::npos) << s.message();
  EXPECT_EQ(batch.num_requests, 0);
  bad = good;
  bad.candidates.clear();
  s = AssembleBatch({&bad}, config, &batch);
  EXPECT_NE(s.message().find("request 0: candidates"), std::string::npos) << s.message();
  bad = good;
  bad.sparse.resize(3);
  s = AssembleBatch({&good, &good, &bad}, config, &batch);
  EXPECT_NE(s.message().find("request 2: sparse"), std::string::npos) << s.message();
  EXPECT_EQ(batch.num_requests, 0);
  EXPECT_EQ(batch.candidate_offsets, std::vector<int32_t>{0});
  // A good batch after a refused one: the refused one left nothing behind.
  ASSERT_TRUE(AssembleBatch({&good}, config, &batch).ok());
  EXPECT_EQ(batch.num_requests, 1);
  EXPECT_EQ(batch.candidate_ids, good.candidates);
  EXPECT_EQ(SparseFeatureIndex(config, "segments"), 1);
  EXPECT_EQ(SparseFeatureIndex(config, "nope"), -1);
}

TEST(ModelForwardTest, AssembleBatchKeepsTheMostRecentHistory) {
  ModelConfig config = SmallConfig(8, 2, 2, 1);
  config.max_history_len = 3;
  RankInput a;
  a.dense.assign(config.num_dense_features, 0.5f);
  a.sparse = {{7, 8}};  // the second feature absent
  a.history = {1, 2, 3, 4, 5};
  a.candidates = {10, 11};
  RankInput b = a;
  b.sparse = {{}, {9}};
  b.history = {6};
  b.candidates = {12};
  Batch batch;
  ASSERT_TRUE(AssembleBatch({&a, &b}, config, &batch).ok());
  EXPECT_EQ(batch.history_ids, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(batch.history_offsets, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(batch.sparse_ids[0], (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(batch.sparse_offsets[0], (std::vector<int32_t>{0, 2, 2}));
  EXPECT_EQ(batch.sparse_ids[1], (std::vector<int64_t>{9}));
  EXPECT_EQ(batch.sparse_offsets[1], (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(batch.candidate_offsets, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(batch.PaddedHistoryTokens(), 6);
}

TEST(ModelForwardTest, CreateAndForwardErrorsNameTheProblem) {
  const ModelConfig config = SmallConfig(8, 2, 1, 1);
  std::unique_ptr<Model> model;
  ModelOptions options;
  options.device = "tpu";
  EXPECT_NE(Model::Create(config, ModelWeights(), options, &model).message().find("device"), std::string::npos);
  ModelConfig other = config;
  other.item_rows = 51;
  ModelWeights wrong;
  ASSERT_TRUE(MakeRandomWeights(other, &wrong).ok());
  Status s = Model::Create(config, std::move(wrong), ModelOptions(), &model);
  EXPECT_NE(s.message().find("embeddings.item"), std::string::npos) << s.message();

  ASSERT_TRUE(Model::Create(config, ModelWeights(), ModelOptions(), &model).ok());
  std::mt19937_64 rng(7);
  Batch batch = BuildBatch(config, {RandomRequest(rng, config, 2, 2)});
  batch.candidate_offsets.back() = 5;
  std::vector<float> scores;
  s = model->Forward(batch, &scores);
  EXPECT_NE(s.message().find("candidate_offsets"), std::string::npos) << s.message();

  AttentionStrategy strategy;
  EXPECT_TRUE(ParseAttentionStrategy("padded_dense", &strategy).ok());
  EXPECT_EQ(strategy, AttentionStrategy::kPaddedDense);
  EXPECT_FALSE(ParseAttentionStrategy("dense", &strategy).ok());
}

// The two-phase API the executor drives: batches staged into two slots and
// run in an interleaved order (a slot restaged before the other one runs)
// give exactly Forward's scores, each from its own slot's batch.
TEST(ModelForwardTest, StageAndRunOnTwoSlotsEqualForwardOfEachBatch) {
  const ModelConfig config = SmallConfig(8, 2, 3, 11);
  std::unique_ptr<Model> model;
  ModelOptions options;
  options.cpu_threads = 2;
  ASSERT_TRUE(Model::Create(config, ScaledWeights(config, 2.0f), options, &model).ok());
  ASSERT_EQ(Model::kStageSlots, 2);
  std::mt19937_64 rng(12);
  std::vector<Batch> batches;
  std::vector<std::vector<float>> expected;
  for (int b = 0; b < 4; ++b) {
    std::vector<RawRequest> reqs;
    for (int r = 0; r <= b; ++r) {
      reqs.push_back(RandomRequest(rng, config, static_cast<int>(rng() % 9), 1 + static_cast<int>(rng() % 5)));
    }
    batches.push_back(BuildBatch(config, reqs));
    expected.emplace_back();
    ASSERT_TRUE(model->Forward(batches.back(), &expected.back()).ok());
  }
  // Every batch has its own scores, so a slot mix-up cannot go unnoticed.
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) ASSERT_NE(expected[a], expected[b]);
  }

  // (stage batch b into slot s) or (run slot s, expect batch b), in order.
  struct Step {
    bool stage;
    int slot, batch;
  };
  const Step steps[] = {{true, 0, 0},  {true, 1, 1},  {false, 1, 1}, {false, 0, 0}, {true, 0, 2},
                        {true, 1, 3},  {false, 0, 2}, {true, 0, 0},  {false, 1, 3}, {true, 1, 2},
                        {true, 1, 1},  {false, 0, 0}, {false, 1, 1}};  // slot 1 restaged before its Run: 1 wins
  for (const Step& step : steps) {
    const std::string label = std::string(step.stage ? "Stage" : "Run") + " slot " + std::to_string(step.slot) +
                              " batch " + std::to_string(step.batch);
    if (step.stage) {
      Status s = model->Stage(batches[step.batch], step.slot);
      ASSERT_TRUE(s.ok()) << label << ": " << s.ToString();
      continue;
    }
    std::vector<float> scores(7, -1.0f);
    ForwardTimings timings;
    timings.h2d_seconds = timings.d2h_seconds = -1;
    Status s = model->Run(step.slot, &scores, &timings);
    ASSERT_TRUE(s.ok()) << label << ": " << s.ToString();
    EXPECT_EQ(scores, expected[step.batch]) << label;
    EXPECT_EQ(timings.h2d_seconds, 0.0) << "no copies on the CPU backend";
    EXPECT_EQ(timings.d2h_seconds, 0.0);
  }

  // Run frees its slot: running it again is an error, as are bad slots and a
  // batch that fails the shape check (which leaves nothing staged).
  std::vector<float> scores;
  Status s = model->Run(0, &scores, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("slot = 0"), std::string::npos) << s.message();
  s = model->Stage(batches[0], 2);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("slot = 2"), std::string::npos) << s.message();
  s = model->Run(-1, &scores, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("slot = -1"), std::string::npos) << s.message();
  ASSERT_TRUE(model->Stage(batches[1], 1).ok());
  Batch bad = batches[2];
  bad.history_offsets.back() += 1;
  s = model->Stage(bad, 1);
  EXPECT_NE(s.message().find("history_offsets"), std::string::npos) << s.message();
  EXPECT_FALSE(model->Run(1, &scores, nullptr).ok()) << "a failed Stage must not leave the earlier batch staged";

  // Run split in Launch and Wait, both slots launched at once (the
  // executor's order on an asynchronous model): each Wait returns its own
  // slot's batch; the CPU backend computes in Wait.
  EXPECT_FALSE(model->AsyncLaunch());
  ASSERT_TRUE(model->Stage(batches[2], 0).ok());
  ASSERT_TRUE(model->Stage(batches[3], 1).ok());
  ASSERT_TRUE(model->Launch(0).ok());
  ASSERT_TRUE(model->Launch(1).ok());
  ASSERT_TRUE(model->Wait(0, &scores, nullptr).ok());
  EXPECT_EQ(scores, expected[2]);
  ASSERT_TRUE(model->Wait(1, &scores, nullptr).ok());
  EXPECT_EQ(scores, expected[3]);
  s = model->Wait(1, &scores, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("nothing is launched"), std::string::npos) << s.message();
  s = model->Launch(2);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace jagrank
