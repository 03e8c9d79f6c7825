// The server over real gRPC on loopback, with the real (small) CPU model:
// answers equal the model's forward, bursts are batched, bad inputs are
// refused naming the field, the queue limit and deadlines hold, health and
// drain behave.
#include <gtest/gtest.h>

#include <dirent.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include <grpcpp/generic/generic_stub.h>

#include "common/process.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/rank_request.h"
#include "server/server.h"
#include "raw_h2_client.h"
#include "server_test_helpers.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::CountingMetrics;
using server_test::ForwardLog;
using server_test::Gate;
using server_test::MakeRequest;
using server_test::PendingCall;
using server_test::SendRank;

constexpr float kTolerance = 1e-5f;

class ServerGrpcTest : public ::testing::Test {
 protected:
  void StartServer(const std::function<void(ServerConfig*)>& adjust = {}) {
    config_.grpc_address = "127.0.0.1:0";
    config_.metrics_address = "";
    config_.max_candidates_per_request = 64;
    config_.max_request_bytes = 64 * 1024;
    config_.drain_linger_ms = 0;
    config_.batching.max_queue_delay_us = 2000;
    if (adjust) adjust(&config_);
    model_config_ = server_test::SmallModelConfig();
    oracle_ = server_test::MakeCpuModel(model_config_);
    auto model = std::make_unique<server_test::RecordingModel>(server_test::MakeCpuModel(model_config_), &gate_,
                                                               &log_);
    Status s = JagrankServer::CreateWithModel(config_, std::move(model), &metrics_, &server_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    // Forget the warm-up batches.
    gate_.ResetCount();
    {
      std::lock_guard<std::mutex> lock(log_.mu);
      log_.candidate_ids.clear();
      log_.batch_requests.clear();
      log_.staged_requests.clear();
    }
    const int port = server_->port();
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    stub_ = v1::Ranker::NewStub(channel_);
  }

  void TearDown() override {
    gate_.Open();
    server_.reset();
  }

  void ExpectMatchesOracle(const v1::RankRequest& request, const PendingCall& call) {
    ASSERT_TRUE(call.status.ok()) << call.status.error_message();
    const std::vector<float> expected = server_test::ForwardAlone(oracle_.get(), request);
    ASSERT_EQ(call.response.scores_size(), request.candidate_item_ids_size());
    ASSERT_EQ(expected.size(), static_cast<size_t>(call.response.scores_size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(call.response.scores(i), expected[i], kTolerance) << request.request_id() << " candidate " << i;
      EXPECT_GT(call.response.scores(i), 0.0f);
      EXPECT_LT(call.response.scores(i), 1.0f);
    }
    EXPECT_EQ(call.response.request_id(), request.request_id());
    EXPECT_EQ(call.response.model_version(), oracle_->version());
  }

  // Opens the gate on the held call `first` (of `blocker`), checks that it
  // and a later call are answered (so whatever was queued between them was
  // handled), and that candidate id `never_id` never reached the model.
  void ReleaseThenExpectNeverComputed(const v1::RankRequest& blocker, PendingCall* first, int later_seed,
                                      int64_t never_id, const char* what) {
    gate_.Open();
    ASSERT_TRUE(first->Wait(20s));
    ExpectMatchesOracle(blocker, *first);
    const v1::RankRequest after = MakeRequest(later_seed, 2, 2, model_config_);
    auto next = SendRank(stub_.get(), after);
    ASSERT_TRUE(next->Wait(20s));
    ExpectMatchesOracle(after, *next);
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.candidate_ids.count(never_id), 0u) << "the " << what << " request was computed";
  }

  // Starts a server with `max_streams` per connection and no batching delay,
  // holds a call of `blocker` (seed `seed`) in the model, then sends `second`
  // (seed `seed` + 1) on the same channel.
  void HoldOneCallThenSendAnother(int max_streams, int seed, v1::RankRequest* blocker, v1::RankRequest* second,
                                  std::unique_ptr<PendingCall>* first, std::unique_ptr<PendingCall>* next) {
    StartServer([max_streams](ServerConfig* c) {
      c->grpc_max_concurrent_streams = max_streams;
      c->batching.max_queue_delay_us = 0;
    });
    *blocker = MakeRequest(seed, 4, 3, model_config_);
    *second = MakeRequest(seed + 1, 4, 2, model_config_);
    gate_.Close();
    *first = SendRank(stub_.get(), *blocker);
    ASSERT_TRUE(gate_.WaitEntered(1, 10s));
    *next = SendRank(stub_.get(), *second);
  }

  // One Rank call (synchronous) carrying `bytes` of custom metadata, on a
  // connection of its own: gRPC 1.51 closes the connection that sent
  // metadata over the limit, and a call sharing it could fail "Socket closed".
  grpc::Status RankWithMetadataBytes(size_t bytes) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::Ranker::NewStub(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                              grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 20s);
    context.AddMetadata("x-jagrank-test-padding", std::string(bytes, 'p'));
    const v1::RankRequest request = MakeRequest(71, 3, 2, model_config_);
    v1::RankResponse response;
    grpc::Status status = stub->Rank(&context, request, &response);
    if (status.ok()) {
      EXPECT_EQ(response.scores_size(), request.candidate_item_ids_size());
    }
    return status;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health(const std::string& service,
                                                              grpc::Status* status = nullptr) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status s = stub->Check(&context, request, &response);
    if (status != nullptr) *status = s;
    return response.status();
  }

