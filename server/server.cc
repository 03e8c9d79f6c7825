#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
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

#include "common/cuda_check.h"
#include "model/weights.h"
#include "common/process.h"

namespace jagrank {
namespace {

Status BuildModel(const ModelConfig& model_config, const ServerConfig& config, const std::string& device,
                  std::unique_ptr<Model>* out) {
  ModelWeights weights;  // empty: Model::Create makes the random model of the config's seed
  if (!config.model_weights.empty()) {
    RETURN_IF_ERROR(LoadSafetensors(config.model_weights, model_config, &weights));
  }
  ModelOptions options;
  options.device = device;
  options.cpu_threads = config.cpu_threads;
  options.cuda_blocking_sync = config.cuda_sync == "block";
  RETURN_IF_ERROR(ParseAttentionStrategy(config.attention, &options.attention));
  return Model::Create(model_config, std::move(weights), options, out);
}

// Requests of every history shape the model meets (empty, short, full).
std::vector<RankInput> WarmupRequests(const ModelConfig& c) {
  std::vector<RankInput> requests;
  const int lengths[] = {0, 1, std::max(1, c.max_history_len / 2), c.max_history_len};
  for (int i = 0; i < 4; ++i) {
    RankInput r;
    for (int j = 0; j < c.num_dense_features; ++j) r.dense.push_back(0.1f * j);
    r.sparse.assign(c.sparse_features.size(), std::vector<int64_t>{i});
    for (int j = 0; j < lengths[i]; ++j) r.history.push_back(int64_t{j} * 7919 + i);
    for (int j = 0; j < 8; ++j) r.candidates.push_back(int64_t{j} * 104729 + i);
    requests.push_back(std::move(r));
  }
  return requests;
}

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
  if (config.tls_cert_file.empty()) {
    *out = grpc::InsecureServerCredentials();
    return Status::Ok();
  }
  RETURN_IF_ERROR(CheckPemFile("tls_cert_file", config.tls_cert_file));
  RETURN_IF_ERROR(CheckPemFile("tls_key_file", config.tls_key_file));
  const bool mtls = !config.tls_client_ca_file.empty();
  if (mtls) RETURN_IF_ERROR(CheckPemFile("tls_client_ca_file", config.tls_client_ca_file));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config.tls_key_file, config.tls_cert_file, config.tls_client_ca_file,
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

Status LoadModel(const ServerConfig& config, std::unique_ptr<Model>* out) {
  ModelConfig model_config;
  if (!config.model_config.empty()) {
    RETURN_IF_ERROR(LoadModelConfig(config.model_config, &model_config));
  } else {
    Status s = DefaultModelConfig(&model_config);
    if (!s.ok()) return Status(s.code(), "embedded config/model.yaml: " + s.message());
  }
  std::string device = config.device;
  if (device == "auto") device = CudaDeviceAvailable() ? "cuda:0" : "cpu";
  return BuildModel(model_config, config, device, out);
}

JagrankServer::JagrankServer(const ServerConfig& config, ServerMetrics* metrics)
    : config_(config), metrics_(metrics) {}

JagrankServer::~JagrankServer() { Drain(); }

Status JagrankServer::Create(const ServerConfig& config, ServerMetrics* metrics,
                             std::unique_ptr<JagrankServer>* out) {
  RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<JagrankServer> server(new JagrankServer(config, metrics));
  RETURN_IF_ERROR(server->Start());
  std::unique_ptr<Model> model;
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(LoadModel(config, &model));
  spdlog::info("model {} version {} loaded on {} in {:.2f} s ({} MiB of weights)", model->config().name,
               model->version(), model->device(),
               std::chrono::duration<double>(Clock::now() - start).count(),
               model->Memory().weights_bytes >> 20);
  RETURN_IF_ERROR(server->Ready(std::move(model)));
  *out = std::move(server);
  return Status::Ok();
}

Status JagrankServer::CreateWithModel(const ServerConfig& config, std::unique_ptr<Model> model,
                                      ServerMetrics* metrics, std::unique_ptr<JagrankServer>* out) {
  RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<JagrankServer> server(new JagrankServer(config, metrics));
  RETURN_IF_ERROR(server->Start());
  RETURN_IF_ERROR(server->Ready(std::move(model)));
  *out = std::move(server);
  return Status::Ok();
}

Status JagrankServer::Start() {
  service_ = std::make_unique<RankerService>(config_, metrics_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
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
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(config_.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(config_.keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(config_.keepalive_min_client_ping_interval_ms));
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return Status::Unavailable("cannot listen on grpc_address '" + config_.grpc_address + "'");
  }
  service_->StartPolling();
  SetHealth(false);
  return Status::Ok();
}

Status JagrankServer::Ready(std::unique_ptr<Model> model) {
  model_ = std::move(model);
  // Warm-up: first-touch allocations, workspace pools, kernel loading.
  const std::vector<RankInput> requests = WarmupRequests(model_->config());
  std::vector<const RankInput*> pointers;
  for (const RankInput& r : requests) pointers.push_back(&r);
  Batch batch;
  RETURN_IF_ERROR(AssembleBatch(pointers, model_->config(), &batch));
  std::vector<float> scores;
  // Through every staging slot the executor uses, so that none of them
  // allocates its pinned and device buffers under live traffic.
  const int warmup_batches =
      config_.warmup_batches > 0 ? std::max(config_.warmup_batches, Model::kStageSlots) : 0;
  for (int i = 0; i < warmup_batches; ++i) {
    const int slot = i % Model::kStageSlots;
    ForwardTimings timings;
    Status s = model_->Stage(batch, slot);
    if (s.ok()) s = model_->Run(slot, &scores, &timings);
    if (!s.ok()) return Status(s.code(), "warm-up forward failed: " + s.message());
  }
  metrics_->SetMemory(model_->Memory());
  batcher_ = std::make_unique<Batcher>(config_.batching, metrics_,
                                       model_->attention() == AttentionStrategy::kJagged
                                           ? Batcher::AttentionCost::kSumOfSquares
                                           : Batcher::AttentionCost::kPadded);
  executor_ = std::make_unique<Executor>(model_.get(), batcher_.get(), metrics_);
  executor_->Start();
  service_->SetReady(model_.get(), batcher_.get());
  SetHealth(true);
  return Status::Ok();
}

void JagrankServer::SetHealth(bool serving) {
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kRankerServiceName, serving);
}

Status JagrankServer::Drain() {
  std::lock_guard<std::mutex> lock(drain_mu_);
  if (drained_) return drain_status_;
  drained_ = true;
  if (grpc_server_ == nullptr) return drain_status_;
  const Clock::time_point start = Clock::now();
  const Clock::time_point give_up = start + std::chrono::milliseconds(config_.drain_timeout_ms);
  SetHealth(false);
  service_->SetDraining();
  spdlog::info("draining: NOT_SERVING, refusing new calls, finishing {} accepted", service_->inflight());
  if (batcher_ != nullptr) {
    batcher_->Close();
    // Join on a helper thread so that a stuck forward cannot hold the drain
    // past its timeout.
    auto joined = std::make_shared<std::promise<void>>();
    std::future<void> done = joined->get_future();
    std::thread([executor = executor_.get(), joined] {
      executor->Join();
      joined->set_value();
    }).detach();
    if (done.wait_until(give_up) != std::future_status::ready) {
      drain_status_ = Status::DeadlineExceeded("drain: accepted requests not finished after drain_timeout_ms = " +
                                               std::to_string(config_.drain_timeout_ms));
      spdlog::error("{}", drain_status_.message());
      grpc_server_->Shutdown(std::chrono::system_clock::now());
      // The executor may still be inside Forward: keep everything it can
      // touch alive; the caller is expected to exit the process now.
      (void)executor_.release();
      (void)batcher_.release();
      (void)model_.release();
      (void)service_.release();
      return drain_status_;
    }
  }
  // Callers that raced the drain get a clean UNAVAILABLE from the service
  // rather than a transport-level cancel when the listener closes.
  spdlog::debug("drain: accepted work done after {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  std::this_thread::sleep_for(std::chrono::milliseconds(config_.drain_linger_ms));
  // Every Rank answer is written before the listener goes. The calls left
  // after that are short (a GetModelInfo) or held open by their clients: a
  // health Watch stream never ends by itself (gRPC's health service ends it
  // only when destroyed), nor does an idle reflection stream. Shutdown
  // waits for them only kShutdownGrace, then cancels them; watchers saw
  // NOT_SERVING when the drain began.
  if (!service_->WaitRepliesSent(give_up)) spdlog::warn("drain: Rank replies still unsent at drain_timeout_ms");
  grpc_server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  spdlog::debug("drain: listener shut down after {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  // Rank's completion queues go after the server (gRPC's order); every call
  // still held is freed as its queue drains.
  service_->StopPolling();
  grpc_server_->Wait();
  spdlog::info("drained in {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  return drain_status_;
}

}  // namespace jagrank
