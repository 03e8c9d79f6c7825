// Executor: owns one Model (one device) and runs the batches the batcher
// closes, as a three-stage pipeline of threads: the assembly thread pulls the
// next batch from the batcher and builds its jagged Batch, the compute thread
// runs Model::Forward, and the completion thread splits the scores back to
// the requests and finishes them (response serialisation and the gRPC
// write). While one batch computes, the next is assembled and the previous
// one answered, so the compute thread does nothing but forward passes
// (on the H200 the per-request finishing of a 72-request batch took longer
// than its forward pass and kept the GPU idle).
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

namespace jagrank {

class Executor {
 public:
  // `model`, `batcher` and `metrics` must outlive the executor. Model::Forward
  // is only ever called from the executor's compute thread.
  Executor(Model* model, Batcher* batcher, ServerMetrics* metrics);
  ~Executor();  // Join()s.

  void Start();
  // Returns once the batcher is closed and empty and every request taken
  // from it has been finished. REQUIRES: Batcher::Close() called (or about to be).
  void Join();

 private:
  struct Work {
    std::vector<std::unique_ptr<QueuedRequest>> requests;
    Batch batch;
    int64_t padded_history_tokens = 0;
    double assemble_seconds = 0;
    Status status;              // of the forward pass
    std::vector<float> scores;  // [C] when status is OK
  };
  // Batches computed but not yet answered before the compute thread waits
  // (bounds memory when finishing falls behind).
  static constexpr size_t kMaxComputedBatches = 2;

  void AssembleLoop();
  void ComputeLoop();
  void CompleteLoop();
  void Assemble(Work* work);
  // Drops expired requests, runs the forward pass; false when nothing is left to answer.
  bool Compute(Work* work);
  void Complete(Work* work);  // finishes every request in `work`
  std::unique_ptr<Work> TakeSpare();  // REQUIRES: mu_ held

  Model* const model_;
  Batcher* const batcher_;
  ServerMetrics* const metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Work> ready_;  // assembled, waiting for compute; guarded by mu_
  std::deque<std::unique_ptr<Work>> computed_;  // waiting to be answered; guarded by mu_
  std::vector<std::unique_ptr<Work>> spares_;   // answered, buffers reusable; guarded by mu_
  bool assembly_done_ = false;   // guarded by mu_
  bool compute_done_ = false;    // guarded by mu_
  std::thread assembly_thread_;
  std::thread compute_thread_;
  std::thread completion_thread_;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_EXECUTOR_H_
