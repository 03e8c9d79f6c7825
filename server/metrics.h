// ServerMetrics: the observer the server reports to. The Prometheus
// implementation (server/prometheus_metrics.h) exports docs/metrics.md's metric
// names; NullMetrics is the no-op one for tests and tools.
// Thread safety: every method may be called concurrently from any thread.
#ifndef JAGRANK_SERVER_METRICS_H_
#define JAGRANK_SERVER_METRICS_H_

#include <cstdint>
#include <string>

#include "model/model.h"

namespace jagrank {

struct BatchStats {
  int requests = 0;              // requests in the batch
  int64_t candidates = 0;        // rows scored
  int64_t history_tokens = 0;    // sum of kept history lengths
  int64_t padded_history_tokens = 0;  // R * max L: what padding would have held
  double assemble_seconds = 0;   // host batch assembly
  double h2d_seconds = 0;        // host-to-device copies (0 on CPU)
  double launch_seconds = 0;     // host time enqueuing the forward (CUDA: the kernel launches; CPU: ~0, the
                                 // forward runs while the executor waits for it)
  double compute_seconds = 0;    // model forward (device time on GPU)
  double d2h_seconds = 0;        // device-to-host copies (0 on CPU)
};

class ServerMetrics {
 public:
  virtual ~ServerMetrics() = default;
  // One finished RPC: its gRPC code name ("OK", "INVALID_ARGUMENT", ...),
  // candidates scored (0 unless OK) and end-to-end latency in the server
  // (the Prometheus latency histogram takes OK calls only).
  virtual void OnRequestDone(const std::string& code, int64_t candidates, double latency_seconds) = 0;
  // A call answered without scores, by reason: refused at arrival
  // ("invalid_argument", "slow_request" (its message did not arrive in
  // time while others waited to be read), "not_ready", "shutting_down",
  // "queue_full", "deadline_unmeetable"), dropped from the queue before compute
  // ("deadline", "cancelled", "model_changed": accepted for a model version
  // whose request contract the version now serving does not share), or
  // computed with its scores withheld ("non_finite_scores").
  virtual void OnRejected(const std::string& reason) = 0;
  // Time a request spent queued before its batch started.
  virtual void OnQueueLatency(double seconds) = 0;
  // Time from handing a reply (or an error) to gRPC until gRPC reports it
  // sent: the response path that request_latency_seconds does not include.
  virtual void OnResponseSent(double seconds) = 0;
  virtual void OnBatch(const BatchStats& stats) = 0;
  virtual void SetQueueDepth(int64_t requests) = 0;
  virtual void SetInflight(int64_t requests) = 0;
  // Memory gauges; called after each batch and on a timer.
  virtual void SetMemory(const ModelMemory& memory) = 0;

  // Model versions (server/model_manager.h). No-ops by default.
  // `version` serves from now on, in place of `previous` ("" at start).
  virtual void OnModelServing(const std::string& /*version*/, const std::string& /*previous*/) {}
  // One attempt to load a repository version (start-up included): whether it
  // loaded and warmed up, and the seconds that took.
  virtual void OnModelLoad(bool /*success*/, double /*seconds*/) {}
  // Model versions in memory: the serving one, plus one loading beside it or
  // replaced ones that batches in flight still hold.
  virtual void SetModelsLoaded(int64_t /*count*/) {}
};

class NullMetrics final : public ServerMetrics {
 public:
  void OnRequestDone(const std::string&, int64_t, double) override {}
  void OnRejected(const std::string&) override {}
  void OnQueueLatency(double) override {}
  void OnResponseSent(double) override {}
  void OnBatch(const BatchStats&) override {}
  void SetQueueDepth(int64_t) override {}
  void SetInflight(int64_t) override {}
  void SetMemory(const ModelMemory&) override {}
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_METRICS_H_
