// RankStream over real gRPC on loopback, with the real (small) CPU model:
// answers equal unary Rank's, each request is answered once with its id,
// a bad request or an expired one fails alone, the outstanding cap holds
// reading back, half-close and drain finish the stream after its answers,
// and streams are refused before the model is ready and beyond the cap.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "server/rank_stream.h"
#include "server/ranker_service.h"
#include "server/server.h"
#include "server_test_helpers.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::CountingMetrics;
using server_test::ForwardLog;
using server_test::Gate;
using server_test::MakeRequest;

constexpr float kTolerance = 1e-5f;

// One RankStream call; a thread reads every answer. Waits are bounded (the
// call has a deadline too).
class StreamCall {
 public:
  explicit StreamCall(v1::Ranker::Stub* stub, std::chrono::milliseconds deadline = 30s) {
    context_.set_deadline(std::chrono::system_clock::now() + deadline);
    stream_ = stub->RankStream(&context_);
    reader_ = std::thread([this] {
      v1::RankStreamResponse answer;
      while (stream_->Read(&answer)) {
        std::lock_guard<std::mutex> lock(mu_);
        answers_.push_back(answer);
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      read_done_ = true;
      cv_.notify_all();
    });
  }
  ~StreamCall() {
    if (reader_.joinable()) {
      context_.TryCancel();
      reader_.join();
      stream_->Finish();
    }
  }

  bool Send(const v1::RankRequest& request, uint32_t timeout_ms = 0) {
    v1::RankStreamRequest message;
    *message.mutable_request() = request;
    message.set_timeout_ms(timeout_ms);
    return stream_->Write(message);
  }
  bool WaitAnswers(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return answers_.size() >= n; });
  }
  // True once the server ended the stream (its last answer was read).
  bool WaitReadDone(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return read_done_; });
  }
  // Half-closes, reads the rest, returns the stream's status.
  grpc::Status Close() {
    stream_->WritesDone();
    return Finish();
  }
  // Reads the rest (the server ends the stream), returns its status.
  grpc::Status Finish() {
    reader_.join();
    return stream_->Finish();
  }
  // Answers by request_id; fails the test on an id answered twice.
  std::map<std::string, v1::RankStreamResponse> AnswersById() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, v1::RankStreamResponse> by_id;
    for (const v1::RankStreamResponse& answer : answers_) {
      EXPECT_TRUE(by_id.emplace(answer.request_id(), answer).second) << answer.request_id() << " answered twice";
    }
    return by_id;
  }
  size_t answer_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return answers_.size();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::RankStreamRequest, v1::RankStreamResponse>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::RankStreamResponse> answers_;
  bool read_done_ = false;
};

