// UsableCores: the cores thread pools are sized from (affinity, cgroup
// quota). ParseGrpcChannelArgs: the "grpc.name=value,..." lists of extra channel
// arguments; and ConfigureGrpcProcess: Abseil's lock-order checker, which Debian's Abseil
// runs on every Mutex lock (gRPC's included), is off after it and stays on
// only when JAGRANK_ABSL_DEADLOCK_CHECK=1. The checker is observed through
// what it does: lock two mutexes in one order, then in the other. With the
// checker on, the second order is a potential deadlock and Abseil aborts.
#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/process.h"

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
TEST(UsableCoresTest, AffinityThenQuota) {
  EXPECT_EQ(UsableCoresFrom(2, "", 64), 2);               // taskset -c 0,1 on a 64-core host
  EXPECT_EQ(UsableCoresFrom(0, "", 8), 8);                // no affinity known: the host's count
  EXPECT_EQ(UsableCoresFrom(0, "", 0), 1);                // nothing known: one
  EXPECT_EQ(UsableCoresFrom(16, "max 100000", 16), 16);   // no quota
  EXPECT_EQ(UsableCoresFrom(16, "250000 100000", 16), 3);  // --cpus 2.5: a third thread still runs
  EXPECT_EQ(UsableCoresFrom(16, "200000 100000", 16), 2);
  EXPECT_EQ(UsableCoresFrom(16, "50000 100000", 16), 1);
  EXPECT_EQ(UsableCoresFrom(2, "800000 100000", 16), 2);  // the quota never adds cores
  EXPECT_EQ(UsableCoresFrom(4, "garbage", 16), 4);         // unreadable: ignored
  EXPECT_EQ(UsableCoresFrom(4, "-1 100000", 16), 4);
  EXPECT_EQ(UsableCoresFrom(4, "100000 0", 16), 4);
}

// A process limited to one CPU (as `taskset -c 0` starts it) sizes its
// pools for one core, whatever the host has. Run in a fresh process, since
// the count is read once.
TEST(UsableCoresTest, FollowsTheAffinityMask) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0) std::exit(2);
        std::exit(UsableCores() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

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


TEST(GrpcChannelArgsTest, ParsesIntegersAndStringsInOrder) {
  std::vector<GrpcChannelArg> args;
  Status s = ParseGrpcChannelArgs("grpc.minimal_stack=1,grpc.optimization_target=throughput,grpc.x=-7", {}, "f",
                                  &args);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0].name, "grpc.minimal_stack");
  EXPECT_TRUE(args[0].is_int);
  EXPECT_EQ(args[0].int_value, 1);
  EXPECT_EQ(args[1].name, "grpc.optimization_target");
  EXPECT_FALSE(args[1].is_int);
  EXPECT_EQ(args[1].value, "throughput");
  EXPECT_TRUE(args[2].is_int);
  EXPECT_EQ(args[2].int_value, -7);
  ASSERT_TRUE(ParseGrpcChannelArgs("", {}, "f", &args).ok());
  EXPECT_TRUE(args.empty());
  // Beyond int range, or not a whole number: passed as the string written.
  ASSERT_TRUE(ParseGrpcChannelArgs("grpc.a=4294967296,grpc.b=1.5", {}, "f", &args).ok());
  ASSERT_EQ(args.size(), 2u);
  EXPECT_FALSE(args[0].is_int);
  EXPECT_FALSE(args[1].is_int);
  EXPECT_EQ(args[1].value, "1.5");
}

TEST(GrpcChannelArgsTest, ErrorsNameTheFieldAndTheItem) {
  const std::vector<ReservedGrpcChannelArg> reserved = {{"grpc.max_concurrent_streams", "use the cap setting"}};
  struct Case {
    const char* spec;
    const char* says;
  };
  const Case cases[] = {
      {"grpc.a", "'grpc.a' is not name=value"},
      {"=1", "'=1' is not name=value"},
      {"grpc.a=", "'grpc.a=' is not name=value"},
      {"grpc.a=1,,grpc.b=2", "'' is not name=value"},
      {"grpc.a=1,", "ends with ','"},
      {"minimal_stack=1", "'minimal_stack' is not a gRPC channel argument"},
      {"grpc.a=1,grpc.a=2", "'grpc.a' is given twice"},
      {"grpc.max_concurrent_streams=4", "'grpc.max_concurrent_streams' is not allowed: use the cap setting"},
  };
  for (const Case& c : cases) {
    std::vector<GrpcChannelArg> args = {GrpcChannelArg{}};
    Status s = ParseGrpcChannelArgs(c.spec, reserved, "server config grpc_channel_args", &args);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.spec;
    EXPECT_NE(s.message().find("server config grpc_channel_args: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.spec << " -> " << s.message();
    EXPECT_EQ(args.size(), 1u) << "out changed on error: " << c.spec;
  }
}

}  // namespace
}  // namespace jagrank
