#include "server/executor.h"

#include "common/process.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include <spdlog/spdlog.h>

namespace jagrank {
namespace {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// OK when every score is finite; otherwise INVALID_ARGUMENT naming how many
// are not and the request's largest dense magnitude (inputs are finite at the
// door, so overflow inside the model is the cause: dense values near the
// float limit, e.g. 3e38, overflow the bottom MLP into Inf - Inf = NaN).
Status CheckScoresFinite(const RankInput& input, const float* scores, int64_t count) {
  int64_t bad = 0;
  for (int64_t j = 0; j < count; ++j) bad += !std::isfinite(scores[j]);
  if (bad == 0) return Status::Ok();
  float largest = 0;
  for (float v : input.dense) largest = std::max(largest, std::fabs(v));
  char text[256];  // the longest text (two 20-digit counts, a %g) fits
  std::snprintf(text, sizeof(text),
                "scores are not finite (%lld of %lld candidates NaN or Inf): the model overflowed on this "
                "request's features (largest |dense_features| = %g; are dense values too large?)",
                static_cast<long long>(bad), static_cast<long long>(count), largest);
  return Status::InvalidArgument(text);
}

// Names show in top -H and /proc/<pid>/task/*/comm (bench/serving_h200.sh
// reads per-thread CPU from there). Linux limits names to 15 characters.
void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace

Executor::Executor(ModelManager* models, int instance, Batcher* batcher, ServerMetrics* metrics)
    : models_(models), instance_(instance), batcher_(batcher), metrics_(metrics) {}

Executor::~Executor() { Join(); }

void Executor::Start() {
  assembly_thread_ = std::thread([this] {
    NameThisThread("jr-assemble");
    AssembleLoop();
  });
  compute_thread_ = std::thread([this] {
    NameThisThread("jr-compute");
    ComputeLoop();
  });
  for (int i = 0; i < std::min(kCompletionThreads, UsableCores()); ++i) {
    completion_threads_.emplace_back([this] {
      NameThisThread("jr-complete");
      CompleteLoop();
    });
  }
}

void Executor::Join() {
  if (assembly_thread_.joinable()) assembly_thread_.join();
  if (compute_thread_.joinable()) compute_thread_.join();
  for (std::thread& t : completion_threads_) {
    if (t.joinable()) t.join();
  }
}

std::unique_ptr<Executor::Work> Executor::TakeSpare() {
  if (spares_.empty()) return std::make_unique<Work>();
  std::unique_ptr<Work> work = std::move(spares_.back());
  spares_.pop_back();
  return work;
}

void Executor::Assemble(Work* work) {
  const Clock::time_point start = Clock::now();
  std::vector<const RankInput*> inputs;
  inputs.reserve(work->requests.size());
  for (const auto& r : work->requests) inputs.push_back(&r->input);
  // The inputs were validated at the door: a failure here is a bug, and the
  // batch's requests get it as their answer.
  work->status = AssembleBatch(inputs, ModelOf(*work)->config(), &work->batch);
  work->padded_history_tokens = work->batch.PaddedHistoryTokens();
  work->assemble_seconds = SecondsSince(start);
}

void Executor::Stage(Work* work) {
  if (!work->status.ok()) return;  // assembly failed: nothing to stage
  const Clock::time_point start = Clock::now();
  work->status = ModelOf(*work)->Stage(work->batch, work->slot);
  work->assemble_seconds += SecondsSince(start);
}

void Executor::ReleaseSlot(Work* work) {
  std::lock_guard<std::mutex> lock(mu_);
  slot_busy_[work->slot] = false;
  work->slot = -1;
  assembly_cv_.notify_one();
}

void Executor::DropOtherContracts(const ServedModel& served,
                                  std::vector<std::unique_ptr<QueuedRequest>>* requests) {
  auto same_end = std::stable_partition(requests->begin(), requests->end(), [&](const auto& r) {
    return r->request_contract == served.request_contract;
  });
  for (auto it = same_end; it != requests->end(); ++it) {
    metrics_->OnRejected("model_changed");
    (*it)->finish(Status::Unavailable("the request was accepted for a model whose request contract differs from "
                                      "model version " + served.version + " now serving: send it again"),
                  nullptr, 0, "");
  }
  requests->erase(same_end, requests->end());
}

void Executor::AssembleLoop() {
  std::vector<std::unique_ptr<QueuedRequest>> requests;
  while (batcher_->NextBatch(&requests)) {
    // Read once per batch, and only once the batch is there: an idle
    // executor holds no version, so a replaced one is freed at once.
    std::shared_ptr<const ServedModel> served = models_->Current();
    DropOtherContracts(*served, &requests);
    if (requests.empty()) continue;
    std::unique_ptr<Work> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work = TakeSpare();
    }
    work->requests = std::move(requests);
    work->served = std::move(served);
    Assemble(work.get());
    {
      // Slots are used in turn; the next one is free once the batch staged
      // in it two batches ago has run, i.e. while the previous batch computes.
      std::unique_lock<std::mutex> lock(mu_);
      const int slot = next_slot_;
      assembly_cv_.wait(lock, [&] { return !slot_busy_[slot]; });
      slot_busy_[slot] = true;
      work->slot = slot;
    }
    next_slot_ = (next_slot_ + 1) % Model::kStageSlots;
    Stage(work.get());
    std::unique_lock<std::mutex> lock(mu_);
    assembly_cv_.wait(lock, [&] { return ready_ == nullptr; });
    ready_ = std::move(work);
    batcher_->SetExecutorHasBatchWaiting(true);
    compute_cv_.notify_one();
  }
  std::lock_guard<std::mutex> lock(mu_);
  assembly_done_ = true;
  compute_cv_.notify_one();
}

void Executor::ComputeLoop() {
  // A batch launched and not yet waited for. On a model whose Launch is
  // asynchronous (CUDA) the next batch, when it is ready, is launched before
  // this one is waited for: the device then goes from one batch to the next
  // without waiting for this thread to wake up, answer and launch again.
  // With a batch in flight the thread never waits for the next one: when
  // none is ready, it waits for the one in flight at once. On the CPU
  // backend Launch computes nothing, so a batch is launched and waited for
  // before the next is taken, as one Run.
  std::unique_ptr<Work> in_flight;
  Clock::time_point previous_done = Clock::time_point::min();
  for (;;) {
    std::unique_ptr<Work> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (in_flight == nullptr) compute_cv_.wait(lock, [&] { return ready_ != nullptr || assembly_done_; });
      const bool take = in_flight == nullptr || ModelOf(*in_flight)->AsyncLaunch();
      if (take && ready_ != nullptr) {
        next = std::move(ready_);
        // Nothing is staged behind this batch now: with dispatch_when_idle
        // the batcher closes the next one at once, to be staged while this
        // one runs. Set under mu_ so it cannot cross the assembly thread's update.
        batcher_->SetExecutorHasBatchWaiting(false);
        assembly_cv_.notify_one();  // the assembly thread may hand over the next batch
      } else if (in_flight == nullptr) {
        break;  // assembly finished and nothing is left
      }
    }
    if (next != nullptr && !Launch(next.get())) {
      std::lock_guard<std::mutex> lock(mu_);
      next->requests.clear();
      next->served.reset();
      spares_.push_back(std::move(next));
    }
    if (in_flight != nullptr) {
      Finish(in_flight.get(), previous_done);
      previous_done = Clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      compute_cv_.wait(lock, [&] { return computed_.size() < kMaxComputedBatches; });
      computed_.push_back(std::move(in_flight));
      completion_cv_.notify_one();
    }
    in_flight = std::move(next);
  }
  std::lock_guard<std::mutex> lock(mu_);
  compute_done_ = true;
  completion_cv_.notify_all();
}

