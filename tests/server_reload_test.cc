// Model repository and hot reload, on the real server over loopback gRPC
// with real files: versions swapped under continuous load lose no request,
// every answer matches the version it names, replaced versions are freed;
// broken and incomplete versions leave the serving one in place; a version
// that changes the request contract switches validation with it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "metrics_http.h"
#include "model/config.h"
#include "model/weights.h"
#include "server/executor.h"
#include "server/model_manager.h"
#include "server/model_repository.h"
#include "server/prometheus_metrics.h"
#include "server/server.h"
#include "server_test_helpers.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::MakeRequest;

constexpr float kTolerance = 1e-5f;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ModelConfig VersionConfig(uint64_t seed) {
  ModelConfig c = server_test::SmallModelConfig();
  c.seed = seed;
  return c;
}

class ServerReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/jagrank_reload_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    root_ = dir_template;
    repo_ = root_ + "/repo";
    ASSERT_EQ(mkdir(repo_.c_str(), 0755), 0);
    config_ = server_test::LoopbackCpuConfig();
    config_.batching.max_queue_delay_us = 500;
  }

  void TearDown() override {
    server_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  // Writes version `n` of `config` (its seed's random weights) beside the
  // repository and renames it in, as a publisher should.
  void WriteVersion(int n, const ModelConfig& config) {
    const std::string staging = root_ + "/staging-" + std::to_string(n);
    ASSERT_EQ(mkdir(staging.c_str(), 0755), 0);
    std::ofstream(staging + "/model.yaml") << ModelConfigToYaml(config);
    ModelWeights weights;
    ASSERT_TRUE(MakeRandomWeights(config, &weights).ok());
    ASSERT_TRUE(WriteSafetensors(staging + "/model.safetensors", weights).ok());
    ASSERT_EQ(std::rename(staging.c_str(), VersionDir(n).c_str()), 0);
  }
  std::string VersionDir(int n) const { return repo_ + "/" + std::to_string(n); }

  // A CPU model built from version n's files: the oracle for that version.
  std::unique_ptr<Model> Oracle(int n) {
    ModelConfig config;
    ModelWeights weights;
    std::unique_ptr<Model> model;
    Status s = LoadModelConfig(VersionDir(n) + "/model.yaml", &config);
    if (s.ok()) s = LoadSafetensors(VersionDir(n) + "/model.safetensors", config, &weights);
    ModelOptions options;
    options.cpu_threads = 1;
    if (s.ok()) s = Model::Create(config, std::move(weights), options, &model);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return model;
  }
  // "<n>:<content hash>", as the server reports a repository version.
  std::string ReportedVersion(int n) { return std::to_string(n) + ":" + Oracle(n)->version(); }

  void StartServer(ServerMetrics* metrics, double poll_interval_s = 0) {
    config_.model_repository = repo_;
    config_.model_poll_interval_s = poll_interval_s;
    Status s = JagrankServer::Create(config_, metrics, &server_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Ranker::NewStub(channel_);
  }

  grpc::Status Rank(const v1::RankRequest& request, v1::RankResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 30s);
    return stub_->Rank(&context, request, response);
  }

  std::string InfoVersion() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::ModelInfo info;
    grpc::Status s = stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.version();
  }

  bool HealthServing() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(kRankerServiceName);
    grpc::health::v1::HealthCheckResponse response;
    return health->Check(&context, request, &response).ok() &&
           response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  // The metrics' port (StartPrometheus).
  int metrics_port_ = 0;
  std::vector<metrics_test::Sample> Scrape() {
    return metrics_test::ParseExposition(metrics_test::HttpGet(metrics_port_, "/metrics").body);
  }
  void StartPrometheus() {
    metrics_port_ = server_test::FreePort();
    ASSERT_GT(metrics_port_, 0);
    ASSERT_TRUE(PrometheusMetrics::Create("127.0.0.1:" + std::to_string(metrics_port_), &prometheus_).ok());
  }

  void SwapThreeTimesUnderLoad();

  std::string root_, repo_;
  ServerConfig config_;
  // Declared before the server, which reports to them until it is gone.
  server_test::CountingMetrics counting_;
  std::unique_ptr<PrometheusMetrics> prometheus_;
  std::unique_ptr<JagrankServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ranker::Stub> stub_;
};

