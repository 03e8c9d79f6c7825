#include "server/model_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/cuda_check.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"

namespace jagrank {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
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

std::string FeatureNames(const ModelConfig& c) {
  std::string names;
  for (size_t f = 0; f < c.sparse_features.size(); ++f) names += (f == 0 ? "" : ", ") + c.sparse_features[f].name;
  return "[" + names + "]";
}

RequestLimits LimitsOf(const ServerConfig& config) {
  RequestLimits limits;
  limits.max_candidates_per_request = config.max_candidates_per_request;
  limits.max_request_bytes = config.max_request_bytes;
  return limits;
}

}  // namespace

ServedModel::ServedModel(std::vector<std::unique_ptr<Model>> instances_in, uint64_t serial_in,
                         std::string version_in, int64_t repository_version_in, std::string fingerprint_in,
                         uint64_t request_contract_in, const RequestLimits& limits, std::shared_ptr<LiveModels> live)
    : instances(std::move(instances_in)),
      serial(serial_in),
      version(std::move(version_in)),
      repository_version(repository_version_in),
      fingerprint(std::move(fingerprint_in)),
      request_contract(request_contract_in),
      converter(instances.front()->config(), limits),
      live_(std::move(live)) {
  std::lock_guard<std::mutex> lock(live_->mu);
  ++live_->count;
}

ServedModel::~ServedModel() {
  instances.clear();  // first, so that the count goes down once the memory is back
  spdlog::info("model version {} freed", version);
  std::lock_guard<std::mutex> lock(live_->mu);
  --live_->count;
  live_->freed.notify_all();
}

ModelMemory ModelManager::MemoryToReport(const Model& instance, int64_t padding_saved_increase) {
  ModelMemory memory = instance.Memory();
  memory.padding_saved_bytes = padding_saved_total_.fetch_add(padding_saved_increase) + padding_saved_increase;
  return memory;
}

int ModelManager::live_models() const {
  std::lock_guard<std::mutex> lock(live_->mu);
  return live_->count;
}

bool SameRequestContract(const ModelConfig& a, const ModelConfig& b, std::string* changes) {
  std::string what;
  if (a.num_dense_features != b.num_dense_features) {
    what += "num_dense_features " + std::to_string(a.num_dense_features) + " -> " +
            std::to_string(b.num_dense_features);
  }
  bool same_features = a.sparse_features.size() == b.sparse_features.size();
  for (size_t f = 0; same_features && f < a.sparse_features.size(); ++f) {
    same_features = a.sparse_features[f].name == b.sparse_features[f].name;
  }
  if (!same_features) what += (what.empty() ? "" : "; ") + ("sparse features " + FeatureNames(a) + " -> " + FeatureNames(b));
  if (changes != nullptr) *changes = what;
  return what.empty();
}

Status WarmUpModel(Model* model) {
  const std::vector<RankInput> requests = WarmupRequests(model->config());
  std::vector<const RankInput*> pointers;
  for (const RankInput& r : requests) pointers.push_back(&r);
  Batch batch;
  RETURN_IF_ERROR(AssembleBatch(pointers, model->config(), &batch));
  std::vector<float> scores;
  // Through every staging slot the executor uses, so that none of them
  // allocates its pinned and device buffers under live traffic.
  for (int slot = 0; slot < Model::kStageSlots; ++slot) {
    ForwardTimings timings;
    Status s = model->Stage(batch, slot);
    if (s.ok()) s = model->Run(slot, &scores, &timings);
    if (!s.ok()) return Status(s.code(), "warm-up forward failed: " + s.message());
  }
  return Status::Ok();
}

std::vector<std::string> ExecutorDevices(const ServerConfig& config) {
  std::vector<std::string> devices;
  for (std::string device : DeviceList(config.device)) {
    if (device == "auto") device = CudaDeviceAvailable() ? "cuda:0" : "cpu";
    for (int i = 0; i < config.instances_per_device; ++i) devices.push_back(device);
  }
  return devices;
}

Status MakeModelOptions(const ServerConfig& config, const std::string& device, ModelOptions* out) {
  ModelOptions options;
  options.device = device;
  options.cpu_threads = config.cpu_threads;
  options.cuda_bf16 = config.precision != "fp32";  // auto and bf16
  RETURN_IF_ERROR(ParseAttentionStrategy(config.attention, &options.attention));
  *out = options;
  return Status::Ok();
}

Status BuildModel(const ModelConfig& model_config, ModelWeights weights, const ServerConfig& config,
                  const std::string& device, std::unique_ptr<Model>* out) {
  ModelOptions options;
  RETURN_IF_ERROR(MakeModelOptions(config, device, &options));
  return Model::Create(model_config, std::move(weights), options, out);
}

