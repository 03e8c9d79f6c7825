// Helpers shared by the server tests: a small real model, a gate that holds
// Forward, a model wrapper that records what it computed, a counting
// ServerMetrics, async Rank calls with bounded waits, free ports.
#ifndef JAGRANK_TESTS_SERVER_TEST_HELPERS_H_
#define JAGRANK_TESTS_SERVER_TEST_HELPERS_H_

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jagrank/v1/ranker.grpc.pb.h"
#include "model/model.h"
#include "process_util.h"
#include "server/rank_request.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace jagrank {
namespace server_test {

// d = 16, two pooled features, histories kept up to 32.
inline ModelConfig SmallModelConfig() {
  ModelConfig c;
  c.name = "test-small";
  c.embedding_dim = 16;
  c.num_dense_features = 4;
  c.sparse_features = {{"country", 50}, {"segments", 1000}};
  c.item_rows = 5000;
  c.max_history_len = 32;
  c.attention_heads = 2;
  c.bottom_mlp = {32, 16};
  c.top_mlp = {32, 1};
  c.seed = 7;
  return c;
}

// A server config for tests: loopback on any free port, no metrics, the CPU
// backend on one thread, no linger after a drain.
inline ServerConfig LoopbackCpuConfig() {
  ServerConfig c;
  c.grpc_address = "127.0.0.1:0";
  c.metrics_address = "";
  c.device = "cpu";
  c.cpu_threads = 1;
  c.drain_linger_ms = 0;
  return c;
}

inline std::unique_ptr<Model> MakeCpuModel(const ModelConfig& config) {
  std::unique_ptr<Model> model;
  ModelOptions options;
  options.device = "cpu";
  options.cpu_threads = 1;
  Status s = Model::Create(config, ModelWeights(), options, &model);
  if (!s.ok()) ADD_FAILURE() << s.ToString();
  return model;
}

// Holds every Forward and Run while closed; counts the calls that reached it.
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void ResetCount() {
    std::lock_guard<std::mutex> lock(mu_);
    entered_ = 0;
  }
  bool WaitEntered(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int entered_ = 0;
};

// What the model computed: every candidate id and every batch's size; and
// the size of every batch staged (Model::Stage), computed or not.
struct ForwardLog {
  std::mutex mu;
  std::condition_variable cv;
  std::multiset<int64_t> candidate_ids;
  std::vector<int> batch_requests;
  std::vector<int> staged_requests;

  // True once a batch of `requests` requests was staged (bounded wait).
  bool WaitStaged(int requests, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] {
      return std::find(staged_requests.begin(), staged_requests.end(), requests) != staged_requests.end();
    });
  }
  // True once `count` batches were staged (bounded wait).
  bool WaitStagedCount(size_t count, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return staged_requests.size() >= count; });
  }
};

// The real model behind a gate, recording each batch. Stage and Run go
// through to the inner model's own (so a CUDA model keeps its copy overlap);
// the gate holds Forward and Run. `gate` and `log` must outlive it.
class RecordingModel final : public Model {
 public:
  RecordingModel(std::unique_ptr<Model> inner, Gate* gate, ForwardLog* log)
      : inner_(std::move(inner)), gate_(gate), log_(log) {}
  Status Forward(const Batch& batch, std::vector<float>* scores) override {
    gate_->Pass();
    RecordComputed(batch);
    return inner_->Forward(batch, scores);
  }
  Status Stage(const Batch& batch, int slot) override {
    if (slot >= 0 && slot < kStageSlots) staged_[slot] = nullptr;
    Status s = inner_->Stage(batch, slot);
    if (!s.ok()) return s;
    staged_[slot] = &batch;
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->staged_requests.push_back(batch.num_requests);
    log_->cv.notify_all();
    return s;
  }
  Status Run(int slot, std::vector<float>* scores, ForwardTimings* timings) override {
    gate_->Pass();
    if (slot >= 0 && slot < kStageSlots && staged_[slot] != nullptr) {
      RecordComputed(*staged_[slot]);
      staged_[slot] = nullptr;
    }
    return inner_->Run(slot, scores, timings);
  }
  const ModelConfig& config() const override { return inner_->config(); }
  std::string device() const override { return inner_->device(); }
  AttentionStrategy attention() const override { return inner_->attention(); }
  int64_t AttentionCost(int64_t requests, int64_t sum_sq, int64_t longest) const override {
    return inner_->AttentionCost(requests, sum_sq, longest);
  }
  std::string version() const override { return inner_->version(); }
  ModelMemory Memory() const override { return inner_->Memory(); }

 private:
  void RecordComputed(const Batch& batch) {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->candidate_ids.insert(batch.candidate_ids.begin(), batch.candidate_ids.end());
    log_->batch_requests.push_back(batch.num_requests);
  }