TEST(ModelRepositoryTest, VersionNamesArePositiveDecimalIntegers) {
  int64_t v = 0;
  EXPECT_TRUE(ParseRepositoryVersion("1", &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(ParseRepositoryVersion("42", &v));
  EXPECT_EQ(v, 42);
  for (const char* bad : {"", "0", "01", "-3", "+3", "3a", " 3", "1234567890123456789", ".staging"}) {
    EXPECT_FALSE(ParseRepositoryVersion(bad, &v)) << bad;
  }
}

TEST_F(ServerReloadTest, ListsCompleteVersionsHighestFirst) {
  WriteVersion(2, VersionConfig(2));
  WriteVersion(10, VersionConfig(10));
  ASSERT_EQ(mkdir((repo_ + "/11").c_str(), 0755), 0);  // incomplete: no files
  std::ofstream(repo_ + "/11/model.yaml") << ModelConfigToYaml(VersionConfig(11));
  ASSERT_EQ(mkdir((repo_ + "/latest").c_str(), 0755), 0);  // not a version
  std::vector<RepositoryVersion> versions;
  ASSERT_TRUE(ListModelRepository(repo_, &versions).ok());
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].version, 10);
  EXPECT_EQ(versions[1].version, 2);
  EXPECT_EQ(versions[0].weights_path, repo_ + "/10/model.safetensors");
  const Status missing = ListModelRepository(root_ + "/nope", &versions);
  EXPECT_EQ(missing.code(), Status::Code::kNotFound);
  EXPECT_NE(missing.message().find(root_ + "/nope"), std::string::npos) << missing.message();
}

TEST_F(ServerReloadTest, RepositoryExcludesModelConfigAndWeights) {
  ServerConfig c;
  c.model_repository = repo_;
  c.model_weights = "w.safetensors";
  Status s = ValidateServerConfig(c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("mutually exclusive"), std::string::npos) << s.message();
  c.model_weights.clear();
  c.model_config = "m.yaml";
  EXPECT_FALSE(ValidateServerConfig(c).ok());
  c.model_config.clear();
  EXPECT_TRUE(ValidateServerConfig(c).ok());
  c.model_poll_interval_s = -1;
  s = ValidateServerConfig(c);
  EXPECT_NE(s.message().find("model_poll_interval_s"), std::string::npos) << s.message();
  ServerConfig parsed;
  ASSERT_TRUE(ParseServerConfig("model_repository: /models\nmodel_poll_interval_s: 2.5\n", &parsed).ok());
  EXPECT_EQ(parsed.model_repository, "/models");
  EXPECT_EQ(parsed.model_poll_interval_s, 2.5);
}

TEST_F(ServerReloadTest, StartFailsNamingAnEmptyRepository) {
  config_.model_repository = repo_;
  Status s = JagrankServer::Create(config_, &counting_, &server_);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find(repo_), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no complete version"), std::string::npos) << s.message();
}

TEST_F(ServerReloadTest, StartServesTheHighestVersionThatLoads) {
  WriteVersion(1, VersionConfig(1));
  WriteVersion(2, VersionConfig(2));
  WriteVersion(3, VersionConfig(3));
  std::filesystem::resize_file(VersionDir(3) + "/model.safetensors", 100);  // truncated
  StartServer(&counting_);
  EXPECT_EQ(server_->CurrentModel()->version, ReportedVersion(2));
  EXPECT_EQ(InfoVersion(), ReportedVersion(2));
}

// Four client threads send Rank calls without pause while versions 2, 3 and
// 4 are swapped in: nothing fails, every answer equals the named version's
// own forward pass, each version served some, and afterwards one version is
// in memory (the replaced ServedModels were destroyed; the metrics agree).
TEST_F(ServerReloadTest, ThreeSwapsUnderLoadLoseNothingAndEachAnswerMatchesItsVersion) {
  SwapThreeTimesUnderLoad();
}

// The same with two executors: each version is loaded once per executor
// and both instances are replaced together.
TEST_F(ServerReloadTest, ThreeSwapsUnderLoadWithTwoExecutors) {
  config_.instances_per_device = 2;
  SwapThreeTimesUnderLoad();
  if (HasFatalFailure()) return;
  EXPECT_EQ(server_->CurrentModel()->instances.size(), 2u);
}

