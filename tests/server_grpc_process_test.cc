// ConfigureGrpcProcess: Abseil's lock-order checker, which Debian's Abseil
// runs on every Mutex lock (gRPC's included), is off after it and stays on
// only when JAGRANK_ABSL_DEADLOCK_CHECK=1. The checker is observed through
// what it does: lock two mutexes in one order, then in the other. With the
// checker on, the second order is a potential deadlock and Abseil aborts.
#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>

#include "server/grpc_process.h"

namespace jagrank {
namespace {

// A then B, later B then A, on one thread: never a real deadlock, but a
// lock-order cycle for the checker.
void LockInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// Why the set-up exists: without it this Abseil checks lock order (and so
// takes its global graph lock on every Mutex lock in gRPC).
TEST(GrpcProcessTest, AbseilChecksLockOrderByDefault) {
  EXPECT_DEATH(LockInBothOrders(), "deadlock");
}

TEST(GrpcProcessTest, ConfigureTurnsTheCheckerOff) {
  EXPECT_EXIT(
      {
        unsetenv("JAGRANK_ABSL_DEADLOCK_CHECK");
        if (ConfigureGrpcProcess()) std::_Exit(3);  // said the checker stays on
        LockInBothOrders();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(GrpcProcessTest, EnvironmentKeepsTheCheckerOn) {
  EXPECT_DEATH(
      {
        setenv("JAGRANK_ABSL_DEADLOCK_CHECK", "1", 1);
        if (!ConfigureGrpcProcess()) std::_Exit(3);  // said the checker is off: no death
        LockInBothOrders();
        std::_Exit(0);
      },
      "deadlock");
}

}  // namespace
}  // namespace jagrank
