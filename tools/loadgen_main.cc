// jagrank-loadgen: drives a jagrank server with Rank calls and reports QPS,
// candidates/s, latency percentiles and errors by code (table + JSON).
//   closed loop: --concurrency N calls always outstanding
//   open loop:   --rate R calls/s with Poisson (exponential) inter-arrivals,
//                sent by --client-threads pacers of R/threads each (a sum of
//                independent Poisson streams is Poisson); latency counts from
//                each call's scheduled send time, so a pacer that falls
//                behind shows as latency (and as pacer_late_fraction), not
//                as a quietly lower rate
// Workload: history lengths log-normal (median --history-median, shape
// --history-sigma) capped at --history-max (default: the model's
// max_history_len), candidates uniform in [--candidates-min, --candidates-max].
// A pool of requests is generated and serialised up front, and calls go out
// through a generic stub as those bytes, on --client-threads completion
// queues each polled by its own thread (gRPC's callback API funnels every
// call of the process through one shared set of threads), so the client's
// own cost stays low: it shares the host with the server in the benchmarks.
// One response in kResponseCheckEvery is parsed and its score count checked.
// The report includes the client's CPU use, in cores, over the run.
// --stream sends the same requests over --streams RankStream calls in total
// (docs/rank_stream.md), spread round-robin over the --channels connections
// and the client threads' queues: each request goes on one stream (the
// closed loop's slot i always on stream i % streams, the open loop's n-th
// request on stream n % streams) with its own id and --timeout-ms as its
// timeout_ms; every answer is parsed (to match it by id) and checked, and
// latency is per request, from its send (or scheduled) time to its answer.
// A stream that ends fails its outstanding requests with its status; it is
// not opened again.
#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jagrank/v1/ranker.grpc.pb.h"
#include "common/flags.h"
#include "common/process.h"
#include "common/socket_address.h"
#include "tools/channel_credentials.h"

