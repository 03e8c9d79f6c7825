#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <thread>
#include <utility>

#include "common/cuda_check.h"
#include "common/socket_address.h"
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
  RETURN_IF_ERROR(MakeModelOptions(config, device, &options));
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

}  // namespace

Status MakeModelOptions(const ServerConfig& config, const std::string& device, ModelOptions* out) {
  ModelOptions options;
  options.device = device;
  options.cpu_threads = config.cpu_threads;
  options.cuda_bf16 = config.precision != "fp32";  // auto and bf16
  RETURN_IF_ERROR(ParseAttentionStrategy(config.attention, &options.attention));
  *out = options;
  return Status::Ok();
}

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
  // gRPC reports a taken port only in its own log, as "No address added":
  // say it in plain words before trying.
  RETURN_IF_ERROR(CheckAddressFree("grpc_address", config_.grpc_address));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.grpc_address, grpc::InsecureServerCredentials(), &port_);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the
  // same port and silently take a share of the connections: refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  service_->AddCompletionQueues(&builder);
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
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return Status::Unavailable("grpc_address '" + config_.grpc_address + "': cannot listen (gRPC's log says why)");
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
  for (int slot = 0; slot < Model::kStageSlots; ++slot) {
    ForwardTimings timings;
    Status s = model_->Stage(batch, slot);
    if (s.ok()) s = model_->Run(slot, &scores, &timings);
    if (!s.ok()) return Status(s.code(), "warm-up forward failed: " + s.message());
  }
  metrics_->SetMemory(model_->Memory());
  batcher_ = std::make_unique<Batcher>(config_.batching, metrics_,
                                       [model = model_.get()](int64_t requests, int64_t sum_sq, int64_t longest) {
                                         return model->AttentionCost(requests, sum_sq, longest);
                                       });
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
  grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  spdlog::debug("drain: listener shut down after {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  // Rank's completion queues go after the server (gRPC's order); every call
  // still held is freed as its queue drains.
  service_->StopPolling();
  grpc_server_->Wait();
  spdlog::info("drained in {:.3f} s", std::chrono::duration<double>(Clock::now() - start).count());
  return drain_status_;
}

}  // namespace jagrank