class ServerStreamTest : public ::testing::Test {
 protected:
  void StartServer(const std::function<void(ServerConfig*)>& adjust = {}) {
    config_ = server_test::LoopbackCpuConfig();
    config_.max_candidates_per_request = 64;
    config_.max_request_bytes = 64 * 1024;
    config_.batching.max_queue_delay_us = 2000;
    if (adjust) adjust(&config_);
    model_config_ = server_test::SmallModelConfig();
    oracle_ = server_test::MakeCpuModel(model_config_);
    auto model = std::make_unique<server_test::RecordingModel>(server_test::MakeCpuModel(model_config_), &gate_,
                                                               &log_);
    Status s = JagrankServer::CreateWithModel(config_, std::move(model), &metrics_, &server_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    gate_.ResetCount();  // forget the warm-up
    stub_ = v1::Ranker::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                    grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    gate_.Open();
    server_.reset();
  }

  // `answer` carries the oracle's scores for `request`.
  void ExpectScores(const v1::RankRequest& request, const v1::RankStreamResponse& answer) {
    ASSERT_EQ(answer.result_case(), v1::RankStreamResponse::kResponse)
        << request.request_id() << ": " << answer.ShortDebugString();
    EXPECT_EQ(answer.request_id(), request.request_id());
    const v1::RankResponse& response = answer.response();
    EXPECT_EQ(response.request_id(), request.request_id());
    EXPECT_EQ(response.model_version(), oracle_->version());
    const std::vector<float> expected = server_test::ForwardAlone(oracle_.get(), request);
    ASSERT_EQ(static_cast<size_t>(response.scores_size()), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(response.scores(i), expected[i], kTolerance) << request.request_id() << " candidate " << i;
    }
  }

  ServerConfig config_;
  ModelConfig model_config_;
  std::unique_ptr<Model> oracle_;
  Gate gate_;
  ForwardLog log_;
  CountingMetrics metrics_;
  std::unique_ptr<JagrankServer> server_;
  std::unique_ptr<v1::Ranker::Stub> stub_;
};

TEST_F(ServerStreamTest, ScoresEqualUnaryRank) {
  StartServer();
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 12; ++i) requests.push_back(MakeRequest(100 + i, i * 3, 1 + i % 7, model_config_));
  StreamCall stream(stub_.get());
  for (const v1::RankRequest& r : requests) ASSERT_TRUE(stream.Send(r));
  ASSERT_TRUE(stream.WaitAnswers(requests.size(), 20s));
  EXPECT_TRUE(stream.Close().ok());
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  for (const v1::RankRequest& r : requests) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 20s);
    v1::RankResponse unary;
    ASSERT_TRUE(stub_->Rank(&context, r, &unary).ok());
    ASSERT_EQ(answers.count(r.request_id()), 1u) << r.request_id();
    const v1::RankStreamResponse& answer = answers[r.request_id()];
    ASSERT_TRUE(answer.has_response()) << answer.error().message();
    ASSERT_EQ(answer.response().scores_size(), unary.scores_size());
    for (int i = 0; i < unary.scores_size(); ++i) {
      EXPECT_NEAR(answer.response().scores(i), unary.scores(i), kTolerance) << r.request_id() << " candidate " << i;
    }
    EXPECT_EQ(answer.response().model_version(), unary.model_version());
    ExpectScores(r, answer);
  }
}

TEST_F(ServerStreamTest, ManyRequestsAreEachAnsweredOnceWithTheirId) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 500; });
  constexpr int kRequests = 300;
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(MakeRequest(1000 + i, i % 40, 1 + i % 9, model_config_));
  StreamCall stream(stub_.get());
  for (const v1::RankRequest& r : requests) ASSERT_TRUE(stream.Send(r));
  ASSERT_TRUE(stream.WaitAnswers(kRequests, 30s)) << stream.answer_count();
  EXPECT_TRUE(stream.Close().ok());
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  ASSERT_EQ(answers.size(), static_cast<size_t>(kRequests));
  for (const v1::RankRequest& r : requests) ExpectScores(r, answers[r.request_id()]);
  // Counted as requests, like unary calls; batched together.
  EXPECT_EQ(metrics_.done("OK"), kRequests);
  EXPECT_GT(metrics_.max_batch_requests(), 1);
}

TEST_F(ServerStreamTest, BadRequestGetsAnErrorNamingTheFieldAndTheOthersSucceed) {
  StartServer();
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 9; ++i) requests.push_back(MakeRequest(200 + i, 5, 3, model_config_));
  requests[4].add_dense_features(0.5f);  // one too many
  for (int i = 0; i < 70; ++i) requests[6].add_candidate_item_ids(i);  // over max_candidates_per_request = 64
  StreamCall stream(stub_.get());
  for (const v1::RankRequest& r : requests) ASSERT_TRUE(stream.Send(r));
  ASSERT_TRUE(stream.WaitAnswers(requests.size(), 20s));
  EXPECT_TRUE(stream.Close().ok());
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  for (size_t i = 0; i < requests.size(); ++i) {
    const v1::RankStreamResponse& answer = answers[requests[i].request_id()];
    if (i == 4 || i == 6) {
      ASSERT_EQ(answer.result_case(), v1::RankStreamResponse::kError) << i;
      EXPECT_EQ(answer.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_NE(answer.error().message().find("request " + requests[i].request_id() + ": "), std::string::npos)
          << answer.error().message();
      const char* field = i == 4 ? "dense_features has 5 values: expected exactly num_dense_features = 4"
                                 : "exceeds max_candidates_per_request = 64";
      EXPECT_NE(answer.error().message().find(field), std::string::npos) << answer.error().message();
    } else {
      ExpectScores(requests[i], answer);
    }
  }
  EXPECT_EQ(metrics_.rejected("invalid_argument"), 2);
}