namespace jagrank {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Options {
  std::string address = "localhost:8500";
  int concurrency = 8;         // closed loop: outstanding calls
  double rate = 0;             // open loop when > 0: calls per second
  double duration_s = 10;      // measured window
  double warmup_s = 2;         // load before the window, not measured
  double history_median = 100;
  double history_sigma = 1.0;
  int history_max = 0;         // 0 = the model's max_history_len
  int candidates_min = 50;
  int candidates_max = 500;
  int sparse_ids_max = 4;      // ids per sparse feature, uniform in [1, this]
  int pool = 512;              // distinct requests generated up front
  int channels = 4;            // separate HTTP/2 connections
  int client_threads = 4;      // completion queues, one polling thread each
  int64_t timeout_ms = 5000;   // per-call deadline
  double connect_timeout_s = 10;  // first contact (GetModelInfo), retried with backoff until then
  int max_outstanding = 20000; // open loop: calls beyond this are counted as CLIENT_OVERLOAD, not sent
  int64_t seed = 1;
  std::string json_out;
  std::string label;
  // gRPC's minimal channel stack (grpc.minimal_stack): no client-side
  // message-size or census filters; call deadlines still hold. On the H200
  // host, where the loadgen shares the server's cores, it took ~12% less
  // client CPU at jagged h1024 c1024 (4.4 vs 5.0 cores).
  bool minimal_stack = true;
  std::string grpc_channel_args;              // "grpc.name=value,..." on every channel
  std::vector<GrpcChannelArg> extra_args;     // parsed from grpc_channel_args
  bool stream = false;         // RankStream instead of unary Rank calls
  int streams = 4;             // with stream: RankStream calls in total
  std::string tls_ca, tls_cert, tls_key;      // TLS / mTLS (tools/channel_credentials.h)
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// The credentials every channel of the run uses (made once, in Main).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const Options& o) { return o.credentials; }

constexpr char kRankMethod[] = "/jagrank.v1.Ranker/Rank";
constexpr char kRankStreamMethod[] = "/jagrank.v1.Ranker/RankStream";
// Every this many calls the response is parsed and its scores counted.
constexpr int64_t kResponseCheckEvery = 64;

// What a completion-queue tag points at: a finished call, or the alarm of a
// closed-loop slot waiting out its backoff.
struct Event {
  enum class Kind { kCall, kRetry, kStreamStarted, kStreamRead, kStreamWritten, kStreamFinished };
  explicit Event(Kind kind) : kind(kind) {}
  const Kind kind;
};

// Closed loop, after UNAVAILABLE (server down, connection refused, draining):
// the slot waits before its next call, 10 ms doubling to 1 s, back to none
// after an answer. Without it a dead server's refusals come back at once and
// the slots spin at full CPU, counting hundreds of thousands of errors.
constexpr std::chrono::milliseconds kRetryBackoffFirst{10};
constexpr std::chrono::milliseconds kRetryBackoffMax{1000};

struct Call : Event {
  Call() : Event(Kind::kCall) {}
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::Status status;
  int thread = 0;  // whose completion queue the call is on
  grpc::ByteBuffer response;
  SteadyClock::time_point start;
  int candidates = 0;
  bool measured = false;
  bool check_response = false;
  std::chrono::milliseconds backoff{0};  // closed loop: the slot's current backoff
};

struct Retry : Event {
  Retry() : Event(Kind::kRetry) {}
  grpc::Alarm alarm;
  int thread = 0;
  std::chrono::milliseconds backoff{0};
};

struct RankStreamCall;

// One operation of a RankStream call.
struct StreamOp : Event {
  StreamOp(Kind kind, RankStreamCall* stream) : Event(kind), stream(stream) {}
  RankStreamCall* const stream;
};

// A request sent on a stream and not yet answered.
struct StreamPending {
  SteadyClock::time_point start;
  bool measured = false;
  int candidates = 0;
};

// One RankStream call: one Read always in flight, writes one at a time
// (the rest wait in `to_write`), the requests it awaits answers for by id.
struct RankStreamCall {
  int index = 0;
  int thread = 0;  // whose completion queue its events come to
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw;
  grpc::ByteBuffer read_bytes;
  std::mutex mu;
  bool writing = false;                    // guarded by mu; StartCall or a Write in flight
  bool writes_done_wanted = false;         // guarded by mu; WritesDone once no write is in flight
  std::deque<grpc::ByteBuffer> to_write;   // guarded by mu
  grpc::ByteBuffer in_flight;              // guarded by mu
  std::map<uint64_t, StreamPending> pending;  // guarded by mu; by request sequence number
  bool ended = false;                      // guarded by mu; Finish came back: sends fail at once
  grpc::Status status;                     // set by Finish
  StreamOp started{Event::Kind::kStreamStarted, this};
  StreamOp read{Event::Kind::kStreamRead, this};
  StreamOp written{Event::Kind::kStreamWritten, this};
  StreamOp finished{Event::Kind::kStreamFinished, this};
};

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// The bytes of a RankStreamRequest carrying `request` (a serialised
// RankRequest) with request_id `id`, and `timeout_ms`. The id is appended as
// a second occurrence of RankRequest field 1 (the last one wins when parsed),
// so the pooled bytes are copied, not parsed and serialised again.
grpc::ByteBuffer StreamMessage(const std::string& request, const std::string& id, uint32_t timeout_ms) {
  std::string inner = request;
  inner.push_back(0x0a);  // RankRequest.request_id: field 1, length-delimited
  AppendVarint(id.size(), &inner);
  inner += id;
  std::string bytes;
  bytes.reserve(inner.size() + 16);
  bytes.push_back(0x0a);  // RankStreamRequest.request: field 1, length-delimited
  AppendVarint(inner.size(), &bytes);
  bytes += inner;
  if (timeout_ms > 0) {
    bytes.push_back(0x10);  // RankStreamRequest.timeout_ms: field 2, varint
    AppendVarint(timeout_ms, &bytes);
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// The process's user + system CPU seconds so far.
double ProcessCpuSeconds() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(std::floor(p * sorted.size()));
  return sorted[std::min(i, sorted.size() - 1)];
}

// A response must parse and carry one score per candidate.
grpc::Status CheckScores(const v1::RankResponse& response, int candidates) {
  if (response.scores_size() != candidates) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS, "response has " + std::to_string(response.scores_size()) +
                                                         " scores for " + std::to_string(candidates) +
                                                         " candidates");
  }
  return grpc::Status::OK;
}

class LoadGen {
 public:
  LoadGen(const Options& options, const v1::ModelInfo& info)
      : options_(options), info_(info) {
    MakePool();
    for (int i = 0; i < options_.channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
      args.SetInt("jagrank.loadgen.channel", i);
      args.SetMaxReceiveMessageSize(64 << 20);
      if (options_.minimal_stack) args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
      for (const GrpcChannelArg& arg : options_.extra_args) {
        if (arg.is_int) {
          args.SetInt(arg.name, arg.int_value);
        } else {
          args.SetString(arg.name, arg.value);
        }
      }
      stubs_.push_back(std::make_unique<grpc::GenericStub>(
          grpc::CreateCustomChannel(options_.address, ChannelCredentials(options_), args)));
    }
    for (int t = 0; t < options_.client_threads; ++t) cqs_.push_back(std::make_unique<grpc::CompletionQueue>());
  }