  std::unique_ptr<Model> inner_;
  Gate* gate_;
  ForwardLog* log_;
  const Batch* staged_[kStageSlots] = {};  // slot s touched only by calls on s (Model's contract)
};

// Counts what the server reports.
class CountingMetrics final : public ServerMetrics {
 public:
  void OnRequestDone(const std::string& code, int64_t, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_[code]++;
  }
  void OnRejected(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    rejected_[reason]++;
  }
  void OnQueueLatency(double) override {}
  void OnResponseSent(double) override {}
  void OnBatch(const BatchStats& stats) override {
    std::lock_guard<std::mutex> lock(mu_);
    batches_++;
    max_batch_requests_ = std::max(max_batch_requests_, stats.requests);
  }
  void SetQueueDepth(int64_t) override {}
  void SetInflight(int64_t requests) override {
    std::lock_guard<std::mutex> lock(mu_);
    inflight_ = requests;
    cv_.notify_all();
  }
  void SetMemory(const ModelMemory&) override {}

  // True once `n` accepted calls are in the server at the same time.
  bool WaitInflight(int64_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return inflight_ >= n; });
  }
  int64_t inflight() {
    std::lock_guard<std::mutex> lock(mu_);
    return inflight_;
  }
  int max_batch_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_batch_requests_;
  }
  int64_t rejected(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    return rejected_[reason];
  }
  int64_t done(const std::string& code) {
    std::lock_guard<std::mutex> lock(mu_);
    return done_[code];
  }
  // Every status code counted so far, as "CODE=n ..." (for failure messages).
  std::string done_codes() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [code, n] : done_) out += code + "=" + std::to_string(n) + " ";
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t inflight_ = 0;
  std::map<std::string, int64_t> done_;
  std::map<std::string, int64_t> rejected_;
  int64_t batches_ = 0;
  int max_batch_requests_ = 0;
};

// One async Rank call; Wait() is bounded.
struct PendingCall {
  grpc::ClientContext context;
  v1::RankResponse response;
  grpc::Status status;
  std::chrono::steady_clock::time_point done_at;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return done; });
  }
};

inline std::unique_ptr<PendingCall> SendRank(v1::Ranker::Stub* stub, const v1::RankRequest& request,
                                             std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  auto call = std::make_unique<PendingCall>();
  call->context.set_deadline(std::chrono::system_clock::now() + deadline);
  PendingCall* raw = call.get();
  stub->async()->Rank(&raw->context, &request, &raw->response, [raw](grpc::Status status) {
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->status = std::move(status);
    raw->done_at = std::chrono::steady_clock::now();
    raw->done = true;
    raw->cv.notify_all();
  });
  return call;
}

// A request for SmallModelConfig() with the given shape; ids depend on `seed`.
inline v1::RankRequest MakeRequest(int seed, int history_len, int candidates, const ModelConfig& c) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(-100000, 100000000);
  std::uniform_real_distribution<float> dense(-1, 1);
  v1::RankRequest r;
  r.set_request_id("req-" + std::to_string(seed));
  for (int i = 0; i < c.num_dense_features; ++i) r.add_dense_features(dense(rng));
  // Feature 0 present with seed % 3 ids (0 = present but empty); feature 1 absent for odd seeds.
  auto* first = (*r.mutable_sparse_features())[c.sparse_features[0].name].mutable_ids();
  for (int i = 0; i < seed % 3; ++i) first->Add(id(rng));
  if (seed % 2 == 0 && c.sparse_features.size() > 1) {
    auto* second = (*r.mutable_sparse_features())[c.sparse_features[1].name].mutable_ids();
    for (int i = 0; i < 1 + seed % 5; ++i) second->Add(id(rng));
  }
  for (int i = 0; i < history_len; ++i) r.add_history(id(rng));
  for (int i = 0; i < candidates; ++i) r.add_candidate_item_ids(id(rng));
  return r;
}

// Scores of `request` computed alone by `model` (the oracle).
inline std::vector<float> ForwardAlone(Model* model, const v1::RankRequest& request) {
  RequestLimits limits;
  limits.max_candidates_per_request = 1 << 20;
  limits.max_request_bytes = 1LL << 30;
  RankInput input;
  Status s = RankRequestConverter(model->config(), limits).Convert(request, &input);
  if (!s.ok()) ADD_FAILURE() << s.ToString();
  Batch batch;
  s = AssembleBatch({&input}, model->config(), &batch);
  if (!s.ok()) ADD_FAILURE() << s.ToString();
  std::vector<float> scores;
  s = model->Forward(batch, &scores);
  if (!s.ok()) ADD_FAILURE() << s.ToString();
  return scores;
}

using testing::FreePort;

}  // namespace server_test
}  // namespace jagrank

#endif  // JAGRANK_TESTS_SERVER_TEST_HELPERS_H_
