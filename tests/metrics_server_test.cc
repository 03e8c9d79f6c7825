// End to end with real peers: starts jagrank-server (CPU, a small model),
// sends known traffic over gRPC and checks /metrics against it; runs the real
// Prometheus server against it and checks through its HTTP API; renders the
// status page in headless Chromium and checks the screenshot's pixels.
//
// Binaries come from CMake through the environment: JAGRANK_SERVER,
// JAGRANK_CLIENT. Tools on PATH: prometheus, chromium (scripts/install-deps.sh).
// JAGRANK_STATUS_PAGE_SCREENSHOT=<path>: also copy the screenshot there (how
// docs/status_page.png is refreshed).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "jagrank/v1/ranker.grpc.pb.h"
#include "tests/metrics_http.h"
#include "tests/metrics_png.h"

extern char** environ;

namespace jagrank {
namespace {

using Clock = std::chrono::steady_clock;
using metrics_test::HttpGet;
using metrics_test::ParseExposition;
using metrics_test::Sample;
using metrics_test::Value;

constexpr int kMaxHistoryLen = 32;  // of the test model below

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A child process with stdout+stderr in `log_path`.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Stop(std::chrono::seconds(5)); }

  bool Start(const std::vector<std::string>& argv, const std::string& log_path) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }

  // SIGTERM, then SIGKILL after `grace`. Returns the wait status (-1 if none).
  int Stop(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + grace;
    while (Running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_status_ = -1;
      pid_ = -1;
    }
    return exit_status_;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// Polls `ready` every 50 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

// What a batch of sent requests should show in /metrics.
struct Sent {
  int64_t ok = 0;
  int64_t invalid = 0;
  int64_t candidates = 0;
  int64_t kept_history_tokens = 0;
  void Add(const Sent& o) {
    ok += o.ok;
    invalid += o.invalid;
    candidates += o.candidates;
    kept_history_tokens += o.kept_history_tokens;
  }
};

class ServerFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_path_ = Env("JAGRANK_SERVER");
    ASSERT_FALSE(server_path_.empty()) << "JAGRANK_SERVER is not set (CMake sets it)";
    char dir_template[] = "/tmp/jagrank_metrics_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    // A small model: starts in well under a second on two cores.
    std::ofstream(dir_ + "/model.yaml") << "name: jagrank-metrics-test\n"
                                           "embedding_dim: 64\n"
                                           "num_dense_features: 4\n"
                                           "sparse_features:\n"
                                           "  - {name: user_country, num_rows: 50}\n"
                                           "  - {name: user_segments, num_rows: 200}\n"
                                           "item_rows: 5000\n"
                                           "max_history_len: "
                                        << kMaxHistoryLen
                                        << "\n"
                                           "attention_heads: 2\n"
                                           "bottom_mlp: [64]\n"
                                           "top_mlp: [64, 1]\n";
    grpc_port_ = FreePort();
    metrics_port_ = FreePort();
    server_ = new Child();
    ASSERT_TRUE(server_->Start({server_path_, "--device", "cpu", "--model-config", dir_ + "/model.yaml",
                                "--grpc-address", "127.0.0.1:" + std::to_string(grpc_port_), "--metrics-address",
                                "127.0.0.1:" + std::to_string(metrics_port_), "--max-queue-delay-us", "1000"},
                               dir_ + "/server.log"));
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
    auto health = grpc::health::v1::Health::NewStub(*channel_);
    const bool serving = WaitFor(
        [&] {
          if (!server_->Running()) return true;  // fail below with the log
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
          grpc::health::v1::HealthCheckRequest req;
          req.set_service("jagrank.v1.Ranker");
          grpc::health::v1::HealthCheckResponse resp;
          return health->Check(&ctx, req, &resp).ok() &&
                 resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
        },
        std::chrono::seconds(60));
    ASSERT_TRUE(serving && server_->Running()) << "server did not become SERVING:\n"
                                              << metrics_test::ReadFile(dir_ + "/server.log");
  }

  void SetUp() override {
    ASSERT_TRUE(server_ != nullptr && server_->Running())
        << "jagrank-server is not running; log:\n" << metrics_test::ReadFile(dir_ + "/server.log");
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      const int status = server_->Stop(std::chrono::seconds(20));
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        std::fprintf(stderr, "jagrank-server did not exit 0 on SIGTERM (wait status %d); log:\n%s\n", status,
                     metrics_test::ReadFile(dir_ + "/server.log").c_str());
      }
      delete server_;
      server_ = nullptr;
    }
    delete channel_;
    channel_ = nullptr;
    if (!dir_.empty() && Env("JAGRANK_KEEP_TEST_DIR").empty()) {
      const int rc = std::system(("rm -rf '" + dir_ + "'").c_str());
      (void)rc;
    }
  }

  static std::vector<Sample> Scrape() {
    const metrics_test::HttpResponse r = HttpGet(metrics_port_, "/metrics");
    EXPECT_EQ(r.status, 200);
    return ParseExposition(r.body);
  }

  // Sends `n` valid requests (1..8 candidates, histories 0..2x the max) and
  // `invalid` requests with the wrong dense count, from `threads` threads.
  static Sent SendTraffic(int n, int invalid, int threads, uint32_t seed) {
    std::mutex mu;
    Sent total;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        auto stub = jagrank::v1::Ranker::NewStub(*channel_);
        std::mt19937 rng(seed * 131 + t);
        Sent sent;
        for (int i = t; i < n + invalid; i += threads) {
          const bool bad = i >= n;
          jagrank::v1::RankRequest req;
          req.set_request_id("metrics-" + std::to_string(seed) + "-" + std::to_string(i));
          for (int d = 0; d < (bad ? 3 : 4); ++d) req.add_dense_features(0.25f * d);
          (*req.mutable_sparse_features())["user_country"].add_ids(rng() % 50);
          const int history = static_cast<int>(rng() % (2 * kMaxHistoryLen + 1));
          for (int h = 0; h < history; ++h) req.add_history(rng() % 5000);
          const int candidates = 1 + static_cast<int>(rng() % 8);
          for (int c = 0; c < candidates; ++c) req.add_candidate_item_ids(rng() % 5000);
          jagrank::v1::RankResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
          const grpc::Status s = stub->Rank(&ctx, req, &resp);
          if (bad) {
            EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
            ++sent.invalid;
          } else {
            EXPECT_TRUE(s.ok()) << s.error_message();
            EXPECT_EQ(resp.scores_size(), candidates);
            ++sent.ok;
            sent.candidates += candidates;
            sent.kept_history_tokens += std::min(history, kMaxHistoryLen);
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        total.Add(sent);
      });
    }
    for (std::thread& w : workers) w.join();
    std::lock_guard<std::mutex> lock(sent_mu_);
    all_sent_.Add(total);
    return total;
  }

  // Sends until `stop` is set; the counts go into all_sent_.
  static std::thread BackgroundTraffic(std::atomic<bool>* stop) {
    return std::thread([stop] {
      for (uint32_t seed = 1000; !stop->load(); ++seed) SendTraffic(8, 0, 2, seed);
    });
  }

  static Sent AllSent() {
    std::lock_guard<std::mutex> lock(sent_mu_);
    return all_sent_;
  }

  static std::string server_path_;
  static std::string dir_;
  static int grpc_port_;
  static int metrics_port_;
  static Child* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static std::mutex sent_mu_;
  static Sent all_sent_;
};

