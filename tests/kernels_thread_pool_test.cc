// CpuThreadPool: tasks run on the caller plus workers, every copy finishes
// before Run returns, concurrent callers both complete, shutdown joins.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/process.h"
#include "kernels/cpu_thread_pool.h"

namespace jagrank {
namespace {

// Sums 0..n-1 through the pool with a shared counter, as kernels use it.
int64_t PooledSum(CpuThreadPool& pool, int extra, int64_t n, int* ran_on) {
  std::atomic<int64_t> next{0}, sum{0};
  *ran_on = pool.Run(extra, [&] {
    for (int64_t i = next++; i < n; i = next++) sum += i;
  });
  return sum.load();
}

// Records the threads that run it; each call holds its thread until `wanted`
// calls have arrived or `patience` passes, which proves they ran concurrently.
struct Rendezvous {
  Rendezvous(int wanted, std::chrono::seconds patience) : wanted(wanted), patience(patience) {}
  void Arrive() {
    {
      std::lock_guard<std::mutex> lock(ids_mutex);
      ids.insert(std::this_thread::get_id());
    }
    ++arrived;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (arrived.load() < wanted && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  const int wanted;
  const std::chrono::seconds patience;
  std::atomic<int> arrived{0};
  std::mutex ids_mutex;
  std::set<std::thread::id> ids;
};

TEST(CpuThreadPoolTest, RunsOnSeveralThreadsAndWaitsForAllOfThem) {
  CpuThreadPool pool(3);
  EXPECT_EQ(pool.num_workers(), 3);
  // A task that holds every runner until 4 have arrived or 2 s pass proves
  // that workers really run it concurrently with the caller.
  Rendezvous rendezvous(4, std::chrono::seconds(2));
  const int ran_on = pool.Run(3, [&] { rendezvous.Arrive(); });
  EXPECT_EQ(ran_on, 4);
  EXPECT_EQ(rendezvous.arrived.load(), 4);
  EXPECT_EQ(rendezvous.ids.size(), 4u);
  for (int rep = 0; rep < 200; ++rep) {  // many short runs: no lost wake-ups, no hang
    int used = 0;
    ASSERT_EQ(PooledSum(pool, 1 + rep % 3, 1000, &used), 999 * 1000 / 2);
    ASSERT_GE(used, 1);
    ASSERT_LE(used, 4);
  }
}

TEST(CpuThreadPoolTest, ConcurrentCallersBothComplete) {
  CpuThreadPool pool(2);
  auto caller = [&pool] {
    int64_t total = 0;
    for (int rep = 0; rep < 100; ++rep) {
      int used = 0;
      total += PooledSum(pool, 2, 5000, &used);
    }
    return total;
  };
  auto a = std::async(std::launch::async, caller);
  auto b = std::async(std::launch::async, caller);
  ASSERT_EQ(a.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(a.get(), int64_t{100} * 4999 * 5000 / 2);
  EXPECT_EQ(b.get(), int64_t{100} * 4999 * 5000 / 2);
}

TEST(CpuThreadPoolTest, ZeroExtraThreadsRunsOnTheCaller) {
  CpuThreadPool pool(2);
  std::thread::id runner;
  EXPECT_EQ(pool.Run(0, [&] { runner = std::this_thread::get_id(); }), 1);
  EXPECT_EQ(runner, std::this_thread::get_id());
  EXPECT_GE(CpuThreadPool::Shared().num_workers(), 1);
}

// ParallelFor: every item exactly once, on more than one thread when the
// pool has a worker and the items hold the caller until a second arrives.
TEST(ParallelForTest, RunsEveryItemOnceAcrossThreads) {
  EXPECT_EQ(CpuThreads(3), 3);
  EXPECT_EQ(ThreadsFor(1000, 1024, 4), 1);  // under two threads' worth: the caller alone
  EXPECT_EQ(ThreadsFor(5000, 1024, 3), 3);
  EXPECT_EQ(ThreadsFor(5000, 1024, 8), 4);  // 4.9 threads' worth
  EXPECT_EQ(ThreadsFor(5000, 1024, 0), std::min(4, CpuThreads(0)));
  EXPECT_EQ(CpuThreads(0), UsableCores());
  for (const int64_t items : {0, 1, 5, 1000}) {
    std::vector<std::atomic<int>> seen(items);
    const int ran_on = ParallelFor(items, 2, [&](int64_t i) { ++seen[i]; });
    EXPECT_GE(ran_on, 1);
    for (int64_t i = 0; i < items; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i << " of " << items;
  }
  if (CpuThreadPool::Shared().num_workers() < 1) GTEST_SKIP() << "no pool worker";
  Rendezvous rendezvous(2, std::chrono::seconds(10));
  const int ran_on = ParallelFor(2, 2, [&](int64_t) { rendezvous.Arrive(); });
  EXPECT_EQ(ran_on, 2);
  EXPECT_EQ(rendezvous.ids.size(), 2u);
}

}  // namespace
}  // namespace jagrank