TEST_F(ServerStreamTest, TimeoutMsExpiresThatRequestOnly) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  const v1::RankRequest first = MakeRequest(300, 4, 2, model_config_);
  const v1::RankRequest expiring = MakeRequest(301, 4, 2, model_config_);
  const v1::RankRequest patient = MakeRequest(302, 4, 2, model_config_);
  gate_.Close();
  StreamCall stream(stub_.get());
  ASSERT_TRUE(stream.Send(first));
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(stream.Send(expiring, /*timeout_ms=*/50));
  ASSERT_TRUE(stream.Send(patient));
  ASSERT_TRUE(metrics_.WaitInflight(3, 10s)) << "both were accepted while the first computes";
  std::this_thread::sleep_until(sent + 150ms);  // past the 50 ms of `expiring`, still held
  gate_.Open();
  ASSERT_TRUE(stream.WaitAnswers(3, 20s));
  EXPECT_TRUE(stream.Close().ok());
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  ExpectScores(first, answers[first.request_id()]);
  ExpectScores(patient, answers[patient.request_id()]);
  const v1::RankStreamResponse& expired = answers[expiring.request_id()];
  ASSERT_EQ(expired.result_case(), v1::RankStreamResponse::kError);
  EXPECT_EQ(expired.error().code(), static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED)) << expired.error().message();
  std::lock_guard<std::mutex> lock(log_.mu);
  for (int64_t id : expiring.candidate_item_ids()) EXPECT_EQ(log_.candidate_ids.count(id), 0u) << "it was computed";
}

// With at most 2 requests read and not answered, the server holds no more
// than 2 at any time (so no batch has more), and every request is answered.
TEST_F(ServerStreamTest, OutstandingCapHoldsReadingBackAndAllAreAnswered) {
  StartServer([](ServerConfig* c) {
    c->rank_stream_max_outstanding = 2;
    c->batching.max_queue_delay_us = 0;
  });
  constexpr int kRequests = 50;
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(MakeRequest(500 + i, 3, 2, model_config_));
  gate_.Close();
  StreamCall stream(stub_.get());
  for (const v1::RankRequest& r : requests) ASSERT_TRUE(stream.Send(r));  // flow control takes them all
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  EXPECT_FALSE(metrics_.WaitInflight(3, 300ms)) << "a third request was read while two were unanswered";
  gate_.Open();
  ASSERT_TRUE(stream.WaitAnswers(kRequests, 30s)) << stream.answer_count();
  EXPECT_TRUE(stream.Close().ok());
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  ASSERT_EQ(answers.size(), static_cast<size_t>(kRequests));
  for (const v1::RankRequest& r : requests) ExpectScores(r, answers[r.request_id()]);
  EXPECT_LE(metrics_.max_batch_requests(), 2);
}

TEST_F(ServerStreamTest, HalfCloseFinishesOkAfterTheAnswers) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(MakeRequest(600 + i, 2, 2, model_config_));
  gate_.Close();
  StreamCall stream(stub_.get());
  for (const v1::RankRequest& r : requests) ASSERT_TRUE(stream.Send(r));
  ASSERT_TRUE(gate_.WaitEntered(1, 10s));
  std::thread closer([&] { EXPECT_TRUE(stream.Close().ok()); });
  EXPECT_FALSE(stream.WaitReadDone(200ms)) << "the stream ended before its answers";
  EXPECT_EQ(stream.answer_count(), 0u);
  gate_.Open();
  closer.join();
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  ASSERT_EQ(answers.size(), requests.size());
  for (const v1::RankRequest& r : requests) ExpectScores(r, answers[r.request_id()]);
  EXPECT_EQ(server_->Drain().code(), Status::Code::kOk);
}

