// The real binaries as a user runs them: jagrank-server under load gets
// SIGTERM and loses no accepted request, then exits 0; jagrank-client and
// jagrank-loadgen talk to it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "common/cuda_check.h"
#include "metrics_http.h"
#include "model/config.h"
#include "model/weights.h"
#include "process_util.h"
#include "server_test_helpers.h"

extern char** environ;

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::MakeRequest;
using server_test::PendingCall;
using server_test::SendRank;
using testing::ReadFile;
using testing::RunCommand;

pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// A TCP socket listening on a loopback port (closed on destruction): a port
// another process holds.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd_, 4) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() {
    if (fd_ >= 0) close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Waits up to `timeout` for `pid` to exit; fills its wait status.
bool WaitExit(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class ServerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/jagrank_server_process_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    model_config_ = server_test::SmallModelConfig();
    std::ofstream(dir_ + "/model.yaml") << ModelConfigToYaml(model_config_);
  }

  void TearDown() override {
    if (pid_ > 0) {
      int status = 0;
      kill(pid_, SIGKILL);
      WaitExit(pid_, 5s, &status);
    }
  }

  // Starts jagrank-server on `address` (default: a free loopback port) and
  // waits (bounded) for health SERVING.
  void StartServer(const std::vector<std::string>& extra, const std::string& address = "",
                   std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials()) {
    if (address.empty()) {
      port_ = server_test::FreePort();
      ASSERT_GT(port_, 0);
      address_ = "127.0.0.1:" + std::to_string(port_);
    } else {
      address_ = address;
    }
    std::vector<std::string> args = {JAGRANK_SERVER_BINARY, "--grpc-address", address_, "--metrics-address", "",
                                     "--device", "cpu", "--cpu-threads", "1", "--log-level", "debug"};
    // A model repository replaces --model-config (they are exclusive).
    if (std::find(extra.begin(), extra.end(), "--model-repository") == extra.end()) {
      args.insert(args.end(), {"--model-config", dir_ + "/model.yaml"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = Spawn(args, dir_ + "/server.log");
    ASSERT_GT(pid_, 0);
    grpc::ChannelArguments channel_args;  // retry the connection quickly while the server starts
    channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
    channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
    channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    channel_ = grpc::CreateCustomChannel(address_, credentials, channel_args);
    auto health = grpc::health::v1::Health::NewStub(channel_);
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    bool serving = false;
    while (!serving && std::chrono::steady_clock::now() < give_up) {
      int status = 0;
      ASSERT_NE(waitpid(pid_, &status, WNOHANG), pid_) << "server exited; log:\n" << ReadFile(dir_ + "/server.log");
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + 200ms);
      context.set_wait_for_ready(true);  // keeps the channel reconnecting while the call waits
      grpc::health::v1::HealthCheckResponse response;
      grpc::health::v1::HealthCheckRequest request;
      serving = health->Check(&context, request, &response).ok() &&
                response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      if (!serving) std::this_thread::sleep_for(20ms);
    }
    ASSERT_TRUE(serving) << "not SERVING in 60 s; log:\n" << ReadFile(dir_ + "/server.log");
    // Health answers SERVING as soon as gRPC starts, a moment before main()
    // logs its "ready" line with the config summary that tests read.
    const auto log_give_up = std::chrono::steady_clock::now() + 10s;
    while (ReadFile(dir_ + "/server.log").find("jagrank-server ready") == std::string::npos &&
           std::chrono::steady_clock::now() < log_give_up) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_NE(ReadFile(dir_ + "/server.log").find("jagrank-server ready"), std::string::npos)
        << "no ready line in 10 s after SERVING; log:\n" << ReadFile(dir_ + "/server.log");
    stub_ = v1::Ranker::NewStub(channel_);
  }

  // SIGTERM, then the server must exit 0 within 30 s.
  void StopServerExpectCleanExit() {
    ASSERT_EQ(kill(pid_, SIGTERM), 0);
    int status = 0;
    ASSERT_TRUE(WaitExit(pid_, 30s, &status));
    pid_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  // Runs the binary on the CPU with `flags` appended, to its exit: its exit
  // code, with stdout and stderr in *out (for flags it refuses at start).
  int RunServerToExit(const std::string& flags, std::string* out) {
    return RunCommand(std::string(JAGRANK_SERVER_BINARY) + " --grpc-address 127.0.0.1:0 --device cpu --model-config " +
                          dir_ + "/model.yaml " + flags + " 2>&1",
                      out);
  }

  std::string dir_;
  ModelConfig model_config_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ranker::Stub> stub_;
};

// A second server on a port that one already serves must fail to start
// (exit code 1) rather than share the port, saying "address already in use"
// with the address, as its last word (no drain of a server that never ran).
TEST_F(ServerProcessTest, SecondServerOnTheSamePortFailsToStart) {
  StartServer({});
  const std::string log = dir_ + "/second.log";
  const pid_t second = Spawn({JAGRANK_SERVER_BINARY, "--grpc-address", address_, "--metrics-address", "", "--device",
                              "cpu", "--model-config", dir_ + "/model.yaml", "--cpu-threads", "1"},
                             log);
  ASSERT_GT(second, 0);
  int status = 0;
  const bool exited = WaitExit(second, 30s, &status);
  if (!exited) {
    kill(second, SIGKILL);
    WaitExit(second, 5s, &status);
  }
  ASSERT_TRUE(exited) << "second server still running on " << address_ << "; log:\n" << ReadFile(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("start failed: UNAVAILABLE: grpc_address '" + address_ + "': address already in use"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("drain"), std::string::npos) << text;
  // The first server is unharmed.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::GetModelInfoRequest request;
  v1::ModelInfo info;
  EXPECT_TRUE(stub_->GetModelInfo(&context, request, &info).ok());
}

// main() runs ConfigureGrpcProcess before any gRPC object: with
// JAGRANK_ABSL_DEADLOCK_CHECK=1 it says the checker stays on; without it
// nothing is said (the checker is off: server_grpc_process_test). A missing
// model config makes each server exit right after.
TEST_F(ServerProcessTest, MainConfiguresAbseilBeforeStarting) {
  for (const bool keep : {true, false}) {
    if (keep) {
      setenv("JAGRANK_ABSL_DEADLOCK_CHECK", "1", 1);
    } else {
      unsetenv("JAGRANK_ABSL_DEADLOCK_CHECK");
    }
    const std::string log = dir_ + (keep ? "/checker_on.log" : "/checker_off.log");
    const pid_t server = Spawn({JAGRANK_SERVER_BINARY, "--grpc-address", "127.0.0.1:0", "--metrics-address", "",
                                "--device", "cpu", "--model-config", dir_ + "/missing.yaml"},
                               log);
    unsetenv("JAGRANK_ABSL_DEADLOCK_CHECK");
    ASSERT_GT(server, 0);
    int status = 0;
    ASSERT_TRUE(WaitExit(server, 30s, &status)) << ReadFile(log);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << ReadFile(log);
    const std::string text = ReadFile(log);
    EXPECT_NE(text.find("missing.yaml"), std::string::npos) << text;
    EXPECT_EQ(text.find("lock-order checker stays on") != std::string::npos, keep) << text;
    // The failure is the last word: the listener that was up while the model
    // loaded closes without "draining ... drained" lines.
    EXPECT_NE(text.find("start failed"), std::string::npos) << text;
    EXPECT_EQ(text.find("drain"), std::string::npos) << text;
  }
}

// Closed-loop load from 16 callers; SIGTERM in the middle. Every call must
// end OK (accepted, computed) or UNAVAILABLE (refused at the door); some
// accepted calls finish after the signal; the server exits 0.
TEST_F(ServerProcessTest, SigtermDuringLoadLosesNoAcceptedRequestAndExitsZero) {
  StartServer({"--max-queue-delay-us", "50000"});
  std::vector<v1::RankRequest> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(MakeRequest(300 + i, 2 * i, 1 + i, model_config_));

  struct Load {
    std::mutex mu;
    std::condition_variable cv;
    std::map<int, int64_t> codes;
    int64_t ok_after_signal = 0;
    int outstanding = 0;
    bool stop = false;
    std::chrono::steady_clock::time_point signal_at = std::chrono::steady_clock::time_point::max();
  } load;
  std::function<void(int)> issue = [&](int slot) {
    auto* call = new PendingCall;
    call->context.set_deadline(std::chrono::system_clock::now() + 30s);
    stub_->async()->Rank(&call->context, &requests[slot], &call->response, [&, call, slot](grpc::Status status) {
      bool again = false;
      {
        std::lock_guard<std::mutex> lock(load.mu);
        load.codes[status.error_code()]++;
        if (status.ok() && std::chrono::steady_clock::now() > load.signal_at) load.ok_after_signal++;
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) load.stop = true;
        again = !load.stop;
        if (!again) load.outstanding--;
        load.cv.notify_all();
      }
      delete call;
      if (again) issue(slot);
    });
  };
  {
    std::lock_guard<std::mutex> lock(load.mu);
    load.outstanding = static_cast<int>(requests.size());
  }
  for (size_t slot = 0; slot < requests.size(); ++slot) issue(static_cast<int>(slot));
  std::this_thread::sleep_for(400ms);  // load runs; then the signal lands mid-batch
  {
    std::lock_guard<std::mutex> lock(load.mu);
    load.signal_at = std::chrono::steady_clock::now();
  }
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  {
    std::unique_lock<std::mutex> lock(load.mu);
    ASSERT_TRUE(load.cv.wait_for(lock, 30s, [&] { return load.outstanding == 0; }))
        << "calls still outstanding; log:\n" << ReadFile(dir_ + "/server.log");
  }
  int status = 0;
  ASSERT_TRUE(WaitExit(pid_, 30s, &status)) << "server did not exit; log:\n" << ReadFile(dir_ + "/server.log");
  pid_ = -1;
  const std::string log = ReadFile(dir_ + "/server.log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;

  std::lock_guard<std::mutex> lock(load.mu);
  int64_t ok = load.codes[0], unavailable = load.codes[grpc::StatusCode::UNAVAILABLE];
  for (const auto& [code, count] : load.codes) {
    EXPECT_TRUE(code == 0 || code == grpc::StatusCode::UNAVAILABLE) << "lost calls: code " << code << " x" << count;
  }
  EXPECT_GT(ok, 16);
  EXPECT_GT(load.ok_after_signal, 0) << "no accepted call was finished during the drain";
  EXPECT_GT(unavailable, 0);
  EXPECT_NE(log.find("drained"), std::string::npos) << log;
}

TEST_F(ServerProcessTest, ClientAndLoadgenTalkToTheBinary) {
  StartServer({});
  std::string out;
  EXPECT_EQ(RunCommand(std::string(JAGRANK_CLIENT_BINARY) + " --address " + address_ + " --health", &out), 0);
  EXPECT_EQ(out, "SERVING\n");
  ASSERT_EQ(RunCommand(std::string(JAGRANK_CLIENT_BINARY) + " --address " + address_ +
                           " --candidates 5,6,7 --history 1,2,3 --sparse 'country=4;segments=8,9'",
                       &out),
            0);
  // "# header" plus one "item score" line per candidate, same order.
  std::istringstream lines(out);
  std::string header;
  std::getline(lines, header);
  EXPECT_NE(header.find("candidates=3"), std::string::npos) << out;
  for (int64_t expected_item : {5, 6, 7}) {
    int64_t item = 0;
    float score = 0;
    ASSERT_TRUE(lines >> item >> score) << out;
    EXPECT_EQ(item, expected_item);
    EXPECT_GT(score, 0.0f);
    EXPECT_LT(score, 1.0f);
  }
  EXPECT_NE(RunCommand(std::string(JAGRANK_CLIENT_BINARY) + " --address " + address_ +
                           " --candidates 5 --sparse 'nope=1' 2>&1",
                       &out),
            0);
  EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
  EXPECT_NE(out.find("nope"), std::string::npos) << out;

  const std::string json = dir_ + "/loadgen.json";
  ASSERT_EQ(RunCommand(std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ +
                           " --concurrency 4 --duration-s 1 --warmup-s 0.2 --candidates-min 5 --candidates-max 20"
                           " --history-median 8 --pool 64 --json-out " + json + " 2>/dev/null",
                       &out),
            0);
  const nlohmann::json result = nlohmann::json::parse(ReadFile(json));
  EXPECT_GT(result["requests_ok"].get<int64_t>(), 10) << result.dump();
  EXPECT_EQ(result["requests_error"].get<int64_t>(), 0) << result.dump();
  EXPECT_GT(result["qps"].get<double>(), 10) << result.dump();
  const double p50 = result["latency_ms"]["p50"], p99 = result["latency_ms"]["p99"];
  EXPECT_GT(p50, 0);
  EXPECT_GE(p99, p50);
  EXPECT_EQ(result["server"]["model"], "test-small");
  // The loadgen measures its own CPU (it shares the host with the server in
  // the benchmarks) and parses a sample of the responses (the first call among them).
  EXPECT_GT(result["client_cpu_cores"].get<double>(), 0.0) << result.dump();
  EXPECT_LT(result["client_cpu_cores"].get<double>(), 64.0) << result.dump();
  EXPECT_GE(result["responses_checked_every"].get<int64_t>(), 1);

  // Open loop: 4 pacers of 50 calls/s each make a Poisson stream of 200/s;
  // every call sent in the window is answered (OK) and counted once.
  const std::string open_json = dir_ + "/loadgen_open.json";
  ASSERT_EQ(RunCommand(std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ +
                           " --rate 200 --client-threads 4 --duration-s 2 --warmup-s 0.2 --candidates-min 5"
                           " --candidates-max 20 --history-median 8 --pool 64 --json-out " + open_json + " 2>/dev/null",
                       &out),
            0);
  const nlohmann::json open = nlohmann::json::parse(ReadFile(open_json));
  EXPECT_EQ(open["mode"], "open") << open.dump();
  const double sent = open["sent_per_s"].get<double>();
  EXPECT_GT(sent, 140) << open.dump();  // Poisson: 400 expected in 2 s, sd 20
  EXPECT_LT(sent, 260) << open.dump();
  EXPECT_EQ(open["requests_error"].get<int64_t>(), 0) << open.dump();
  EXPECT_DOUBLE_EQ(open["qps"].get<double>(), sent) << open.dump();
  EXPECT_GE(open["pacer_late_fraction"].get<double>(), 0.0) << open.dump();
  EXPECT_LE(open["pacer_late_fraction"].get<double>(), 1.0) << open.dump();
  // Close this process's idle connection first: with no call to poll it, the
  // client would notice the server's GOAWAY only at its backup poll (5 s).
  stub_.reset();
  channel_.reset();
  StopServerExpectCleanExit();
}

// A bad --grpc-channel-args stops the server at start, naming the setting;
// the server listens on a unix: address and takes a good list; the loadgen
// passes its own list, refuses grpc.minimal_stack in it (that is
// --minimal-stack) and records its client stack in the JSON.
TEST_F(ServerProcessTest, ChannelArgFlagsAndAUnixSocketAddress) {
  std::string out;
  EXPECT_EQ(RunServerToExit("--grpc-channel-args grpc.minimal_stack=1", &out), 2);
  EXPECT_NE(out.find("grpc_channel_args"), std::string::npos) << out;
  EXPECT_NE(out.find("receive-size cap"), std::string::npos) << out;

  StartServer({"--grpc-channel-args", "grpc.http2.bdp_probe=0"}, "unix:" + dir_ + "/jagrank.sock");
  EXPECT_NE(ReadFile(dir_ + "/server.log").find("grpc_channel_args=grpc.http2.bdp_probe=0"), std::string::npos);
  // A second server on the same socket path is refused (gRPC would unlink
  // the path and take it over).
  EXPECT_EQ(RunServerToExit("--metrics-address '' --grpc-address " + address_, &out), 1) << out;
  EXPECT_NE(out.find("grpc_address '" + address_ + "': address already in use"), std::string::npos) << out;

  const std::string load = std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ +
                           " --concurrency 2 --duration-s 0.5 --warmup-s 0.1 --candidates-min 5 --candidates-max 20"
                           " --history-median 8 --pool 16";
  const std::string json = dir_ + "/loadgen_uds.json";
  ASSERT_EQ(RunCommand(load + " --minimal-stack=false --grpc-channel-args grpc.primary_user_agent=jagrank-test"
                              " --json-out " + json + " 2>&1",
                       &out),
            0)
      << out;
  const nlohmann::json result = nlohmann::json::parse(ReadFile(json));
  EXPECT_GT(result["requests_ok"].get<int64_t>(), 0) << result.dump();
  EXPECT_EQ(result["requests_error"].get<int64_t>(), 0) << result.dump();
  EXPECT_EQ(result["workload"]["minimal_stack"], false) << result.dump();
  EXPECT_EQ(result["workload"]["grpc_channel_args"], "grpc.primary_user_agent=jagrank-test") << result.dump();
  ASSERT_EQ(RunCommand(load + " --json-out " + json + " 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["workload"]["minimal_stack"], true);
  EXPECT_EQ(RunCommand(load + " --grpc-channel-args grpc.minimal_stack=1 2>&1", &out), 2);
  EXPECT_NE(out.find("use --minimal-stack"), std::string::npos) << out;

  stub_.reset();  // as above: no idle connection of this process at the drain
  channel_.reset();
  StopServerExpectCleanExit();
}

// jagrank-loadgen against the real server gets every call answered and the
// sampled responses' score counts right, in the closed and the open loop; it
// reports the server's own status and message for refused calls; and when
// the server dies mid-run it counts the calls lost as UNAVAILABLE and still
// ends after its window.
TEST_F(ServerProcessTest, LoadgenClosedOpenRefusedAndServerKilled) {
  StartServer({"--max-candidates-per-request", "40"});
  const std::string load = std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ +
                           " --channels 3 --client-threads 2 --history-median 8 --pool 64";
  std::string out;
  const std::string json = dir_ + "/loadgen.json";
  ASSERT_EQ(RunCommand(load + " --concurrency 8 --duration-s 1 --warmup-s 0.2 --candidates-min 5"
                              " --candidates-max 20 --json-out " + json + " 2>&1",
                       &out),
            0)
      << out;
  nlohmann::json r = nlohmann::json::parse(ReadFile(json));
  EXPECT_GT(r["requests_ok"].get<int64_t>(), 64) << r.dump();  // so sampled responses were parsed and counted
  EXPECT_EQ(r["requests_error"].get<int64_t>(), 0) << r.dump();
  EXPECT_EQ(r["server"]["model"], "test-small");
  EXPECT_GE(r["latency_ms"]["p99"].get<double>(), r["latency_ms"]["p50"].get<double>());
  EXPECT_GT(r["latency_ms"]["p50"].get<double>(), 0) << r.dump();

  // Open loop: the pacers send a Poisson stream of 200 calls/s.
  ASSERT_EQ(RunCommand(load + " --rate 200 --duration-s 2 --warmup-s 0.2 --candidates-min 5 --candidates-max 20"
                              " --json-out " + json + " 2>&1",
                       &out),
            0)
      << out;
  r = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(r["mode"], "open") << r.dump();
  EXPECT_GT(r["sent_per_s"].get<double>(), 140) << r.dump();  // 400 expected in 2 s, sd 20
  EXPECT_LT(r["sent_per_s"].get<double>(), 260) << r.dump();
  EXPECT_EQ(r["requests_error"].get<int64_t>(), 0) << r.dump();
  EXPECT_DOUBLE_EQ(r["qps"].get<double>(), r["sent_per_s"].get<double>()) << r.dump();

  // Every request over the server's candidate limit: the server's code and
  // message come back through the trailers, and a run in which every call
  // failed exits 1 (still writing its report).
  ASSERT_EQ(RunCommand(load + " --concurrency 4 --duration-s 0.5 --warmup-s 0.1 --candidates-min 41"
                              " --candidates-max 50 --json-out " + json + " 2>&1",
                       &out),
            1)
      << out;
  EXPECT_NE(out.find("every call failed"), std::string::npos) << out;
  r = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(r["requests_ok"].get<int64_t>(), 0) << r.dump();
  EXPECT_GT(r["errors"]["INVALID_ARGUMENT"].get<int64_t>(), 0) << r.dump();
  EXPECT_EQ(r["errors"].size(), 1u) << r.dump();
  EXPECT_NE(r["first_error"].get<std::string>().find("max_candidates_per_request = 40"), std::string::npos)
      << r.dump();


  // The server dies once the measured window has begun (the progress line
  // on stderr says so): the loadgen ends after its window, the calls lost
  // counted as UNAVAILABLE.
  const std::string progress = dir_ + "/loadgen_progress.txt";
  int killed_rc = -1;
  std::thread loadgen([&] {
    std::string ignored;
    killed_rc = RunCommand(load + " --concurrency 8 --duration-s 3 --warmup-s 0.1 --candidates-min 5"
                                  " --candidates-max 20 --json-out " + json + " 2>" + progress,
                           &ignored);
  });
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (ReadFile(progress).find("measure") == std::string::npos && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(kill(pid_, SIGKILL), 0);
  int status = 0;
  EXPECT_TRUE(WaitExit(pid_, 10s, &status));
  pid_ = -1;
  loadgen.join();
  EXPECT_EQ(killed_rc, 0) << ReadFile(progress);
  r = nlohmann::json::parse(ReadFile(json));
  EXPECT_GT(r["requests_ok"].get<int64_t>(), 0) << r.dump();
  EXPECT_GT(r["errors"]["UNAVAILABLE"].get<int64_t>(), 0) << r.dump();
  // Each of the 8 slots backs off (10 ms doubling to 1 s) after a refused
  // call: about 10 tries each in the ~3 s left, not a spin of refusals.
  EXPECT_LT(r["errors"]["UNAVAILABLE"].get<int64_t>(), 400) << r.dump();
}

// A port nobody listens on is a connection failure, said so after a few
// tries with backoff, not a call's "Deadline Exceeded"; exit 1.
TEST_F(ServerProcessTest, LoadgenReportsAClosedPortAsAConnectionFailure) {
  const int port = server_test::FreePort();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunCommand(std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address +
                           " --connect-timeout-s 1 --duration-s 1 2>&1",
                       &out),
            1)
      << out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0) << out;
  EXPECT_NE(out.find("cannot connect to " + address + ": Connection refused"), std::string::npos) << out;
  EXPECT_NE(out.find("attempts"), std::string::npos) << out;
  EXPECT_EQ(out.find("Deadline Exceeded"), std::string::npos) << out;
}

// jagrank-client with nothing to rank prints its usage and exits 2 instead
// of sending an empty request.
TEST_F(ServerProcessTest, ClientWithoutArgumentsPrintsUsage) {
  std::string out;
  EXPECT_EQ(RunCommand(std::string(JAGRANK_CLIENT_BINARY) + " --address 127.0.0.1:1 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("nothing to send"), std::string::npos) << out;
  EXPECT_NE(out.find("--candidates"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(std::string(JAGRANK_CLIENT_BINARY) + " 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("nothing to send"), std::string::npos) << out;
}

// Certificates made by openssl for the TLS tests: a CA, a server
// certificate for localhost and 127.0.0.1, a client certificate, and a
// second CA with a server certificate of its own. False when openssl failed.
bool MakeTestCertificates(const std::string& dir) {
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "set -e; cd " + dir + "; exec >openssl.log 2>&1\n"
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext\n"
      "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n"
      "for ca in ca ca2; do\n"
      "  openssl req -x509" + ec + " -keyout $ca.key -out $ca.pem -days 2 -subj /CN=jagrank-test-$ca\n"
      "done\n"
      "sign() {  # name ca ext\n"
      "  openssl req" + ec + " -keyout $1.key -out $1.csr -subj /CN=$1\n"
      "  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem -days 2 -extfile $3\n"
      "}\n"
      "sign server ca server.ext; sign client ca client.ext; sign server2 ca2 server.ext\n";
  std::ofstream(dir + "/certs.sh") << script;
  std::string out;
  return RunCommand("sh " + dir + "/certs.sh", &out) == 0;
}

std::shared_ptr<grpc::ChannelCredentials> TrustingCa(const std::string& ca_path) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(ca_path);
  return grpc::SslCredentials(options);
}

// TLS on the gRPC port: the client and the loadgen speak it (--tls-ca);
// plaintext against it fails, and so does a client trusting another CA.
// With --tls-client-ca (mTLS) a client without a certificate is refused and
// one with a certificate of that CA is served. The server re-reads its
// certificate files: replaced by ones of a second CA, they are what the
// next connection is shown (tls_reload_interval_s: 1).
TEST_F(ServerProcessTest, TlsAndMutualTls) {
  ASSERT_TRUE(MakeTestCertificates(dir_)) << ReadFile(dir_ + "/openssl.log");
  const std::string client = std::string(JAGRANK_CLIENT_BINARY) + " --candidates 5,6,7 --timeout-ms 3000";
  std::string out;

  // TLS (server certificate only). The files are copies, replaced below.
  ASSERT_EQ(RunCommand("cp " + dir_ + "/server.pem " + dir_ + "/live.pem && cp " + dir_ + "/server.key " + dir_ +
                           "/live.key",
                       &out),
            0);
  std::ofstream(dir_ + "/tls.yaml") << "tls_cert: " << dir_ << "/live.pem\ntls_key: " << dir_
                                    << "/live.key\ntls_reload_interval_s: 1\n";
  StartServer({"--config", dir_ + "/tls.yaml"}, "", TrustingCa(dir_ + "/ca.pem"));
  EXPECT_NE(ReadFile(dir_ + "/server.log").find("tls_cert=" + dir_ + "/live.pem"), std::string::npos);
  EXPECT_EQ(RunCommand(client + " --address " + address_ + " --tls-ca " + dir_ + "/ca.pem 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("candidates=3"), std::string::npos) << out;
  EXPECT_NE(RunCommand(client + " --address " + address_ + " 2>&1", &out), 0) << "plaintext was served: " << out;
  EXPECT_NE(RunCommand(client + " --address " + address_ + " --tls-ca " + dir_ + "/ca2.pem 2>&1", &out), 0)
      << "a client trusting another CA was served: " << out;
  const std::string json = dir_ + "/loadgen_tls.json";
  ASSERT_EQ(RunCommand(std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ + " --tls-ca " + dir_ +
                           "/ca.pem --concurrency 4 --duration-s 0.5 --warmup-s 0.1 --candidates-min 5"
                           " --candidates-max 20 --history-median 8 --pool 16 --json-out " + json + " 2>&1",
                       &out),
            0)
      << out;
  nlohmann::json r = nlohmann::json::parse(ReadFile(json));
  EXPECT_GT(r["requests_ok"].get<int64_t>(), 0) << r.dump();
  EXPECT_EQ(r["requests_error"].get<int64_t>(), 0) << r.dump();
  EXPECT_EQ(r["workload"]["tls"], "tls") << r.dump();

  // The certificate files change: within a few reload intervals a new
  // connection is shown the second CA's certificate.
  ASSERT_EQ(RunCommand("cp " + dir_ + "/server2.key " + dir_ + "/live.key && cp " + dir_ + "/server2.pem " + dir_ +
                           "/live.pem",
                       &out),
            0);
  bool reloaded = false;
  for (const auto give_up = std::chrono::steady_clock::now() + 15s;
       !reloaded && std::chrono::steady_clock::now() < give_up;) {
    std::this_thread::sleep_for(200ms);
    reloaded = RunCommand(client + " --address " + address_ + " --tls-ca " + dir_ + "/ca2.pem 2>&1", &out) == 0;
  }
  EXPECT_TRUE(reloaded) << "the renewed certificate was never served; last: " << out;
  EXPECT_NE(RunCommand(client + " --address " + address_ + " --tls-ca " + dir_ + "/ca.pem 2>&1", &out), 0)
      << "the old certificate is still served: " << out;
  stub_.reset();
  channel_.reset();
  StopServerExpectCleanExit();

  // mTLS.
  StartServer({"--tls-cert", dir_ + "/server.pem", "--tls-key", dir_ + "/server.key", "--tls-client-ca",
               dir_ + "/ca.pem"},
              "", [&] {
                grpc::SslCredentialsOptions options;
                options.pem_root_certs = ReadFile(dir_ + "/ca.pem");
                options.pem_cert_chain = ReadFile(dir_ + "/client.pem");
                options.pem_private_key = ReadFile(dir_ + "/client.key");
                return grpc::SslCredentials(options);
              }());
  EXPECT_NE(ReadFile(dir_ + "/server.log").find("tls_client_ca=" + dir_), std::string::npos);
  const std::string tls = client + " --address " + address_ + " --tls-ca " + dir_ + "/ca.pem";
  EXPECT_EQ(RunCommand(tls + " --tls-cert " + dir_ + "/client.pem --tls-key " + dir_ + "/client.key 2>&1", &out), 0)
      << out;
  EXPECT_NE(RunCommand(tls + " 2>&1", &out), 0) << "a client without a certificate was served: " << out;
  EXPECT_NE(RunCommand(client + " --address " + address_ + " 2>&1", &out), 0) << "plaintext was served: " << out;
  ASSERT_EQ(RunCommand(std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ + " --tls-ca " + dir_ +
                           "/ca.pem --tls-cert " + dir_ + "/client.pem --tls-key " + dir_ + "/client.key" +
                           " --concurrency 2 --duration-s 0.3 --warmup-s 0.1 --candidates-min 5 --candidates-max 20"
                           " --history-median 8 --pool 16 --json-out " + json + " 2>&1",
                       &out),
            0)
      << out;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["workload"]["tls"], "mtls");
  stub_.reset();
  channel_.reset();
  StopServerExpectCleanExit();

  // A missing certificate file stops the start, naming the key and the file.
  EXPECT_EQ(RunServerToExit("--tls-cert " + dir_ + "/nope.pem --tls-key " + dir_ + "/server.key", &out), 1);
  EXPECT_NE(out.find("tls_cert: cannot open '" + dir_ + "/nope.pem'"), std::string::npos) << out;
}

// Writes version `n` of the test model (weights from `seed`) into `repo`.
void WriteRepositoryVersion(const std::string& repo, int n, uint64_t seed) {
  mkdir(repo.c_str(), 0755);
  const std::string staging = repo + "/.staging";
  ASSERT_EQ(mkdir(staging.c_str(), 0755), 0);
  ModelConfig config = server_test::SmallModelConfig();
  config.seed = seed;
  std::ofstream(staging + "/model.yaml") << ModelConfigToYaml(config);
  ModelWeights weights;
  ASSERT_TRUE(MakeRandomWeights(config, &weights).ok());
  ASSERT_TRUE(WriteSafetensors(staging + "/model.safetensors", weights).ok());
  ASSERT_EQ(std::rename(staging.c_str(), (repo + "/" + std::to_string(n)).c_str()), 0);
}

// SIGHUP makes the binary scan its model repository (no polling here): a
// version added after start serves without a restart, and the server exits
// cleanly after. A repository excludes --model-config.
TEST_F(ServerProcessTest, SighupReloadsTheModelRepository) {
  const std::string repo = dir_ + "/repo";
  WriteRepositoryVersion(repo, 1, 11);
  StartServer({"--model-repository", repo, "--model-poll-interval-s", "0"});
  auto info_version = [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::ModelInfo info;
    EXPECT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    return info.version();
  };
  EXPECT_EQ(info_version().rfind("1:", 0), 0u) << info_version();
  WriteRepositoryVersion(repo, 2, 12);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(info_version().rfind("1:", 0), 0u) << "reloaded without SIGHUP";
  ASSERT_EQ(kill(pid_, SIGHUP), 0);
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (info_version().rfind("2:", 0) != 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(info_version().rfind("2:", 0), 0u) << ReadFile(dir_ + "/server.log");
  const v1::RankRequest request = MakeRequest(5, 4, 3, model_config_);
  auto call = SendRank(stub_.get(), request);
  ASSERT_TRUE(call->Wait(30s));
  ASSERT_TRUE(call->status.ok()) << call->status.error_message();
  EXPECT_EQ(call->response.model_version(), info_version());
  EXPECT_NE(ReadFile(dir_ + "/server.log").find("SIGHUP"), std::string::npos);
  StopServerExpectCleanExit();

  std::string out;
  EXPECT_EQ(RunServerToExit("--model-repository " + repo, &out), 2) << out;
  EXPECT_NE(out.find("mutually exclusive"), std::string::npos) << out;
  // --check-config looks into the repository.
  const std::string check = std::string(JAGRANK_SERVER_BINARY) + " --check-config --device cpu --model-repository ";
  EXPECT_EQ(RunCommand(check + repo + " 2>&1", &out), 0) << out;
  ASSERT_EQ(mkdir((dir_ + "/empty").c_str(), 0755), 0);
  EXPECT_EQ(RunCommand(check + dir_ + "/empty 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("model_repository"), std::string::npos) << out;
  EXPECT_NE(out.find("no complete version"), std::string::npos) << out;
}

// Without a repository SIGHUP is logged and ignored (its default action
// would have killed the server).
TEST_F(ServerProcessTest, SighupWithoutARepositoryKeepsServing) {
  StartServer({});
  ASSERT_EQ(kill(pid_, SIGHUP), 0);
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (ReadFile(dir_ + "/server.log").find("nothing to reload") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(ReadFile(dir_ + "/server.log").find("nothing to reload"), std::string::npos);
  auto call = SendRank(stub_.get(), MakeRequest(6, 2, 2, model_config_));
  ASSERT_TRUE(call->Wait(30s));
  EXPECT_TRUE(call->status.ok()) << call->status.error_message();
  StopServerExpectCleanExit();
}

// precision is checked on the CPU too (and then ignored); an unknown
// log_level is refused naming the allowed levels, before anything starts
// (spdlog would take it as "off" and hide even the start failures).
TEST_F(ServerProcessTest, PrecisionAndLogLevelAreValidated) {
  std::string out;
  EXPECT_EQ(RunServerToExit("--precision fp16", &out), 2);
  EXPECT_NE(out.find("precision (server config key precision) = 'fp16': must be one of auto, fp32, bf16"),
            std::string::npos)
      << out;
  EXPECT_EQ(RunServerToExit("--log-level loud", &out), 2);
  EXPECT_NE(out.find("log_level) = 'loud': must be one of trace, debug, info, warn, error"), std::string::npos)
      << out;
  std::ofstream(dir_ + "/server.yaml") << "log_level: quiet\n";
  EXPECT_EQ(RunServerToExit("--config " + dir_ + "/server.yaml", &out), 2);
  EXPECT_NE(out.find("server config key 'log_level' = 'quiet'"), std::string::npos) << out;
  StartServer({"--precision", "fp32"});  // a CPU server takes (and ignores) it
  EXPECT_NE(ReadFile(dir_ + "/server.log").find(" precision=fp32 "), std::string::npos);
  StopServerExpectCleanExit();
}

// The metrics port taken: exit 1 with the same plain words.
TEST_F(ServerProcessTest, TakenMetricsPortSaysAddressInUse) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  std::string out;
  EXPECT_EQ(RunServerToExit("--metrics-address " + held.address(), &out), 1);
  EXPECT_NE(out.find("metrics_address '" + held.address() + "': address already in use"), std::string::npos) << out;
}

// --check-config: 0 with the summary (device resolved, which defaults
// applied) for a good config, without loading the weights or listening (its
// port is held by another socket and its weights file is not safetensors);
// 2 naming the key for each kind of bad config.
TEST_F(ServerProcessTest, CheckConfigExitsWithoutStarting) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  std::ofstream(dir_ + "/weights.safetensors") << "not safetensors";
  const std::string base = std::string(JAGRANK_SERVER_BINARY) + " --check-config --model-config " + dir_ +
                           "/model.yaml --grpc-address " + held.address() + " --metrics-address " + held.address() +
                           " --model-weights " + dir_ + "/weights.safetensors";
  std::string out;
  ASSERT_EQ(RunCommand(base + " --device cpu 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("config OK: grpc_address=" + held.address()), std::string::npos) << out;
  EXPECT_NE(out.find(" device=cpu "), std::string::npos) << out;
  EXPECT_NE(out.find("device_defaults=cpu(batching.max_queue_delay_us,"), std::string::npos) << out;
  EXPECT_NE(out.find(" batching.max_batch_candidates=16384 "), std::string::npos) << out;
  ASSERT_EQ(RunCommand(base + " --device cpu --max-batch-candidates 999 2>&1", &out), 0) << out;
  EXPECT_NE(out.find(" batching.max_batch_candidates=999 "), std::string::npos) << out;
  // auto resolves here as the server would: cuda:0 with the CUDA budgets on
  // a GPU machine, the CPU otherwise.
  ASSERT_EQ(RunCommand(base + " 2>&1", &out), 0) << out;
  if (CudaDeviceAvailable()) {
    EXPECT_NE(out.find(" device=cuda:0 "), std::string::npos) << out;
    EXPECT_NE(out.find("device_defaults=cuda("), std::string::npos) << out;
    EXPECT_NE(out.find(" batching.max_batch_candidates=65536 "), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find(" device=cpu "), std::string::npos) << out;
    EXPECT_EQ(RunCommand(base + " --device cuda 2>&1", &out), 2) << out;
    EXPECT_NE(out.find("key 'device' = 'cuda': no usable CUDA device"), std::string::npos) << out;
  }

  const std::pair<std::string, std::string> bad_files[] = {
      {"batching:\n  max_batch_requests: 8\n  max_batch_requests: 9\n",
       "key 'batching.max_batch_requests' appears twice"},
      {"cuda_sync: spin\n", "unknown key 'cuda_sync'"},
      {"batching:\n  max_queue_requests: 0\n", "key 'batching.max_queue_requests' = '0': must be in [1, "},
      {"grpc_address: 8500\n", "key 'grpc_address' '8500': not host:port or unix:/path"},
  };
  for (const auto& [yaml, says] : bad_files) {
    std::ofstream(dir_ + "/bad.yaml") << yaml;
    EXPECT_EQ(RunCommand(base + " --device cpu --config " + dir_ + "/bad.yaml 2>&1", &out), 2) << yaml;
    EXPECT_NE(out.find(dir_ + "/bad.yaml: "), std::string::npos) << out;
    EXPECT_NE(out.find(says), std::string::npos) << out;
  }
  std::ofstream(dir_ + "/bad_model.yaml") << "embedding_dim: 63\n";
  EXPECT_EQ(RunCommand(base + " --device cpu --model-config " + dir_ + "/bad_model.yaml 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("key 'model_config' = '" + dir_ + "/bad_model.yaml'"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(base + " --device cpu --model-weights " + dir_ + "/none.safetensors 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("key 'model_weights' = '" + dir_ + "/none.safetensors': cannot be opened"), std::string::npos)
      << out;
}

// The binary's malloc is tcmalloc when the build linked it (JAGRANK_TCMALLOC,
// found), glibc's otherwise; the server says which at start.
TEST_F(ServerProcessTest, StartLogNamesTheAllocatorInUse) {
  StartServer({});
  const std::string log = ReadFile(dir_ + "/server.log");
  const size_t at = log.find("malloc from ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(at, log.find('\n', at) - at);
#ifdef JAGRANK_EXPECT_TCMALLOC
  EXPECT_NE(line.find("libtcmalloc_minimal.so"), std::string::npos) << line;
#elif defined(JAGRANK_EXPECT_SANITIZER_MALLOC)  // a sanitizer build: its runtime's, linked into the binary
  EXPECT_NE(line.find("/jagrank-server"), std::string::npos) << line;
#else
  EXPECT_NE(line.find("libc.so"), std::string::npos) << line;
#endif
}

// Overload, short (bench/overload_cpu.sh is the 20 s version): the default
// model on the CPU, the loadgen's default workload. Its closed-loop capacity
// first, then an open loop at 3x that rate: deadline-aware admission refuses
// the excess at once (RESOURCE_EXHAUSTED "would not finish before its
// deadline", counted as rejection deadline_unmeetable), so the calls it takes
// are answered within their deadline and the goodput stays near the
// capacity. (Without it the queue holds seconds of work, most calls expire
// in it, and the goodput falls far below; 0 OK at 5x was seen.) The goodput
// bound is looser than the benchmark's 90 % because this run is short and
// shares two cores with the rest of the suite (its capacity measured 215 to
// 560 calls/s from one run to the next); what must hold in any case is that
// the calls admitted are answered, not left to expire.
TEST_F(ServerProcessTest, OverloadIsShedAtTheDoorAndGoodputHolds) {
  port_ = server_test::FreePort();
  const int metrics_port = server_test::FreePort();
  ASSERT_GT(port_, 0);
  ASSERT_GT(metrics_port, 0);
  address_ = "127.0.0.1:" + std::to_string(port_);
  pid_ = Spawn({JAGRANK_SERVER_BINARY, "--grpc-address", address_, "--metrics-address",
                "127.0.0.1:" + std::to_string(metrics_port), "--device", "cpu"},
               dir_ + "/server.log");
  ASSERT_GT(pid_, 0);
  for (const auto give_up = std::chrono::steady_clock::now() + 60s;
       ReadFile(dir_ + "/server.log").find("jagrank-server ready") == std::string::npos;) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << ReadFile(dir_ + "/server.log");
    std::this_thread::sleep_for(50ms);
  }
  const std::string load = std::string(JAGRANK_LOADGEN_BINARY) + " --address " + address_ +
                           " --channels 32 --timeout-ms 2000 --warmup-s 2";
  std::string out;
  const std::string closed_json = dir_ + "/closed.json", open_json = dir_ + "/open.json";
  ASSERT_EQ(RunCommand(load + " --concurrency 32 --duration-s 3 --json-out " + closed_json + " 2>&1", &out), 0)
      << out;
  const double capacity = nlohmann::json::parse(ReadFile(closed_json))["qps"].get<double>();
  ASSERT_GT(capacity, 10) << out;
  ASSERT_EQ(RunCommand(load + " --rate " + std::to_string(static_cast<int>(3 * capacity)) +
                           " --duration-s 4 --json-out " + open_json + " 2>&1",
                       &out),
            0)
      << out;
  const nlohmann::json open = nlohmann::json::parse(ReadFile(open_json));
  const double goodput = open["qps"].get<double>();
  EXPECT_GE(goodput, 0.5 * capacity) << "capacity " << capacity << "; " << open.dump();
  // Of the calls admitted, most are answered (without admission nearly all
  // expire in the queue; here 64-88 % were answered, run to run).
  const double ok = open["requests_ok"].get<double>();
  const double expired = open["errors"].value("DEADLINE_EXCEEDED", 0);
  EXPECT_GE(ok / (ok + expired), 0.5) << open.dump();
  // Every OK call answered within its 2 s deadline (latency counts from the
  // scheduled send, so the pacer's own lag is allowed on top).
  EXPECT_LE(open["latency_ms"]["max"].get<double>(), 2000 + open["pacer_max_lag_ms"].get<double>()) << open.dump();
  EXPECT_GT(open["errors"].value("RESOURCE_EXHAUSTED", 0), 0) << open.dump();
  EXPECT_NE(open["first_error"].get<std::string>().find("would not finish before its deadline"), std::string::npos)
      << open.dump();
  const metrics_test::HttpResponse scrape = metrics_test::HttpGet(metrics_port, "/metrics");
  EXPECT_GT(metrics_test::Value(metrics_test::ParseExposition(scrape.body), "jagrank_rejections_total",
                                {{"reason", "deadline_unmeetable"}}),
            0)
      << scrape.body;
}

}  // namespace
}  // namespace jagrank
