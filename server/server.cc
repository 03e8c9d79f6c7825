#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <utility>

#include "common/socket_address.h"
#include "model/weights.h"
#include "common/process.h"

namespace jagrank {

namespace {

// How long the listener's shutdown waits for the calls still open once every
// Rank reply is sent (refusals of calls that raced it; streams a client holds
// open) before cancelling them.
constexpr std::chrono::milliseconds kShutdownGrace{100};

// Readable and holding a PEM block, or an error naming the key and the file.
Status CheckPemFile(const char* key, const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(std::string("server config ") + key + ": cannot open '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return Status::InvalidArgument(std::string("server config ") + key + ": '" + path + "' holds no PEM block");
  }
  return Status::Ok();
}

// Plaintext, TLS or mTLS (server/server_config.h: tls_*). gRPC's file
// watcher re-reads the files every tls_reload_interval_s; they are checked
// here first so that a wrong path fails the start rather than every handshake.
Status MakeServerCredentials(const ServerConfig& config, std::shared_ptr<grpc::ServerCredentials>* out) {
  if (config.tls_cert.empty()) {
    *out = grpc::InsecureServerCredentials();
    return Status::Ok();
  }
  RETURN_IF_ERROR(CheckPemFile("tls_cert", config.tls_cert));
  RETURN_IF_ERROR(CheckPemFile("tls_key", config.tls_key));
  const bool mtls = !config.tls_client_ca.empty();
  if (mtls) RETURN_IF_ERROR(CheckPemFile("tls_client_ca", config.tls_client_ca));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config.tls_key, config.tls_cert, config.tls_client_ca,
      static_cast<unsigned int>(config.tls_reload_interval_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mtls) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  *out = grpc::experimental::TlsServerCredentials(options);
  if (*out == nullptr) return Status::InvalidArgument("server config tls_*: gRPC refused the TLS settings");
  return Status::Ok();
}

}  // namespace

Status LoadModels(const ServerConfig& config, std::vector<std::unique_ptr<Model>>* out) {
  out->clear();
  ModelConfig model_config;
  if (!config.model_config.empty()) {
    RETURN_IF_ERROR(LoadModelConfig(config.model_config, &model_config));
  } else {
    Status s = DefaultModelConfig(&model_config);
    if (!s.ok()) return Status(s.code(), "embedded config/model.yaml: " + s.message());
  }
  for (const std::string& device : ExecutorDevices(config)) {
    ModelWeights weights;  // empty: Model::Create makes the random model of the config's seed
    if (!config.model_weights.empty()) {
      RETURN_IF_ERROR(LoadSafetensors(config.model_weights, model_config, &weights));
    }
    std::unique_ptr<Model> model;
    RETURN_IF_ERROR(BuildModel(model_config, std::move(weights), config, device, &model));
    out->push_back(std::move(model));
  }
  return Status::Ok();
}

JagrankServer::JagrankServer(const ServerConfig& config, ServerMetrics* metrics)
    : config_(config), metrics_(metrics) {}

JagrankServer::~JagrankServer() { Drain(); }

Status JagrankServer::Create(const ServerConfig& config, ServerMetrics* metrics,
                             std::unique_ptr<JagrankServer>* out) {
  RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<JagrankServer> server(new JagrankServer(config, metrics));
  RETURN_IF_ERROR(server->Start());
  std::unique_ptr<ModelManager> models;
  if (!config.model_repository.empty()) {
    RETURN_IF_ERROR(ModelManager::CreateFromRepository(server->config_, metrics, &models));
  } else {
    std::vector<std::unique_ptr<Model>> instances;
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(LoadModels(config, &instances));
    const Model& model = *instances.front();
    spdlog::info("model {} version {} loaded on {} ({} instance(s)) in {:.2f} s ({} MiB of weights each)",
                 model.config().name, model.version(), config.device, instances.size(),
                 std::chrono::duration<double>(Clock::now() - start).count(), model.Memory().weights_bytes >> 20);
    RETURN_IF_ERROR(ModelManager::CreateFixed(server->config_, std::move(instances), metrics, &models));
  }
  RETURN_IF_ERROR(server->Ready(std::move(models)));
  *out = std::move(server);
  return Status::Ok();
}

Status JagrankServer::CreateWithModel(const ServerConfig& config, std::unique_ptr<Model> model,
                                      ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out) {
  std::vector<std::unique_ptr<Model>> instances;
  instances.push_back(std::move(model));
  return CreateWithModels(config, std::move(instances), metrics, out);
}

Status JagrankServer::CreateWithModels(const ServerConfig& config, std::vector<std::unique_ptr<Model>> instances,
                                       ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out) {
  RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<JagrankServer> server(new JagrankServer(config, metrics));
  RETURN_IF_ERROR(server->Start());
  std::unique_ptr<ModelManager> models;
  RETURN_IF_ERROR(ModelManager::CreateFixed(server->config_, std::move(instances), metrics, &models));
  RETURN_IF_ERROR(server->Ready(std::move(models)));
  *out = std::move(server);
  return Status::Ok();
}

Status JagrankServer::Start() {
  service_ = std::make_unique<RankerService>(config_, metrics_);
  stream_service_ = std::make_unique<RankStreamService>(config_, metrics_, service_.get());
  // Health is RankerService's own (on Rank's queues, see there): gRPC's
  // default one runs on the callback API.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // gRPC reports a taken port only in its own log, as "No address added":
  // say it in plain words before trying.
  RETURN_IF_ERROR(CheckAddressFree("grpc_address", config_.grpc_address));
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  RETURN_IF_ERROR(MakeServerCredentials(config_, &credentials));
  builder.AddListeningPort(config_.grpc_address, credentials, &port_);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the
  // same port and silently take a share of the connections: refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  service_->AddToBuilder(&builder);
  if (config_.grpc_max_concurrent_streams > 0) {
    // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: calls beyond it wait in the
    // client's channel instead of opening streams here.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config_.grpc_max_concurrent_streams);
  }
  std::vector<GrpcChannelArg> extra_args;  // also checked by ValidateServerConfig in Create
  RETURN_IF_ERROR(ParseGrpcChannelArgs(config_.grpc_channel_args, ServerReservedGrpcChannelArgs(),
                                       "server config grpc_channel_args", &extra_args));
  for (const GrpcDefaultChannelArg& arg : ServerDefaultGrpcChannelArgs()) {
    const bool overridden = std::any_of(extra_args.begin(), extra_args.end(),
                                        [&arg](const GrpcChannelArg& extra) { return extra.name == arg.name; });
    if (!overridden) builder.AddChannelArgument(arg.name, arg.value);
  }
  for (const GrpcChannelArg& arg : extra_args) {
    if (arg.is_int) {
      builder.AddChannelArgument(arg.name, arg.int_value);
    } else {
      builder.AddChannelArgument(arg.name, arg.value);
    }
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.grpc_max_receive_message_bytes));
  // One memory bound for every connection: streams that declare large
  // messages and never finish them fill gRPC's buffers up to the quota, and
  // no further (gRPC then grants smaller windows and cancels streams).
  grpc::ResourceQuota quota("jagrank-server");
  quota.Resize(static_cast<size_t>(GrpcMemoryQuotaBytes(config_)));
  builder.SetResourceQuota(quota);
  if (config_.grpc_max_connection_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(config_.grpc_max_connection_idle_ms));
  }
  if (config_.grpc_max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, static_cast<int>(config_.grpc_max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(config_.grpc_max_connection_age_grace_ms));
  }
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return Status::Unavailable("grpc_address '" + config_.grpc_address + "': cannot listen (gRPC's log says why)");
  }
  service_->StartPolling();
  stream_service_->RequestStreams();
  return Status::Ok();
}

