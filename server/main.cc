// jagrank-server: see DESIGN.md "Server". Flags override --config (which
// defaults to the embedded config/server.yaml).
#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "common/flags.h"
#include "common/process.h"
#include "server/metrics.h"
#include "server/prometheus_metrics.h"
#include "server/server.h"
#include "server/server_config.h"

namespace jagrank {
namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_last_signal{0};

// Async-signal-safe: counts; the second signal exits at once.
void OnSignal(int sig) {
  g_last_signal.store(sig);
  if (g_signals.fetch_add(1) >= 1) {
    static const char kMessage[] = "jagrank-server: second signal, exiting now without draining\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    _exit(1);
  }
}

Status ParseArgs(int argc, char** argv, ServerConfig* config, bool* help) {
  // Flag values start at the built-in defaults (shown by --help); only flags
  // given on the command line override the config file.
  const ServerConfig d;
  std::string config_path, grpc_address = d.grpc_address, metrics_address = d.metrics_address, device = d.device,
                           model_config, model_weights, attention = d.attention, log_level = d.log_level,
                           grpc_channel_args = d.grpc_channel_args, cuda_sync = d.cuda_sync;
  int64_t max_queue_delay_us = d.batching.max_queue_delay_us, max_batch_candidates = d.batching.max_batch_candidates,
          max_batch_history_tokens = d.batching.max_batch_history_tokens,
          max_batch_attention_cost = d.batching.max_batch_attention_cost;
  bool dispatch_when_idle = d.batching.dispatch_when_idle;
  int max_queue_requests = d.batching.max_queue_requests, max_batch_requests = d.batching.max_batch_requests,
      max_candidates_per_request = d.max_candidates_per_request, cpu_threads = d.cpu_threads,
      grpc_completion_queues = d.grpc_completion_queues, grpc_max_concurrent_streams = d.grpc_max_concurrent_streams;
  FlagParser flags("jagrank-server: the jagrank gRPC ranking server");
  flags.Add("config", &config_path, "server YAML (default: the embedded config/server.yaml)");
  flags.Add("grpc-address", &grpc_address, "gRPC listen address host:port");
  flags.Add("metrics-address", &metrics_address, "Prometheus /metrics address host:port ('' = off)");
  flags.Add("device", &device, "auto | cpu | cuda | cuda:N");
  flags.Add("model-config", &model_config, "model YAML (default: the embedded config/model.yaml)");
  flags.Add("model-weights", &model_weights, "safetensors weights (default: random from the config's seed)");
  flags.Add("attention", &attention, "jagged | padded_flash | padded_dense");
  flags.Add("max-queue-delay-us", &max_queue_delay_us, "batcher: longest wait of the oldest request");
  flags.Add("dispatch-when-idle", &dispatch_when_idle,
            "batcher: also close a batch at once when the executor has none waiting to run");
  flags.Add("max-batch-candidates", &max_batch_candidates, "batcher: candidate rows per batch");
  flags.Add("max-batch-requests", &max_batch_requests, "batcher: requests per batch");
  flags.Add("max-batch-history-tokens", &max_batch_history_tokens, "batcher: kept history ids per batch");
  flags.Add("max-batch-attention-cost", &max_batch_attention_cost,
            "batcher: attention work per batch (jagged: sum L^2; padded: R x max L^2)");
  flags.Add("max-queue-requests", &max_queue_requests, "queued requests before RESOURCE_EXHAUSTED");
  flags.Add("max-candidates-per-request", &max_candidates_per_request, "INVALID_ARGUMENT above this");
  flags.Add("cpu-threads", &cpu_threads, "CPU backend threads (0 = all cores)");
  flags.Add("cuda-sync", &cuda_sync, "spin | block: how the CUDA executor waits for a batch");
  flags.Add("grpc-completion-queues", &grpc_completion_queues,
            "Rank's completion queues, one polling thread each (0 = half the cores, 2 to 8)");
  flags.Add("grpc-max-concurrent-streams", &grpc_max_concurrent_streams,
            "calls open at once per client connection; more wait in the client (0 = no limit)");
  flags.Add("grpc-channel-args", &grpc_channel_args,
            "further gRPC server channel arguments, grpc.name=value[,...] (whole numbers go as integers)");
  flags.Add("log-level", &log_level, "trace | debug | info | warn | error");
  // ---- Hostile load: TLS and memory (server_config.h's block of the same name) ----
  std::string tls_cert = d.tls_cert_file, tls_key = d.tls_key_file, tls_client_ca = d.tls_client_ca_file;
  int64_t grpc_memory_quota_bytes = d.grpc_memory_quota_bytes;
  flags.Add("tls-cert", &tls_cert, "PEM certificate chain of the gRPC port (with --tls-key: TLS)");
  flags.Add("tls-key", &tls_key, "PEM private key of --tls-cert");
  flags.Add("tls-client-ca", &tls_client_ca, "PEM CA bundle: clients must present a certificate it signed (mTLS)");
  flags.Add("grpc-memory-quota-bytes", &grpc_memory_quota_bytes,
            "bytes gRPC may hold for all connections (0 = a quarter of the machine's memory)");
  RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return Status::Ok();
  }
  if (flags.IsSet("config")) {
    RETURN_IF_ERROR(LoadServerConfig(config_path, config));
  } else {
    Status s = ParseServerConfig(EmbeddedServerYaml(), config);
    if (!s.ok()) return Status(s.code(), "embedded config/server.yaml: " + s.message());
  }
  if (flags.IsSet("grpc-address")) config->grpc_address = grpc_address;
  if (flags.IsSet("metrics-address")) config->metrics_address = metrics_address;
  if (flags.IsSet("device")) config->device = device;
  if (flags.IsSet("model-config")) config->model_config = model_config;
  if (flags.IsSet("model-weights")) config->model_weights = model_weights;
  if (flags.IsSet("attention")) config->attention = attention;
  if (flags.IsSet("log-level")) config->log_level = log_level;
  if (flags.IsSet("cpu-threads")) config->cpu_threads = cpu_threads;
  if (flags.IsSet("cuda-sync")) config->cuda_sync = cuda_sync;
  if (flags.IsSet("grpc-completion-queues")) config->grpc_completion_queues = grpc_completion_queues;
  if (flags.IsSet("grpc-max-concurrent-streams")) config->grpc_max_concurrent_streams = grpc_max_concurrent_streams;
  if (flags.IsSet("grpc-channel-args")) config->grpc_channel_args = grpc_channel_args;
  if (flags.IsSet("max-candidates-per-request")) config->max_candidates_per_request = max_candidates_per_request;
  if (flags.IsSet("max-queue-delay-us")) config->batching.max_queue_delay_us = max_queue_delay_us;
  if (flags.IsSet("dispatch-when-idle")) config->batching.dispatch_when_idle = dispatch_when_idle;
  if (flags.IsSet("max-batch-candidates")) config->batching.max_batch_candidates = max_batch_candidates;
  if (flags.IsSet("max-batch-requests")) config->batching.max_batch_requests = max_batch_requests;
  if (flags.IsSet("max-batch-history-tokens")) config->batching.max_batch_history_tokens = max_batch_history_tokens;
  if (flags.IsSet("max-batch-attention-cost")) config->batching.max_batch_attention_cost = max_batch_attention_cost;
  if (flags.IsSet("max-queue-requests")) config->batching.max_queue_requests = max_queue_requests;
  // ---- Hostile load: TLS and memory ----
  if (flags.IsSet("tls-cert")) config->tls_cert_file = tls_cert;
  if (flags.IsSet("tls-key")) config->tls_key_file = tls_key;
  if (flags.IsSet("tls-client-ca")) config->tls_client_ca_file = tls_client_ca;
  if (flags.IsSet("grpc-memory-quota-bytes")) config->grpc_memory_quota_bytes = grpc_memory_quota_bytes;
  return ValidateServerConfig(*config);
}

