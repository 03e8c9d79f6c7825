// Several executors on one batcher, on the CPU: both compute (while one is
// held inside its forward pass the other keeps answering), every answer
// equals the model's own forward pass, and a version swap reaches both. On
// a GPU (skipped without one): two instances on one device both compute,
// and their answers equal the CPU model's.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/cuda_check.h"
#include "model/config.h"
#include "model/weights.h"
#include "common/process.h"
#include "server/batcher.h"
#include "server/executor.h"
#include "server/model_manager.h"
#include "server/server.h"
#include "server_test_helpers.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::ForwardLog;
using server_test::Gate;
using server_test::MakeRequest;
using server_test::PendingCall;
using server_test::SendRank;

constexpr float kTolerance = 1e-5f;

ServerConfig TestConfig() {
  ServerConfig c = server_test::LoopbackCpuConfig();
  c.batching.max_queue_delay_us = 0;
  c.batching.max_batch_requests = 2;
  return c;
}

void ExpectMatches(Model* oracle, const v1::RankRequest& request, const PendingCall& call) {
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  const std::vector<float> want = server_test::ForwardAlone(oracle, request);
  ASSERT_EQ(static_cast<size_t>(call.response.scores_size()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(call.response.scores(i), want[i], kTolerance);
  EXPECT_EQ(call.response.model_version(), oracle->version());
}

size_t Computed(ForwardLog* log) {
  std::lock_guard<std::mutex> lock(log->mu);
  return log->batch_requests.size();
}

// A server over two recorded instances and a stub to it; `warmup` holds the
// batches each instance computed before the test's calls.
struct TwoInstanceServer {
  server_test::CountingMetrics metrics;
  std::unique_ptr<JagrankServer> server;
  std::unique_ptr<v1::Ranker::Stub> stub;
  size_t warmup[2] = {0, 0};

  void Start(const ServerConfig& config, std::vector<std::unique_ptr<Model>> instances, ForwardLog logs[2]) {
    ASSERT_TRUE(JagrankServer::CreateWithModels(config, std::move(instances), &metrics, &server).ok());
    ASSERT_EQ(server->model_manager().instances(), 2);
    warmup[0] = Computed(&logs[0]);
    warmup[1] = Computed(&logs[1]);
    stub = v1::Ranker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  }
};

// Two executors over two instances of the real model: executor 0 is held in
// its forward pass, and executor 1 still answers every further call; once
// released, the held batch is answered too. Each instance computed batches.
TEST(ServerExecutorsTest, WhileOneExecutorIsHeldTheOtherAnswers) {
  const ModelConfig model_config = server_test::SmallModelConfig();
  std::unique_ptr<Model> oracle = server_test::MakeCpuModel(model_config);
  Gate gates[2];
  ForwardLog logs[2];
  std::vector<std::unique_ptr<Model>> instances;
  for (int i = 0; i < 2; ++i) {
    instances.push_back(std::make_unique<server_test::RecordingModel>(server_test::MakeCpuModel(model_config),
                                                                      &gates[i], &logs[i]));
  }
  TwoInstanceServer served;
  ASSERT_NO_FATAL_FAILURE(served.Start(TestConfig(), std::move(instances), logs));
  v1::Ranker::Stub* stub = served.stub.get();
  const size_t* warmup = served.warmup;

  // Hold executor 0: send calls one by one until one of them is inside its
  // gate (the others are answered by whichever executor took them).
  gates[0].Close();
  gates[0].ResetCount();
  std::vector<v1::RankRequest> requests;
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (int i = 0; i < 50 && !gates[0].WaitEntered(1, 0ms); ++i) {
    requests.push_back(MakeRequest(400 + i, i % 20, 1 + i % 4, model_config));
    calls.push_back(SendRank(stub, requests.back()));
    // Either answered (executor 1) or held (executor 0).
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!calls.back()->Wait(5ms) && !gates[0].WaitEntered(1, 5ms) && std::chrono::steady_clock::now() < give_up) {
    }
  }
  ASSERT_TRUE(gates[0].WaitEntered(1, 0ms)) << "executor 0 never took a batch";
  const size_t held = calls.size() - 1;  // the last call sent is the held one
  EXPECT_FALSE(calls[held]->Wait(0ms));

  // Executor 0 is stuck in Run. Its assembly thread may still take two more
  // batches (one staged in the other slot and waiting to run, one waiting
  // for a slot), at most 2 x max_batch_requests = 4 of ten calls: executor 1
  // answers the other six or more meanwhile.
  const size_t first_more = calls.size();
  for (int i = 0; i < 10; ++i) {
    requests.push_back(MakeRequest(500 + i, i, 2, model_config));
    calls.push_back(SendRank(stub, requests.back()));
  }
  auto answered = [&] {
    int n = 0;
    for (size_t i = first_more; i < calls.size(); ++i) n += calls[i]->Wait(0ms);
    return n;
  };
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (answered() < 6 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(5ms);
  EXPECT_GE(answered(), 6) << "executor 1 did not answer while executor 0 was held";
  EXPECT_FALSE(calls[held]->Wait(0ms));
  gates[0].Open();
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s));
    ExpectMatches(oracle.get(), requests[i], *calls[i]);
  }
  EXPECT_GT(Computed(&logs[0]), warmup[0]);
  EXPECT_GT(Computed(&logs[1]), warmup[1]);
}