void Executor::CompleteLoop() {
  for (;;) {
    Work* work = nullptr;
    size_t begin = 0, end = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      completion_cv_.wait(lock, [&] { return !computed_.empty() || compute_done_; });
      if (computed_.empty()) return;  // compute finished and everything is claimed
      // The oldest batch's next chunk; the batch leaves computed_ with its
      // last chunk, and another thread may take the chunk after this one.
      work = computed_.front().get();
      begin = work->claimed;
      end = std::min(work->requests.size(), begin + kAnswerChunk);
      work->claimed = end;
      if (end == work->requests.size()) {
        answering_.push_back(std::move(computed_.front()));
        computed_.pop_front();
        compute_cv_.notify_one();  // the compute thread may be waiting for room
      }
      if (!computed_.empty()) completion_cv_.notify_one();
    }
    Complete(work, begin, end);
    std::unique_ptr<Work> recycled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work->answered += end - begin;
      if (work->answered < work->requests.size()) continue;  // another thread answers the rest
      // Every chunk is answered and the last one was claimed before: the
      // batch is in answering_, and this thread recycles it.
      auto it = std::find_if(answering_.begin(), answering_.end(), [&](const auto& w) { return w.get() == work; });
      recycled = std::move(*it);
      answering_.erase(it);
    }
    ReportMemory(*recycled);
    recycled->requests.clear();
    recycled->served.reset();  // may free a replaced version (its last batch)
    recycled->claimed = recycled->answered = 0;
    std::lock_guard<std::mutex> lock(mu_);
    spares_.push_back(std::move(recycled));
  }
}

