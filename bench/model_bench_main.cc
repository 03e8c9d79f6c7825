// jagrank-bench-model: the model's forward pass alone, in process (no gRPC,
// no batcher), on batches shaped like the serving benchmark's: R requests
// per batch with log-normal history lengths and uniform candidate counts.
// For each attention strategy it reports forward passes/s, requests/s,
// candidates/s, the wall latency of one Forward (p50/p99) and the model's
// memory. This is the ceiling the server's executor could reach if gRPC and
// batching cost nothing, and the number to set beside MLPerf's in-process
// DLRM result. With --iterations N it runs exactly N forward passes per
// strategy (for a profiler such as ncu); otherwise it runs for --duration-s.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "common/flags.h"

namespace jagrank {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Options {
  std::string device = "cuda";
  std::string attention = "jagged,padded_flash,padded_dense";
  std::string model_config;  // empty: the embedded default
  std::string model_weights;  // empty: the random model of the config's seed
  int sparse_ids_max = 4;     // ids per sparse feature: uniform in [1, this]
  int requests_per_batch = 38;
  int batches = 16;          // distinct batches, cycled
  double history_median = 100;
  double history_sigma = 1.0;
  int history_max = 0;       // 0 = the model's max_history_len
  int candidates_min = 50;
  int candidates_max = 500;
  double duration_s = 3;
  int warmup = 5;            // forward passes before timing
  int iterations = 0;        // > 0: exactly this many timed forward passes
  int cpu_threads = 0;
  // As the server's executor drives a model: batch i+1 staged and launched
  // before batch i is waited for (Model::Stage/Launch/Wait), so the host's
  // packing and copy overlap the device's compute. Off: Forward, one batch
  // after the other.
  bool pipelined = false;
  int64_t seed = 1;
  std::string json_out;
};

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Batches of random requests; ids are any int64 (the model hashes them into its tables).
Status MakeBatches(const ModelConfig& config, const Options& o, std::vector<Batch>* out, int64_t* candidates,
                   int64_t* history_tokens) {
  std::mt19937_64 rng(o.seed);
  const int history_max = o.history_max > 0 ? o.history_max : config.max_history_len;
  std::lognormal_distribution<double> history_len(std::log(std::max(1.0, o.history_median)), o.history_sigma);
  std::uniform_int_distribution<int> num_candidates(o.candidates_min, o.candidates_max);
  std::uniform_int_distribution<int> sparse_count(1, std::max(1, o.sparse_ids_max));
  std::uniform_int_distribution<int64_t> item(0, 999999999);
  std::normal_distribution<float> dense_value(0.0f, 1.0f);
  const int num_sparse = static_cast<int>(config.sparse_features.size());
  *candidates = 0;
  *history_tokens = 0;
  out->assign(o.batches, Batch());
  for (Batch& batch : *out) {
    std::vector<RankInput> inputs(o.requests_per_batch);
    for (RankInput& input : inputs) {
      std::vector<float> dense(config.num_dense_features);
      for (float& v : dense) v = dense_value(rng);
      std::vector<std::vector<int64_t>> sparse(num_sparse);
      for (auto& ids : sparse) ids.resize(sparse_count(rng));
      for (auto& ids : sparse) {
        for (int64_t& id : ids) id = item(rng);
      }
      std::vector<int64_t> history(std::clamp(static_cast<int>(std::lround(history_len(rng))), 1, history_max));
      for (int64_t& id : history) id = item(rng);
      std::vector<int64_t> items(num_candidates(rng));
      for (int64_t& id : items) id = item(rng);
      input = {std::move(dense), std::move(sparse), std::move(history), std::move(items)};
    }
    std::vector<const RankInput*> pointers;
    for (const RankInput& input : inputs) pointers.push_back(&input);
    RETURN_IF_ERROR(AssembleBatch(pointers, config, &batch));
    *candidates += batch.num_candidates();
    *history_tokens += batch.num_history_tokens();
  }
  return Status::Ok();
}

double Percentile(std::vector<double> xs, double p) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(p * xs.size()))];
}