  // Opens a health Watch of `service` on `context` (deadline `timeout`)
  // and reads its first update into *first.
  std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> Watch(
      const std::string& service, grpc::ClientContext* context, std::chrono::seconds timeout,
      grpc::health::v1::HealthCheckResponse* first) {
    if (health_stub_ == nullptr) health_stub_ = grpc::health::v1::Health::NewStub(channel_);
    context->set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    auto reader = health_stub_->Watch(context, request);
    if (!reader->Read(first)) first->Clear();
    return reader;
  }

  ServerConfig config_;
  ModelConfig model_config_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  Gate gate_;
  ForwardLog log_;
  CountingMetrics metrics_;
  std::unique_ptr<Model> oracle_;
  std::unique_ptr<JagrankServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ranker::Stub> stub_;
};


TEST_F(ServerGrpcTest, SingleRequestEqualsForward) {
  StartServer();
  const v1::RankRequest request = MakeRequest(4, 10, 7, model_config_);
  auto call = SendRank(stub_.get(), request);
  ASSERT_TRUE(call->Wait(20s));
  ExpectMatchesOracle(request, *call);
}

// Threads of this process named `name` (Linux: /proc/self/task/*/comm).
int ThreadsNamed(const std::string& name) {
  int count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++count;
  }
  closedir(dir);
  return count;
}

// Rank is served on half the cores' worth of completion queues (one polling
// thread each), 2 to 8; calls are answered through them.
TEST_F(ServerGrpcTest, CompletionQueueCountIsHalfTheCores) {
  StartServer();
  EXPECT_EQ(ThreadsNamed("jr-rank-cq"), std::clamp(UsableCores() / 2, 1, 8));
  std::vector<v1::RankRequest> requests;
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(MakeRequest(70 + i, 3, 2 + i, model_config_));
    calls.push_back(SendRank(stub_.get(), requests.back()));
  }
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s));
    ExpectMatchesOracle(requests[i], *calls[i]);
  }
}

// grpc_polling_threads sets the queue count: 3 queues, 3 polling threads,
// and calls spread over them are all answered.
TEST_F(ServerGrpcTest, PollingThreadsAsConfigured) {
  StartServer([](ServerConfig* c) { c->grpc_polling_threads = 3; });
  EXPECT_EQ(ThreadsNamed("jr-rank-cq"), 3);
  std::vector<v1::RankRequest> requests;
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (int i = 0; i < 9; ++i) {
    requests.push_back(MakeRequest(90 + i, 3, 2 + i % 4, model_config_));
    calls.push_back(SendRank(stub_.get(), requests.back()));
  }
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s));
    ExpectMatchesOracle(requests[i], *calls[i]);
  }
}

// grpc_max_concurrent_streams caps the calls one connection has open: with
// 1, a second call on the same channel waits in the client while the first
// is held in the model, so it is never staged; it runs once the first ends.
// (Without the cap the executor stages it beside the held batch.)
TEST_F(ServerGrpcTest, MaxConcurrentStreamsHoldsExtraCallsInTheClient) {
  v1::RankRequest blocker, second;
  std::unique_ptr<PendingCall> first, waiting;
  ASSERT_NO_FATAL_FAILURE(HoldOneCallThenSendAnother(1, 61, &blocker, &second, &first, &waiting));
  EXPECT_FALSE(log_.WaitStagedCount(2, 500ms)) << "the second call reached the server past the stream cap";
  EXPECT_FALSE(waiting->Wait(0ms));
  gate_.Open();
  ASSERT_TRUE(first->Wait(20s));
  ExpectMatchesOracle(blocker, *first);
  ASSERT_TRUE(waiting->Wait(20s));
  ExpectMatchesOracle(second, *waiting);
}

// The same two calls with 0 (no cap): the second is staged while the first
// is held (the control for the test above).
TEST_F(ServerGrpcTest, WithoutAStreamCapTheSecondCallIsStagedBesideTheHeldOne) {
  v1::RankRequest blocker, second;
  std::unique_ptr<PendingCall> first, staged;
  ASSERT_NO_FATAL_FAILURE(HoldOneCallThenSendAnother(0, 63, &blocker, &second, &first, &staged));
  EXPECT_TRUE(log_.WaitStagedCount(2, 10s));
  gate_.Open();
  ASSERT_TRUE(first->Wait(20s));
  ASSERT_TRUE(staged->Wait(20s));
  ExpectMatchesOracle(second, *staged);
}

// grpc_channel_args reaches the server's gRPC. Observed through one argument
// with a visible effect: grpc.max_metadata_size = 1024 refuses a call that
// carries 4000 bytes of metadata, which gRPC's default limit (8 KiB) admits.
TEST_F(ServerGrpcTest, ChannelArgsReachTheServersGrpc) {
  StartServer();
  const grpc::Status admitted = RankWithMetadataBytes(4000);
  EXPECT_TRUE(admitted.ok()) << admitted.error_message();
  server_.reset();
  StartServer([](ServerConfig* c) { c->grpc_channel_args = "grpc.max_metadata_size=1024"; });
  const grpc::Status refused = RankWithMetadataBytes(4000);
  EXPECT_FALSE(refused.ok());
  const grpc::Status small = RankWithMetadataBytes(100);
  EXPECT_TRUE(small.ok()) << small.error_message();
}