// The real path: --device cpu with instances_per_device 2 (and the list
// form cpu,cpu) builds two executors, and a burst of concurrent calls is
// answered correctly.
TEST(ServerExecutorsTest, InstancesPerDeviceAndADeviceListBuildTwoExecutors) {
  const ModelConfig model_config = server_test::SmallModelConfig();
  char dir_template[] = "/tmp/jagrank_executors_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::ofstream(dir + "/model.yaml") << ModelConfigToYaml(model_config);
  std::unique_ptr<Model> oracle = server_test::MakeCpuModel(model_config);
  for (const bool list : {false, true}) {
    SCOPED_TRACE(list ? "device list" : "instances_per_device");
    ServerConfig config = TestConfig();
    config.model_config = dir + "/model.yaml";
    if (list) {
      config.device = "cpu,cpu";
    } else {
      config.instances_per_device = 2;
    }
    server_test::CountingMetrics metrics;
    std::unique_ptr<JagrankServer> server;
    Status s = JagrankServer::Create(config, &metrics, &server);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(server->model_manager().instances(), 2);
    auto channel =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials());
    auto stub = v1::Ranker::NewStub(channel);
    std::vector<v1::RankRequest> requests;
    std::vector<std::unique_ptr<PendingCall>> calls;
    for (int i = 0; i < 40; ++i) {
      requests.push_back(MakeRequest(600 + i, (i * 3) % 40, 1 + i % 6, model_config));
      calls.push_back(SendRank(stub.get(), requests.back()));
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      ASSERT_TRUE(calls[i]->Wait(30s));
      ExpectMatches(oracle.get(), requests[i], *calls[i]);
    }
    EXPECT_EQ(metrics.done("OK"), 40);
  }
  std::filesystem::remove_all(dir);
}

// Two instances of the model on one GPU (instances_per_device 2), fed by one
// batcher: a burst of concurrent calls is answered by both (each instance
// computed batches) and every answer equals the CPU model's, in fp32.
TEST(ServerExecutorsTest, TwoInstancesOnOneGpu) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  // The small model with a head dim the CUDA attention supports (32).
  ModelConfig model_config = server_test::SmallModelConfig();
  model_config.embedding_dim = 64;
  model_config.bottom_mlp = {64, 64};
  std::unique_ptr<Model> oracle = server_test::MakeCpuModel(model_config);
  ServerConfig config = TestConfig();
  config.device = "cuda:0";
  config.instances_per_device = 2;
  config.precision = "fp32";
  Gate gates[2];
  ForwardLog logs[2];
  std::vector<std::unique_ptr<Model>> instances;
  const std::vector<std::string> devices = ExecutorDevices(config);
  ASSERT_EQ(devices, (std::vector<std::string>{"cuda:0", "cuda:0"}));
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Model> model;
    const Status s = BuildModel(model_config, ModelWeights(), config, devices[i], &model);
    ASSERT_TRUE(s.ok()) << s.ToString();
    instances.push_back(std::make_unique<server_test::RecordingModel>(std::move(model), &gates[i], &logs[i]));
  }
  TwoInstanceServer served;
  ASSERT_NO_FATAL_FAILURE(served.Start(config, std::move(instances), logs));
  v1::Ranker::Stub* stub = served.stub.get();
  const size_t* warmup = served.warmup;
  // Hold instance 0 until instance 1 has computed something, so that the
  // burst cannot all land on one of them.
  gates[0].Close();
  std::vector<v1::RankRequest> requests;
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (int i = 0; i < 64; ++i) {
    requests.push_back(MakeRequest(700 + i, (i * 7) % 60, 1 + i % 5, model_config));
    calls.push_back(SendRank(stub, requests.back()));
  }
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (Computed(&logs[1]) == warmup[1] && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
  }
  gates[0].Open();
  constexpr float kGpuTolerance = 1e-4f;  // fp32 on the GPU against the CPU backend
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i]->Wait(30s));
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    const std::vector<float> want = server_test::ForwardAlone(oracle.get(), requests[i]);
    ASSERT_EQ(static_cast<size_t>(calls[i]->response.scores_size()), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(calls[i]->response.scores(j), want[j], kGpuTolerance);
  }
  EXPECT_GT(Computed(&logs[0]), warmup[0]);
  EXPECT_GT(Computed(&logs[1]), warmup[1]);
}