Status JagrankServer::Ready(std::unique_ptr<ModelManager> models) {
  models_ = std::move(models);  // loaded and warmed up
  std::shared_ptr<const ServedModel> served = models_->Current();
  metrics_->SetMemory(models_->MemoryToReport(served->model(), 0));
  batcher_ = std::make_unique<Batcher>(config_.batching, metrics_,
                                       // Every version has the server's one attention
                                       // strategy; the current one is asked, as the
                                       // batch goes to it (a replaced one may be freed).
                                       [models = models_.get()](int64_t requests, int64_t sum_sq, int64_t longest) {
                                         return models->Current()->model().AttentionCost(requests, sum_sq, longest);
                                       },
                                       models_->instances());
  for (int i = 0; i < models_->instances(); ++i) {
    executors_.push_back(std::make_unique<Executor>(models_.get(), i, batcher_.get(), metrics_));
  }
  for (auto& executor : executors_) executor->Start();
  service_->SetReady(models_.get(), batcher_.get());
  models_->StartWatching();
  return Status::Ok();
}

Status JagrankServer::ReloadModel() { return models_->ReloadNow(); }

void JagrankServer::RequestModelReload() {
  if (!models_->has_repository()) {
    spdlog::info("model reload requested: no model_repository configured, nothing to reload");
    return;
  }
  models_->RequestReload();
}

