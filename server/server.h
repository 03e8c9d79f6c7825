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
#include "server/model_manager.h"
#include "server/rank_stream.h"
#include "server/ranker_service.h"
#include "server/server_config.h"

namespace jagrank {

// Reads the model config (config.model_config, or the embedded default),
// the weights (config.model_weights, or random ones from the config's seed)
// and builds one instance of the model per executor (ExecutorDevices: each
// entry of config.device, "auto" being the GPU when this build has CUDA and
// one is usable, the CPU otherwise; instances_per_device on each). Not for
// config.model_repository (ModelManager::CreateFromRepository loads those).
Status LoadModels(const ServerConfig& config, std::vector<std::unique_ptr<Model>>* out);

class JagrankServer {
 public:
  // Starts listening on config.grpc_address with health NOT_SERVING, loads
  // the model (config.model_repository's highest complete version, or
  // LoadModels), warms it up, then reports SERVING; a repository is watched
  // from then on (server/model_manager.h). `metrics` must outlive the server.
  static Status Create(const ServerConfig& config, ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out);
  // The same with a fixed model built by the caller (tests wrap the real
  // one): one executor; or one executor per instance (of one config and
  // weights).
  static Status CreateWithModel(const ServerConfig& config, std::unique_ptr<Model> model, ServerMetrics* metrics,
                                std::unique_ptr<JagrankServer>* out);
  static Status CreateWithModels(const ServerConfig& config, std::vector<std::unique_ptr<Model>> instances,
                                 ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out);
  ~JagrankServer();  // Drain()s if not done yet.

  int port() const { return port_; }        // the bound gRPC port
  // The version serving now (it may change at any time with a repository).
  std::shared_ptr<const ServedModel> CurrentModel() const { return models_->Current(); }
  const ModelManager& model_manager() const { return *models_; }
  // A repository scan now, blocking for a load (ModelManager::ReloadNow):
  // OK, or the failure naming the refused version (the serving one stays).
  Status ReloadModel();
  // Asks the watch thread for a scan and returns at once (SIGHUP).
  // Thread-safe.
  void RequestModelReload();
  const ServerConfig& config() const { return config_; }

  // Graceful drain: health NOT_SERVING, new Rank calls and RankStream
  // messages UNAVAILABLE, every accepted request finished, open RankStreams
  // finished after their answers, then the listener stops. Blocks; idempotent;
  // thread-safe. DEADLINE_EXCEEDED when the accepted work did not finish in
  // drain_timeout_ms (what is left is then cancelled, and the parts that may
  // still be running are leaked: exit the process after that).
  Status Drain();

 private:
  JagrankServer(const ServerConfig& config, ServerMetrics* metrics);
  Status Start();  // listener, NOT_SERVING
  Status Ready(std::unique_ptr<ModelManager> models);  // executor, watching, SERVING

  const ServerConfig config_;
  ServerMetrics* const metrics_;
  std::unique_ptr<ModelManager> models_;  // declared before the executor, which reads it
  std::unique_ptr<Batcher> batcher_;
  std::vector<std::unique_ptr<Executor>> executors_;  // one per model instance, all on batcher_
  std::unique_ptr<RankerService> service_;
  std::unique_ptr<RankStreamService> stream_service_;  // RankStream, on service_'s door; freed before it
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  std::mutex drain_mu_;
  bool drained_ = false;  // guarded by drain_mu_
  Status drain_status_;   // guarded by drain_mu_
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_SERVER_H_
