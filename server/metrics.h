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
  double compute_seconds = 0;    // model forward (device time on GPU)
  double d2h_seconds = 0;        // device-to-host copies (0 on CPU)
};

class ServerMetrics {
 public:
  virtual ~ServerMetrics() = default;
  // One finished RPC: its gRPC code name ("OK", "INVALID_ARGUMENT", ...),
  // candidates scored (0 unless OK) and end-to-end latency in the server.
  virtual void OnRequestDone(const std::string& code, int64_t candidates, double latency_seconds) = 0;
  // A request rejected before queueing, by reason ("invalid_argument",
  // "queue_full", "deadline", "cancelled", "shutting_down").
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
