// ModelManager: which model version serves, and the swap to a new one
// without downtime.
//
// Two sources:
//   - a fixed model (--model-config/--model-weights, or one the caller
//     built): served for the process's life; its version is the weights'
//     content hash (Model::version());
//   - a model repository (--model-repository DIR, server/model_repository.h):
//     the highest complete version that loads is served, and the repository
//     is scanned again every model_poll_interval_s and on RequestReload()
//     (SIGHUP). Its version is reported as "<n>:<content hash>", e.g.
//     "3:0d688b953b30ec0a": the repository's number first, and a different
//     string whenever the weights differ (GetModelInfo's contract).
//
// A swap: the new version is loaded and warmed up on the serving device
// beside the serving one, then made current in one step (Current()). Each
// batch reads Current() once and holds that ServedModel until its requests
// are answered, so a request is computed entirely by one version and batches
// in flight finish on the old one; the old one is freed when the last of
// them lets go (its device memory and mapped weights return). A version that
// fails to load is logged by name, counted (ServerMetrics::OnModelLoad) and
// remembered with its files' fingerprint: it is not tried again until its
// files change. The serving version stays meanwhile.
//
// Thread safety: Current() from any thread. ReloadNow(), and the watch
// thread's reloads, are serialised by reload_mu_ (a load blocks only other
// reloads, never Current()). The ServedModel a caller holds is immutable,
// except that its models may be used by one executor as Model's own
// contract allows.
#ifndef JAGRANK_SERVER_MODEL_MANAGER_H_
#define JAGRANK_SERVER_MODEL_MANAGER_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/model_repository.h"
#include "server/rank_request.h"
#include "server/server_config.h"

namespace jagrank {

// How many ServedModels of one manager are alive; the destructor of each
// notifies `freed`.
struct LiveModels {
  std::mutex mu;
  std::condition_variable freed;
  int count ABSL_GUARDED_BY(mu) = 0;
};

// One loaded model version, shared (std::shared_ptr<const ServedModel>) by
// the manager while it is current and by every batch computed on it.
struct ServedModel {
  ServedModel(std::vector<std::unique_ptr<Model>> instances, uint64_t serial, std::string version,
              int64_t repository_version, std::string fingerprint, uint64_t request_contract,
              const RequestLimits& limits, std::shared_ptr<LiveModels> live);
  ~ServedModel();  // frees the instances, then counts down `live` and notifies
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  // The version's config, device and attention (instance 0).
  const Model& model() const { return *instances.front(); }

  // One instance per executor, in ExecutorDevices order, all of one config
  // and one set of weights; executor i uses only instances[i]. Not const
  // only so that the destructor can free them before counting down; holders
  // see a const ServedModel and never reseat them.
  std::vector<std::unique_ptr<Model>> instances;
  const uint64_t serial;                  // unique per ServedModel of a manager (1, 2, ...)
  const std::string version;              // reported in RankResponse.model_version and GetModelInfo
  const int64_t repository_version;       // the repository's <n>; 0 for a fixed model
  const std::string fingerprint;          // of the repository files (model_repository.h); "" for a fixed model
  // Equal for two versions exactly when a RankRequest means the same to
  // both (dense count, sparse feature names and order); a request converted
  // for one contract is only computed by a version of the same contract.
  const uint64_t request_contract;
  const RankRequestConverter converter;   // validates RankRequests for this version

 private:
  const std::shared_ptr<LiveModels> live_;
};

// Both configs give a RankRequest the same meaning (what
// ServedModel::request_contract compares). When not, *changes (if not null)
// lists what differs, e.g. "num_dense_features 4 -> 5".
bool SameRequestContract(const ModelConfig& a, const ModelConfig& b, std::string* changes);

// One forward pass through every staging slot the executor uses, on
// requests of every history shape (empty, short, full), so that first-touch
// allocations, workspace pools and kernel loading happen before traffic.
Status WarmUpModel(Model* model);

// The device of each executor, in order: every entry of config.device's
// list ("auto" resolved: the GPU when this build has CUDA and one is usable,
// the CPU otherwise), instances_per_device times in a row.
std::vector<std::string> ExecutorDevices(const ServerConfig& config);

// The ModelOptions a model is built with on `device` (resolved: cpu, cuda or
// cuda:N): threads, attention strategy, and precision's CUDA numerics
// (fp32 -> cuda_bf16 false; bf16 and auto -> true).
Status MakeModelOptions(const ServerConfig& config, const std::string& device, ModelOptions* out);

// Builds a model on `device` with MakeModelOptions; empty `weights` = the
// random model of the config.
Status BuildModel(const ModelConfig& model_config, ModelWeights weights, const ServerConfig& config,
                  const std::string& device, std::unique_ptr<Model>* out);

class ModelManager {
 public:
  // A fixed model, one instance per executor (of one config and weights),
  // warmed up here (WarmUpModel). `config` and `metrics` must
  // outlive the manager.
  static Status CreateFixed(const ServerConfig& config, std::vector<std::unique_ptr<Model>> instances,
                            ServerMetrics* metrics, std::unique_ptr<ModelManager>* out);
  // The highest complete version of config.model_repository that loads and
  // warms up, one instance per ExecutorDevices(config) entry (a lower
  // version when higher ones fail). Error naming the repository and each
  // failure when none does.
  static Status CreateFromRepository(const ServerConfig& config, ServerMetrics* metrics,
                                     std::unique_ptr<ModelManager>* out);
  ~ModelManager();  // StopWatching()