  nlohmann::json Run() {
    const bool open_loop = options_.rate > 0;
    const auto start = SteadyClock::now();
    const double cpu_start = ProcessCpuSeconds();
    const auto measure_at = start + Seconds(options_.warmup_s);
    const auto end_at = measure_at + Seconds(options_.duration_s);
    measure_at_ = measure_at;
    end_at_ = end_at;
    // One sending thread could not keep up: at ~47k calls/s offered on the
    // H200 host a single pacer sent ~31k/s and the rest piled up behind it.
    std::vector<std::thread> pacers;
    for (int t = 0; t < options_.client_threads; ++t) threads_.emplace_back([this, t] { Poll(t); });
    if (options_.stream) OpenStreams();
    if (open_loop) {
      for (int t = 0; t < options_.client_threads; ++t) {
        pacers.emplace_back([this, t, end_at] { OpenLoop(t, end_at); });
      }
    } else {
      const auto now = SteadyClock::now();
      for (int i = 0; i < options_.concurrency; ++i) Issue(i % options_.client_threads, now);
    }
    // Progress: one line per second on stderr.
    int64_t last_done = 0;
    auto last_tick = start;
    for (auto tick = start + std::chrono::seconds(1);; tick += std::chrono::seconds(1)) {
      std::this_thread::sleep_until(std::min(tick, end_at));
      const auto now = SteadyClock::now();
      const int64_t done = completed_.load();
      std::fprintf(stderr, "\r[%5.1fs %s] %7.0f calls/s  outstanding %5lld  ok %9lld  errors %lld   ",
                   std::chrono::duration<double>(now - start).count(), now < measure_at ? "warm-up" : "measure",
                   static_cast<double>(done - last_done) /
                       std::max(1e-3, std::chrono::duration<double>(now - last_tick).count()),
                   static_cast<long long>(outstanding_.load()), static_cast<long long>(ok_total_.load()),
                   static_cast<long long>(errors_total_.load()));
      last_done = done;
      last_tick = now;
      if (now >= end_at) break;
    }
    client_cpu_cores_ = (ProcessCpuSeconds() - cpu_start) /
                        std::max(1e-3, std::chrono::duration<double>(SteadyClock::now() - start).count());
    stopping_.store(true);
    for (std::thread& pacer : pacers) pacer.join();
    // Bounded wait for the calls still out (each has a deadline).
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait_for(lock, std::chrono::milliseconds(options_.timeout_ms + 5000),
                     [&] { return outstanding_.load() == 0; });
    }
    std::fprintf(stderr, "\n");
    if (options_.stream) CloseStreams();
    for (auto& cq : cqs_) cq->Shutdown();
    for (std::thread& t : threads_) t.join();
    return Report(open_loop);
  }

 private:
  static SteadyClock::duration Seconds(double s) {
    return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
  }

  void MakePool() {
    std::mt19937_64 rng(options_.seed);
    const int history_max = options_.history_max > 0 ? options_.history_max : info_.max_history_len();
    std::lognormal_distribution<double> history_len(std::log(std::max(1.0, options_.history_median)),
                                                    options_.history_sigma);
    std::uniform_int_distribution<int> candidates(options_.candidates_min, options_.candidates_max);
    std::uniform_int_distribution<int> sparse_count(1, std::max(1, options_.sparse_ids_max));
    std::uniform_int_distribution<int64_t> item(0, 999999999);
    std::normal_distribution<float> dense(0.0f, 1.0f);
    for (int i = 0; i < options_.pool; ++i) {
      v1::RankRequest r;
      r.set_request_id("loadgen-" + std::to_string(i));
      for (int j = 0; j < info_.num_dense_features(); ++j) r.add_dense_features(dense(rng));
      for (const std::string& name : info_.sparse_feature_names()) {
        auto* ids = (*r.mutable_sparse_features())[name].mutable_ids();
        for (int k = sparse_count(rng); k > 0; --k) ids->Add(item(rng));
      }
      const int len = std::clamp(static_cast<int>(std::lround(history_len(rng))), 1, history_max);
      for (int k = 0; k < len; ++k) r.add_history(item(rng));
      for (int k = candidates(rng); k > 0; --k) r.add_candidate_item_ids(item(rng));
      history_tokens_ += len;
      pool_candidates_ += r.candidate_item_ids_size();
      std::string bytes;
      if (!r.SerializeToString(&bytes)) {
        std::fprintf(stderr, "jagrank-loadgen: cannot serialise request %d\n", i);
        std::exit(1);
      }
      PooledRequest pooled;
      pooled.candidates = r.candidate_item_ids_size();
      if (options_.stream) pooled.serialized = bytes;
      grpc::Slice slice(bytes);
      pooled.bytes = grpc::ByteBuffer(&slice, 1);
      pool_.push_back(std::move(pooled));
    }
  }

  // The polling loop of completion queue `thread`: every event is a finished call.
  void Poll(int thread) {
    void* tag = nullptr;
    bool ok = false;
    while (cqs_[thread]->Next(&tag, &ok)) {
      Event* event = static_cast<Event*>(tag);
      if (event->kind == Event::Kind::kRetry) {
        Retry* retry = static_cast<Retry*>(event);
        const int retry_thread = retry->thread;
        const std::chrono::milliseconds backoff = retry->backoff;
        delete retry;
        if (stopping_.load()) {
          CallLeft();
        } else {
          outstanding_.fetch_sub(1);
          Issue(retry_thread, SteadyClock::now(), backoff);
        }
        continue;
      }
      if (event->kind != Event::Kind::kCall) {
        OnStreamEvent(static_cast<StreamOp*>(event), ok);
        continue;
      }
      Call* call = static_cast<Call*>(event);
      Done(call, ok ? call->status : grpc::Status(grpc::StatusCode::UNKNOWN, "completion queue event failed"));
    }
  }