// A drain answers what the stream had sent, refuses what it sends after
// (UNAVAILABLE replies, the stream goes on), then ends the stream.
TEST_F(ServerStreamTest, DrainAnswersTheAcceptedRefusesNewMessagesThenEndsTheStream) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  std::vector<v1::RankRequest> accepted;
  for (int i = 0; i < 3; ++i) accepted.push_back(MakeRequest(700 + i, 2, 2, model_config_));
  gate_.Close();
  StreamCall stream(stub_.get());
  StreamCall closed_stream(stub_.get());  // half-closes during the drain: ends OK
  // Probes that are invalid (no candidates) are answered at once: with
  // INVALID_ARGUMENT while serving, UNAVAILABLE once the drain has begun.
  // A stream's messages are taken one after the other, so a probe's answer
  // also says that the messages before it are in the batcher.
  auto probe = [&](const std::string& id) {
    v1::RankRequest r = MakeRequest(720, 2, 2, model_config_);
    r.clear_candidate_item_ids();
    r.set_request_id(id);
    return r;
  };
  const v1::RankRequest other = MakeRequest(710, 2, 2, model_config_);
  ASSERT_TRUE(closed_stream.Send(other));
  ASSERT_TRUE(closed_stream.Send(probe("probe-other")));
  for (const v1::RankRequest& r : accepted) ASSERT_TRUE(stream.Send(r));
  ASSERT_TRUE(stream.Send(probe("probe-first")));
  ASSERT_TRUE(closed_stream.WaitAnswers(1, 10s));
  ASSERT_TRUE(stream.WaitAnswers(1, 10s));
  ASSERT_EQ(stream.AnswersById()["probe-first"].error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  ASSERT_EQ(metrics_.inflight(), 4);
  std::thread drainer([&] { EXPECT_TRUE(server_->Drain().ok()); });
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  size_t probes = 1;
  bool draining = false;
  while (!draining && std::chrono::steady_clock::now() < give_up) {
    const std::string id = "probe-" + std::to_string(probes);
    ASSERT_TRUE(stream.Send(probe(id)));
    ASSERT_TRUE(stream.WaitAnswers(++probes, 10s));
    const v1::RankStreamResponse answer = stream.AnswersById()[id];
    ASSERT_EQ(answer.result_case(), v1::RankStreamResponse::kError);
    draining = answer.error().code() == static_cast<int>(grpc::StatusCode::UNAVAILABLE);
    if (!draining) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(draining);
  // A valid message sent now is refused too, and the stream goes on.
  v1::RankRequest late = MakeRequest(721, 2, 2, model_config_);
  late.set_request_id("late");
  ASSERT_TRUE(stream.Send(late));
  ASSERT_TRUE(stream.WaitAnswers(probes + 1, 10s));
  {
    const v1::RankStreamResponse answer = stream.AnswersById()["late"];
    ASSERT_EQ(answer.result_case(), v1::RankStreamResponse::kError);
    EXPECT_EQ(answer.error().code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    EXPECT_NE(answer.error().message().find("server is shutting down"), std::string::npos)
        << answer.error().message();
  }
  std::thread closer([&] { EXPECT_TRUE(closed_stream.Close().ok()); });
  EXPECT_FALSE(stream.WaitReadDone(50ms)) << "the drain must wait for the held answers";
  gate_.Open();
  drainer.join();
  closer.join();
  const grpc::Status ended = stream.Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  std::map<std::string, v1::RankStreamResponse> answers = stream.AnswersById();
  for (const v1::RankRequest& r : accepted) ExpectScores(r, answers[r.request_id()]);
  ExpectScores(other, closed_stream.AnswersById()[other.request_id()]);
  EXPECT_EQ(metrics_.done("OK"), 4);
}

// A client that cancels with requests in the server: each is computed or
// dropped, the stream is freed once the last one is finished, and the drain
// does not wait for it.
TEST_F(ServerStreamTest, CancelledStreamIsFreedAndDoesNotHoldTheDrain) {
  StartServer([](ServerConfig* c) { c->batching.max_queue_delay_us = 0; });
  gate_.Close();
  {
    StreamCall stream(stub_.get());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(stream.Send(MakeRequest(850 + i, 2, 2, model_config_)));
    // An invalid probe is answered at once; as a stream's messages are taken
    // one after the other, its answer says the four are in the batcher (the
    // in-flight count rises just before a request enters the queue, so it
    // cannot say that: the last one could still be refused by the drain).
    v1::RankRequest probe = MakeRequest(860, 2, 2, model_config_);
    probe.clear_candidate_item_ids();
    ASSERT_TRUE(stream.Send(probe));
    ASSERT_TRUE(stream.WaitAnswers(1, 10s));
    ASSERT_TRUE(gate_.WaitEntered(1, 10s));
    ASSERT_EQ(metrics_.inflight(), 4);
  }  // cancelled here
  gate_.Open();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(server_->Drain().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the drain waited for the cancelled stream";
  // Each was computed or dropped as cancelled, whichever came first.
  EXPECT_EQ(metrics_.done("OK") + metrics_.done("CANCELLED"), 4) << metrics_.done_codes();
}

// A stream cancelled while its reading is paused at the outstanding cap
// (no Read pending to report the end) is freed too: with one stream
// allowed, a new one opens afterwards.
TEST_F(ServerStreamTest, StreamCancelledWhilePausedAtTheCapIsFreed) {
  StartServer([](ServerConfig* c) {
    c->rank_stream_max_outstanding = 2;
    c->rank_stream_max_streams = 1;
    c->batching.max_queue_delay_us = 0;
  });
  gate_.Close();
  {
    StreamCall stream(stub_.get());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(stream.Send(MakeRequest(870 + i, 2, 2, model_config_)));
    ASSERT_TRUE(gate_.WaitEntered(1, 10s));
    ASSERT_TRUE(metrics_.WaitInflight(2, 10s));
  }  // cancelled here, 3 messages unread
  gate_.Open();
  const v1::RankRequest request = MakeRequest(880, 2, 2, model_config_);
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  grpc::Status status(grpc::StatusCode::UNKNOWN, "not tried");
  while (!status.ok() && std::chrono::steady_clock::now() < give_up) {
    StreamCall next(stub_.get());
    next.Send(request);
    next.WaitAnswers(1, 5s);
    status = next.Close();
    if (status.ok()) ExpectScores(request, next.AnswersById()[request.request_id()]);
    else std::this_thread::sleep_for(5ms);  // the cancelled stream is freed as its last events come back
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(ServerStreamTest, StreamsBeyondTheCapAreRefused) {
  StartServer([](ServerConfig* c) { c->rank_stream_max_streams = 1; });
  StreamCall first(stub_.get());
  const v1::RankRequest request = MakeRequest(800, 2, 2, model_config_);
  ASSERT_TRUE(first.Send(request));
  ASSERT_TRUE(first.WaitAnswers(1, 20s));  // open and registered
  StreamCall second(stub_.get());
  second.Send(request);
  const grpc::Status refused = second.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("rank_stream_max_streams = 1"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(first.Close().ok());
  ExpectScores(request, first.AnswersById()[request.request_id()]);
}

// Before SetReady (the model still loading) a stream ends at once with
// UNAVAILABLE; the service and the stream service on a bare gRPC server.
TEST(ServerStreamLoadingTest, StreamBeforeTheModelIsReadyIsUnavailable) {
  const ServerConfig config = server_test::LoopbackCpuConfig();
  NullMetrics metrics;
  RankerService ranker(config, &metrics);
  RankStreamService streams(config, &metrics, &ranker);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  ranker.AddToBuilder(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ranker.StartPolling();
  streams.RequestStreams();
  {
    auto stub = v1::Ranker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    StreamCall stream(stub.get());
    stream.Send(MakeRequest(900, 2, 2, server_test::SmallModelConfig()));
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(status.error_message().find("model is still loading"), std::string::npos) << status.error_message();
    EXPECT_EQ(stream.answer_count(), 0u);
  }
  server->Shutdown(std::chrono::system_clock::now() + 1s);
  ranker.StopPolling();
  server->Wait();
}

}  // namespace
}  // namespace jagrank