Status JagrankServer::Drain() {
  std::lock_guard<std::mutex> lock(drain_mu_);
  if (drained_) return drain_status_;
  drained_ = true;
  if (grpc_server_ == nullptr) return drain_status_;
  if (batcher_ == nullptr) {
    // The start failed before Ready: no request was accepted, nothing to
    // drain or to log.
    grpc_server_->Shutdown(std::chrono::system_clock::now());
    service_->StopPolling();
    grpc_server_->Wait();
    return drain_status_;
  }
  const Clock::time_point start = Clock::now();
  const Clock::time_point give_up = start + std::chrono::milliseconds(config_.drain_timeout_ms);
  // No version swaps while draining (a load in progress finishes unused).
  if (models_ != nullptr) models_->StopWatching();
  service_->SetDraining();
  spdlog::info("draining: NOT_SERVING, refusing new calls, finishing {} accepted", service_->inflight());
  if (batcher_ != nullptr) {
    batcher_->Close();
    // Join on a helper thread so that a stuck forward cannot hold the drain
    // past its timeout.
    auto joined = std::make_shared<std::promise<void>>();
    std::future<void> done = joined->get_future();
    std::vector<Executor*> executors;
    for (auto& executor : executors_) executors.push_back(executor.get());
    std::thread([executors, joined] {
      for (Executor* executor : executors) executor->Join();
      joined->set_value();
    }).detach();
    if (done.wait_until(give_up) != std::future_status::ready) {
      drain_status_ = Status::DeadlineExceeded("drain: accepted requests not finished after drain_timeout_ms = " +
                                               std::to_string(config_.drain_timeout_ms));
      spdlog::error("{}", drain_status_.message());
      grpc_server_->Shutdown(std::chrono::system_clock::now());
      // The executor may still be inside Forward: keep everything it can
      // touch alive; the caller is expected to exit the process now.
      for (auto& executor : executors_) (void)executor.release();
      (void)batcher_.release();
      (void)models_.release();
      (void)stream_service_.release();
      (void)service_.release();
      return drain_status_;
    }
  }
  // Callers that raced the drain get a clean UNAVAILABLE from the service
  // rather than a transport-level cancel when the listener closes.
  spdlog::debug("drain: accepted work done after {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  std::this_thread::sleep_for(std::chrono::milliseconds(config_.drain_linger_ms));
  // Every Rank answer is written before the listener goes. Health Watch
  // streams (which saw NOT_SERVING when the drain began) end here. The calls
  // left after that are short (a GetModelInfo) or held open by their
  // clients, as an idle reflection stream is: Shutdown waits for them only
  // kShutdownGrace, then cancels them.
  service_->EndWatches();
  if (!service_->WaitRepliesSent(give_up)) spdlog::warn("drain: Rank replies still unsent at drain_timeout_ms");
  // Open RankStreams end after their answers are written (every accepted
  // request has its answer by now).
  if (!stream_service_->FinishOpenStreams(give_up)) {
    spdlog::warn("drain: {} RankStream calls still open at drain_timeout_ms", stream_service_->open_streams());
  }
  grpc_server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  spdlog::debug("drain: listener shut down after {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  // The completion queues go after the server (gRPC's order); every call
  // and stream still held is freed as its queue drains.
  service_->StopPolling();
  grpc_server_->Wait();
  spdlog::info("drained in {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  return drain_status_;
}

}  // namespace jagrank
