// CUDA backend against the CPU backend (float32, itself checked against the
// docs/model.md math in model_forward_test): scores within 1e-2 with bf16
// tables/attention, 1e-4 in float32 mode, for all three attention strategies.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "model_test_util.h"

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
  std::vector<RankInput> inputs;
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
    inputs.push_back({dense, sparse, history, candidates});
  }
  std::vector<const RankInput*> pointers;
  for (const RankInput& input : inputs) pointers.push_back(&input);
  Batch batch;
  EXPECT_TRUE(AssembleBatch(pointers, c, &batch).ok());
  return batch;
}

using testing::ScaledWeights;

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

class ModelCudaTest : public ::testing::Test {
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

// More than 7 pooled features: the CUDA model splits the interaction and the
// first top-MLP layer by request and candidate (padded widths, the request
// part repeated over the candidates). 17 features: 18 request vectors, two
// rounds of the candidate kernel; spread scores so that a wrong column
// cannot hide.
TEST_F(ModelCudaTest, SplitFirstTopLayerMatchesCpu) {
  ModelConfig c = TestConfig(128, 4, 200, 100000);
  c.sparse_features.clear();
  for (int f = 0; f < 17; ++f) c.sparse_features.push_back({"f" + std::to_string(f), 50 + 37 * f});
  c.top_mlp = {192, 64, 1};
  CompareToCpu(c, RandomBatch(c, 24, 40, 3), /*bf16=*/false, 1e-4, /*scale=*/2.0f);
  CompareToCpu(c, RandomBatch(c, 24, 40, 4), /*bf16=*/true, 2e-2, /*scale=*/2.0f);
  c.top_mlp = {1};  // the split layer is the last: no ReLU, float32 logits
  CompareToCpu(c, RandomBatch(c, 24, 40, 5), /*bf16=*/true, 2e-2, /*scale=*/2.0f);
}

TEST_F(ModelCudaTest, OtherHeadDimsAndEdgeBatches) {
  const ModelConfig c = TestConfig(128, 2, 64, 5000);  // dh = 64, target head dim 128
  CompareToCpu(c, RandomBatch(c, 7, 5, 3), true, 1e-2);
  const ModelConfig c32 = TestConfig(32, 1, 16, 1000);  // dh = 32
  CompareToCpu(c32, RandomBatch(c32, 1, 1, 4), true, 1e-2);  // one request with no history, one candidate
  CompareToCpu(c32, RandomBatch(c32, 3, 2, 5), true, 1e-2);
}

// The executor's pipeline: a second thread stages batch i + 1 (pinned
// packing, async H2D copy on the copy stream) into the other slot while this
// thread runs batch i, launched before batch i - 1 is waited for (two in
// flight, as the executor runs them). Every Wait must return its own batch's scores (what
// Forward gives, shapes changing every iteration) and report the copy times.
// A wait that returned before the scores' copy would show here as scores
// that differ from Forward's.
void CheckStagedPipeline() {
  using namespace std::chrono_literals;
  const ModelConfig c = TestConfig(64, 2, 256, 100000);
  std::vector<Batch> batches;
  // The last shape (~100k candidates) makes its Runs long enough (~1 ms) that
  // the stager, woken when the previous Run returns, stages the next batch
  // while it computes: with only small batches a fast Run could finish before
  // the stager thread woke up (seen on the H200 once the model got faster).
  const int shapes[][2] = {{64, 64}, {1, 1},   {17, 200}, {0, 1},   {40, 8},
                           {3, 128}, {64, 32}, {9, 3},    {28, 60}, {512, 400}};
  uint64_t seed = 100;
  for (const auto& shape : shapes) batches.push_back(RandomBatch(c, shape[0], shape[1], seed++));
  const int nb = static_cast<int>(batches.size());
  for (AttentionStrategy strategy : kStrategies) {
    const char* name = AttentionStrategyName(strategy);
    std::unique_ptr<Model> model = MakeModel(c, "cuda:0", strategy, /*bf16=*/true, /*scale=*/2.0f);
    ASSERT_NE(model, nullptr);
    std::vector<std::vector<float>> expected(nb);
    for (int b = 0; b < nb; ++b) ASSERT_TRUE(model->Forward(batches[b], &expected[b]).ok()) << name << " " << b;

    const int iters = 90;
    std::mutex mu;
    std::condition_variable cv;
    int staged_upto = -1, run_upto = -1;  // last iteration staged / run; guarded by mu
    bool abort = false;                   // guarded by mu
    std::vector<Status> stage_status(iters);
    std::atomic<int> runs_started{0}, runs_finished{0};
    int overlapped = 0;  // stager thread only until joined
    std::thread stager([&] {
      for (int i = 0; i < iters; ++i) {
        {
          // Slot i % 2 was last used by iteration i - 2: wait until its Run returned.
          std::unique_lock<std::mutex> lock(mu);
          if (!cv.wait_for(lock, 60s, [&] { return run_upto >= i - 2 || abort; }) || abort) return;
        }
        const int started0 = runs_started.load(), finished0 = runs_finished.load();
        stage_status[i] = model->Stage(batches[i % nb], i % 2);
        const int started1 = runs_started.load(), finished1 = runs_finished.load();
        // A Run was in flight at some point during this Stage.
        if (started0 != finished0 || started1 != finished1 || started1 != started0) ++overlapped;
        std::lock_guard<std::mutex> lock(mu);
        staged_upto = i;
        cv.notify_all();
      }
    });
    int checked = 0, exact = 0;
    double max_diff = 0, h2d_sum = 0, d2h_sum = 0;
    std::vector<Status> launch_status(iters);
    // Waits for iteration j (launched before j + 1 was, as the executor
    // does: two batches in flight at once) and checks its scores.
    auto wait_and_check = [&](int j) {
      const Batch& batch = batches[j % nb];
      std::vector<float> scores(3, -1.0f);
      ForwardTimings timings;
      Status s = launch_status[j];
      if (s.ok()) s = model->Wait(j % 2, &scores, &timings);
      runs_finished++;
      {
        std::lock_guard<std::mutex> lock(mu);
        run_upto = j;
        cv.notify_all();
      }
      EXPECT_TRUE(stage_status[j].ok()) << name << " " << j << ": " << stage_status[j].ToString();
      EXPECT_TRUE(s.ok()) << name << " " << j << ": " << s.ToString();
      const std::vector<float>& want = expected[j % nb];
      if (!s.ok() || scores.size() != want.size()) {
        ADD_FAILURE() << name << " iteration " << j << ": " << scores.size() << " scores, want " << want.size();
        return;
      }
      const double diff = MaxAbsDiff(scores, want);
      max_diff = std::max(max_diff, diff);
      EXPECT_LE(diff, 1e-6) << name << " iteration " << j << " (batch " << j % nb << ", slot " << j % 2 << ")";
      exact += scores == want;
      ++checked;
      if (batch.num_candidates() > 0) {
        EXPECT_GT(timings.h2d_seconds, 0.0) << name << " " << j;
        EXPECT_GT(timings.d2h_seconds, 0.0) << name << " " << j;
        EXPECT_LT(timings.h2d_seconds, 1.0) << name << " " << j;
        h2d_sum += timings.h2d_seconds;
        d2h_sum += timings.d2h_seconds;
      } else {
        EXPECT_EQ(timings.h2d_seconds, 0.0) << "empty batch: nothing copied";
      }
    };
    int launched = 0;
    for (int i = 0; i < iters; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (!cv.wait_for(lock, 60s, [&] { return staged_upto >= i; })) {
          ADD_FAILURE() << name << ": iteration " << i << " was never staged";
          abort = true;
          cv.notify_all();
          break;
        }
      }
      runs_started++;
      launch_status[i] = model->Launch(i % 2);
      launched = i + 1;
      if (i > 0) wait_and_check(i - 1);
    }
    if (launched > 0) wait_and_check(launched - 1);
    stager.join();
    EXPECT_EQ(checked, iters) << name;
    // Stage is called as soon as a slot frees, so it overlaps at least the
    // long Runs of the largest batch; one overlap is the bound asserted.
    EXPECT_GT(overlapped, 0) << name << ": no Stage ever ran during a Run";
    std::printf("%s: %d pipelined iterations, %d bit-identical to Forward, max |diff| %.3g, Stage during Run %d, "
                "mean h2d %.1f us, d2h %.1f us\n",
                name, checked, exact, max_diff, overlapped,
                1e6 * h2d_sum / checked, 1e6 * d2h_sum / checked);

    // Forward (slot 0) still agrees afterwards; Wait frees its slot; bad slots are named.
    std::vector<float> scores;
    ASSERT_TRUE(model->Forward(batches[0], &scores).ok());
    EXPECT_LE(MaxAbsDiff(scores, expected[0]), 1e-6);
    EXPECT_TRUE(model->AsyncLaunch());
    Status s = model->Run(1, &scores, nullptr);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("slot = 1"), std::string::npos) << s.message();
    s = model->Wait(1, &scores, nullptr);
    EXPECT_NE(s.message().find("nothing is launched"), std::string::npos) << s.message();
    s = model->Stage(batches[0], Model::kStageSlots);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    Batch bad = batches[2];
    bad.candidate_offsets.back() += 1;
    s = model->Stage(bad, 0);
    EXPECT_NE(s.message().find("candidate_offsets"), std::string::npos) << s.message();
    EXPECT_FALSE(model->Run(0, &scores, nullptr).ok()) << "a failed Stage leaves nothing to run";
  }
}

