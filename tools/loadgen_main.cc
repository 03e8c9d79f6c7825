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
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
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
};

constexpr char kRankMethod[] = "/jagrank.v1.Ranker/Rank";
// Every this many calls the response is parsed and its scores counted.
constexpr int64_t kResponseCheckEvery = 64;

struct Call {
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::Status status;
  int thread = 0;  // whose completion queue the call is on
  grpc::ByteBuffer response;
  SteadyClock::time_point start;
  int candidates = 0;
  bool measured = false;
  bool check_response = false;
};

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
          grpc::CreateCustomChannel(options_.address, grpc::InsecureChannelCredentials(), args)));
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
      Call* call = static_cast<Call*>(tag);
      Done(call, ok ? call->status : grpc::Status(grpc::StatusCode::UNKNOWN, "completion queue event failed"));
    }
  }

  // Sends one call on completion queue `thread`; its latency counts from
  // `start` (now, or the open loop's scheduled send time).
  void Issue(int thread, SteadyClock::time_point start) {
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
    delete call;
    if (options_.rate <= 0 && !stopping_.load()) {  // closed loop: the next call takes this one's place
      outstanding_.fetch_sub(1);
      Issue(thread, SteadyClock::now());
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
                     {"grpc_channel_args", options_.grpc_channel_args}};
    j["server"] = {{"model", info_.name()},     {"version", info_.version()},
                   {"device", info_.device()}, {"attention", info_.attention()},
                   {"max_history_len", info_.max_history_len()}};
    return j;
  }

  const Options options_;
  const v1::ModelInfo info_;
  struct PooledRequest {
    grpc::ByteBuffer bytes;  // a serialised v1::RankRequest
    int candidates = 0;
  };
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
  flags.Add("max-outstanding", &o.max_outstanding, "open loop: cap on calls in flight");
  flags.Add("seed", &o.seed, "workload seed");
  flags.Add("json-out", &o.json_out, "write the result as JSON to this file");
  flags.Add("label", &o.label, "free-form label copied into the result");
  flags.Add("minimal-stack", &o.minimal_stack,
            "gRPC's minimal client stack: less client CPU (no message-size or census filters; deadlines hold)");
  flags.Add("grpc-channel-args", &o.grpc_channel_args,
            "further gRPC channel arguments on every connection, grpc.name=value[,...]");
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
      o.channels < 1 || o.client_threads < 1 || (o.rate <= 0 && o.concurrency < 1)) {
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
  v1::ModelInfo info;
  {
    auto stub = v1::Ranker::NewStub(grpc::CreateChannel(o.address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.set_wait_for_ready(true);
    grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) {
      std::fprintf(stderr, "jagrank-loadgen: GetModelInfo: %s\n", status.error_message().c_str());
      return 1;
    }
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
  return 0;
}

}  // namespace
}  // namespace jagrank

int main(int argc, char** argv) {
  jagrank::ConfigureGrpcProcess();
  return jagrank::Main(argc, argv);
}
