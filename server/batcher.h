// Batcher: the dynamic batching policy, and nothing else. It owns the queue
// of accepted requests and decides which of them form the next batch:
//   - a batch closes when the queued work reaches any budget (requests,
//     candidates, history tokens, attention cost) or when the oldest queued
//     request has waited max_queue_delay_us. With dispatch_when_idle it also
//     closes, with whatever is queued, whenever the executor has no batch
//     waiting to run (SetExecutorHasBatchWaiting): the batch is then staged
//     while the current one computes, so the device never idles while
//     requests wait, and under load batches still grow to what arrives
//     during one forward pass. The attention cost is the work
//     the model's strategy does: sum of L^2 for jagged attention, R times the
//     longest L^2 for the padded strategies (what they compute and allocate);
//   - requests leave in arrival order; a single request above a budget runs
//     alone instead of failing;
//   - a full queue refuses at once (RESOURCE_EXHAUSTED);
//   - deadline-aware admission: a request that would not finish before its
//     deadline, by the queue ahead of it and the recent batch compute times
//     (RecordBatch), is refused at once (RESOURCE_EXHAUSTED "would not
//     finish before its deadline: ...", or DEADLINE_EXCEEDED when even an
//     empty queue could not meet the deadline), so that under
//     overload the excess is shed at the door instead of expiring in the
//     queue;
//   - requests whose deadline passed or whose client cancelled are finished
//     with DEADLINE_EXCEEDED / CANCELLED when they reach the head of the
//     queue, never handed to the executor.
// It never touches a device or the model; the executor (server/executor.h)
// pulls batches with NextBatch.
#ifndef JAGRANK_SERVER_BATCHER_H_
#define JAGRANK_SERVER_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <absl/base/thread_annotations.h>

#include "common/status.h"
#include "model/batch.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace jagrank {

using Clock = std::chrono::steady_clock;

// Completes an accepted request: called exactly once, from any thread, with
// OK and `count` scores computed by the model version `model_version`, or
// with an error (scores == nullptr, model_version empty).
using RankFinish =
    std::function<void(const Status& status, const float* scores, int64_t count, const std::string& model_version)>;

// One accepted request on its way through the batcher and the executor:
// transport-free (the gRPC handler converted it, server/rank_request.h).
struct QueuedRequest {
  std::string request_id;  // the client's id, for logs
  RankInput input;         // validated; history already truncated
  // ServedModel::request_contract of the version `input` was validated for
  // (server/model_manager.h); the executor computes it only on a version of
  // the same contract.
  uint64_t request_contract = 0;
  // Work it brings to a batch (history counted after truncation).
  int64_t candidates = 0;
  int64_t history_tokens = 0;
  int64_t attention_cost = 0;  // kept history length squared (L = history_tokens)
  Clock::time_point arrival = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  // True once the client has gone away; may be empty (never cancelled).
  std::function<bool()> is_cancelled;
  RankFinish finish;

  // True when the request must not be computed any more; fills `why`:
  // DEADLINE_EXCEEDED once the deadline passed, or when the client cancelled
  // within kClientDeadlineLead of it (its deadline timer fired first);
  // CANCELLED for any other cancel.
  bool Expired(Clock::time_point now, Status* why) const;
  // How far ahead of the server's deadline a client's own deadline may fire
  // (the server starts its clock one transport delay later).
  static constexpr std::chrono::milliseconds kClientDeadlineLead{20};
};

class Batcher {
 public:
  // The attention cost of `requests` histories whose squared lengths sum to
  // `sum_of_squares` and whose longest is `longest`: the model's strategy
  // says (Model::AttentionCost). Called under the batcher's lock.
  using AttentionCostFn = std::function<int64_t(int64_t requests, int64_t sum_of_squares, int64_t longest)>;