void ServerReloadTest::SwapThreeTimesUnderLoad() {
  WriteVersion(1, VersionConfig(101));
  StartPrometheus();
  StartServer(prometheus_.get());

  const ModelConfig shape = server_test::SmallModelConfig();
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 12; ++i) requests.push_back(MakeRequest(1000 + i, (i * 7) % 40, 1 + i % 5, shape));
  struct Answer {
    int request;
    grpc::Status status;
    v1::RankResponse response;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Answer> answers;
  std::map<std::string, int> by_version;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto stub = v1::Ranker::NewStub(channel_);
      for (int i = t; !stop.load(); i = (i + 1) % static_cast<int>(requests.size())) {
        Answer a;
        a.request = i;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + 30s);
        a.status = stub->Rank(&context, requests[i], &a.response);
        std::lock_guard<std::mutex> lock(mu);
        by_version[a.response.model_version()]++;
        answers.push_back(std::move(a));
        cv.notify_all();
      }
    });
  }
  auto wait_answers_from = [&](const std::string& version, int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 60s, [&] { return by_version[version] >= n; });
  };

  std::vector<std::string> versions = {ReportedVersion(1)};
  ASSERT_TRUE(wait_answers_from(versions[0], 20));
  for (int n = 2; n <= 4; ++n) {
    WriteVersion(n, VersionConfig(100 + n));
    versions.push_back(ReportedVersion(n));
    const Status s = server_->ReloadModel();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(server_->CurrentModel()->version, versions.back());
    ASSERT_TRUE(wait_answers_from(versions.back(), 20)) << "no answers from " << versions.back();
    // ReloadNow waited for the batches of the replaced version.
    EXPECT_EQ(server_->model_manager().live_models(), 1) << "after swapping in version " << n;
  }
  stop = true;
  for (std::thread& t : clients) t.join();

  std::map<std::string, std::vector<std::vector<float>>> expected;
  for (int n = 1; n <= 4; ++n) {
    std::unique_ptr<Model> oracle = Oracle(n);
    for (const v1::RankRequest& r : requests) {
      expected[versions[n - 1]].push_back(server_test::ForwardAlone(oracle.get(), r));
    }
  }
  for (const Answer& a : answers) {
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    const auto it = expected.find(a.response.model_version());
    ASSERT_NE(it, expected.end()) << "unknown version '" << a.response.model_version() << "'";
    const std::vector<float>& want = it->second[a.request];
    ASSERT_EQ(static_cast<size_t>(a.response.scores_size()), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(a.response.scores(i), want[i], kTolerance)
          << "request " << a.request << " candidate " << i << " version " << a.response.model_version();
    }
  }
  // The versions' answers differ (different weights), so a right answer
  // under the wrong name would have failed above.
  EXPECT_NE(expected[versions[0]][0], expected[versions[3]][0]);
  for (const std::string& v : versions) EXPECT_GE(by_version[v], 20) << v;

  EXPECT_EQ(server_->model_manager().live_models(), 1);
  EXPECT_EQ(InfoVersion(), versions[3]);
  const auto samples = Scrape();
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_models_loaded"), 1);
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_model_info", {{"version", versions[3]}}), 1);
  int info_series = 0;
  for (const auto& s : samples) info_series += s.name == "jagrank_model_info";
  EXPECT_EQ(info_series, 1) << "the replaced versions' series are removed";
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_model_reloads_total", {{"result", "success"}}), 4);
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_model_reloads_total", {{"result", "failure"}}), 0);
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_model_load_seconds_count"), 4);
  EXPECT_EQ(metrics_test::Value(samples, "jagrank_model_weights_bytes"),
            static_cast<double>(server_->CurrentModel()->model().Memory().weights_bytes));
}

// jagrank_padding_saved_bytes_total runs on across a swap: each model counts
// the padding it saved from its own creation, and the counter adds both.
// The two versions see the same batches (warm-up, then one batch of four
// histories of different lengths), so the second model's own count equals
// the first's and a counter that took the models' counts as one running
// total would stand still.
TEST_F(ServerReloadTest, PaddingSavedCounterAddsEveryVersion) {
  WriteVersion(1, VersionConfig(1));
  config_.batching.max_batch_requests = 4;
  config_.batching.max_queue_delay_us = 10 * 1000 * 1000;  // the batch closes on its fourth request
  StartPrometheus();
  StartServer(prometheus_.get());
  const ModelConfig shape = server_test::SmallModelConfig();
  auto counter = [&] { return metrics_test::Value(Scrape(), "jagrank_padding_saved_bytes_total"); };
  auto wait_counter = [&](double want) {
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (counter() != want && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(10ms);
    return counter();
  };
  auto one_batch = [&] {
    std::vector<std::unique_ptr<server_test::PendingCall>> calls;
    for (int len : {0, 5, 10, 20}) {
      calls.push_back(server_test::SendRank(stub_.get(), MakeRequest(70 + len, len, 2, shape)));
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->Wait(30s));
      ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    }
  };
  one_batch();
  const double first = static_cast<double>(server_->CurrentModel()->model().Memory().padding_saved_bytes);
  ASSERT_GT(first, 0);
  EXPECT_EQ(wait_counter(first), first);
  WriteVersion(2, VersionConfig(2));
  ASSERT_TRUE(server_->ReloadModel().ok());
  one_batch();
  const double second = static_cast<double>(server_->CurrentModel()->model().Memory().padding_saved_bytes);
  EXPECT_EQ(second, first);
  EXPECT_EQ(wait_counter(first + second), first + second);
}