  // The version serving now; never null. Thread-safe; cheap (one lock and a
  // reference count).
  std::shared_ptr<const ServedModel> Current() const;
  bool has_repository() const { return !config_.model_repository.empty(); }
  // Model instances per version = executors.
  int instances() const { return static_cast<int>(devices_.size()); }

  // Scans the repository once and serves the highest complete version that
  // loads: when that is not the serving one, loads it, warms it up and makes
  // it current, then waits (bounded by drain_timeout_ms) until the replaced
  // version is freed. Versions that failed before with the same files are
  // skipped. Blocks for the load; thread-safe (one reload at a time). OK when
  // nothing failed in this scan (changed or not); otherwise the first
  // failure, naming the version (the serving version stays). A fixed model:
  // OK, nothing happens.
  Status ReloadNow();

  // Starts the watch thread: ReloadNow() every model_poll_interval_s (when
  // > 0) and whenever RequestReload() is called. No-op for a fixed model.
  void StartWatching();
  // Asks the watch thread for a reload; returns at once. Thread-safe, not
  // async-signal-safe (a signal handler sets a flag that main passes on).
  void RequestReload();
  // Stops and joins the watch thread; a load in progress is finished but not
  // made current. Idempotent.
  void StopWatching();

  // ServedModel objects alive: the current one plus replaced ones still held
  // by batches (or by callers of Current()).
  int live_models() const;

  // Memory of `instance` to report (ServerMetrics::SetMemory), with
  // padding_saved_bytes turned into one running total over every instance
  // and version: each Model counts from its own creation, so the executor
  // passes the increase since its last report on that instance.
  // Thread-safe.
  ModelMemory MemoryToReport(const Model& instance, int64_t padding_saved_increase);

 private:
  ModelManager(const ServerConfig& config, ServerMetrics* metrics, std::vector<std::string> devices);

  // Loads `v`, warms it up and wraps it (not yet current). REQUIRES: reload_mu_ held.
  Status LoadVersion(const RepositoryVersion& v, std::shared_ptr<ServedModel>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  // ReloadNow's body; `serving` is null at start-up.
  Status ScanAndLoad(const std::shared_ptr<const ServedModel>& serving, std::shared_ptr<ServedModel>* loaded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  // Makes `next` current; logs contract changes; waits for the old one to go.
  void Swap(std::shared_ptr<const ServedModel> next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  std::shared_ptr<ServedModel> Wrap(std::vector<std::unique_ptr<Model>> instances, std::string version,
                                    int64_t repository_version, std::string fingerprint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  void WatchLoop();

  const ServerConfig& config_;
  ServerMetrics* const metrics_;
  const std::vector<std::string> devices_;  // one per executor
  const std::shared_ptr<LiveModels> live_ = std::make_shared<LiveModels>();

  mutable std::mutex current_mu_;
  std::shared_ptr<const ServedModel> current_ ABSL_GUARDED_BY(current_mu_);

  std::mutex reload_mu_;  // one reload at a time; held for a whole load
  // Versions that failed to load -> the fingerprint their files had then.
  std::map<int64_t, std::string> failed_ ABSL_GUARDED_BY(reload_mu_);
  uint64_t last_contract_ ABSL_GUARDED_BY(reload_mu_) = 0;  // request_contract of the newest ServedModel
  uint64_t last_serial_ ABSL_GUARDED_BY(reload_mu_) = 0;    // serial of the newest ServedModel
  std::atomic<int64_t> padding_saved_total_{0};              // see MemoryToReport
  std::string last_scan_note_ ABSL_GUARDED_BY(reload_mu_);  // logged once per change, not every poll

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool reload_requested_ ABSL_GUARDED_BY(watch_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::atomic<bool> stopping_{false};  // StopWatching began: a finished load is not swapped in
  std::thread watch_thread_;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_MODEL_MANAGER_H_
