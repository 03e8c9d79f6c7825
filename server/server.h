// JagrankServer: the assembled server (model, batcher, executor, Ranker
// service, health and reflection) behind one gRPC listener.
//
//   std::unique_ptr<JagrankServer> server;
//   RETURN_IF_ERROR(JagrankServer::Create(config, &metrics, &server));  // listening, SERVING
//   ...
//   server->Drain();  // on SIGTERM: NOT_SERVING, UNAVAILABLE to new calls, finish the accepted ones
#ifndef JAGRANK_SERVER_SERVER_H_
#define JAGRANK_SERVER_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "model/model.h"
#include "server/batcher.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/ranker_service.h"
#include "server/server_config.h"

namespace jagrank {

// The health service names reported SERVING once the server is ready.
inline constexpr const char* kRankerServiceName = "jagrank.v1.Ranker";

// Reads the model config (config.model_config, or the embedded default),
// the weights (config.model_weights, or random ones from the config's seed)
// and builds the model on config.device ("auto": the GPU when this build has
// CUDA and one is usable, the CPU otherwise).
Status LoadModel(const ServerConfig& config, std::unique_ptr<Model>* out);
// The ModelOptions LoadModel builds the model with on `device` (resolved:
// cpu, cuda or cuda:N): threads, attention strategy, and precision's CUDA
// numerics (fp32 -> cuda_bf16 false; bf16 and auto -> true).
Status MakeModelOptions(const ServerConfig& config, const std::string& device, ModelOptions* out);

class JagrankServer {
 public:
  // Starts listening on config.grpc_address with health NOT_SERVING, loads
  // the model (LoadModel), warms it up, then reports SERVING. `metrics` must
  // outlive the server.
  static Status Create(const ServerConfig& config, ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out);
  // The same with a model built by the caller (tests wrap the real one).
  static Status CreateWithModel(const ServerConfig& config, std::unique_ptr<Model> model, ServerMetrics* metrics,
                                std::unique_ptr<JagrankServer>* out);
  ~JagrankServer();  // Drain()s if not done yet.

  int port() const { return port_; }        // the bound gRPC port
  const Model& model() const { return *model_; }
  const ServerConfig& config() const { return config_; }

  // Graceful drain: health NOT_SERVING, new Rank calls UNAVAILABLE, every
  // accepted request finished, then the listener stops. Blocks; idempotent;
  // thread-safe. DEADLINE_EXCEEDED when the accepted work did not finish in
  // drain_timeout_ms (what is left is then cancelled, and the parts that may
  // still be running are leaked: exit the process after that).
  Status Drain();

 private:
  JagrankServer(const ServerConfig& config, ServerMetrics* metrics);
  Status Start();  // listener, NOT_SERVING
  Status Ready(std::unique_ptr<Model> model);  // warm-up, executor, SERVING
  void SetHealth(bool serving);

  const ServerConfig config_;
  ServerMetrics* const metrics_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<RankerService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  std::mutex drain_mu_;
  bool drained_ = false;  // guarded by drain_mu_
  Status drain_status_;   // guarded by drain_mu_
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_SERVER_H_
