// jagrank-bench-model on the CPU backend: it runs exactly --iterations
// forward passes per strategy, reports consistent rates, and rejects bad flags.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "process_util.h"

namespace jagrank {
namespace {

using testing::ReadFile;
using testing::RunCommand;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/bench_model_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(BenchModelTest, RunsEachStrategyForExactlyTheRequestedPasses) {
  const std::string json_path = TempPath("result.json");
  std::string out;
  ASSERT_EQ(RunCommand(std::string(JAGRANK_BENCH_MODEL_BINARY) +
                           " --device cpu --cpu-threads 1 --requests-per-batch 3 --batches 2 --candidates-min 5"
                           " --candidates-max 9 --history-median 20 --warmup 1 --iterations 3 --json-out " +
                           json_path + " 2>&1",
                       &out),
            0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path));
  EXPECT_EQ(j["requests_per_batch"], 3);
  const double mean_candidates = j["mean_candidates_per_batch"];
  EXPECT_GE(mean_candidates, 3 * 5);
  EXPECT_LE(mean_candidates, 3 * 9);
  ASSERT_EQ(j["results"].size(), 3u) << j.dump();
  const char* expected[] = {"jagged", "padded_flash", "padded_dense"};
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& r = j["results"][i];
    EXPECT_EQ(r["attention"], expected[i]);
    EXPECT_EQ(r["device"], "cpu");
    EXPECT_EQ(r["forward_passes"], 3);
    const double seconds = r["seconds"], forwards = r["forwards_per_s"], requests = r["requests_per_s"];
    ASSERT_GT(seconds, 0);
    EXPECT_NEAR(forwards * seconds, 3.0, 1e-6);
    EXPECT_NEAR(requests, forwards * 3, 1e-6 * requests);  // every batch has 3 requests
    const double candidates = r["candidates_per_s"];
    EXPECT_GE(candidates, requests * 5 * (1 - 1e-9));
    EXPECT_LE(candidates, requests * 9 * (1 + 1e-9));
    EXPECT_GT(r["forward_ms"]["p50"].get<double>(), 0);
    EXPECT_GE(r["forward_ms"]["p99"].get<double>(), r["forward_ms"]["p50"].get<double>());
    EXPECT_GT(r["weights_bytes"].get<int64_t>(), 0);
  }
  std::remove(json_path.c_str());
}

TEST(BenchModelTest, BadFlagsAndStrategiesAreRejectedByName) {
  std::string out;
  EXPECT_EQ(RunCommand(std::string(JAGRANK_BENCH_MODEL_BINARY) + " --requests-per-batch 0 2>&1", &out), 2);
  EXPECT_NE(out.find("bad workload flags"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(std::string(JAGRANK_BENCH_MODEL_BINARY) +
                           " --device cpu --attention nope --iterations 1 --requests-per-batch 1 2>&1",
                       &out),
            1);
  EXPECT_NE(out.find("nope"), std::string::npos) << out;
}

}  // namespace
}  // namespace jagrank