// A message above grpc_max_receive_message_bytes is refused by gRPC itself
// (RESOURCE_EXHAUSTED) before jagrank parses it; the server goes on serving.
// (With grpc.minimal_stack=1 in gRPC 1.51 this call came back
// INVALID_ARGUMENT from jagrank's own size check: the cap was gone, which is
// why grpc_channel_args refuses that argument.)
TEST_F(ServerGrpcTest, MessageAboveTheTransportCapIsRefusedByGrpc) {
  StartServer([](ServerConfig* c) {
    c->max_request_bytes = 16 * 1024;
    c->grpc_max_receive_message_bytes = 16 * 1024;
  });
  v1::RankRequest big = MakeRequest(73, 4, 2, model_config_);
  for (int i = 0; i < 8000; ++i) big.add_dense_features(0.5f);  // 32 KB of floats: twice the cap
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 20s);
  v1::RankResponse response;
  const grpc::Status refused = stub_->Rank(&context, big, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  const grpc::Status small = RankWithMetadataBytes(10);
  EXPECT_TRUE(small.ok()) << small.error_message();
}

TEST_F(ServerGrpcTest, GetModelInfoDescribesTheModel) {
  StartServer();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.name(), "test-small");
  EXPECT_EQ(info.version(), oracle_->version());
  EXPECT_EQ(info.embedding_dim(), 16);
  EXPECT_EQ(info.num_dense_features(), 4);
  ASSERT_EQ(info.sparse_feature_names_size(), 2);
  EXPECT_EQ(info.sparse_feature_names(0), "country");
  EXPECT_EQ(info.max_history_len(), 32);
  EXPECT_EQ(info.max_candidates_per_request(), 64);
  EXPECT_EQ(info.device(), "cpu");
  EXPECT_EQ(info.attention(), "jagged");
}

// A burst of requests of different shapes (empty, short, truncated
// histories; 1..40 candidates; absent and empty sparse features) lands in
// shared batches and every answer equals that request's forward alone.
TEST_F(ServerGrpcTest, BurstIsBatchedAndEqualsForwardAlone) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 200000; });
  const int lengths[] = {0, 1, 5, 31, 32, 33, 90};
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 28; ++i) requests.push_back(MakeRequest(100 + i, lengths[i % 7], 1 + (i * 13) % 40, model_config_));
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (const auto& r : requests) calls.push_back(SendRank(stub_.get(), r));
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s)) << i;
    ExpectMatchesOracle(requests[i], *calls[i]);
  }
  EXPECT_GT(metrics_.max_batch_requests(), 1) << "the burst was never batched";
}

// Validation skips the exact ByteSizeLong when this bound is under the limit,
// so it must never be below the exact size.
TEST(RequestSizeBoundTest, NeverBelowTheExactSize) {
  std::mt19937_64 rng(5);
  const int64_t extremes[] = {0, 1, 127, 128, -1, INT64_MIN, INT64_MAX, 1000000000};
  auto id = [&] { return rng() % 2 ? extremes[rng() % 8] : static_cast<int64_t>(rng()); };
  for (int trial = 0; trial < 300; ++trial) {
    v1::RankRequest r;
    if (trial % 3) r.set_request_id(std::string(rng() % 300, 'r'));
    for (int i = static_cast<int>(rng() % 20); i > 0; --i) r.add_dense_features(1.5f);
    for (int f = static_cast<int>(rng() % 8); f > 0; --f) {
      auto* ids = (*r.mutable_sparse_features())[std::string(1 + rng() % 200, 'a' + f)].mutable_ids();
      for (int i = static_cast<int>(rng() % 40); i > 0; --i) ids->Add(id());
    }
    for (int i = static_cast<int>(rng() % 3000); i > 0; --i) r.add_history(id());
    for (int i = static_cast<int>(rng() % 600); i > 0; --i) r.add_candidate_item_ids(id());
    const size_t exact = r.ByteSizeLong();
    ASSERT_GE(RankRequestByteSizeBound(r), exact) << r.ShortDebugString().substr(0, 200);
    // All-10-byte ids are the worst case; the bound stays within a few x of typical sizes.
    EXPECT_LE(RankRequestByteSizeBound(r), 10 * exact + 2048);
  }
  v1::RankRequest with_unknown;
  with_unknown.GetReflection()->MutableUnknownFields(&with_unknown)->AddVarint(99, 1);
  EXPECT_EQ(RankRequestByteSizeBound(with_unknown), SIZE_MAX);
}