TEST_F(ModelCudaTest, StageOnAnotherThreadWhileRunComputesMatchesForward) { CheckStagedPipeline(); }

// Each intermediate goes back to the pool once its last reader is queued,
// so a pass's workspace peak is that of its widest step: here two adjacent
// top-MLP activations (C x 2 x 1024 bf16), not every activation of the pass
// at once (C x (1024 + 1024 + 512) bf16 for the top MLP alone). The scores
// stay those of the CPU model.
TEST_F(ModelCudaTest, WorkspacePeakIsTheWidestStepNotTheSumOfSteps) {
  ModelConfig c = TestConfig(128, 4, 200, 100000);
  c.sparse_features.clear();
  for (int f = 0; f < 17; ++f) c.sparse_features.push_back({"f" + std::to_string(f), 50 + 37 * f});
  c.top_mlp = {1024, 1024, 512, 1};
  const Batch batch = RandomBatch(c, 64, 400, 21);
  std::unique_ptr<Model> model = MakeModel(c, "cuda:0", AttentionStrategy::kJagged, /*bf16=*/true);
  ASSERT_NE(model, nullptr);
  std::vector<float> scores;
  ASSERT_TRUE(model->Forward(batch, &scores).ok());
  const int64_t C = batch.num_candidates();
  const int64_t peak = model->Memory().workspace_peak_bytes;
  std::printf("C = %lld, T = %lld: workspace peak %.2f MiB = %.0f bytes per candidate\n", static_cast<long long>(C),
              static_cast<long long>(batch.num_history_tokens()), peak / 1048576.0, double(peak) / C);
  EXPECT_GE(peak, C * 2 * 1024 * 2);
  EXPECT_LT(peak, C * (1024 + 1024 + 512) * 2);
  CompareToCpu(c, batch, /*bf16=*/true, 2e-2, /*scale=*/2.0f);
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