std::string ServerFixture::server_path_;
std::string ServerFixture::dir_;
int ServerFixture::grpc_port_ = 0;
int ServerFixture::metrics_port_ = 0;
Child* ServerFixture::server_ = nullptr;
std::shared_ptr<grpc::Channel>* ServerFixture::channel_ = nullptr;
std::mutex ServerFixture::sent_mu_;
Sent ServerFixture::all_sent_;

// Histogram invariants: cumulative buckets never decrease and +Inf == count.
void ExpectConsistentHistogram(const std::vector<Sample>& s, const std::string& name) {
  const auto buckets = metrics_test::Buckets(s, name);
  ASSERT_FALSE(buckets.empty()) << name;
  for (size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_LE(buckets[i - 1].second, buckets[i].second) << name << " le=" << buckets[i].first;
  }
  EXPECT_TRUE(std::isinf(buckets.back().first)) << name;
  EXPECT_EQ(buckets.back().second, Value(s, name + "_count")) << name;
}

TEST_F(ServerFixture, MetricsCountExactlyTheTrafficSent) {
  const std::vector<Sample> before = Scrape();
  const Sent sent = SendTraffic(/*n=*/120, /*invalid=*/6, /*threads=*/4, /*seed=*/1);
  ASSERT_EQ(sent.ok, 120);
  // In-flight and queue depth return to zero once every reply is out, and
  // gRPC reports each reply sent (the last may come a moment after the
  // client has it).
  std::vector<Sample> after;
  const double sends_before = Value(before, "jagrank_response_send_seconds_count");
  EXPECT_TRUE(WaitFor(
      [&] {
        after = Scrape();
        return Value(after, "jagrank_inflight_requests") == 0 && Value(after, "jagrank_queue_depth") == 0 &&
               Value(after, "jagrank_response_send_seconds_count") - sends_before >= sent.ok + sent.invalid;
      },
      std::chrono::seconds(5)))
      << "inflight " << Value(after, "jagrank_inflight_requests") << " queue " << Value(after, "jagrank_queue_depth");
  auto delta = [&](const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    const double b = Value(before, name, labels);
    return Value(after, name, labels) - (std::isnan(b) ? 0 : b);
  };

  EXPECT_EQ(delta("jagrank_requests_total", {{"code", "OK"}}), sent.ok);
  EXPECT_EQ(delta("jagrank_requests_total", {{"code", "INVALID_ARGUMENT"}}), sent.invalid);
  EXPECT_EQ(delta("jagrank_candidates_total"), sent.candidates);
  EXPECT_EQ(delta("jagrank_rejections_total", {{"reason", "invalid_argument"}}), sent.invalid);
  EXPECT_EQ(delta("jagrank_request_latency_seconds_count"), sent.ok);  // OK calls only
  EXPECT_EQ(delta("jagrank_queue_latency_seconds_count"), sent.ok);
  EXPECT_EQ(delta("jagrank_response_send_seconds_count"), sent.ok + sent.invalid);
  EXPECT_GT(delta("jagrank_response_send_seconds_sum"), 0);

  // Every OK request sat in exactly one batch; invalid ones in none.
  EXPECT_EQ(delta("jagrank_batch_requests_sum"), sent.ok);
  EXPECT_EQ(delta("jagrank_batch_candidates_sum"), sent.candidates);
  EXPECT_EQ(delta("jagrank_batch_history_tokens_sum"), sent.kept_history_tokens);
  EXPECT_GE(delta("jagrank_batch_padded_history_tokens_sum"), sent.kept_history_tokens);
  const double batches = delta("jagrank_batches_total");
  EXPECT_GE(batches, 1);
  EXPECT_LE(batches, sent.ok);
  for (const char* h : {"jagrank_batch_requests", "jagrank_batch_candidates", "jagrank_batch_history_tokens",
                        "jagrank_compute_latency_seconds", "jagrank_batch_launch_seconds"}) {
    EXPECT_EQ(delta(std::string(h) + "_count"), batches) << h;
  }
  // The CPU backend launches and waits for one batch at a time, so each
  // launch lies inside its batch's compute time (timed from the launch).
  EXPECT_GT(delta("jagrank_batch_launch_seconds_sum"), 0);
  EXPECT_LE(delta("jagrank_batch_launch_seconds_sum"), delta("jagrank_compute_latency_seconds_sum"));
  for (const char* h : {"jagrank_batch_requests", "jagrank_batch_candidates", "jagrank_batch_history_tokens",
                        "jagrank_batch_padded_history_tokens", "jagrank_request_latency_seconds",
                        "jagrank_queue_latency_seconds", "jagrank_compute_latency_seconds",
                        "jagrank_batch_launch_seconds", "jagrank_response_send_seconds"}) {
    ExpectConsistentHistogram(after, h);
  }
  // Memory: the weights and the process are real; a CPU server has no device.
  EXPECT_GT(Value(after, "jagrank_model_weights_bytes"), 5000 * 64 * 4);
  EXPECT_GT(Value(after, "jagrank_process_resident_memory_bytes"), Value(after, "jagrank_model_weights_bytes"));
  EXPECT_EQ(Value(after, "jagrank_device_memory_total_bytes"), 0);
  EXPECT_GE(delta("jagrank_padding_saved_bytes_total"), 0);
  for (const std::string& name : metrics_test::DesignMetricNames()) {
    EXPECT_TRUE(metrics_test::FamilyNames(after).count(name)) << name;
  }
}