TEST_F(ServerGrpcTest, EachBadInputIsInvalidArgumentNamingTheField) {
  StartServer();
  struct Case {
    const char* what;
    std::function<void(v1::RankRequest*)> spoil;
    std::vector<std::string> message_has;
  };
  const std::vector<Case> cases = {
      {"too few dense", [](v1::RankRequest* r) { r->mutable_dense_features()->RemoveLast(); },
       {"dense_features", "num_dense_features = 4"}},
      {"too many dense", [](v1::RankRequest* r) { r->add_dense_features(1); }, {"dense_features", "4"}},
      {"NaN dense", [](v1::RankRequest* r) { r->set_dense_features(2, std::nanf("")); },
       {"dense_features[2]", "NaN"}},
      {"Inf dense", [](v1::RankRequest* r) { r->set_dense_features(1, std::numeric_limits<float>::infinity()); },
       {"dense_features[1]", "Inf"}},
      {"unknown sparse", [](v1::RankRequest* r) { (*r->mutable_sparse_features())["bogus"].add_ids(1); },
       {"sparse_features", "'bogus'", "country"}},
      {"no candidates", [](v1::RankRequest* r) { r->clear_candidate_item_ids(); },
       {"candidate_item_ids", "max_candidates_per_request = 64"}},
      {"too many candidates",
       [](v1::RankRequest* r) {
         for (int i = 0; i < 65; ++i) r->add_candidate_item_ids(i);
       },
       {"candidate_item_ids", "max_candidates_per_request = 64"}},
      {"message too large",
       [](v1::RankRequest* r) {
         for (int i = 0; i < 20000; ++i) r->add_history(1000000000000LL + i);
       },
       {"max_request_bytes = 65536"}},
      {"message too large in a sparse feature's ids",
       [this](v1::RankRequest* r) {
         auto* ids = (*r->mutable_sparse_features())[model_config_.sparse_features[0].name].mutable_ids();
         for (int i = 0; i < 7000; ++i) ids->Add(-1 - i);  // negative: 10 bytes each
       },
       {"max_request_bytes = 65536"}},
      {"message too large in unknown fields",
       [](v1::RankRequest* r) {
         r->GetReflection()->MutableUnknownFields(r)->AddLengthDelimited(99, std::string(70000, 'x'));
       },
       {"max_request_bytes = 65536"}},
  };
  for (const Case& c : cases) {
    v1::RankRequest request = MakeRequest(1, 3, 2, model_config_);
    request.set_request_id(std::string("bad-") + c.what);
    c.spoil(&request);
    auto call = SendRank(stub_.get(), request);
    ASSERT_TRUE(call->Wait(20s)) << c.what;
    EXPECT_EQ(call->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    for (const std::string& part : c.message_has) {
      EXPECT_NE(call->status.error_message().find(part), std::string::npos)
          << c.what << ": '" << call->status.error_message() << "' lacks '" << part << "'";
    }
    EXPECT_NE(call->status.error_message().find(request.request_id()), std::string::npos) << c.what;
  }
  // None of them reached the model (only the warm-up did).
  std::lock_guard<std::mutex> lock(log_.mu);
  EXPECT_TRUE(log_.batch_requests.empty());
}

TEST_F(ServerGrpcTest, BadRequestInABurstLeavesTheOthersIntact) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 100000; });
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 12; ++i) {
    v1::RankRequest r = MakeRequest(200 + i, 3 * i, 2 + i, model_config_);
    if (i % 4 == 1) r.set_dense_features(0, std::nanf(""));
    if (i % 4 == 3) (*r.mutable_sparse_features())["nope"];
    requests.push_back(std::move(r));
  }
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (const auto& r : requests) calls.push_back(SendRank(stub_.get(), r));
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s)) << i;
    if (i % 4 == 1 || i % 4 == 3) {
      EXPECT_EQ(calls[i]->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << i;
    } else {
      ExpectMatchesOracle(requests[i], *calls[i]);
    }
  }
  EXPECT_GT(metrics_.max_batch_requests(), 1);
}

// Dense values of +-3e38 are finite (they pass the door) but overflow the
// bottom MLP: that request's scores are NaN. It gets INVALID_ARGUMENT naming
// the cause instead of OK with NaN; the requests computed in the same batch
// get their exact scores.
TEST_F(ServerGrpcTest, NonFiniteScoresAreAnErrorAndTheRestOfTheBatchIsIntact) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 200000; });
  constexpr int kCalls = 8, kHuge = 5;
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < kCalls; ++i) {
    v1::RankRequest r = MakeRequest(600 + i, 2 + i, 3 + i, model_config_);
    if (i == kHuge) {
      for (int j = 0; j < r.dense_features_size(); ++j) r.set_dense_features(j, j % 2 ? -3e38f : 3e38f);
    }
    requests.push_back(std::move(r));
  }
  // The premise: alone, the model gives this request non-finite scores.
  const std::vector<float> alone = server_test::ForwardAlone(oracle_.get(), requests[kHuge]);
  ASSERT_FALSE(alone.empty());
  ASSERT_TRUE(std::any_of(alone.begin(), alone.end(), [](float v) { return !std::isfinite(v); }))
      << "dense values of 3e38 no longer overflow the model: pick larger ones";

  std::vector<std::unique_ptr<PendingCall>> calls;
  for (const auto& r : requests) calls.push_back(SendRank(stub_.get(), r));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s)) << i;
    if (i == kHuge) {
      EXPECT_EQ(calls[i]->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << "scores " << (calls[i]->response.scores_size() > 0 ? calls[i]->response.scores(0) : 0.0f);
      const std::string& message = calls[i]->status.error_message();
      EXPECT_NE(message.find(requests[i].request_id()), std::string::npos) << message;
      EXPECT_NE(message.find("not finite"), std::string::npos) << message;
      EXPECT_NE(message.find("3e+38"), std::string::npos) << message;
    } else {
      ExpectMatchesOracle(requests[i], *calls[i]);
    }
  }
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_NE(std::find(log_.batch_requests.begin(), log_.batch_requests.end(), kCalls), log_.batch_requests.end())
        << "the burst was not computed as one batch";
  }
  EXPECT_EQ(metrics_.rejected("non_finite_scores"), 1);
  EXPECT_EQ(metrics_.done("INVALID_ARGUMENT"), 1);
  EXPECT_EQ(metrics_.done("OK"), kCalls - 1);
}

