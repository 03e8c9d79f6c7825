// Executor: owns one Model (one device) and runs the batches the batcher
// closes. Two threads: the assembly thread pulls the next batch from the
// batcher and builds its jagged Batch while the compute thread runs the
// previous one through Model::Forward; then the compute thread splits the
// scores back to the requests and finishes them.
#ifndef JAGRANK_SERVER_EXECUTOR_H_
#define JAGRANK_SERVER_EXECUTOR_H_

#include <condition_variable>
#include <cstdint>
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
  };

  void AssembleLoop();
  void ComputeLoop();
  void Assemble(Work* work);
  void Compute(Work* work);  // finishes every request in `work`

  Model* const model_;
  Batcher* const batcher_;
  ServerMetrics* const metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Work> ready_;  // assembled, waiting for compute; guarded by mu_
  std::unique_ptr<Work> spare_;  // computed, buffers reusable; guarded by mu_
  bool assembly_done_ = false;   // guarded by mu_
  std::thread assembly_thread_;
  std::thread compute_thread_;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_EXECUTOR_H_