  // Sends one call on completion queue `thread`; its latency counts from
  // `start` (now, or the open loop's scheduled send time).
  void Issue(int thread, SteadyClock::time_point start, std::chrono::milliseconds backoff = {}) {
    if (options_.stream) {
      const int64_t n = next_.fetch_add(1);
      IssueOnStream(streams_[n % streams_.size()].get(), n, start);
      return;
    }
    const int64_t n = next_.fetch_add(1);
    const PooledRequest& request = pool_[n % pool_.size()];
    grpc::GenericStub* stub = stubs_[n % stubs_.size()].get();
    auto* call = new Call;
    call->start = start;
    call->measured = call->start >= measure_at_ && call->start < end_at_;
    if (call->measured) sent_measured_.fetch_add(1);
    call->candidates = request.candidates;
    call->check_response = n % kResponseCheckEvery == 0;
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(options_.timeout_ms));
    call->thread = thread;
    call->backoff = backoff;
    outstanding_.fetch_add(1);
    call->reader = stub->PrepareUnaryCall(&call->context, kRankMethod, request.bytes, cqs_[thread].get());
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
  }

  void Done(Call* call, grpc::Status status) {
    if (status.ok() && call->check_response) {
      v1::RankResponse response;  // consumes call->response
      status = grpc::SerializationTraits<v1::RankResponse>::Deserialize(&call->response, &response).ok()
                   ? CheckScores(response, call->candidates)
                   : grpc::Status(grpc::StatusCode::DATA_LOSS, "response does not parse");
    }
    Record(call->start, call->measured, call->candidates, status);
    const int thread = call->thread;
    const std::chrono::milliseconds backoff = call->backoff;
    delete call;
    if (options_.rate <= 0 && !stopping_.load()) {  // closed loop: the next call takes this one's place
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        // Still counted as outstanding while it waits, so the final wait covers it.
        auto* retry = new Retry;
        retry->thread = thread;
        retry->backoff = std::min(kRetryBackoffMax, backoff.count() == 0 ? kRetryBackoffFirst : 2 * backoff);
        retry->alarm.Set(cqs_[thread].get(), std::chrono::system_clock::now() + retry->backoff, retry);
        return;
      }
      outstanding_.fetch_sub(1);
      Issue(thread, SteadyClock::now());
      return;
    }
    CallLeft();
  }

  // Starts --streams RankStream calls, round-robin over the channels and
  // the client threads' queues.
  void OpenStreams() {
    for (int i = 0; i < options_.streams; ++i) {
      auto stream = std::make_unique<RankStreamCall>();
      stream->index = i;
      stream->thread = i % options_.client_threads;
      grpc::GenericStub* stub = stubs_[i % stubs_.size()].get();
      stream->rw = stub->PrepareCall(&stream->context, kRankStreamMethod, cqs_[stream->thread].get());
      stream->writing = true;  // until StartCall is back
      streams_open_.fetch_add(1);
      stream->rw->StartCall(&stream->started);
      streams_.push_back(std::move(stream));
    }
  }

  // Half-closes every stream and waits (bounded) for the server to end
  // them: every answer was read by then.
  void CloseStreams() {
    for (auto& stream : streams_) {
      std::lock_guard<std::mutex> lock(stream->mu);
      if (stream->ended) continue;
      if (stream->writing) {
        stream->writes_done_wanted = true;
      } else {
        stream->writing = true;
        stream->rw->WritesDone(&stream->written);
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_.wait_for(lock, std::chrono::seconds(10), [&] { return streams_open_.load() == 0; })) {
      lock.unlock();
      for (auto& stream : streams_) stream->context.TryCancel();
      lock.lock();
      idle_.wait(lock, [&] { return streams_open_.load() == 0; });
    }
  }

  // Sends pool request `n` on `stream`; its latency counts from `start`.
  void IssueOnStream(RankStreamCall* stream, int64_t n, SteadyClock::time_point start) {
    const PooledRequest& request = pool_[n % pool_.size()];
    StreamPending pending;
    pending.start = start;
    pending.measured = start >= measure_at_ && start < end_at_;
    pending.candidates = request.candidates;
    if (pending.measured) sent_measured_.fetch_add(1);
    outstanding_.fetch_add(1);
    const uint64_t sequence = stream_sequence_.fetch_add(1);
    grpc::ByteBuffer bytes =
        StreamMessage(request.serialized, "s" + std::to_string(sequence), static_cast<uint32_t>(options_.timeout_ms));
    grpc::Status failed;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      if (stream->ended) {
        failed = stream->status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : stream->status;
      } else {
        stream->pending.emplace(sequence, pending);
        if (stream->writing) {
          stream->to_write.push_back(std::move(bytes));
        } else {
          stream->writing = true;
          stream->in_flight = std::move(bytes);
          stream->rw->Write(stream->in_flight, &stream->written);
        }
      }
    }
    if (!failed.ok()) Answered(stream, pending, failed);
  }

  // The next queued write, or the wanted WritesDone. REQUIRES: stream->mu held, no write in flight.
  static void WriteNextLocked(RankStreamCall* stream) {
    if (!stream->to_write.empty()) {
      stream->writing = true;
      stream->in_flight = std::move(stream->to_write.front());
      stream->to_write.pop_front();
      stream->rw->Write(stream->in_flight, &stream->written);
    } else if (stream->writes_done_wanted) {
      stream->writes_done_wanted = false;
      stream->writing = true;
      stream->rw->WritesDone(&stream->written);
    }
  }

  void OnStreamEvent(StreamOp* op, bool ok) {
    RankStreamCall* stream = op->stream;
    switch (op->kind) {
      case Event::Kind::kStreamStarted:
      case Event::Kind::kStreamWritten: {
        std::lock_guard<std::mutex> lock(stream->mu);
        stream->writing = false;
        if (op->kind == Event::Kind::kStreamStarted && ok) stream->rw->Read(&stream->read_bytes, &stream->read);
        if (!ok) {
          // The call is over: the read fails too and Finish tells why.
          if (op->kind == Event::Kind::kStreamStarted) stream->rw->Finish(&stream->status, &stream->finished);
          return;
        }
        WriteNextLocked(stream);
        return;
      }
      case Event::Kind::kStreamRead: {
        if (!ok) {
          stream->rw->Finish(&stream->status, &stream->finished);
          return;
        }
        v1::RankStreamResponse answer;
        grpc::Status status;
        if (!grpc::SerializationTraits<v1::RankStreamResponse>::Deserialize(&stream->read_bytes, &answer).ok()) {
          status = grpc::Status(grpc::StatusCode::DATA_LOSS, "stream answer does not parse");
        }
        StreamPending pending;
        bool found = false;
        {
          std::lock_guard<std::mutex> lock(stream->mu);
          stream->rw->Read(&stream->read_bytes, &stream->read);
          const std::string& id = answer.request_id();
          if (id.size() > 1 && id[0] == 's') {
            auto it = stream->pending.find(std::strtoull(id.c_str() + 1, nullptr, 10));
            if (it != stream->pending.end()) {
              pending = it->second;
              stream->pending.erase(it);
              found = true;
            }
          }
        }
        if (!found) {
          std::fprintf(stderr, "jagrank-loadgen: stream answer for unknown id '%s'\n", answer.request_id().c_str());
          return;
        }
        if (status.ok() && answer.has_error()) {
          status = grpc::Status(static_cast<grpc::StatusCode>(answer.error().code()), answer.error().message());
        } else if (status.ok()) {
          status = CheckScores(answer.response(), pending.candidates);
        }
        Answered(stream, pending, status);
        return;
      }
      case Event::Kind::kStreamFinished: {
        std::map<uint64_t, StreamPending> left;
        {
          std::lock_guard<std::mutex> lock(stream->mu);
          stream->ended = true;
          left.swap(stream->pending);
        }
        const grpc::Status why = stream->status.ok()
                                     ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended unanswered")
                                     : stream->status;
        for (const auto& [sequence, pending] : left) Answered(stream, pending, why);
        if (streams_open_.fetch_sub(1) == 1) {
          std::lock_guard<std::mutex> lock(mu_);
          idle_.notify_all();
        }
        return;
      }
      default:
        return;
    }
  }

  // One stream request answered (or failed): counted, and in the closed
  // loop the next request takes its place on the same stream.
  void Answered(RankStreamCall* stream, const StreamPending& pending, const grpc::Status& status) {
    Record(pending.start, pending.measured, pending.candidates, status);
    bool ended = false;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      ended = stream->ended;
    }
    // As the unary closed loop backs off after UNAVAILABLE, a refused
    // stream slot (server draining) is not refilled: no spinning.
    if (options_.rate <= 0 && !stopping_.load() && !ended && status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      outstanding_.fetch_sub(1);
      IssueOnStream(stream, next_.fetch_add(1), SteadyClock::now());
      return;
    }
    CallLeft();
  }

  // Counts one finished call, and in the window its latency from `start`
  // or its error.
  void Record(SteadyClock::time_point start, bool measured, int candidates, const grpc::Status& status) {
    const double ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
    completed_.fetch_add(1);
    if (status.ok()) {
      ok_total_.fetch_add(1);
    } else {
      errors_total_.fetch_add(1);
    }
    if (!measured) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      latencies_ms_.push_back(ms);
      candidates_ok_ += candidates;
    } else {
      errors_[CodeName(status.error_code())]++;
      if (first_error_.empty()) first_error_ = status.error_message();
    }
  }

  // One pacer's schedule keeping, over the calls scheduled in the window.
  struct PacerStats {
    int64_t scheduled = 0;
    int64_t late = 0;  // sent > 1 ms behind schedule
    double max_lag_ms = 0;
  };

  // A pacer's call scheduled at `scheduled_at` is due at `now`: notes its lag
  // (in the window) and says whether it may go out; beyond
  // --max-outstanding it is counted as CLIENT_OVERLOAD instead.
  bool AdmitScheduled(SteadyClock::time_point scheduled_at, SteadyClock::time_point now, PacerStats* stats) {
    const bool measured = scheduled_at >= measure_at_ && scheduled_at < end_at_;
    if (measured) {
      const double lag_ms = std::chrono::duration<double, std::milli>(now - scheduled_at).count();
      ++stats->scheduled;
      if (lag_ms > 1.0) ++stats->late;
      stats->max_lag_ms = std::max(stats->max_lag_ms, lag_ms);
    }
    if (outstanding_.load() < options_.max_outstanding) return true;
    if (measured) {
      std::lock_guard<std::mutex> lock(mu_);
      errors_["CLIENT_OVERLOAD"]++;
    }
    return false;
  }

  void AddPacerStats(const PacerStats& stats) {
    std::lock_guard<std::mutex> lock(mu_);
    pacer_scheduled_ += stats.scheduled;
    pacer_late_ += stats.late;
    pacer_max_lag_ms_ = std::max(pacer_max_lag_ms_, stats.max_lag_ms);
  }

  // One call fewer outstanding; wakes Run's final wait at the last.
  void CallLeft() {
    if (outstanding_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.notify_all();
    }
  }

  // Pacer `thread`: a Poisson stream of rate / client_threads calls per
  // second on that thread's completion queue.
  void OpenLoop(int thread, SteadyClock::time_point end_at) {
    std::mt19937_64 rng(options_.seed + 1 + thread);
    std::exponential_distribution<double> gap(options_.rate / options_.client_threads);
    PacerStats pacer;
    auto next = SteadyClock::now();
    while (!stopping_.load()) {
      next += Seconds(gap(rng));
      if (next >= end_at) break;
      std::this_thread::sleep_until(next);
      if (AdmitScheduled(next, SteadyClock::now(), &pacer)) Issue(thread, next);
    }
    AddPacerStats(pacer);
  }

  static std::string CodeName(grpc::StatusCode code) {
    static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                   "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                   "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                   "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    const int i = static_cast<int>(code);
    return i >= 0 && i < 17 ? kNames[i] : "CODE_" + std::to_string(i);
  }

  nlohmann::json Report(bool open_loop) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> sorted = latencies_ms_;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double v : sorted) sum += v;
    int64_t errors = 0;
    for (const auto& [code, count] : errors_) errors += count;
    nlohmann::json j;
    j["label"] = options_.label;
    j["address"] = options_.address;
    j["mode"] = open_loop ? "open" : "closed";
    j["transport"] = options_.stream ? "stream" : "unary";
    j["streams"] = options_.stream ? options_.streams : 0;
    j["concurrency"] = open_loop ? 0 : options_.concurrency;
    j["target_rate"] = open_loop ? options_.rate : 0.0;
    j["duration_s"] = options_.duration_s;
    j["warmup_s"] = options_.warmup_s;
    j["requests_ok"] = sorted.size();
    j["requests_error"] = errors;
    j["qps"] = sorted.size() / options_.duration_s;
    j["candidates_per_s"] = candidates_ok_ / options_.duration_s;
    j["latency_ms"] = {{"p50", Percentile(sorted, 0.50)},   {"p90", Percentile(sorted, 0.90)},
                       {"p99", Percentile(sorted, 0.99)},   {"p99.9", Percentile(sorted, 0.999)},
                       {"mean", sorted.empty() ? 0 : sum / sorted.size()},
                       {"max", sorted.empty() ? 0 : sorted.back()}};
    j["errors"] = errors_;
    j["client_cpu_cores"] = client_cpu_cores_;
    j["sent_per_s"] = sent_measured_.load() / options_.duration_s;
    if (open_loop) {
      // Sends more than 1 ms behind schedule: the client, not the server,
      // limited the offered load when this is large.
      j["pacer_late_fraction"] = pacer_scheduled_ > 0 ? static_cast<double>(pacer_late_) / pacer_scheduled_ : 0.0;
      j["pacer_max_lag_ms"] = pacer_max_lag_ms_;
    }
    j["responses_checked_every"] = kResponseCheckEvery;
    if (!first_error_.empty()) j["first_error"] = first_error_;
    j["workload"] = {{"history_median", options_.history_median},
                     {"history_sigma", options_.history_sigma},
                     {"history_max", options_.history_max > 0 ? options_.history_max : info_.max_history_len()},
                     {"mean_history_len", static_cast<double>(history_tokens_) / pool_.size()},
                     {"candidates_min", options_.candidates_min},
                     {"candidates_max", options_.candidates_max},
                     {"mean_candidates", static_cast<double>(pool_candidates_) / pool_.size()},
                     {"pool", options_.pool},
                     {"channels", options_.channels},
                     {"client_threads", options_.client_threads},
                     {"minimal_stack", options_.minimal_stack},
                     {"grpc_channel_args", options_.grpc_channel_args},
                     {"tls", options_.tls_ca.empty() ? "off" : options_.tls_cert.empty() ? "tls" : "mtls"}};
    j["server"] = {{"model", info_.name()},     {"version", info_.version()},
                   {"device", info_.device()}, {"attention", info_.attention()},
                   {"max_history_len", info_.max_history_len()}};
    return j;
  }

  const Options options_;
  const v1::ModelInfo info_;
  struct PooledRequest {
    grpc::ByteBuffer bytes;  // a serialised v1::RankRequest
    std::string serialized;  // the same bytes, with --stream (each send appends its own id)
    int candidates = 0;
  };
  std::vector<std::unique_ptr<RankStreamCall>> streams_;
  std::atomic<uint64_t> stream_sequence_{0};
  std::atomic<int> streams_open_{0};  // started and not yet finished
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;  // one per client thread
  std::vector<std::thread> threads_;
  std::vector<PooledRequest> pool_;
  double client_cpu_cores_ = 0;  // CPU cores used by this process from start to the window's end
  int64_t history_tokens_ = 0;
  int64_t pool_candidates_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> ok_total_{0};
  std::atomic<int64_t> errors_total_{0};
  std::atomic<int64_t> sent_measured_{0};  // calls sent (scheduled, in the open loop) inside the window
  // The measured window: calls sent inside it count. Set before any call.
  SteadyClock::time_point measure_at_;
  SteadyClock::time_point end_at_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  std::vector<double> latencies_ms_;      // guarded by mu_
  int64_t candidates_ok_ = 0;             // guarded by mu_
  std::map<std::string, int64_t> errors_; // guarded by mu_
  std::string first_error_;               // guarded by mu_
  int64_t pacer_scheduled_ = 0;           // guarded by mu_; open loop, inside the window
  int64_t pacer_late_ = 0;                // guarded by mu_; of those, sent > 1 ms late
  double pacer_max_lag_ms_ = 0;           // guarded by mu_
};

