#include "server/batcher.h"

#include <algorithm>
#include <utility>

namespace jagrank {

bool QueuedRequest::Expired(Clock::time_point now, Status* why) const {
  const bool cancelled = is_cancelled && is_cancelled();
  // The deadline first: gRPC cancels a call whose deadline passed, and a
  // client whose own timer fired first (it started earlier, by the transport
  // delay) cancels it a little before the server's deadline.
  if (now >= deadline || (cancelled && deadline - now <= kClientDeadlineLead)) {
    const auto waited_us = std::chrono::duration_cast<std::chrono::microseconds>(now - arrival).count();
    *why = Status::DeadlineExceeded("deadline passed after " + std::to_string(waited_us) +
                                    " us in the queue, before compute");
    return true;
  }
  if (cancelled) {
    *why = Status::Cancelled("client cancelled the call before compute");
    return true;
  }
  return false;
}

Batcher::Batcher(const BatchingConfig& config, ServerMetrics* metrics, AttentionCostFn attention_cost, int executors)
    : config_(config),
      metrics_(metrics),
      attention_cost_(std::move(attention_cost)),
      executors_(std::max(1, executors)) {}

int64_t Batcher::AttentionCostOf(int64_t count, int64_t sum_of_squares, int64_t longest) const {
  return attention_cost_ ? attention_cost_(count, sum_of_squares, longest) : sum_of_squares;
}

Batcher::~Batcher() {
  // Whatever is still queued is answered, never leaked.
  std::deque<std::unique_ptr<QueuedRequest>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  for (auto& r : left) r->finish(Status::Unavailable("server shut down before compute"), nullptr, 0, "");
}

Status Batcher::Enqueue(std::unique_ptr<QueuedRequest>* request) {
  int64_t depth = 0;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::Unavailable("server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_requests) {
      return Status::ResourceExhausted("queue full: " + std::to_string(queue_.size()) +
                                       " requests queued = max_queue_requests");
    }
    QueuedRequest& r = **request;
    RETURN_IF_ERROR(AdmitLocked(r.deadline));
    queued_candidates_ += r.candidates;
    queued_history_tokens_ += r.history_tokens;
    queued_attention_cost_ += r.attention_cost;
    queued_longest_ = std::max(queued_longest_, r.history_tokens);
    queue_.push_back(std::move(*request));
    depth = queue_.size();
    // NextBatch waits for the first request, then for a budget, the oldest
    // request's delay (unchanged by a push at the back) or an idle executor.
    // Waking it for any other push only puts it back to sleep: one futex
    // wake and context switch per request while a batch fills.
    wake = depth == 1 || BudgetReachedLocked() || (config_.dispatch_when_idle && ExecutorIdleLocked());
  }
  metrics_->SetQueueDepth(depth);
  if (wake) cv_.notify_all();
  return Status::Ok();
}

bool Batcher::BudgetReachedLocked() const {
  return static_cast<int64_t>(queue_.size()) >= config_.max_batch_requests ||
         queued_candidates_ >= config_.max_batch_candidates ||
         queued_history_tokens_ >= config_.max_batch_history_tokens ||
         AttentionCostOf(queue_.size(), queued_attention_cost_, queued_longest_) >= config_.max_batch_attention_cost;
}

std::unique_ptr<QueuedRequest> Batcher::PopLocked() {
  std::unique_ptr<QueuedRequest> head = std::move(queue_.front());
  queue_.pop_front();
  queued_candidates_ -= head->candidates;
  queued_history_tokens_ -= head->history_tokens;
  queued_attention_cost_ -= head->attention_cost;
  if (queue_.empty()) queued_longest_ = 0;
  return head;
}

bool Batcher::NextBatch(std::vector<std::unique_ptr<QueuedRequest>>* batch) {
  batch->clear();
  const auto delay = std::chrono::microseconds(config_.max_queue_delay_us);
  std::vector<std::pair<std::unique_ptr<QueuedRequest>, Status>> dropped;
  int64_t depth = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (batch->empty()) {
      cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return false;  // closed and drained
      // Wait for a budget or the oldest request's delay; a request arriving
      // meanwhile may fill a budget, so re-check on every wake-up.
      while (!closed_ && !queue_.empty() && !BudgetReachedLocked() &&
             !(config_.dispatch_when_idle && ExecutorIdleLocked())) {
        const Clock::time_point close_at = queue_.front()->arrival + delay;
        if (Clock::now() >= close_at) break;
        cv_.wait_until(lock, close_at);
      }
      // Take requests in arrival order while they fit every budget; the
      // first live one is always taken, so an oversized request runs alone.
      int64_t candidates = 0, tokens = 0, sum_of_squares = 0, longest = 0;
      const Clock::time_point now = Clock::now();
      while (!queue_.empty()) {
        QueuedRequest& head = *queue_.front();
        Status why;
        if (head.Expired(now, &why)) {
          dropped.emplace_back(PopLocked(), why);
          continue;
        }
        if (!batch->empty() &&
            (static_cast<int>(batch->size()) + 1 > config_.max_batch_requests ||
             candidates + head.candidates > config_.max_batch_candidates ||
             tokens + head.history_tokens > config_.max_batch_history_tokens ||
             AttentionCostOf(batch->size() + 1, sum_of_squares + head.attention_cost,
                             std::max(longest, head.history_tokens)) > config_.max_batch_attention_cost)) {
          break;
        }
        candidates += head.candidates;
        tokens += head.history_tokens;
        sum_of_squares += head.attention_cost;
        longest = std::max(longest, head.history_tokens);
        batch->push_back(PopLocked());
      }
      depth = queue_.size();
      if (!dropped.empty()) break;  // finish the dropped ones outside the lock
    }
  }
  metrics_->SetQueueDepth(depth);
  for (auto& [request, why] : dropped) {
    metrics_->OnRejected(why.code() == Status::Code::kCancelled ? "cancelled" : "deadline");
    request->finish(why, nullptr, 0, "");
  }
  if (batch->empty()) return NextBatch(batch);  // everything taken had expired
  return true;
}

