// PrometheusMetrics: ServerMetrics exported with prometheus-cpp. Its pull
// exposer serves `/metrics` (docs/metrics.md's names, prefix jagrank_) and a
// self-contained live status page at `/` on the metrics address.
// Thread safety: as ServerMetrics (all methods concurrent-safe).
#ifndef JAGRANK_SERVER_PROMETHEUS_METRICS_H_
#define JAGRANK_SERVER_PROMETHEUS_METRICS_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "server/metrics.h"

namespace jagrank {

class PrometheusMetrics : public ServerMetrics {
 public:
  // Starts the HTTP exposer on `bind_address` ("0.0.0.0:9100"; port 0 is not
  // supported by prometheus-cpp's exposer: pick a free port). Fails with a
  // clear error when the address cannot be bound.
  static Status Create(const std::string& bind_address, std::unique_ptr<PrometheusMetrics>* out);
  ~PrometheusMetrics() override = default;

  // The port actually bound (useful for tests).
  virtual int port() const = 0;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_PROMETHEUS_METRICS_H_
