// Executor: owns one Model (one device) and runs the batches the batcher
// closes, as a three-stage pipeline of threads: the assembly thread pulls the
// next batch from the batcher, builds its jagged Batch and stages it on the
// device (Model::Stage: pinned packing + async H2D copy into one of the
// model's kStageSlots slots, alternating), the compute thread launches the
// staged slot (Model::Launch; on CUDA the next batch is queued on the
// device before the previous one is waited for) and waits for it
// (Model::Wait), and kCompletionThreads completion threads
// each take a computed batch, split its scores back to the requests and
// finish them (response serialisation and the gRPC write). While one batch
// computes, the next is assembled and copied and the previous ones answered,
// so the compute thread does nothing but forward passes. (On the H200 the
// per-request finishing of a 72-request batch took longer than its forward
// pass and kept the GPU idle; with one completion thread that thread was
// the busiest of the server, ~0.87 cores at ~34k requests/s, and bounded QPS.)
//
// Slots: a Work holds its staging slot from Stage until its Wait returns (or
// until the compute thread drops all its requests); slot_busy_ says which
// slots are held, and the assembly thread waits for its next slot to be
// released before staging into it. So a slot is staged again only after its
// batch was waited for, and Stage(a) overlaps only the launch or wait of
// b != a, as Model requires.
//
// Model versions: the assembly thread reads ModelManager::Current() once per
// batch, and the batch's Work holds that ServedModel until its requests are
// answered: the batch is assembled, staged, run and reported on that one
// version, and a replaced version is freed after its last batch. Slots are
// counted across versions (slot_busy_ is per index, whatever the model), so
// the batch staged on a new version while the last one of the old version
// runs uses the other slot index: Stage(new, a) overlaps only the old
// version's batch in slot b != a, and at most two batches are launched at
// any time, as with one model. Requests converted
// for another request contract than the batch's version (the version changed
// what a RankRequest means while they were queued) are answered UNAVAILABLE,
// never computed.
//
// Several executors: one per model instance (ServedModel::instances, e.g.
// two per GPU or one per GPU of a list), all pulling from one Batcher
// (NextBatch is thread-safe), so whichever assembly thread is free takes the
// next batch. Each uses only its own instance of every version, and its own
// slots and threads; nothing is shared between executors but the batcher,
// the manager and the metrics. An executor takes a batch only when it has a
// slot for it, so a slow one holds at most the batch it runs, one staged
// behind it and one waiting for a slot; the rest go to the others.
#ifndef JAGRANK_SERVER_EXECUTOR_H_
#define JAGRANK_SERVER_EXECUTOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/batch.h"
#include "model/model.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/model_manager.h"

namespace jagrank {

class Executor {
 public:
  // Computes on instance `instance` (0 <= instance < models->instances()) of
  // every version. `models`, `batcher` and `metrics` must outlive the
  // executor. Model::Launch and Wait are only ever called from the compute thread;
  // Model::Stage from the assembly thread, or from the compute thread when
  // it re-stages a batch whose requests partly expired (same slot and
  // model, which that Work holds).
  Executor(ModelManager* models, int instance, Batcher* batcher, ServerMetrics* metrics);
  ~Executor();  // Join()s.

  void Start();
  // Returns once the batcher is closed and empty and every request taken
  // from it has been finished. REQUIRES: Batcher::Close() called (or about to be).
  void Join();