// grpc-timeout values from 2562048H up overflow a conversion of the deadline
// to system_clock nanoseconds; the server reads them as no deadline instead
// of as one long past (which answered DEADLINE_EXCEEDED at once, no scores).
// gRPC's own client caps the timeouts it sends, so these go out raw.
TEST_F(ServerGrpcTest, HugeGrpcTimeoutIsNoDeadline) {
  StartServer();
  const v1::RankRequest request = MakeRequest(80, 3, 4, model_config_);
  const std::string bytes = request.SerializeAsString();
  for (const char* timeout : {"2562047H", "2562048H", "3000000H", "99999999H", "1000000000H"}) {
    testing::RawH2Client h2;
    ASSERT_TRUE(h2.Connect(server_->port()));
    ASSERT_TRUE(h2.SendRequestHeaders(1, "/jagrank.v1.Ranker/Rank", {{"grpc-timeout", timeout}}));
    ASSERT_TRUE(h2.SendData(1, testing::RawH2Client::GrpcPrefix(bytes.size()) + bytes, /*end_stream=*/true));
    std::string message;
    ASSERT_TRUE(h2.ReadMessage(1, &message, std::chrono::steady_clock::now() + 10s))
        << "grpc-timeout " << timeout << ": no response message";
    v1::RankResponse response;
    ASSERT_TRUE(response.ParseFromString(message)) << timeout;
    EXPECT_EQ(response.scores_size(), request.candidate_item_ids_size()) << timeout;
  }
  EXPECT_EQ(metrics_.rejected("deadline"), 0);
  EXPECT_EQ(metrics_.done("OK"), 5);
}

// Admission runs before the message is read: a call whose deadline the
// queue cannot meet is refused at once, without its request being read (so
// an overloaded server spends no read, parse or conversion on what it sheds).
// The client below never sends its message: refused before the read, the
// call ends at once, counted as deadline_unmeetable; read first, it would
// wait for the message until its deadline.
TEST_F(ServerGrpcTest, UnmeetableDeadlineIsRefusedBeforeTheMessageIsRead) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  // One batch held for 1 s teaches the batcher a batch costs ~1 s: a call
  // alone then needs ~2 s (a batch in compute and its own) plus the margin.
  gate_.Close();
  const v1::RankRequest blocker = MakeRequest(41, 4, 3, model_config_);
  auto first = SendRank(stub_.get(), blocker);
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  std::this_thread::sleep_for(1s);
  gate_.Open();
  ASSERT_TRUE(first->Wait(10s));
  ExpectMatchesOracle(blocker, *first);

  testing::RawH2Client h2;
  ASSERT_TRUE(h2.Connect(server_->port()));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(h2.SendRequestHeaders(1, "/jagrank.v1.Ranker/Rank", {{"grpc-timeout", "2S"}}));
  std::string message;
  EXPECT_FALSE(h2.ReadMessage(1, &message, start + 10s)) << "a response message without a request";
  const auto took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took_ms, 1500) << "the call waited for its message instead of being refused at once";
  EXPECT_EQ(metrics_.rejected("deadline_unmeetable"), 1);
  EXPECT_EQ(metrics_.done("DEADLINE_EXCEEDED"), 1);
}

// Bytes that do not parse as a RankRequest are the client's error:
// INVALID_ARGUMENT naming the message type (gRPC's typed handler answered
// INTERNAL "Unable to parse request").
TEST_F(ServerGrpcTest, BytesThatAreNotARankRequestAreInvalidArgument) {
  StartServer();
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  // Field 1 (request_id) declares 5 bytes and carries 2; then a varint that never ends.
  for (const std::string& bytes : {std::string("\x0a\x05" "ab", 4), std::string("\x10\xff\xff\xff", 4)}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    auto call = stub.PrepareUnaryCall(&context, "/jagrank.v1.Ranker/Rank", request, &cq);
    call->StartCall();
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("does not parse as a jagrank.v1.RankRequest"), std::string::npos)
        << status.error_message();
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(metrics_.rejected("invalid_argument"), 2);
  EXPECT_EQ(metrics_.done("INVALID_ARGUMENT"), 2);
  // A well-formed request still works on the same connection.
  const v1::RankRequest good = MakeRequest(81, 2, 3, model_config_);
  auto call = SendRank(stub_.get(), good);
  ASSERT_TRUE(call->Wait(20s));
  ExpectMatchesOracle(good, *call);
}