// Why a plain stream connection to `address` ("host:port" or "unix:/path")
// fails ("Connection refused", ...), or "" when it succeeds: gRPC's own
// message for an unreachable address varies with the moment of the attempt.
std::string ConnectError(const std::string& address) {
  SocketAddress parsed;
  Status s = ParseSocketAddress("--address", address, &parsed);
  if (!s.ok()) return s.message();
  if (parsed.is_unix) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", parsed.unix_path.c_str());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    const bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    const std::string error = ok ? "" : std::strerror(errno);
    if (fd >= 0) close(fd);
    return error;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(parsed.host.empty() ? "localhost" : parsed.host.c_str(),
                             std::to_string(parsed.port).c_str(), &hints, &found);
  if (rc != 0) return std::string("cannot resolve '") + parsed.host + "': " + gai_strerror(rc);
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    error = ok ? "" : std::strerror(errno);
    close(fd);
    if (ok) break;
  }
  freeaddrinfo(found);
  return error;
}

// The server's GetModelInfo, retried with backoff (100 ms doubling to 1 s)
// while the server cannot be reached, for up to --connect-timeout-s. A port
// nobody listens on is reported as a connection failure with gRPC's reason
// (e.g. "Connection refused"), not as the deadline of a call that waited
// for a connection.
Status FetchModelInfo(const Options& o, v1::ModelInfo* info) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto stub = v1::Ranker::NewStub(grpc::CreateCustomChannel(o.address, ChannelCredentials(o), args));
  const auto start = SteadyClock::now();
  const auto give_up = start + std::chrono::duration_cast<SteadyClock::duration>(
                                   std::chrono::duration<double>(o.connect_timeout_s));
  std::chrono::milliseconds backoff(100);
  int attempts = 0;
  for (;;) {
    ++attempts;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.timeout_ms));
    const grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), info);
    if (status.ok()) return Status::Ok();
    const double waited = std::chrono::duration<double>(SteadyClock::now() - start).count();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return Status::Unavailable("GetModelInfo on " + o.address + " failed: " + status.error_message());
    }
    if (SteadyClock::now() + backoff >= give_up) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f", waited);
      const std::string why = ConnectError(o.address);
      return Status::Unavailable("cannot connect to " + o.address + ": " +
                                 (why.empty() ? "the connection opens but gRPC fails" : why) + " (" +
                                 std::to_string(attempts) + " attempts in " + seconds +
                                 " s, --connect-timeout-s; gRPC: " + status.error_message() + ")");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(2 * backoff, std::chrono::milliseconds(1000));
  }
}