Status BenchStrategy(const ModelConfig& config, const Options& o, const std::vector<Batch>& batches,
                     const std::string& attention, nlohmann::json* result) {
  ModelOptions options;
  options.device = o.device;
  options.cpu_threads = o.cpu_threads;
  RETURN_IF_ERROR(ParseAttentionStrategy(attention, &options.attention));
  std::unique_ptr<Model> model;
  ModelWeights weights;  // empty: random from the config's seed
  if (!o.model_weights.empty()) RETURN_IF_ERROR(LoadSafetensors(o.model_weights, config, &weights));
  RETURN_IF_ERROR(Model::Create(config, std::move(weights), options, &model));
  std::vector<float> scores;
  for (int i = 0; i < o.warmup; ++i) RETURN_IF_ERROR(model->Forward(batches[i % batches.size()], &scores));

  // Forward: each pass's time. Pipelined: the time between two batches'
  // scores (what each batch adds when they overlap).
  std::vector<double> latencies_ms;
  int64_t requests = 0, candidates = 0;
  auto count = [&](const Batch& batch) -> Status {
    if (static_cast<int64_t>(scores.size()) != batch.num_candidates()) {
      return Status::Internal("forward returned " + std::to_string(scores.size()) + " scores for " +
                              std::to_string(batch.num_candidates()) + " candidates");
    }
    requests += batch.num_requests;
    candidates += batch.num_candidates();
    return Status::Ok();
  };
  const auto start = SteadyClock::now();
  const auto end = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(o.duration_s));
  auto more = [&](int64_t i) { return o.iterations > 0 ? i < o.iterations : SteadyClock::now() < end; };
  if (o.pipelined) {
    // Batch i in slot i % 2: staged and launched, then batch i - 1 waited for.
    auto previous = SteadyClock::now();
    int64_t i = 0;
    for (; more(i); ++i) {
      RETURN_IF_ERROR(model->Stage(batches[i % batches.size()], static_cast<int>(i % 2)));
      RETURN_IF_ERROR(model->Launch(static_cast<int>(i % 2)));
      if (i == 0) continue;
      RETURN_IF_ERROR(model->Wait(static_cast<int>((i - 1) % 2), &scores, nullptr));
      const auto now = SteadyClock::now();
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - previous).count());
      previous = now;
      RETURN_IF_ERROR(count(batches[(i - 1) % batches.size()]));
    }
    if (i > 0) {
      RETURN_IF_ERROR(model->Wait(static_cast<int>((i - 1) % 2), &scores, nullptr));
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - previous).count());
      RETURN_IF_ERROR(count(batches[(i - 1) % batches.size()]));
    }
  } else {
    for (int64_t i = 0; more(i); ++i) {
      const Batch& batch = batches[i % batches.size()];
      const auto t0 = SteadyClock::now();
      RETURN_IF_ERROR(model->Forward(batch, &scores));
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
      RETURN_IF_ERROR(count(batch));
    }
  }
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  const ModelMemory memory = model->Memory();
  *result = {{"attention", attention},
             {"device", model->device()},
             {"forward_passes", latencies_ms.size()},
             {"seconds", seconds},
             {"pipelined", o.pipelined},
             {"forwards_per_s", latencies_ms.size() / seconds},
             {"requests_per_s", requests / seconds},
             {"candidates_per_s", candidates / seconds},
             {"forward_ms", {{"p50", Percentile(latencies_ms, 0.5)}, {"p99", Percentile(latencies_ms, 0.99)}}},
             {"weights_bytes", memory.weights_bytes},
             {"workspace_peak_bytes", memory.workspace_peak_bytes},
             {"device_used_bytes", memory.device_used_bytes}};
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Options o;
  FlagParser flags("jagrank-bench-model: forward passes of the model alone (no gRPC), per attention strategy");
  flags.Add("device", &o.device, "cpu, cuda or cuda:N");
  flags.Add("attention", &o.attention, "comma-separated strategies: jagged,padded_flash,padded_dense");
  flags.Add("model-config", &o.model_config, "model YAML (default: the embedded default model)");
  flags.Add("sparse-ids-max", &o.sparse_ids_max, "ids per sparse feature: uniform in [1, this]");
  flags.Add("model-weights", &o.model_weights, "safetensors weights (default: random from the config's seed)");
  flags.Add("requests-per-batch", &o.requests_per_batch, "requests in each batch");
  flags.Add("batches", &o.batches, "distinct batches, cycled");
  flags.Add("history-median", &o.history_median, "median history length (log-normal)");
  flags.Add("history-sigma", &o.history_sigma, "log-normal shape");
  flags.Add("history-max", &o.history_max, "cap on history length (0 = the model's max_history_len)");
  flags.Add("candidates-min", &o.candidates_min, "fewest candidates per request");
  flags.Add("candidates-max", &o.candidates_max, "most candidates per request");
  flags.Add("duration-s", &o.duration_s, "timed seconds per strategy");
  flags.Add("warmup", &o.warmup, "untimed forward passes first");
  flags.Add("iterations", &o.iterations, "> 0: exactly this many timed forward passes per strategy");
  flags.Add("cpu-threads", &o.cpu_threads, "CPU backend threads (0 = all cores)");
  flags.Add("pipelined", &o.pipelined,
            "stage and launch batch i+1 before waiting for batch i, as the server does (forward_ms is then the "
            "time between two batches' scores)");
  flags.Add("seed", &o.seed, "workload seed");
  flags.Add("json-out", &o.json_out, "write the results as JSON to this file");
  Status parsed = flags.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "jagrank-bench-model: %s\n", parsed.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (o.requests_per_batch < 1 || o.batches < 1 || o.candidates_min < 1 || o.candidates_max < o.candidates_min ||
      o.warmup < 0 || (o.iterations <= 0 && o.duration_s <= 0)) {
    std::fprintf(stderr, "jagrank-bench-model: bad workload flags (see --help)\n");
    return 2;
  }
  ModelConfig config;
  Status s = o.model_config.empty() ? DefaultModelConfig(&config) : LoadModelConfig(o.model_config, &config);
  if (!s.ok()) {
    std::fprintf(stderr, "jagrank-bench-model: %s\n", s.message().c_str());
    return 1;
  }
  std::vector<Batch> batches;
  int64_t candidates = 0, history_tokens = 0;
  s = MakeBatches(config, o, &batches, &candidates, &history_tokens);
  if (!s.ok()) {
    std::fprintf(stderr, "jagrank-bench-model: %s\n", s.message().c_str());
    return 1;
  }
  nlohmann::json all = {{"requests_per_batch", o.requests_per_batch},
                        {"mean_candidates_per_batch", static_cast<double>(candidates) / batches.size()},
                        {"mean_history_tokens_per_batch", static_cast<double>(history_tokens) / batches.size()},
                        {"max_history_len", config.max_history_len},
                        {"results", nlohmann::json::array()}};
  std::printf("%-13s %-7s %9s %11s %13s %9s %9s %10s\n", "attention", "device", "fwd/s", "requests/s",
              "candidates/s", "p50_ms", "p99_ms", "ws_MiB");
  int rc = 0;
  for (const std::string& attention : Split(o.attention)) {
    nlohmann::json r;
    s = BenchStrategy(config, o, batches, attention, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "jagrank-bench-model: %s: %s\n", attention.c_str(), s.message().c_str());
      rc = 1;
      continue;
    }
    std::printf("%-13s %-7s %9.1f %11.0f %13.0f %9.3f %9.3f %10.1f\n", attention.c_str(),
                r["device"].get<std::string>().c_str(), r["forwards_per_s"].get<double>(),
                r["requests_per_s"].get<double>(), r["candidates_per_s"].get<double>(),
                r["forward_ms"]["p50"].get<double>(), r["forward_ms"]["p99"].get<double>(),
                r["workspace_peak_bytes"].get<int64_t>() / 1048576.0);
    all["results"].push_back(r);
  }
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << all.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "jagrank-bench-model: cannot write %s\n", o.json_out.c_str());
      return 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace jagrank

int main(int argc, char** argv) { return jagrank::Main(argc, argv); }