// An open health Watch stream ends when the server drains (the health
// service's shutdown finishes it) instead of holding the listener's shutdown
// for its grace period.
TEST_F(ServerGrpcTest, OpenHealthWatchDoesNotDelayTheDrain) {
  StartServer();
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  auto reader = Watch("", &context, 60s, &response);
  ASSERT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::atomic<bool> ended{false};
  std::atomic<bool> saw_not_serving{false};
  std::thread watcher([&] {
    grpc::health::v1::HealthCheckResponse update;
    while (reader->Read(&update)) {
      if (update.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING) saw_not_serving = true;
    }
    ended = true;
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(server_->Drain().ok());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  watcher.join();
  EXPECT_TRUE(ended);
  EXPECT_TRUE(saw_not_serving) << "the watcher was not told of the drain before its stream ended";
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(seconds, 1.0) << "the open Watch stream held the drain";
}

// Watch on a service the server does not have: SERVICE_UNKNOWN, and the
// stream stays open (the health protocol's answer, not an error).
TEST_F(ServerGrpcTest, HealthWatchOfAnUnknownServiceSaysServiceUnknown) {
  StartServer();
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  auto reader = Watch("no.such.Service", &context, 10s, &response);
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN);
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// Every call is served by the server's own queue threads: nothing starts
// gRPC's callback-API threads ("nexting_thread", which would also poll the
// connections and add a thread hand-over to every Rank event: under 3x
// overload on one core they cost ~8 % of goodput). GetModelInfo, health
// Check and Watch are each called first, so a callback method among them
// would have started them.
TEST_F(ServerGrpcTest, NoCallbackApiThreads) {
  StartServer();
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.embedding_dim(), model_config_.embedding_dim);
  EXPECT_EQ(Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    auto reader = Watch("", &context, 10s, &response);
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    context.TryCancel();
    while (reader->Read(&response)) {
    }
    (void)reader->Finish();
  }
  ASSERT_GT(ThreadsNamed("jr-rank-cq"), 0);  // the thread names are readable here
  EXPECT_EQ(ThreadsNamed("nexting_thread"), 0);
}

// With Forward held, a queue of 3 fills: later calls are refused at once.
TEST_F(ServerGrpcTest, FullQueueAnswersResourceExhaustedAtOnce) {
  StartServer([](ServerConfig* c) {
    c->batching.max_queue_requests = 3;
    c->batching.max_batch_requests = 1;
    c->batching.max_queue_delay_us = 0;
  });
  gate_.Close();
  const v1::RankRequest request = MakeRequest(7, 4, 3, model_config_);
  std::vector<std::unique_ptr<PendingCall>> calls;
  calls.push_back(SendRank(stub_.get(), request));
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  for (int i = 0; i < 12; ++i) calls.push_back(SendRank(stub_.get(), request));
  // While Forward is still held, the refusals arrive.
  int refused = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i]->Wait(300ms)) {
      EXPECT_EQ(calls[i]->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << calls[i]->status.error_message();
      EXPECT_NE(calls[i]->status.error_message().find("max_queue_requests"), std::string::npos);
      ++refused;
    }
  }
  // At most 1 computing, 1 assembled and waiting for compute, 1 taken by the
  // assembly thread and 3 queued were accepted: 12 - 5 refused at least.
  EXPECT_GE(refused, 12 - 5);
  EXPECT_EQ(metrics_.rejected("queue_full"), refused);
  gate_.Open();
  int ok = 0;
  for (auto& call : calls) {
    ASSERT_TRUE(call->Wait(20s));
    if (call->status.ok()) ++ok;
  }
  EXPECT_EQ(ok + refused, static_cast<int>(calls.size()));
  EXPECT_GE(ok, 2);
}

// A call whose deadline passes while it waits behind a held batch is
// answered DEADLINE_EXCEEDED and its candidates never reach the model.
TEST_F(ServerGrpcTest, ExpiredDeadlineIsNeverComputed) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  gate_.Close();
  const v1::RankRequest blocker = MakeRequest(11, 4, 3, model_config_);
  auto first = SendRank(stub_.get(), blocker);
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  v1::RankRequest victim = MakeRequest(12, 4, 1, model_config_);
  victim.set_candidate_item_ids(0, 777777777);
  auto late = SendRank(stub_.get(), victim, 100ms);
  ASSERT_TRUE(late->Wait(10s));
  EXPECT_EQ(late->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's deadline for the call trails the client's by the transport
  // delay (a few ms on a loaded machine); let it pass before the staged
  // victim may compute, as in the staged-batch test below.
  std::this_thread::sleep_for(50ms);
  ASSERT_NO_FATAL_FAILURE(ReleaseThenExpectNeverComputed(blocker, first.get(), 13, 777777777, "expired"));
  // The client's deadline expiry reaches the server as a cancel: still
  // counted as a deadline, not as a client cancel.
  EXPECT_EQ(metrics_.rejected("deadline"), 1);
  EXPECT_EQ(metrics_.rejected("cancelled"), 0);
  EXPECT_EQ(metrics_.done("DEADLINE_EXCEEDED"), 1);
  EXPECT_EQ(metrics_.done("CANCELLED"), 0);
}