void PrintTable(const nlohmann::json& j) {
  const auto& l = j["latency_ms"];
  std::printf("%-10s %-8s %6s %8s %10s %12s %9s %9s %9s %9s %9s\n", "label", "mode", "load", "seconds", "qps",
              "candidates/s", "p50_ms", "p90_ms", "p99_ms", "p99.9_ms", "errors");
  const std::string load = j["mode"] == "open" ? std::to_string(static_cast<int>(j["target_rate"].get<double>()))
                                               : std::to_string(j["concurrency"].get<int>());
  std::printf("%-10s %-8s %6s %8.1f %10.1f %12.0f %9.3f %9.3f %9.3f %9.3f %9lld\n",
              j["label"].get<std::string>().c_str(), j["mode"].get<std::string>().c_str(), load.c_str(),
              j["duration_s"].get<double>(), j["qps"].get<double>(), j["candidates_per_s"].get<double>(),
              l["p50"].get<double>(), l["p90"].get<double>(), l["p99"].get<double>(), l["p99.9"].get<double>(),
              static_cast<long long>(j["requests_error"].get<int64_t>()));
  if (j["transport"] == "stream") std::printf("  over %d RankStream calls\n", j["streams"].get<int>());
  if (j["mode"] == "open") {
    std::printf("  sent %.1f calls/s; %.1f%% of sends > 1 ms behind schedule (max %.1f ms)\n",
                j["sent_per_s"].get<double>(), 100 * j["pacer_late_fraction"].get<double>(),
                j["pacer_max_lag_ms"].get<double>());
  }
  for (const auto& [code, count] : j["errors"].items()) {
    std::printf("  error %-20s %lld\n", code.c_str(), static_cast<long long>(count.get<int64_t>()));
  }
}

