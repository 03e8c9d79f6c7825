// jagrank-server: flags override --config (which defaults to the embedded
// config/server.yaml); server/server_config.h holds the keys.
#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "common/cuda_check.h"
#include "common/process.h"
#include "common/socket_address.h"
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

int Main(int argc, char** argv) {
  ServerCommandLine cmd;
  Status s = ParseServerCommandLine(argc, argv, &cmd);
  if (s.ok() && cmd.help) {
    std::fputs(cmd.usage.c_str(), stdout);
    return 0;
  }
  if (s.ok()) s = ResolveServerConfig(cmd.given_keys, CudaDeviceAvailable, &cmd.config);
  if (s.ok() && cmd.check_config) s = CheckServerConfigFiles(cmd.config);
  if (!s.ok()) {
    std::fprintf(stderr, "jagrank-server: %s\n", s.ToString().c_str());
    return 2;
  }
  const ServerConfig& config = cmd.config;
  if (cmd.check_config) {
    std::printf("jagrank-server: config OK: %s\n", ServerConfigSummary(config, cmd.given_keys).c_str());
    return 0;
  }
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
    s = CheckAddressFree("metrics_address", config.metrics_address);
    if (s.ok()) s = PrometheusMetrics::Create(config.metrics_address, &prometheus);
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
  spdlog::info("jagrank-server ready: port={} model={} version={} device={} attention={} | {}", server->port(),
               model.config().name, model.version(), model.device(), AttentionStrategyName(model.attention()),
               ServerConfigSummary(config, cmd.given_keys));

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