// The executor stages a batch (H2D copy) while the one before it computes.
// A request of that staged batch that expires before its compute is dropped,
// and the rest is rebuilt and staged again into the same slot: the survivor
// is answered correctly, the expired one never reaches the model.
TEST_F(ServerGrpcTest, ExpiredRequestOfAStagedBatchIsDroppedAndTheRestRestaged) {
  // 300 ms: the two calls sent back to back below close one batch together.
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 300000; });
  gate_.Close();
  const v1::RankRequest blocker = MakeRequest(31, 4, 3, model_config_);
  auto first = SendRank(stub_.get(), blocker);
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  v1::RankRequest victim = MakeRequest(32, 5, 2, model_config_);
  victim.set_candidate_item_ids(0, 888888888);
  const v1::RankRequest survivor = MakeRequest(33, 7, 4, model_config_);
  auto late = SendRank(stub_.get(), victim, 1500ms);
  auto kept = SendRank(stub_.get(), survivor);
  ASSERT_TRUE(log_.WaitStaged(2, 10s)) << "the two calls were not staged as one batch while the blocker ran";
  ASSERT_TRUE(late->Wait(10s));
  EXPECT_EQ(late->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's deadline for the call trails the client's by the transport
  // delay; let the steady clock pass it before the batch may compute.
  std::this_thread::sleep_for(50ms);
  gate_.Open();
  ASSERT_TRUE(first->Wait(20s));
  ExpectMatchesOracle(blocker, *first);
  ASSERT_TRUE(kept->Wait(20s));
  ExpectMatchesOracle(survivor, *kept);
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.candidate_ids.count(888888888), 0u) << "the expired request was computed";
    EXPECT_EQ(log_.staged_requests, (std::vector<int>{1, 2, 1})) << "blocker, the pair, the survivor restaged";
    EXPECT_EQ(log_.batch_requests, (std::vector<int>{1, 1}));
  }
  EXPECT_EQ(metrics_.rejected("deadline"), 1);
  EXPECT_EQ(metrics_.rejected("cancelled"), 0);
}

// dispatch_when_idle, with a batching delay (60 s) far beyond every deadline:
// while a batch runs, the next call is staged at once (nothing was waiting
// to run); the calls after it wait, since a batch is now waiting, and run
// together as one batch once it moves to compute. A lone call on an idle
// server is answered at once. With the delay-only policy the second call
// would not be staged for 60 s.
TEST_F(ServerGrpcTest, DispatchWhenIdleStagesAtOnceWhileNothingWaitsToRun) {
  StartServer([](ServerConfig* c) {
    c->batching.max_queue_delay_us = 60LL * 1000 * 1000;
    c->batching.dispatch_when_idle = true;
  });
  gate_.Close();
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(MakeRequest(50 + i, 3 + i, 2 + i, model_config_));
  std::vector<std::unique_ptr<PendingCall>> calls;
  calls.push_back(SendRank(stub_.get(), requests[0], 30s));
  ASSERT_TRUE(gate_.WaitEntered(1, 10s)) << "the first call did not reach compute";
  calls.push_back(SendRank(stub_.get(), requests[1], 30s));
  ASSERT_TRUE(log_.WaitStagedCount(2, 10s)) << "the second call was not staged while the first ran";
  calls.push_back(SendRank(stub_.get(), requests[2], 30s));
  calls.push_back(SendRank(stub_.get(), requests[3], 30s));
  ASSERT_TRUE(metrics_.WaitInflight(4, 10s));
  std::this_thread::sleep_for(200ms);
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.staged_requests, (std::vector<int>{1, 1})) << "a batch closed while another waited to run";
  }
  gate_.Open();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(calls[i]->Wait(20s));
    ExpectMatchesOracle(requests[i], *calls[i]);
  }
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.staged_requests, (std::vector<int>{1, 1, 2}));
    EXPECT_EQ(log_.batch_requests, (std::vector<int>{1, 1, 2}));
  }
  const v1::RankRequest alone = MakeRequest(60, 5, 3, model_config_);
  const auto sent_at = std::chrono::steady_clock::now();
  auto call = SendRank(stub_.get(), alone, 30s);
  ASSERT_TRUE(call->Wait(30s));
  ExpectMatchesOracle(alone, *call);
  EXPECT_LT(std::chrono::duration<double>(call->done_at - sent_at).count(), 20.0);
}

// A call whose client cancels it while it waits behind a held batch is
// dropped: the client sees CANCELLED, its candidates never reach the model,
// and the server counts it as cancelled.
TEST_F(ServerGrpcTest, CancelledCallIsNeverComputed) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  gate_.Close();
  const v1::RankRequest blocker = MakeRequest(41, 4, 3, model_config_);
  auto first = SendRank(stub_.get(), blocker);
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  v1::RankRequest victim = MakeRequest(42, 4, 1, model_config_);
  victim.set_candidate_item_ids(0, 999999999);
  auto cancelled = SendRank(stub_.get(), victim);
  ASSERT_TRUE(metrics_.WaitInflight(2, 10s)) << "the call to cancel was not accepted";
  cancelled->context.TryCancel();
  ASSERT_TRUE(cancelled->Wait(10s));
  EXPECT_EQ(cancelled->status.error_code(), grpc::StatusCode::CANCELLED);
  // The server hears of the cancel from the transport, on its own threads,
  // and nothing outside shows when: let it 300 ms before the held batch ends
  // and the cancelled call's batch may compute.
  std::this_thread::sleep_for(300ms);
  ASSERT_NO_FATAL_FAILURE(ReleaseThenExpectNeverComputed(blocker, first.get(), 43, 999999999, "cancelled"));
  EXPECT_EQ(metrics_.rejected("cancelled"), 1);
  EXPECT_EQ(metrics_.done("CANCELLED"), 1);
}