// A truncated weights file and a config whose shapes do not match the
// weights are refused by name and counted; the serving version answers
// throughout and health stays SERVING; a refused version is not tried again
// until its files change, and then it loads.
TEST_F(ServerReloadTest, BrokenVersionLeavesTheServingOneAndCountsAFailure) {
  WriteVersion(1, VersionConfig(1));
  WriteVersion(2, VersionConfig(2));
  const std::string weights2 = VersionDir(2) + "/model.safetensors";
  const std::string good_weights = ReadFileBytes(weights2);
  std::filesystem::resize_file(weights2, good_weights.size() / 2);
  // Version 1 is served at start (2 is broken): one failure counted.
  StartPrometheus();
  StartServer(prometheus_.get());
  const std::string v1 = ReportedVersion(1);
  EXPECT_EQ(InfoVersion(), v1);
  auto failures = [&] {
    return metrics_test::Value(Scrape(), "jagrank_model_reloads_total", {{"result", "failure"}});
  };
  EXPECT_EQ(failures(), 1);

  // Not retried while its files stay the same.
  EXPECT_TRUE(server_->ReloadModel().ok());
  EXPECT_EQ(failures(), 1);

  // Version 3's config does not fit its weights (embedding_dim differs).
  WriteVersion(3, VersionConfig(3));
  ModelConfig other = VersionConfig(3);
  other.embedding_dim = 32;
  other.bottom_mlp = {32, 32};
  std::ofstream(VersionDir(3) + "/model.yaml") << ModelConfigToYaml(other);
  Status s = server_->ReloadModel();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version 3"), std::string::npos) << s.message();
  EXPECT_EQ(failures(), 2);
  EXPECT_EQ(server_->CurrentModel()->version, v1);
  EXPECT_TRUE(HealthServing());
  const v1::RankRequest request = MakeRequest(5, 10, 3, server_test::SmallModelConfig());
  v1::RankResponse response;
  ASSERT_TRUE(Rank(request, &response).ok());
  EXPECT_EQ(response.model_version(), v1);

  // Version 2's files are fixed (new size and mtime): it is tried again;
  // version 3 is still skipped, so 2 serves.
  std::filesystem::remove_all(VersionDir(3));
  { std::ofstream(weights2, std::ios::binary | std::ios::trunc) << good_weights; }
  s = server_->ReloadModel();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(server_->CurrentModel()->version, ReportedVersion(2));
  EXPECT_EQ(failures(), 2);
  ASSERT_TRUE(Rank(request, &response).ok());
  EXPECT_EQ(response.model_version(), ReportedVersion(2));
  EXPECT_EQ(server_->model_manager().live_models(), 1);
}