bool Executor::Launch(Work* work) {
  // A request may have expired while its batch waited for this thread: drop
  // it now and rebuild the batch without it, so that it is never computed.
  const Clock::time_point now = Clock::now();
  auto alive_end = std::stable_partition(work->requests.begin(), work->requests.end(), [&](const auto& r) {
    Status why;
    return !r->Expired(now, &why);
  });
  if (alive_end != work->requests.end()) {
    for (auto it = alive_end; it != work->requests.end(); ++it) {
      Status why;
      (*it)->Expired(now, &why);
      metrics_->OnRejected(why.code() == Status::Code::kCancelled ? "cancelled" : "deadline");
      (*it)->finish(why, nullptr, 0, "");
    }
    work->requests.erase(alive_end, work->requests.end());
    if (work->requests.empty()) {
      ReleaseSlot(work);  // staged but never run: the next Stage of the slot replaces it
      return false;
    }
    // Rare: rebuild the batch without the dropped requests and stage it
    // again into the slot this Work holds (Stage waits for the earlier copy).
    Assemble(work);
    Stage(work);
  }

  work->launched_at = Clock::now();
  for (const auto& r : work->requests) {
    metrics_->OnQueueLatency(std::chrono::duration<double>(work->launched_at - r->arrival).count());
  }
  work->timings = ForwardTimings();
  work->launched = false;
  work->launch_seconds = 0;
  if (work->status.ok()) {
    const Clock::time_point start = Clock::now();
    work->status = ModelOf(*work)->Launch(work->slot);
    work->launched = work->status.ok();
    work->launch_seconds = SecondsSince(start);
  }
  return true;
}

void Executor::Finish(Work* work, Clock::time_point previous_done) {
  if (work->launched) work->status = ModelOf(*work)->Wait(work->slot, &work->scores, &work->timings);
  work->launched = false;
  // The batch's own share of the device: from its launch, or from the end
  // of the batch before it when the two were queued together.
  const double compute_seconds = SecondsSince(std::max(work->launched_at, previous_done));
  ReleaseSlot(work);
  if (work->status.ok() && static_cast<int64_t>(work->scores.size()) != work->batch.num_candidates()) {
    work->status = Status::Internal("model returned " + std::to_string(work->scores.size()) + " scores for " +
                                    std::to_string(work->batch.num_candidates()) + " candidates");
  }
  BatchStats stats;
  stats.requests = work->batch.num_requests;
  stats.candidates = work->batch.num_candidates();
  stats.history_tokens = work->batch.num_history_tokens();
  stats.padded_history_tokens = work->padded_history_tokens;
  stats.assemble_seconds = work->assemble_seconds;
  stats.launch_seconds = work->launch_seconds;
  stats.h2d_seconds = work->timings.h2d_seconds;
  stats.compute_seconds = compute_seconds;
  stats.d2h_seconds = work->timings.d2h_seconds;
  // Reported before the calls finish, so a client that saw its answer also
  // sees its batch in the metrics.
  metrics_->OnBatch(stats);
  if (work->status.ok()) batcher_->RecordBatch(stats.requests, compute_seconds);
}

void Executor::Complete(Work* work, size_t begin, size_t end) {
  if (!work->status.ok()) {
    const Status error = Status::Internal("forward failed: " + work->status.ToString());
    if (begin == 0) spdlog::error("batch of {} requests: {}", work->requests.size(), error.message());
    for (size_t i = begin; i < end; ++i) work->requests[i]->finish(error, nullptr, 0, "");
    return;
  }
  const std::vector<int32_t>& offsets = work->batch.candidate_offsets;
  const std::string& version = work->served->version;
  for (size_t i = begin; i < end; ++i) {
    QueuedRequest& request = *work->requests[i];
    const float* scores = work->scores.data() + offsets[i];
    const int64_t count = offsets[i + 1] - offsets[i];
    // Rows do not mix in the forward pass, so one request's overflow
    // leaves the others' scores intact: only its own answer is an error.
    const Status finite = CheckScoresFinite(request.input, scores, count);
    if (!finite.ok()) {
      metrics_->OnRejected("non_finite_scores");
      request.finish(finite, nullptr, 0, "");
      continue;
    }
    request.finish(Status::Ok(), scores, count, version);
  }
}

void Executor::ReportMemory(const Work& work) {
  // The model counts padding saved since its creation; the metrics take one
  // running total over instances and versions (ModelManager::MemoryToReport).
  const Model& model = *ModelOf(work);
  int64_t increase = 0;
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    if (work.served->serial > reported_serial_) {  // a newer version: its count starts at its creation
      reported_serial_ = work.served->serial;
      reported_padding_saved_bytes_ = 0;
    }
    // A replaced version's last batches, answered after the new version's
    // first, are not counted (serials only grow).
    if (work.served->serial == reported_serial_) {
      const int64_t total = model.Memory().padding_saved_bytes;
      increase = std::max<int64_t>(0, total - reported_padding_saved_bytes_);
      reported_padding_saved_bytes_ = std::max(reported_padding_saved_bytes_, total);
    }
  }
  metrics_->SetMemory(models_->MemoryToReport(model, increase));
}

}  // namespace jagrank
