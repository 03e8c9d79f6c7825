#include "kernels/cpu_thread_pool.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "common/process.h"

// OpenBLAS's thread control, declared weak: null when the BLAS is another.
extern "C" void openblas_set_num_threads(int num_threads) __attribute__((weak));

namespace jagrank {

CpuThreadPool& CpuThreadPool::Shared() {
  static CpuThreadPool pool(UsableCores() - 1);
  return pool;
}

CpuThreadPool::CpuThreadPool(int num_workers) {
  workers_.reserve(std::max(0, num_workers));
  for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

CpuThreadPool::~CpuThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void CpuThreadPool::WorkerLoop() {
  int64_t seen = 0;  // the last generation this worker looked at
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
    if (stop_) return;
    seen = generation_;
    --wanted_;
    ++running_;
    const std::function<void()>* task = task_;
    lock.unlock();
    (*task)();
    lock.lock();
    if (--running_ == 0) done_.notify_all();
  }
}

int CpuThreadPool::Run(int extra_threads, const std::function<void()>& task) {
  std::unique_lock<std::mutex> owner(run_mutex_, std::try_to_lock);
  extra_threads = std::min(extra_threads, num_workers());
  if (!owner.owns_lock() || extra_threads <= 0) {
    task();
    return 1;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    wanted_ = extra_threads;
    ++generation_;
  }
  wake_.notify_all();
  task();
  std::unique_lock<std::mutex> lock(mutex_);
  const int joined = extra_threads - wanted_;
  wanted_ = 0;  // late wakers skip this task: the work is already shared out
  done_.wait(lock, [&] { return running_ == 0; });
  task_ = nullptr;
  return 1 + joined;
}

int CpuThreads(int requested) {
  return requested > 0 ? requested : UsableCores();
}

int ParallelFor(int64_t items, int threads, const std::function<void(int64_t)>& body) {
  std::atomic<int64_t> next{0};
  auto task = [&] {
    for (int64_t i = next++; i < items; i = next++) body(i);
  };
  const int64_t extra = std::min<int64_t>(threads, items) - 1;
  if (extra <= 0) {
    task();
    return 1;
  }
  return CpuThreadPool::Shared().Run(static_cast<int>(extra), task);
}

int ThreadsFor(double work, double min_work, int requested) {
  const double useful = work / min_work;
  return useful < 2.0 ? 1 : static_cast<int>(std::min<double>(CpuThreads(requested), useful));
}

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
  });
}

}  // namespace jagrank