TEST_F(ServerFixture, EveryDashboardMetricIsExported) {
  SendTraffic(4, 0, 1, 2);
  const auto dashboard = nlohmann::json::parse(metrics_test::ReadFile("deploy/grafana/dashboards/jagrank.json"));
  const std::set<std::string> exported = metrics_test::FamilyNames(Scrape());
  int queried = 0;
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) {
      for (const std::string& name : metrics_test::MetricNamesIn(target.at("expr").get<std::string>())) {
        ++queried;
        EXPECT_TRUE(exported.count(name)) << panel.at("title") << " queries " << name;
      }
    }
  }
  EXPECT_GT(queried, 20);
}

// GET on Prometheus's HTTP API; the parsed JSON (null on failure).
nlohmann::json PrometheusQuery(int port, const std::string& promql) {
  std::string encoded;
  for (unsigned char c : promql) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
      encoded += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      encoded += hex;
    }
  }
  const metrics_test::HttpResponse r = HttpGet(port, "/api/v1/query?query=" + encoded);
  if (r.status == 0) return nullptr;
  return nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
}

// The single value of an instant-vector query with one result; NaN otherwise.
double ScalarResult(const nlohmann::json& j) {
  if (j.is_discarded() || j.is_null() || j.value("status", "") != "success") return std::nan("");
  const auto& result = j["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nan("");
  return std::stod(result[0]["value"][1].get<std::string>());
}

TEST_F(ServerFixture, RealPrometheusScrapesMatchingCountsAndPositiveRate) {
  const int prom_port = FreePort();
  const std::string config = dir_ + "/prometheus.yml";
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  std::ofstream(config) << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                           "rule_files: ['"
                        << cwd << "/deploy/jagrank-rules.yml']\n"
                        << "scrape_configs:\n"
                           "  - job_name: jagrank\n"
                           "    static_configs: [{targets: ['127.0.0.1:"
                        << metrics_port_ << "']}]\n";
  Child prometheus;
  ASSERT_TRUE(prometheus.Start({"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir_ + "/tsdb",
                                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
                               dir_ + "/prometheus.log"));
  ASSERT_TRUE(WaitFor([&] { return !prometheus.Running() || HttpGet(prom_port, "/-/ready").status == 200; },
                      std::chrono::seconds(30)) &&
              prometheus.Running())
      << metrics_test::ReadFile(dir_ + "/prometheus.log");

  // Traffic until Prometheus holds 3 scrapes of it, then quiet so the counts settle.
  std::atomic<bool> stop{false};
  std::thread traffic = BackgroundTraffic(&stop);
  const bool scraped_during_traffic = WaitFor(
      [&] {
        return ScalarResult(PrometheusQuery(
                   prom_port, "count_over_time(jagrank_requests_total{code=\"OK\"}[1m])")) >= 3;
      },
      std::chrono::seconds(30));
  stop = true;
  traffic.join();
  ASSERT_TRUE(scraped_during_traffic) << metrics_test::ReadFile(dir_ + "/prometheus.log");
  const Sent sent = AllSent();
  const std::vector<Sample> server_view = Scrape();
  ASSERT_EQ(Value(server_view, "jagrank_requests_total", {{"code", "OK"}}), sent.ok);

  double scraped = std::nan("");
  const bool caught_up = WaitFor(
      [&] {
        scraped = ScalarResult(PrometheusQuery(prom_port, "sum(jagrank_requests_total{job=\"jagrank\",code=\"OK\"})"));
        return scraped == sent.ok;
      },
      std::chrono::seconds(20));
  EXPECT_TRUE(caught_up) << "Prometheus has " << scraped << ", sent " << sent.ok;
  EXPECT_EQ(ScalarResult(PrometheusQuery(prom_port, "sum(jagrank_candidates_total)")), sent.candidates);
  // docs/metrics.md's QPS expression is positive after traffic.
  const double qps = ScalarResult(PrometheusQuery(prom_port, "sum(rate(jagrank_requests_total[1m]))"));
  EXPECT_GT(qps, 0);
  // The recording rules of deploy/jagrank-rules.yml evaluate on real data.
  EXPECT_TRUE(WaitFor([&] { return ScalarResult(PrometheusQuery(prom_port, "jagrank:qps:rate1m")) > 0; },
                      std::chrono::seconds(10)));

  // Every dashboard query is valid PromQL for this Prometheus.
  const auto dashboard = nlohmann::json::parse(metrics_test::ReadFile("deploy/grafana/dashboards/jagrank.json"));
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) {
      std::string expr = target.at("expr").get<std::string>();
      expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "30s");
      expr = std::regex_replace(expr, std::regex(R"(\$instance)"), ".*");
      const nlohmann::json j = PrometheusQuery(prom_port, expr);
      EXPECT_EQ(j.is_discarded() || j.is_null() ? "" : j.value("status", ""), "success")
          << panel.at("title") << ": " << expr << " -> " << (j.is_discarded() ? "" : j.dump());
    }
  }
  prometheus.Stop(std::chrono::seconds(10));
}