 private:
  struct Work {
    std::vector<std::unique_ptr<QueuedRequest>> requests;
    std::shared_ptr<const ServedModel> served;  // the version computing it; released once answered
    Batch batch;
    int64_t padded_history_tokens = 0;
    double assemble_seconds = 0;  // building `batch` plus Stage's host time (pinned packing, copy issue)
    int slot = -1;                // staging slot held from Stage to the end of Wait; -1 = none
    Status status;                // of Stage, then of Launch and Wait
    bool launched = false;        // Launch succeeded, Wait not yet called
    Clock::time_point launched_at;
    double launch_seconds = 0;    // host time in the model's Launch
    std::vector<float> scores;    // [C] when status is OK
    ForwardTimings timings;       // of Wait
    size_t claimed = 0;   // requests handed to completion threads so far; guarded by mu_
    size_t answered = 0;  // requests finished so far; guarded by mu_
  };
  // Batches computed but not yet answered before the compute thread waits
  // (bounds memory when finishing falls behind).
  static constexpr size_t kMaxComputedBatches = 4;
  // Threads finishing computed batches (gRPC's Finish costs ~25 us of CPU
  // per call on the H200 host); no more than UsableCores(): on fewer cores
  // they would only take turns. They share each batch in chunks of
  // kAnswerChunk requests, so that a batch of 300 is answered by all of
  // them at once, not by one thread in 300 x 25 us = 7.5 ms.
  static constexpr int kCompletionThreads = 4;
  static constexpr size_t kAnswerChunk = 16;

  void AssembleLoop();
  void ComputeLoop();
  void CompleteLoop();
  void Assemble(Work* work);
  void Stage(Work* work);  // REQUIRES: work holds work->slot
  // Drops expired requests (re-assembling and re-staging the rest) and
  // launches the staged batch; false (slot released) when nothing is left
  // to answer.
  bool Launch(Work* work);
  // Waits for a launched batch, releases its slot and reports it;
  // `previous_done` is when the batch launched before it was finished.
  void Finish(Work* work, Clock::time_point previous_done);
  void ReleaseSlot(Work* work);
  // Finishes requests [begin, end) of `work`. A request whose scores are not
  // all finite gets INVALID_ARGUMENT (counted as rejection
  // "non_finite_scores") instead of OK; the others are answered as usual.
  void Complete(Work* work, size_t begin, size_t end);
  // After a batch is answered: the memory metrics, with the padding its
  // model saved since the last report.
  void ReportMemory(const Work& work);
  std::unique_ptr<Work> TakeSpare();  // REQUIRES: mu_ held
  // Answers the requests of `requests` converted for another request
  // contract than `served`'s with UNAVAILABLE and removes them.
  void DropOtherContracts(const ServedModel& served, std::vector<std::unique_ptr<QueuedRequest>>* requests);

  Model* ModelOf(const Work& work) const { return work.served->instances[instance_].get(); }

  ModelManager* const models_;
  const int instance_;
  // The instance last reported to the metrics (its ServedModel's serial) and
  // its padding_saved_bytes then; completion threads only, under report_mu_.
  std::mutex report_mu_;
  uint64_t reported_serial_ = 0;
  int64_t reported_padding_saved_bytes_ = 0;
  Batcher* const batcher_;
  ServerMetrics* const metrics_;
  std::mutex mu_;
  // One condition variable per waiting role, so that a hand-over wakes only
  // the thread it concerns (one shared one woke all six threads every time).
  std::condition_variable assembly_cv_;    // a slot freed, or ready_ taken
  std::condition_variable compute_cv_;     // ready_ set, assembly done, or room in computed_
  std::condition_variable completion_cv_;  // a batch in computed_, or compute done
  std::unique_ptr<Work> ready_;  // assembled, waiting for compute; guarded by mu_
  std::deque<std::unique_ptr<Work>> computed_;  // chunks left to claim; guarded by mu_
  std::vector<std::unique_ptr<Work>> answering_;  // all claimed, some not yet answered; guarded by mu_
  std::vector<std::unique_ptr<Work>> spares_;   // answered, buffers reusable; guarded by mu_
  bool assembly_done_ = false;   // guarded by mu_
  bool compute_done_ = false;    // guarded by mu_
  bool slot_busy_[Model::kStageSlots] = {};  // held by a Work; guarded by mu_
  int next_slot_ = 0;            // the assembly thread's next slot; that thread only
  std::thread assembly_thread_;
  std::thread compute_thread_;
  std::vector<std::thread> completion_threads_;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_EXECUTOR_H_
