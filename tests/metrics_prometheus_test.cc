// PrometheusMetrics fed known events, scraped over HTTP from its own exposer:
// counts, histogram buckets and gauges must be exactly what was fed, every
// docs/metrics.md name present, and the status page served at "/".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/prometheus_metrics.h"
#include "tests/metrics_http.h"

// 256 KiB of static TLS in every thread, like a server linking cuBLASLt and
// OpenBLAS: CivetWeb's default 100 KiB thread stacks cannot hold it.
thread_local char g_large_static_tls[256 << 10];

namespace jagrank {
namespace {

using metrics_test::BucketCount;
using metrics_test::HttpGet;
using metrics_test::ParseExposition;
using metrics_test::Sample;
using metrics_test::Value;

std::unique_ptr<PrometheusMetrics> StartMetrics() {
  std::unique_ptr<PrometheusMetrics> metrics;
  const Status s = PrometheusMetrics::Create("127.0.0.1:0", &metrics);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return metrics;
}

std::vector<Sample> Scrape(int port) {
  const metrics_test::HttpResponse r = HttpGet(port, "/metrics");
  EXPECT_EQ(r.status, 200) << r.headers;
  return ParseExposition(r.body);
}

TEST(PrometheusMetricsTest, BindsAnEphemeralPortAndServesEveryDesignName) {
  auto metrics = StartMetrics();
  ASSERT_NE(metrics, nullptr);
  ASSERT_GT(metrics->port(), 0);
  const std::vector<Sample> samples = Scrape(metrics->port());
  const std::set<std::string> names = metrics_test::FamilyNames(samples);
  for (const std::string& name : metrics_test::DesignMetricNames()) {
    EXPECT_TRUE(names.count(name)) << name << " missing from /metrics";
  }
  // Known codes exist at zero before any traffic, so rate() sees them.
  EXPECT_EQ(Value(samples, "jagrank_requests_total", {{"code", "OK"}}), 0);
  EXPECT_EQ(Value(samples, "jagrank_rejections_total", {{"reason", "queue_full"}}), 0);
}

// Connections that never finish their request (one silent, one stopped
// in the middle of its headers) must not hold the exposer's workers: a scrape
// meanwhile is answered at once (with 2 threads and CivetWeb's 30 s request
// timeout it waited ~30 s). The half-open connections are closed by the
// server after its request timeout.
TEST(PrometheusMetricsTest, HalfOpenConnectionsDoNotBlindTheScrape) {
  auto metrics = StartMetrics();
  ASSERT_NE(metrics, nullptr);
  std::vector<int> half_open;
  for (const std::string& partial : {std::string(), std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n")}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(metrics->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (!partial.empty()) {
      ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), static_cast<ssize_t>(partial.size()));
    }
    half_open.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the server take them up
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const metrics_test::HttpResponse r = HttpGet(metrics->port(), "/metrics", std::chrono::milliseconds(1000));
    EXPECT_EQ(r.status, 200) << "scrape " << i << " not answered within 1 s beside two half-open connections";
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  }
  // The server gives up on them after its request timeout (the partial one
  // may get an error status first): each reads end-of-stream.
  for (int fd : half_open) {
    bool closed = false;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (!closed && ::poll(&p, 1, 10000) == 1) closed = ::recv(fd, buf, sizeof(buf), 0) <= 0;
    EXPECT_TRUE(closed) << "a half-open connection was never closed by the server";
    ::close(fd);
  }
}