// Runs chromium headless on the status page with `mode_flag`; returns stdout.
std::string RunChromium(const std::string& url, const std::string& profile_dir, const std::string& mode_flag) {
  const std::string cmd =
      "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage "
      "--hide-scrollbars --user-data-dir='" +
      profile_dir + "' --window-size=1260,560 --virtual-time-budget=6000 " + mode_flag + " '" + url +
      "' 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

std::string DataAttribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex(name + "=\"([^\"]*)\""))) return "";
  return m[1];
}

TEST_F(ServerFixture, StatusPageInChromiumDrawsChartsAfterTraffic) {
  std::atomic<bool> stop{false};
  std::thread traffic = BackgroundTraffic(&stop);
  const std::string url = "http://127.0.0.1:" + std::to_string(metrics_port_) + "/";
  const std::string shot = dir_ + "/status_page.png";
  RunChromium(url, dir_ + "/chromium-shot", "--screenshot='" + shot + "'");
  const std::string dom = RunChromium(url, dir_ + "/chromium-dom", "--dump-dom");
  stop = true;
  traffic.join();

  // The page's own account of what it drew (see status_page.html).
  ASSERT_NE(dom.find("<canvas id=\"qps\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_GE(std::atoi(DataAttribute(dom, "data-samples").c_str()), 3);
  EXPECT_GT(std::atof(DataAttribute(dom, "data-requests").c_str()), 0);
  // Maxima over the page's samples: under virtual time a single poll window
  // may fall between two requests, the whole run does not.
  EXPECT_GT(std::atof(DataAttribute(dom, "data-qps-max").c_str()), 0);
  EXPECT_GT(std::atof(DataAttribute(dom, "data-p99-max-seconds").c_str()), 0);
  EXPECT_GT(std::atof(DataAttribute(dom, "data-rss-bytes").c_str()), 1 << 20);

  // The screenshot: each chart's line colour covers a visible stretch.
  metrics_test::RgbImage image;
  std::string error;
  ASSERT_TRUE(metrics_test::DecodePng(metrics_test::ReadFile(shot), &image, &error)) << error;
  EXPECT_EQ(image.width, 1260);
  const int64_t qps_px = metrics_test::CountColor(image, 0x1f, 0x77, 0xb4);
  const int64_t p99_px = metrics_test::CountColor(image, 0xff, 0x7f, 0x0e);
  const int64_t rss_px = metrics_test::CountColor(image, 0x2c, 0xa0, 0x2c);
  EXPECT_GT(qps_px, 150) << "QPS chart looks empty";
  EXPECT_GT(p99_px, 150) << "p99 chart looks empty";
  EXPECT_GT(rss_px, 150) << "memory chart looks empty";
  const std::string keep = Env("JAGRANK_STATUS_PAGE_SCREENSHOT");
  if (!keep.empty()) {
    std::ofstream(keep, std::ios::binary) << metrics_test::ReadFile(shot);
  }
}

}  // namespace
}  // namespace jagrank