// Polling: a version that is still incomplete (no weights yet) is not
// served; once complete, the next poll serves it.
TEST_F(ServerReloadTest, PollingServesANewVersionOnceItIsComplete) {
  WriteVersion(1, VersionConfig(1));
  StartServer(&counting_, /*poll_interval_s=*/0.05);
  const std::string v1 = ReportedVersion(1);
  ASSERT_EQ(mkdir(VersionDir(2).c_str(), 0755), 0);
  std::ofstream(VersionDir(2) + "/model.yaml") << ModelConfigToYaml(VersionConfig(2));
  std::this_thread::sleep_for(300ms);  // several polls
  EXPECT_EQ(InfoVersion(), v1);
  ModelWeights weights;
  ASSERT_TRUE(MakeRandomWeights(VersionConfig(2), &weights).ok());
  ASSERT_TRUE(WriteSafetensors(VersionDir(2) + "/model.safetensors", weights).ok());
  const std::string v2 = ReportedVersion(2);
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (InfoVersion() != v2 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(InfoVersion(), v2);
  v1::RankResponse response;
  ASSERT_TRUE(Rank(MakeRequest(3, 5, 2, server_test::SmallModelConfig()), &response).ok());
  EXPECT_EQ(response.model_version(), v2);
}

// A version with another dense count and other feature names loads (with a
// warning); from then on requests are validated for it.
TEST_F(ServerReloadTest, ContractChangeSwitchesValidationWithTheModel) {
  WriteVersion(1, VersionConfig(1));
  StartServer(&counting_);
  const ModelConfig old_shape = server_test::SmallModelConfig();
  ModelConfig new_shape = VersionConfig(2);
  new_shape.num_dense_features = 6;
  new_shape.sparse_features = {{"country", 50}, {"device", 30}};
  WriteVersion(2, new_shape);
  ASSERT_TRUE(server_->ReloadModel().ok());

  v1::RankResponse response;
  grpc::Status s = Rank(MakeRequest(8, 4, 2, old_shape), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("num_dense_features = 6"), std::string::npos) << s.error_message();
  const v1::RankRequest fitting = MakeRequest(8, 4, 2, new_shape);
  s = Rank(fitting, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.model_version(), ReportedVersion(2));
  const std::vector<float> want = server_test::ForwardAlone(Oracle(2).get(), fitting);
  ASSERT_EQ(static_cast<size_t>(response.scores_size()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(response.scores(i), want[i], kTolerance);

  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.num_dense_features(), 6);
  ASSERT_EQ(info.sparse_feature_names_size(), 2);
  EXPECT_EQ(info.sparse_feature_names(1), "device");
}

// The executor computes a queued request only on a version of the request
// contract it was validated for: a same-contract swap computes it on the new
// version; after a contract change it is answered UNAVAILABLE, never computed.
TEST_F(ServerReloadTest, QueuedRequestIsComputedOnlyByAVersionOfItsContract) {
  WriteVersion(1, VersionConfig(1));
  config_.model_repository = repo_;
  config_.model_poll_interval_s = 0;
  server_test::CountingMetrics& metrics = counting_;
  std::unique_ptr<ModelManager> models;
  ASSERT_TRUE(ModelManager::CreateFromRepository(config_, &metrics, &models).ok());

  struct Outcome {
    Status status;
    std::string version;
    std::vector<float> scores;
  };
  // Validates `request` for the version serving now and queues it.
  auto enqueue = [&](Batcher* batcher, const v1::RankRequest& request, Outcome* outcome) {
    auto queued = std::make_unique<QueuedRequest>();
    {
      std::shared_ptr<const ServedModel> served = models->Current();
      ASSERT_TRUE(served->converter.Convert(request, &queued->input).ok());
      queued->request_contract = served->request_contract;
    }
    queued->candidates = static_cast<int64_t>(queued->input.candidates.size());
    queued->history_tokens = static_cast<int64_t>(queued->input.history.size());
    queued->attention_cost = queued->history_tokens * queued->history_tokens;
    queued->finish = [outcome](const Status& status, const float* scores, int64_t count, const std::string& version) {
      outcome->status = status;
      outcome->version = version;
      if (scores != nullptr) outcome->scores.assign(scores, scores + count);
    };
    ASSERT_TRUE(batcher->Enqueue(&queued).ok());
  };
  auto run_executor = [&](Batcher* batcher) {
    Executor executor(models.get(), 0, batcher, &metrics);
    executor.Start();
    batcher->Close();
    executor.Join();
  };

  const ModelConfig shape = server_test::SmallModelConfig();
  const v1::RankRequest old_request = MakeRequest(21, 6, 3, shape);
  {
    Batcher batcher(config_.batching, &metrics);
    Outcome same;
    enqueue(&batcher, old_request, &same);
    WriteVersion(2, VersionConfig(2));  // same contract
    ASSERT_TRUE(models->ReloadNow().ok());
    run_executor(&batcher);
    ASSERT_TRUE(same.status.ok()) << same.status.ToString();
    EXPECT_EQ(same.version, ReportedVersion(2));
    EXPECT_EQ(same.scores, server_test::ForwardAlone(Oracle(2).get(), old_request));
  }
  {
    Batcher batcher(config_.batching, &metrics);
    Outcome stale, fresh;
    enqueue(&batcher, old_request, &stale);
    ModelConfig new_shape = VersionConfig(3);
    new_shape.num_dense_features = 5;
    WriteVersion(3, new_shape);
    ASSERT_TRUE(models->ReloadNow().ok());
    const v1::RankRequest new_request = MakeRequest(22, 6, 3, new_shape);
    enqueue(&batcher, new_request, &fresh);
    run_executor(&batcher);
    EXPECT_EQ(stale.status.code(), Status::Code::kUnavailable);
    EXPECT_NE(stale.status.message().find(ReportedVersion(3)), std::string::npos) << stale.status.message();
    EXPECT_TRUE(stale.version.empty());
    ASSERT_TRUE(fresh.status.ok()) << fresh.status.ToString();
    EXPECT_EQ(fresh.version, ReportedVersion(3));
    EXPECT_EQ(metrics.rejected("model_changed"), 1);
  }
  EXPECT_EQ(models->live_models(), 1);
}

}  // namespace
}  // namespace jagrank