// One batch's answers are shared by the completion threads: while the
// first request's finish is held, another thread answers requests of the
// same batch (one thread per batch would answer them only after it).
TEST(ServerExecutorsTest, CompletionThreadsShareOneBatch) {
  if (UsableCores() < 2) GTEST_SKIP() << "one usable core: one completion thread";
  const ModelConfig model_config = server_test::SmallModelConfig();
  ServerConfig config = TestConfig();
  constexpr int kRequests = 48;
  config.batching.max_batch_requests = kRequests;
  config.batching.max_queue_delay_us = 10000000;  // the batch closes on its request budget
  server_test::CountingMetrics metrics;
  std::vector<std::unique_ptr<Model>> instances;
  instances.push_back(server_test::MakeCpuModel(model_config));
  std::unique_ptr<ModelManager> models;
  ASSERT_TRUE(ModelManager::CreateFixed(config, std::move(instances), &metrics, &models).ok());
  Batcher batcher(config.batching, &metrics);
  Executor executor(models.get(), 0, &batcher, &metrics);
  executor.Start();

  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  bool first_held = false, others_answered_while_held = false;
  std::set<std::thread::id> threads;
  const std::shared_ptr<const ServedModel> served = models->Current();
  for (int i = 0; i < kRequests; ++i) {
    auto queued = std::make_unique<QueuedRequest>();
    ASSERT_TRUE(served->converter.Convert(MakeRequest(900 + i, 4, 2, model_config), &queued->input).ok());
    queued->request_contract = served->request_contract;
    queued->finish = [&, i](const Status& status, const float*, int64_t, const std::string&) {
      EXPECT_TRUE(status.ok()) << status.ToString();
      std::unique_lock<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      ++finished;
      cv.notify_all();
      if (i == 0) {
        first_held = true;
        others_answered_while_held = cv.wait_for(lock, 10s, [&] { return finished > 1; });
      }
    };
    ASSERT_TRUE(batcher.Enqueue(&queued).ok());
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 30s, [&] { return finished == kRequests; }));
    EXPECT_TRUE(first_held);
    EXPECT_TRUE(others_answered_while_held) << "the batch's other requests waited for its first answer";
    EXPECT_GE(threads.size(), 2u);
  }
  batcher.Close();
  executor.Join();
}

TEST(ServerExecutorsTest, ConfigChecksTheDeviceListAndInstances) {
  ServerConfig c = TestConfig();
  c.device = "cuda:0,tpu";
  Status s = ValidateServerConfig(c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'tpu'"), std::string::npos) << s.message();
  c.device = "cuda:0,";
  EXPECT_FALSE(ValidateServerConfig(c).ok());
  c.device = "cuda:0,cuda:1";
  EXPECT_TRUE(ValidateServerConfig(c).ok());
  c.instances_per_device = 0;
  s = ValidateServerConfig(c);
  EXPECT_NE(s.message().find("'instances_per_device' = '0'"), std::string::npos) << s.message();
  c.instances_per_device = 17;  // the limit is 16
  EXPECT_FALSE(ValidateServerConfig(c).ok());
  ServerConfig parsed;
  ASSERT_TRUE(ParseServerConfig("device: cpu,cpu\ninstances_per_device: 3\n", &parsed).ok());
  EXPECT_EQ(parsed.instances_per_device, 3);
  EXPECT_EQ(ExecutorDevices(parsed), std::vector<std::string>(6, "cpu"));
  parsed.device = "cuda:0,cuda:1";
  parsed.instances_per_device = 2;
  EXPECT_EQ(ExecutorDevices(parsed), (std::vector<std::string>{"cuda:0", "cuda:0", "cuda:1", "cuda:1"}));
}

}  // namespace
}  // namespace jagrank
