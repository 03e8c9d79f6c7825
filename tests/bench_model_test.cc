// jagrank-bench-model on the CPU backend: it runs exactly --iterations
// forward passes per strategy, reports consistent rates, and rejects bad flags.
// bench/host_cpu_per_call.sh against the real server and loadgen: it reports
// per-call CPU and context switches that add up.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "process_util.h"

namespace jagrank {
namespace {

using testing::ReadFile;
using testing::FreePort;
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

// --pipelined drives the model as the server does (Stage, Launch of batch
// i + 1, then Wait for batch i): every timed batch is counted once, with the
// same candidates as one after the other (same seed, same batches).
TEST(BenchModelTest, PipelinedCountsEveryBatchOnce) {
  const std::string common = std::string(JAGRANK_BENCH_MODEL_BINARY) +
                             " --device cpu --cpu-threads 1 --attention jagged --requests-per-batch 3 --batches 3"
                             " --candidates-min 5 --candidates-max 9 --history-median 20 --warmup 1 --iterations 5";
  nlohmann::json runs[2];
  for (int pipelined = 0; pipelined < 2; ++pipelined) {
    const std::string json_path = TempPath("pipelined" + std::to_string(pipelined) + ".json");
    std::string out;
    ASSERT_EQ(RunCommand(common + (pipelined ? " --pipelined" : "") + " --json-out " + json_path + " 2>&1", &out), 0)
        << out;
    runs[pipelined] = nlohmann::json::parse(ReadFile(json_path))["results"][0];
    std::remove(json_path.c_str());
  }
  EXPECT_EQ(runs[0]["pipelined"], false);
  EXPECT_EQ(runs[1]["pipelined"], true);
  for (const nlohmann::json& r : runs) {
    EXPECT_EQ(r["forward_passes"], 5);
    EXPECT_GT(r["forward_ms"]["p50"].get<double>(), 0);
  }
  // Candidates per batch: the totals over the same five batches agree.
  const double per_pass[2] = {runs[0]["candidates_per_s"].get<double>() / runs[0]["forwards_per_s"].get<double>(),
                              runs[1]["candidates_per_s"].get<double>() / runs[1]["forwards_per_s"].get<double>()};
  EXPECT_NEAR(per_pass[1], per_pass[0], 1e-6 * per_pass[0]);
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

// One short round at 200 calls/s: every measured call answered, and the
// per-call figures consistent (threads sum to the total, the tiny model's
// compute thread and the front end's threads took part).
TEST(HostCpuPerCallTest, ScriptMeasuresAServerRunByTheLoadgen) {
  const std::string out_dir = TempPath("host_cpu");
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::string out;
  ASSERT_EQ(RunCommand("OUT=" + out_dir + " PORT=" + std::to_string(port) +
                           " RATE=200 MEASURE_S=1 ROUNDS=1 LOADGEN=" + JAGRANK_LOADGEN_BINARY +
                           " bash " + JAGRANK_HOST_CPU_SCRIPT + " " + JAGRANK_SERVER_BINARY + " 2>&1",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("server_us_per_call="), std::string::npos) << out;
  std::istringstream lines(ReadFile(out_dir + "/host_cpu_per_call.jsonl"));
  std::vector<nlohmann::json> runs;
  for (std::string line; std::getline(lines, line);) runs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(runs.size(), 1u);
  for (const nlohmann::json& r : runs) {
    EXPECT_EQ(r["server"], JAGRANK_SERVER_BINARY);
    // 1 s at 200/s, Poisson (sd ~14); the lower bound leaves room for a slow,
    // loaded CI machine, the upper one catches a run that measured too long.
    EXPECT_GE(r["calls"].get<int64_t>(), 50) << r.dump();
    EXPECT_LE(r["calls"].get<int64_t>(), 260) << r.dump();
    double sum = 0;
    for (const auto& [thread, us] : r["server_us_per_call_by_thread"].items()) sum += us.get<double>();
    EXPECT_NEAR(sum, r["server_us_per_call"].get<double>(), 0.05) << r.dump();
    EXPECT_GT(r["server_us_per_call_by_thread"].value("jr-compute", 0.0), 0) << r.dump();
    // The threads that take the calls off the sockets: their CPU share is
    // ~10 ms over this run, one clock tick of /proc's CPU accounting, so it
    // can read 0 (a fresh clone's make test once did); their context
    // switches are counted exactly.
    EXPECT_GT(r["server_context_switches_per_call_by_thread"].value("jr-rank-cq", 0.0), 0) << r.dump();
    EXPECT_GT(r["server_context_switches_per_call"].get<double>(), 0) << r.dump();
    EXPECT_GT(r["loadgen_us_per_call"].get<double>(), 0) << r.dump();
  }
  std::string ignored;
  RunCommand("rm -rf " + out_dir, &ignored);
}

}  // namespace
}  // namespace jagrank