ModelManager::ModelManager(const ServerConfig& config, ServerMetrics* metrics, std::vector<std::string> devices)
    : config_(config), metrics_(metrics), devices_(std::move(devices)) {}

ModelManager::~ModelManager() { StopWatching(); }

Status ModelManager::CreateFixed(const ServerConfig& config, std::vector<std::unique_ptr<Model>> instances,
                                 ServerMetrics* metrics, std::unique_ptr<ModelManager>* out) {
  if (instances.empty()) return Status::InvalidArgument("ModelManager::CreateFixed: no model instance");
  std::vector<std::string> devices;
  for (const auto& model : instances) {
    RETURN_IF_ERROR(WarmUpModel(model.get()));
    devices.push_back(model->device());
  }
  std::unique_ptr<ModelManager> manager(new ModelManager(config, metrics, std::move(devices)));
  const std::string version = instances.front()->version();
  {
    std::lock_guard<std::mutex> lock(manager->reload_mu_);
    std::shared_ptr<ServedModel> served = manager->Wrap(std::move(instances), version, 0, "");
    std::lock_guard<std::mutex> current_lock(manager->current_mu_);
    manager->current_ = std::move(served);
  }
  metrics->OnModelServing(version, "");
  metrics->SetModelsLoaded(1);
  *out = std::move(manager);
  return Status::Ok();
}

Status ModelManager::CreateFromRepository(const ServerConfig& config, ServerMetrics* metrics,
                                          std::unique_ptr<ModelManager>* out) {
  std::unique_ptr<ModelManager> manager(new ModelManager(config, metrics, ExecutorDevices(config)));
  std::shared_ptr<ServedModel> loaded;
  {
    std::lock_guard<std::mutex> lock(manager->reload_mu_);
    Status s = manager->ScanAndLoad(nullptr, &loaded);
    if (loaded == nullptr) {
      return Status(s.ok() ? Status::Code::kNotFound : s.code(),
                    "model repository '" + config.model_repository + "': " +
                        (s.ok() ? "no complete version (need <n>/" + std::string(kRepositoryConfigFile) + " and <n>/" +
                                      kRepositoryWeightsFile + " with n a positive integer)"
                                : "no version could be loaded: " + s.message()));
    }
    std::lock_guard<std::mutex> current_lock(manager->current_mu_);
    manager->current_ = loaded;
  }
  metrics->OnModelServing(loaded->version, "");
  metrics->SetModelsLoaded(manager->live_models());
  *out = std::move(manager);
  return Status::Ok();
}

std::shared_ptr<const ServedModel> ModelManager::Current() const {
  std::lock_guard<std::mutex> lock(current_mu_);
  return current_;
}

std::shared_ptr<ServedModel> ModelManager::Wrap(std::vector<std::unique_ptr<Model>> instances, std::string version,
                                                int64_t repository_version, std::string fingerprint) {
  // A new contract number only when the request contract changes, so that
  // requests queued for the previous version still match the next one.
  std::shared_ptr<const ServedModel> serving = Current();
  if (serving == nullptr ||
      !SameRequestContract(serving->model().config(), instances.front()->config(), nullptr)) {
    ++last_contract_;
  }
  return std::make_shared<ServedModel>(std::move(instances), ++last_serial_, std::move(version), repository_version,
                                       std::move(fingerprint), last_contract_, LimitsOf(config_), live_);
}

Status ModelManager::LoadVersion(const RepositoryVersion& v, std::shared_ptr<ServedModel>* out) {
  const SteadyClock::time_point start = SteadyClock::now();
  ModelConfig model_config;
  std::vector<std::unique_ptr<Model>> instances;
  int64_t file_bytes = 0;
  Status s = LoadModelConfig(v.config_path, &model_config);
  // One instance per executor; each consumes its own weights (the file is
  // mapped again, which shares its pages).
  for (size_t i = 0; s.ok() && i < devices_.size(); ++i) {
    ModelWeights weights;
    s = LoadSafetensors(v.weights_path, model_config, &weights);
    file_bytes = weights.total_bytes();
    std::unique_ptr<Model> model;
    if (s.ok()) s = BuildModel(model_config, std::move(weights), config_, devices_[i], &model);
    if (s.ok() && i == 0) metrics_->SetModelsLoaded(live_models() + 1);
    if (s.ok()) s = WarmUpModel(model.get());
    if (s.ok()) instances.push_back(std::move(model));
  }
  const double seconds = SecondsSince(start);
  metrics_->OnModelLoad(s.ok(), seconds);
  if (!s.ok()) {
    instances.clear();
    metrics_->SetModelsLoaded(live_models());
    failed_[v.version] = v.fingerprint;
    return Status(s.code(), "version " + std::to_string(v.version) + ": " + s.message());
  }
  failed_.erase(v.version);
  const Model& model = *instances.front();
  const std::string version = std::to_string(v.version) + ":" + model.version();
  spdlog::info("model repository '{}': version {} ({}, content hash {}, {} MiB of weights in the file) loaded and "
               "warmed up on {} ({} instance(s)) in {:.2f} s",
               config_.model_repository, v.version, model.config().name, model.version(), file_bytes >> 20,
               config_.device, instances.size(), seconds);
  *out = Wrap(std::move(instances), version, v.version, v.fingerprint);
  return Status::Ok();
}