  // `metrics` must outlive the batcher. Without `attention_cost`, the jagged
  // strategy's (sum of L^2). `executors`: how many executors pull from it
  // (each reports SetExecutorHasBatchWaiting for itself).
  Batcher(const BatchingConfig& config, ServerMetrics* metrics, AttentionCostFn attention_cost = {},
          int executors = 1);
  ~Batcher();

  // Queues `*request` and takes ownership of it (then *request is null).
  // Returns RESOURCE_EXHAUSTED when max_queue_requests are already queued or
  // when the request would not finish before its deadline (the message says
  // which; DEADLINE_EXCEEDED for the latter when even an empty queue would
  // not meet the deadline), and
  // UNAVAILABLE after Close(); on failure the caller keeps *request and must
  // finish it. Never blocks on the executor. Thread-safe.
  Status Enqueue(std::unique_ptr<QueuedRequest>* request);

  // Blocks until the policy closes a batch, then moves its requests into
  // `*batch` (cleared first; at least one request). Requests that expired at
  // the head of the queue are finished here, not returned. Returns false
  // once Close() was called and the queue is empty. After Close() batches
  // close at once (no waiting for the delay). Thread-safe; normally one
  // caller per executor (its assembly thread).
  bool NextBatch(std::vector<std::unique_ptr<QueuedRequest>>* batch);

  // Whether the calling executor holds a batch that is ready and waiting to
  // run (false at start); each executor alternates true and false. With
  // dispatch_when_idle, NextBatch closes at once with whatever is queued
  // while some executor has none waiting; without it, no effect.
  // Thread-safe.
  void SetExecutorHasBatchWaiting(bool waiting);

  // The deadline-aware admission Enqueue applies, alone: OK, or the refusal
  // Enqueue would return for a request with `deadline` now (so that a caller
  // can refuse before converting the request). Thread-safe.
  Status CheckAdmission(Clock::time_point deadline) const;

  // A batch of `requests` requests was computed in `compute_seconds` and
  // has just ended: feeds the admission estimate (with a backlog, the time
  // since the previous batch ended counts when it is longer). Thread-safe.
  void RecordBatch(int requests, double compute_seconds);
  // How long a request queued now would take to finish: the requests ahead
  // of it at the recent compute time per request, one batch in compute and
  // its own batch at the recent batch time, and the batching delay. Zero
  // before the first RecordBatch.
  std::chrono::microseconds EstimatedFinishIn() const;

  // Stops accepting; queued requests still come out of NextBatch.
  void Close();

  int64_t depth() const;

 private:
  bool BudgetReachedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the head out of the queue and the totals. REQUIRES: queue not empty.
  std::unique_ptr<QueuedRequest> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Attention cost of `count` requests whose squared lengths sum to
  // `sum_of_squares` and whose longest is `longest`.
  int64_t AttentionCostOf(int64_t count, int64_t sum_of_squares, int64_t longest) const;

  const BatchingConfig config_;
  ServerMetrics* const metrics_;
  const AttentionCostFn attention_cost_;
  const int executors_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<QueuedRequest>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_candidates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_history_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_attention_cost_ ABSL_GUARDED_BY(mu_) = 0;  // sum of L^2
  int64_t queued_longest_ ABSL_GUARDED_BY(mu_) = 0;  // longest L since the queue was last empty (an upper bound)
  Status AdmitLocked(Clock::time_point deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EstimatedFinishIn with `ahead` requests queued in front.
  std::chrono::microseconds EstimatedFinishInLocked(int64_t ahead) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recent compute times (exponential moving averages over batches); 0 = none yet.
  double batch_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double seconds_per_request_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_batch_end_ ABSL_GUARDED_BY(mu_);  // of the last RecordBatch
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Executors that hold a batch waiting to run (SetExecutorHasBatchWaiting).
  int executors_with_batch_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Some executor has no batch waiting: with dispatch_when_idle, close now.
  bool ExecutorIdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return executors_with_batch_waiting_ < executors_;
  }
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_BATCHER_H_