TEST(PrometheusMetricsTest, ReportsExactlyTheEventsFed) {
  auto metrics = StartMetrics();
  ASSERT_NE(metrics, nullptr);
  for (int i = 0; i < 7; ++i) metrics->OnRequestDone("OK", 3, 0.0004);
  for (int i = 0; i < 2; ++i) metrics->OnRequestDone("INVALID_ARGUMENT", 0, 0.00002);
  metrics->OnRequestDone("ABORTED", 0, 2.0);  // a code not pre-registered
  for (int i = 0; i < 3; ++i) metrics->OnRejected("queue_full");
  metrics->OnRejected("novel_reason");
  metrics->OnQueueLatency(0.003);
  metrics->OnQueueLatency(0.003);
  BatchStats batch;
  batch.requests = 4;
  batch.candidates = 12;
  batch.history_tokens = 100;
  batch.padded_history_tokens = 160;
  batch.assemble_seconds = 0.0001;
  batch.launch_seconds = 0.0003;
  batch.compute_seconds = 0.002;
  metrics->OnBatch(batch);
  batch.requests = 3;
  batch.candidates = 9;
  metrics->OnBatch(batch);
  metrics->SetQueueDepth(5);
  metrics->SetInflight(2);
  ModelMemory memory;
  memory.weights_bytes = 1000;
  memory.device_used_bytes = 5000;
  memory.device_total_bytes = 10000;
  memory.workspace_peak_bytes = 300;
  memory.padding_saved_bytes = 640;
  metrics->SetMemory(memory);
  memory.device_used_bytes = 4000;   // peak must stay at 5000
  memory.padding_saved_bytes = 1000;  // cumulative: the counter adds 360
  metrics->SetMemory(memory);

  const std::vector<Sample> s = Scrape(metrics->port());
  EXPECT_EQ(Value(s, "jagrank_requests_total", {{"code", "OK"}}), 7);
  EXPECT_EQ(Value(s, "jagrank_requests_total", {{"code", "INVALID_ARGUMENT"}}), 2);
  EXPECT_EQ(Value(s, "jagrank_requests_total", {{"code", "ABORTED"}}), 1);
  EXPECT_EQ(metrics_test::SumOf(s, "jagrank_requests_total"), 10);
  EXPECT_EQ(Value(s, "jagrank_candidates_total"), 21);
  EXPECT_EQ(Value(s, "jagrank_rejections_total", {{"reason", "queue_full"}}), 3);
  EXPECT_EQ(Value(s, "jagrank_rejections_total", {{"reason", "novel_reason"}}), 1);

  // The request latency takes OK calls only (the 20 us refusals and the 2 s
  // ABORTED are counted by code, not timed); buckets resolve sub-millisecond.
  EXPECT_EQ(Value(s, "jagrank_request_latency_seconds_count"), 7);
  EXPECT_NEAR(Value(s, "jagrank_request_latency_seconds_sum"), 7 * 0.0004, 1e-9);
  EXPECT_EQ(BucketCount(s, "jagrank_request_latency_seconds", 250e-6), 0);
  EXPECT_EQ(BucketCount(s, "jagrank_request_latency_seconds", 500e-6), 7);
  EXPECT_EQ(BucketCount(s, "jagrank_request_latency_seconds", INFINITY), 7);
  // The rejection counter's help says what it counts (not "before queueing":
  // it also counts calls dropped from the queue).
  const std::string text = HttpGet(metrics->port(), "/metrics").body;
  const size_t help = text.find("# HELP jagrank_rejections_total ");
  ASSERT_NE(help, std::string::npos);
  const std::string help_line = text.substr(help, text.find('\n', help) - help);
  EXPECT_EQ(help_line.find("before queueing"), std::string::npos) << help_line;
  for (const char* reason : {"queue_full", "deadline", "cancelled", "non_finite_scores"}) {
    EXPECT_NE(help_line.find(reason), std::string::npos) << help_line;
  }
  EXPECT_EQ(Value(s, "jagrank_queue_latency_seconds_count"), 2);
  EXPECT_EQ(BucketCount(s, "jagrank_queue_latency_seconds", 2.5e-3), 0);
  EXPECT_EQ(BucketCount(s, "jagrank_queue_latency_seconds", 5e-3), 2);

  EXPECT_EQ(Value(s, "jagrank_batches_total"), 2);
  EXPECT_EQ(Value(s, "jagrank_batch_requests_count"), 2);
  EXPECT_EQ(Value(s, "jagrank_batch_requests_sum"), 7);
  EXPECT_EQ(BucketCount(s, "jagrank_batch_requests", 2), 0);
  EXPECT_EQ(BucketCount(s, "jagrank_batch_requests", 4), 2);
  EXPECT_EQ(Value(s, "jagrank_batch_candidates_sum"), 21);
  EXPECT_EQ(Value(s, "jagrank_batch_history_tokens_sum"), 200);
  EXPECT_EQ(Value(s, "jagrank_batch_padded_history_tokens_sum"), 320);
  EXPECT_EQ(Value(s, "jagrank_compute_latency_seconds_count"), 2);
  EXPECT_NEAR(Value(s, "jagrank_compute_latency_seconds_sum"), 0.004, 1e-12);
  EXPECT_NEAR(Value(s, "jagrank_batch_assemble_seconds_sum"), 0.0002, 1e-12);
  EXPECT_EQ(Value(s, "jagrank_batch_launch_seconds_count"), 2);
  EXPECT_NEAR(Value(s, "jagrank_batch_launch_seconds_sum"), 0.0006, 1e-12);

  EXPECT_EQ(Value(s, "jagrank_queue_depth"), 5);
  EXPECT_EQ(Value(s, "jagrank_inflight_requests"), 2);
  EXPECT_EQ(Value(s, "jagrank_model_weights_bytes"), 1000);
  EXPECT_EQ(Value(s, "jagrank_device_memory_used_bytes"), 4000);
  EXPECT_EQ(Value(s, "jagrank_device_memory_total_bytes"), 10000);
  EXPECT_EQ(Value(s, "jagrank_device_memory_peak_bytes"), 5000);
  EXPECT_EQ(Value(s, "jagrank_workspace_peak_bytes"), 300);
  EXPECT_EQ(Value(s, "jagrank_padding_saved_bytes_total"), 1000);
  // RSS is read from /proc at scrape time: a live process holds megabytes.
  EXPECT_GT(Value(s, "jagrank_process_resident_memory_bytes"), 1 << 20);
}