void Batcher::SetExecutorHasBatchWaiting(bool waiting) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    executors_with_batch_waiting_ = std::clamp(executors_with_batch_waiting_ + (waiting ? 1 : -1), 0, executors_);
  }
  if (!waiting) cv_.notify_all();
}

Status Batcher::CheckAdmission(Clock::time_point deadline) const {
  std::lock_guard<std::mutex> lock(mu_);
  return AdmitLocked(deadline);
}

Status Batcher::AdmitLocked(Clock::time_point deadline) const {
  if (deadline == Clock::time_point::max()) return Status::Ok();
  const Clock::time_point now = Clock::now();
  const std::chrono::microseconds finish_in = EstimatedFinishInLocked(static_cast<int64_t>(queue_.size()));
  // Half over the estimate: one admitted at the very edge of its deadline
  // expires about every other time (the estimate follows the load a few
  // batches late), and an expiry is work refused too late.
  if (now + finish_in + finish_in / 2 <= deadline) return Status::Ok();
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  const std::string why = "would not finish before its deadline: queue ~" + std::to_string(finish_in.count() / 1000) +
                          " ms (" + std::to_string(queue_.size()) + " requests ahead), deadline in " +
                          std::to_string(left_ms) + " ms";
  // Too short even for an empty queue: the deadline is the problem;
  // otherwise the server is overloaded and sheds the call.
  const std::chrono::microseconds alone = EstimatedFinishInLocked(/*ahead=*/0);
  const bool too_short = now + alone + alone / 2 > deadline;
  return too_short ? Status::DeadlineExceeded(why) : Status::ResourceExhausted(why);
}

void Batcher::RecordBatch(int requests, double compute_seconds) {
  if (requests <= 0) return;
  // Weight of the newest batch: recent enough to follow a load change within
  // a few batches, smooth enough that one slow batch does not shed a burst.
  constexpr double kNewest = 0.2;
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // With a backlog, batches end one after another, and the time between two
  // ends is what a batch really costs: the forward plus whatever the other
  // threads (assembly, replies, gRPC) take from the same cores. Idle gaps
  // (no backlog) say nothing about the cost and are not counted.
  double seconds = compute_seconds;
  if (!queue_.empty() && last_batch_end_ != Clock::time_point()) {
    seconds = std::max(seconds, std::chrono::duration<double>(now - last_batch_end_).count());
  }
  last_batch_end_ = now;
  const double per_request = seconds / requests;
  compute_seconds = seconds;
  if (batch_seconds_ == 0) {
    batch_seconds_ = compute_seconds;
    seconds_per_request_ = per_request;
  } else {
    batch_seconds_ += kNewest * (compute_seconds - batch_seconds_);
    seconds_per_request_ += kNewest * (per_request - seconds_per_request_);
  }
}

std::chrono::microseconds Batcher::EstimatedFinishIn() const {
  std::lock_guard<std::mutex> lock(mu_);
  return EstimatedFinishInLocked(static_cast<int64_t>(queue_.size()));
}

std::chrono::microseconds Batcher::EstimatedFinishInLocked(int64_t ahead) const {
  if (batch_seconds_ == 0) return std::chrono::microseconds(0);
  // The requests ahead at the recent time per request, then up to one batch
  // still in compute and the request's own batch (its scores come when the
  // whole batch is done), and the batching delay.
  // (With dispatch_when_idle a batch closes as soon as the executor is free:
  // no delay.)
  const double delay_seconds = config_.dispatch_when_idle ? 0 : 1e-6 * static_cast<double>(config_.max_queue_delay_us);
  const double seconds =
      static_cast<double>(ahead) * seconds_per_request_ + 2 * batch_seconds_ + delay_seconds;
  return std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

void Batcher::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

int64_t Batcher::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace jagrank