int Main(int argc, char** argv) {
  ServerConfig config;
  bool help = false;
  Status s = ParseArgs(argc, argv, &config, &help);
  if (!s.ok()) {
    std::fprintf(stderr, "jagrank-server: %s\n", s.ToString().c_str());
    return 2;
  }
  if (help) return 0;
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::info("malloc from {}", MallocLibrary());
  if (ConfigureGrpcProcess()) {
    spdlog::warn("JAGRANK_ABSL_DEADLOCK_CHECK=1: Abseil's lock-order checker stays on (slow, for debugging)");
  }

  // A handler rather than sigwait: libraries start threads before main (the
  // BLAS pool), and a signal landing on one of those would otherwise take the
  // default action and kill the process without a drain.
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  NullMetrics null_metrics;
  std::unique_ptr<PrometheusMetrics> prometheus;
  ServerMetrics* metrics = &null_metrics;
  if (!config.metrics_address.empty()) {
    s = PrometheusMetrics::Create(config.metrics_address, &prometheus);
    if (!s.ok()) {
      spdlog::critical("metrics: {}", s.ToString());
      return 1;
    }
    metrics = prometheus.get();
  }

  std::unique_ptr<JagrankServer> server;
  s = JagrankServer::Create(config, metrics, &server);
  if (!s.ok()) {
    spdlog::critical("start failed: {}", s.ToString());
    return 1;
  }
  const Model& model = server->model();
  spdlog::info("jagrank-server ready: port={} model={} version={} device={} attention={} | {}", server->port(), model.config().name, model.version(), model.device(), AttentionStrategyName(model.attention()),
               ServerConfigSummary(config));

  // First signal: drain (OnSignal exits at once on the second).
  while (g_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  spdlog::info("signal {}: draining (send it again to exit at once)", g_last_signal.load());
  const Status drain_status = server->Drain();
  if (!drain_status.ok()) {
    spdlog::error("drain: {}", drain_status.ToString());
    std::_Exit(1);
  }
  server.reset();
  spdlog::info("jagrank-server exited cleanly");
  return 0;
}

}  // namespace
}  // namespace jagrank

int main(int argc, char** argv) { return jagrank::Main(argc, argv); }