TEST(PrometheusMetricsTest, ConcurrentEventsAreAllCounted) {
  auto metrics = StartMetrics();
  ASSERT_NE(metrics, nullptr);
  constexpr int kThreads = 4, kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      const std::string code = t % 2 == 0 ? "OK" : "code_" + std::to_string(t);
      for (int i = 0; i < kPerThread; ++i) {
        metrics->OnRequestDone(code, 2, 0.001);
        metrics->OnRejected("reason_" + std::to_string(i % 3));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<Sample> s = Scrape(metrics->port());
  EXPECT_EQ(metrics_test::SumOf(s, "jagrank_requests_total"), kThreads * kPerThread);
  EXPECT_EQ(Value(s, "jagrank_requests_total", {{"code", "OK"}}), 2 * kPerThread);
  EXPECT_EQ(Value(s, "jagrank_candidates_total"), 2.0 * kThreads * kPerThread);
  EXPECT_EQ(metrics_test::SumOf(s, "jagrank_rejections_total"), kThreads * kPerThread);
  EXPECT_EQ(Value(s, "jagrank_request_latency_seconds_count"), 2 * kPerThread);  // OK calls only
}

TEST(PrometheusMetricsTest, ServesTheSelfContainedStatusPageAtRoot) {
  auto metrics = StartMetrics();
  ASSERT_NE(metrics, nullptr);
  const metrics_test::HttpResponse page = HttpGet(metrics->port(), "/");
  ASSERT_EQ(page.status, 200) << page.headers;
  EXPECT_NE(page.headers.find("text/html"), std::string::npos) << page.headers;
  EXPECT_NE(page.body.find("<canvas id=\"qps\""), std::string::npos);
  EXPECT_NE(page.body.find("<canvas id=\"p99\""), std::string::npos);
  EXPECT_NE(page.body.find("<canvas id=\"mem\""), std::string::npos);
  EXPECT_NE(page.body.find("fetch(\"metrics\""), std::string::npos);
  // No CDN: nothing is loaded from another origin.
  EXPECT_EQ(page.body.find("http://"), std::string::npos);
  EXPECT_EQ(page.body.find("https://"), std::string::npos);
  EXPECT_EQ(page.body.find("src="), std::string::npos);
  EXPECT_EQ(HttpGet(metrics->port(), "/index.html").status, 200);
  // The page handler leaves /metrics to the exposer.
  const metrics_test::HttpResponse m = HttpGet(metrics->port(), "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("jagrank_requests_total"), std::string::npos);
  EXPECT_EQ(HttpGet(metrics->port(), "/nope").status, 404);
}

TEST(PrometheusMetricsTest, BindsTheGivenPort) {
  // Find a free port through an ephemeral bind, then ask for it by number.
  int port = 0;
  {
    auto probe = StartMetrics();
    ASSERT_NE(probe, nullptr);
    port = probe->port();
  }
  std::unique_ptr<PrometheusMetrics> metrics;
  const Status s = PrometheusMetrics::Create("127.0.0.1:" + std::to_string(port), &metrics);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(metrics->port(), port);
  EXPECT_EQ(HttpGet(port, "/metrics").status, 200);
}

TEST(PrometheusMetricsTest, StartsDespiteLargeStaticTls) {
  g_large_static_tls[0] = 1;  // keep the TLS block referenced
  auto metrics = StartMetrics();  // fails with "null context" without the stack-size fix
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(HttpGet(metrics->port(), "/metrics").status, 200);
  EXPECT_EQ(g_large_static_tls[0], 1);
}

TEST(PrometheusMetricsTest, BusyAddressIsAClearError) {
  auto first = StartMetrics();
  ASSERT_NE(first, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  std::unique_ptr<PrometheusMetrics> second;
  const Status s = PrometheusMetrics::Create(address, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(address), std::string::npos) << s.ToString();
  EXPECT_EQ(second, nullptr);
}

}  // namespace
}  // namespace jagrank