int Main(int argc, char** argv) {
  Options o;
  FlagParser flags(
      "jagrank-loadgen: closed-loop (--concurrency) or open-loop Poisson (--rate) load against a jagrank server");
  flags.Add("address", &o.address, "server host:port");
  flags.Add("concurrency", &o.concurrency, "closed loop: calls kept outstanding");
  flags.Add("rate", &o.rate, "open loop: calls per second (Poisson); > 0 selects open loop");
  flags.Add("duration-s", &o.duration_s, "measured seconds");
  flags.Add("warmup-s", &o.warmup_s, "unmeasured seconds of load first");
  flags.Add("history-median", &o.history_median, "median history length (log-normal)");
  flags.Add("history-sigma", &o.history_sigma, "log-normal shape (sigma of log length)");
  flags.Add("history-max", &o.history_max, "cap on history length (0 = the model's max_history_len)");
  flags.Add("candidates-min", &o.candidates_min, "fewest candidates per request");
  flags.Add("candidates-max", &o.candidates_max, "most candidates per request");
  flags.Add("sparse-ids-max", &o.sparse_ids_max, "ids per sparse feature: uniform in [1, this]");
  flags.Add("pool", &o.pool, "distinct requests generated up front");
  flags.Add("channels", &o.channels, "gRPC connections");
  flags.Add("client-threads", &o.client_threads, "client threads: completion queues, one polling thread each");
  flags.Add("timeout-ms", &o.timeout_ms, "per-call deadline");
  flags.Add("connect-timeout-s", &o.connect_timeout_s,
            "keep trying to reach the server (with backoff) this long before giving up");
  flags.Add("max-outstanding", &o.max_outstanding, "open loop: cap on calls in flight");
  flags.Add("seed", &o.seed, "workload seed");
  flags.Add("json-out", &o.json_out, "write the result as JSON to this file");
  flags.Add("label", &o.label, "free-form label copied into the result");
  flags.Add("minimal-stack", &o.minimal_stack,
            "gRPC's minimal client stack: less client CPU (no message-size or census filters; deadlines hold)");
  flags.Add("grpc-channel-args", &o.grpc_channel_args,
            "further gRPC channel arguments on every connection, grpc.name=value[,...]");
  flags.Add("stream", &o.stream,
            "send the requests over RankStream calls instead of unary Rank calls (--timeout-ms per request)");
  flags.Add("streams", &o.streams,
            "with --stream: RankStream calls in total, spread over the --channels connections");
  flags.Add("tls-ca", &o.tls_ca, "PEM CA bundle to verify the server with: connect over TLS");
  flags.Add("tls-cert", &o.tls_cert, "PEM client certificate chain for mTLS (with --tls-key; needs --tls-ca)");
  flags.Add("tls-key", &o.tls_key, "PEM private key of --tls-cert");
  Status parsed = flags.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "jagrank-loadgen: %s\n", parsed.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (o.candidates_min < 1 || o.candidates_max < o.candidates_min || o.duration_s <= 0 || o.pool < 1 ||
      o.channels < 1 || o.client_threads < 1 || (o.rate <= 0 && o.concurrency < 1) || o.streams < 1 ||
      o.timeout_ms < 0 || (o.stream && o.timeout_ms > UINT32_MAX)) {
    std::fprintf(stderr, "jagrank-loadgen: bad workload flags (see --help)\n");
    return 2;
  }
  Status args_ok = ParseGrpcChannelArgs(
      o.grpc_channel_args,
      {{GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, "each channel is its own connection"},
       {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, "the loadgen accepts responses up to 64 MiB"},
       {GRPC_ARG_MINIMAL_STACK, "use --minimal-stack"}},
      "--grpc-channel-args", &o.extra_args);
  if (!args_ok.ok()) {
    std::fprintf(stderr, "jagrank-loadgen: %s\n", args_ok.message().c_str());
    return 2;
  }
  Status tls = MakeChannelCredentials(o.tls_ca, o.tls_cert, o.tls_key, &o.credentials);
  if (!tls.ok()) {
    std::fprintf(stderr, "jagrank-loadgen: %s\n", tls.message().c_str());
    return 2;
  }
  v1::ModelInfo info;
  Status connected = FetchModelInfo(o, &info);
  if (!connected.ok()) {
    std::fprintf(stderr, "jagrank-loadgen: %s\n", connected.message().c_str());
    return 1;
  }
  LoadGen loadgen(o, info);
  const nlohmann::json result = loadgen.Run();
  PrintTable(result);
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << result.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "jagrank-loadgen: cannot write %s\n", o.json_out.c_str());
      return 1;
    }
  }
  if (result["requests_ok"].get<int64_t>() == 0) {
    const std::string first = result.value("first_error", std::string("no call was answered in the window"));
    std::fprintf(stderr, "jagrank-loadgen: every call failed (%lld errors; first: %s)\n",
                 static_cast<long long>(result["requests_error"].get<int64_t>()), first.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace jagrank

int main(int argc, char** argv) {
  jagrank::ConfigureGrpcProcess();
  return jagrank::Main(argc, argv);
}