Status ModelManager::ScanAndLoad(const std::shared_ptr<const ServedModel>& serving,
                                 std::shared_ptr<ServedModel>* loaded) {
  std::vector<RepositoryVersion> versions;
  Status first_failure;
  Status listed = ListModelRepository(config_.model_repository, &versions);
  std::string note;
  if (!listed.ok()) {
    note = listed.message();
    first_failure = listed;
  } else if (versions.empty()) {
    note = "model repository '" + config_.model_repository + "' has no complete version";
  }
  for (const RepositoryVersion& v : versions) {
    if (serving != nullptr && v.version == serving->repository_version && v.fingerprint == serving->fingerprint) {
      break;  // the serving version is the highest that loads
    }
    const auto failed = failed_.find(v.version);
    if (failed != failed_.end() && failed->second == v.fingerprint) continue;  // same files failed before
    spdlog::info("model repository '{}': loading version {}", config_.model_repository, v.version);
    Status s = LoadVersion(v, loaded);
    if (s.ok()) break;
    spdlog::error("model repository '{}': refused {} (the serving version stays; the version is tried again when "
                  "its files change)",
                  config_.model_repository, s.message());
    if (first_failure.ok()) first_failure = s;
  }
  if (!note.empty() && note != last_scan_note_) spdlog::warn("{}", note);
  last_scan_note_ = note;
  return first_failure;
}

Status ModelManager::ReloadNow() {
  if (!has_repository()) return Status::Ok();
  std::lock_guard<std::mutex> lock(reload_mu_);
  std::shared_ptr<ServedModel> loaded;
  Status s = ScanAndLoad(Current(), &loaded);
  if (loaded != nullptr) {
    if (stopping_.load()) {
      spdlog::info("model version {} loaded while stopping: not served", loaded->version);
    } else {
      Swap(std::move(loaded));
    }
  }
  return s;
}

void ModelManager::Swap(std::shared_ptr<const ServedModel> next) {
  std::shared_ptr<const ServedModel> previous = Current();
  std::string changes;
  if (!SameRequestContract(previous->model().config(), next->model().config(), &changes)) {
    spdlog::warn("model version {} changes what a RankRequest means ({}): requests are now validated for it, and "
                 "requests accepted for version {} that have not started are answered UNAVAILABLE",
                 next->version, changes, previous->version);
  }
  {
    std::lock_guard<std::mutex> lock(current_mu_);
    current_ = next;
  }
  spdlog::info("model version {} serving (was {}); batches in flight finish on {}", next->version,
               previous->version, previous->version);
  metrics_->OnModelServing(next->version, previous->version);
  // Wait for the batches that hold the old version, so that two reloads
  // never stack versions in memory and its memory shows returned below.
  const std::string previous_version = previous->version;
  previous.reset();
  bool freed = false;
  {
    // Only the current version and the replaced one exist here (reloads are
    // serialised and each waits like this one).
    std::unique_lock<std::mutex> lock(live_->mu);
    freed = live_->freed.wait_for(lock, std::chrono::milliseconds(config_.drain_timeout_ms),
                                  [&] { return live_->count <= 1; });
  }
  if (!freed) {
    spdlog::warn("model version {} still held by a batch after drain_timeout_ms = {}", previous_version,
                 config_.drain_timeout_ms);
  }
  metrics_->SetModelsLoaded(live_models());
  metrics_->SetMemory(MemoryToReport(next->model(), 0));
}

void ModelManager::StartWatching() {
  if (!has_repository() || watch_thread_.joinable()) return;
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

void ModelManager::RequestReload() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  reload_requested_ = true;
  watch_cv_.notify_all();
}

void ModelManager::StopWatching() {
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_ = true;
    watch_cv_.notify_all();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

void ModelManager::WatchLoop() {
  const double interval_s = config_.model_poll_interval_s;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      auto woken = [&] { return stop_ || reload_requested_; };
      if (interval_s > 0) {
        watch_cv_.wait_for(lock, std::chrono::duration<double>(interval_s), woken);
      } else {
        watch_cv_.wait(lock, woken);
      }
      if (stop_) return;
      if (reload_requested_) spdlog::info("model repository '{}': reload requested", config_.model_repository);
      reload_requested_ = false;
    }
    ReloadNow();  // logs and counts its own failures
  }
}

}  // namespace jagrank
