// CpuThreadPool: worker threads for the CPU kernels, started once, so that a
// kernel call pays a wake-up instead of thread creation (~32 us per thread
// to start and join, measured on the 2-core dev box).
//
//   std::atomic<int64_t> next{0};
//   CpuThreadPool::Shared().Run(threads - 1, [&] {
//     for (int64_t i = next++; i < n; i = next++) Work(i);
//   });
//
// Tasks must share their work dynamically (as above): Run may hand the task
// to fewer threads than asked, down to the caller alone.
#ifndef JAGRANK_KERNELS_CPU_THREAD_POOL_H_
#define JAGRANK_KERNELS_CPU_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace jagrank {

class CpuThreadPool {
 public:
  // The process-wide pool: UsableCores() - 1 workers (none on one core: the
  // caller then runs every task alone), created on first use.
  static CpuThreadPool& Shared();

  explicit CpuThreadPool(int num_workers);
  ~CpuThreadPool();  // wakes and joins the workers; REQUIRES: no Run in progress
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Runs task() on the calling thread and concurrently on up to
  // `extra_threads` workers; returns once every copy has returned, with the
  // number of threads that ran it (>= 1). Workers that have not picked the
  // task up by the time the caller's copy returns are not waited for. When
  // another thread is inside Run, the task runs on the calling thread only.
  // Thread-safe.
  int Run(int extra_threads, const std::function<void()>& task);

 private:
  void WorkerLoop();

  std::mutex run_mutex_;  // held by the one caller that owns the workers
  std::mutex mutex_;      // guards everything below
  std::condition_variable wake_;  // workers: a new task or stop
  std::condition_variable done_;  // caller: running_ reached 0
  const std::function<void()>* task_ = nullptr;
  int64_t generation_ = 0;  // bumped per Run that uses workers
  int wanted_ = 0;          // workers that may still take the current task
  int running_ = 0;         // workers inside the current task
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Threads a CPU kernel may use, the caller's included: `requested`, or
// UsableCores() when it is 0.
int CpuThreads(int requested);

// Runs body(i) for every i in [0, items) exactly once, on the caller and up
// to threads - 1 workers of CpuThreadPool::Shared(), items taken in order from
// a shared counter. Returns the threads that ran (>= 1).
int ParallelFor(int64_t items, int threads, const std::function<void(int64_t)>& body);

// Threads worth using for `work` units of work when one thread should get
// at least `min_work` of it: between 1 and CpuThreads(requested).
int ThreadsFor(double work, double min_work, int requested);

// The CPU kernels split their GEMMs over CpuThreadPool::Shared(), so
// OpenBLAS must not run its own pool beside it: after each call its idle
// workers spin in sched_yield (2^28 cycles by default), taking cores from
// the kernels' threads and the server's. Sets OpenBLAS to one thread, once
// per process; a no-op when the BLAS linked is not OpenBLAS. Thread-safe.
void UseSingleThreadedBlas();

}  // namespace jagrank

#endif  // JAGRANK_KERNELS_CPU_THREAD_POOL_H_