// Server reflection answers list_services and describes the health service
// (raw bytes: the reflection protos are not installed, and the names are
// plain strings on the wire). Health is served through the generic service,
// so it is not in the list, but its descriptor is there for grpcurl.
TEST_F(ServerGrpcTest, ReflectionListsTheServices) {
  StartServer();
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    return cq.Next(&got, &ok) && ok && reinterpret_cast<intptr_t>(got) == tag;
  };
  auto ask = [&](const std::string& request, intptr_t tag) {
    grpc::Slice slice(request);
    grpc::ByteBuffer out(&slice, 1);
    call->Write(out, reinterpret_cast<void*>(tag));
    if (!step(tag)) return std::string("(write failed)");
    grpc::ByteBuffer in;
    call->Read(&in, reinterpret_cast<void*>(tag + 1));
    if (!step(tag + 1)) return std::string("(read failed)");
    std::vector<grpc::Slice> slices;
    if (!in.Dump(&slices).ok()) return std::string("(dump failed)");
    std::string response;
    for (const grpc::Slice& s : slices) response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return response;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  // ServerReflectionRequest{list_services = "*"}: field 7, length-delimited.
  const std::string services = ask(std::string("\x3a\x01*", 3), 2);
  EXPECT_NE(services.find("jagrank.v1.Ranker"), std::string::npos) << services;
  // ServerReflectionRequest{file_containing_symbol = "grpc.health.v1.Health"}: field 4.
  const std::string symbol = "grpc.health.v1.Health";
  const std::string health = ask(std::string("\x22") + static_cast<char>(symbol.size()) + symbol, 4);
  EXPECT_NE(health.find("grpc/health/v1/health.proto"), std::string::npos) << health;
  EXPECT_NE(health.find("HealthCheckResponse"), std::string::npos) << health;
  call->WritesDone(reinterpret_cast<void*>(6));
  ASSERT_TRUE(step(6));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(7));
  ASSERT_TRUE(step(7));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ServerGrpcTest, HealthServingThenDrainFinishesAcceptedAndRefusesNew) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  EXPECT_EQ(Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health("jagrank.v1.Ranker"), grpc::health::v1::HealthCheckResponse::SERVING);
  grpc::Status unknown;
  Health("no.such.Service", &unknown);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);

  gate_.Close();
  const v1::RankRequest request = MakeRequest(21, 6, 4, model_config_);
  auto accepted = SendRank(stub_.get(), request);
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  auto queued = SendRank(stub_.get(), request);
  // Accepted means in a batch: the in-flight gauge counts a call just
  // before the batcher takes it, and a drain in between refuses it (a fresh
  // clone's make test once caught that window).
  ASSERT_TRUE(log_.WaitStagedCount(2, 10s)) << "the second call was not staged while the first ran";
  std::thread drainer([&] { EXPECT_TRUE(server_->Drain().ok()); });
  // NOT_SERVING and UNAVAILABLE while the accepted calls are still held.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (Health("") != grpc::health::v1::HealthCheckResponse::NOT_SERVING &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(Health(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Health("jagrank.v1.Ranker"), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto refused = SendRank(stub_.get(), request);
  ASSERT_TRUE(refused->Wait(10s));
  EXPECT_EQ(refused->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(accepted->Wait(50ms)) << "drain must wait for the held batch";
  gate_.Open();
  drainer.join();
  ASSERT_TRUE(accepted->Wait(10s));
  ASSERT_TRUE(queued->Wait(10s));
  ExpectMatchesOracle(request, *accepted);
  ExpectMatchesOracle(request, *queued);
}

// Many connections, calls cancelled by their clients or expiring while
// queued, then a drain: every call ends with its own status, answered ones
// are right, and the drain finishes with nothing in flight.
TEST_F(ServerGrpcTest, ManyConnectionsCancelsAndDrain) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 1000; });
  std::vector<std::unique_ptr<v1::Ranker::Stub>> stubs;
  for (int i = 0; i < 6; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection each
    stubs.push_back(v1::Ranker::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 240; ++i) requests.push_back(MakeRequest(400 + i, i % 45, 1 + i % 20, model_config_));
  std::vector<std::unique_ptr<PendingCall>> calls;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto deadline = i % 7 == 3 ? 1ms : 30s;
    calls.push_back(SendRank(stubs[i % stubs.size()].get(), requests[i], deadline));
    if (i % 5 == 2) calls.back()->context.TryCancel();
  }
  int ok = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i]->Wait(30s)) << i;
    const grpc::StatusCode code = calls[i]->status.error_code();
    if (code == grpc::StatusCode::OK) {
      ExpectMatchesOracle(requests[i], *calls[i]);
      ++ok;
    } else if (i % 5 == 2 && code == grpc::StatusCode::CANCELLED) {
      continue;
    } else {
      EXPECT_EQ(i % 7, 3u) << i << ": " << calls[i]->status.error_message();
      // A 1 ms call expires, or admission refuses it on arrival because the
      // queue ahead of it would not finish in time (RESOURCE_EXHAUSTED).
      if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        EXPECT_NE(calls[i]->status.error_message().find("would not finish before its deadline"), std::string::npos)
            << i << ": " << calls[i]->status.error_message();
      } else {
        EXPECT_EQ(code, grpc::StatusCode::DEADLINE_EXCEEDED) << i;
      }
    }
  }
  EXPECT_GE(ok, 240 - 48 - 35);  // every call neither cancelled nor given 1 ms
  EXPECT_TRUE(server_->Drain().ok());
  EXPECT_EQ(metrics_.inflight(), 0);
}

}  // namespace
}  // namespace jagrank
