// The server under hostile load, in process over real loopback sockets:
// connections that open streams declaring 15 MB messages and push bytes as
// fast as the server's flow control lets them, never finishing a message.
// gRPC's resource quota (grpc_memory_quota_bytes) bounds what they can make
// the process hold, and a well-behaved call meanwhile answers at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include "raw_h2_client.h"
#include "server/server.h"
#include "server_test_helpers.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;
using server_test::MakeRequest;
using testing::RawH2Client;

int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : 0;
}

// One hostile connection: `streams` streams at a time on /jagrank.v1.Ranker/Rank,
// each declaring a message of kDeclaredBytes and pushing its body in 16 KiB
// DATA frames as far as the connection's and the stream's flow-control
// windows allow, never reaching the end. A stream the server resets is
// replaced by a new one. Stops when `stop` is set or the connection dies.
class HostileConnection {
 public:
  static constexpr uint32_t kDeclaredBytes = 15u << 20;

  HostileConnection(int port, int streams, std::atomic<bool>* stop, std::atomic<int64_t>* pushed)
      : port_(port), streams_(streams), stop_(stop), pushed_(pushed) {}

  void Run() {
    if (!h2_.Connect(port_)) return;
    for (int i = 0; i < streams_; ++i) OpenStream();
    const std::string chunk(16384, 'x');
    while (!stop_->load()) {
      // Take in what the server said (window updates, resets, settings).
      RawH2Client::Frame frame;
      while (h2_.ReadFrame(&frame, std::chrono::steady_clock::now())) {
        if (!Apply(frame)) return;
      }
      bool sent = false;
      for (auto& [id, stream] : open_) {
        const int64_t room =
            std::min({connection_window_, stream.window, static_cast<int64_t>(kDeclaredBytes) - stream.sent - 1});
        if (room <= 0) continue;
        const int64_t n = std::min<int64_t>(room, chunk.size());
        std::string payload = chunk.substr(0, n);
        if (stream.sent == 0) payload = RawH2Client::GrpcPrefix(kDeclaredBytes) + payload.substr(5);
        if (!h2_.SendFrame(RawH2Client::kData, 0, id, payload)) return;
        stream.sent += n;
        stream.window -= n;
        connection_window_ -= n;
        pushed_->fetch_add(n);
        sent = true;
      }
      if (!sent) {  // every window is shut: wait for the server
        if (h2_.ReadFrame(&frame, std::chrono::steady_clock::now() + 20ms) && !Apply(frame)) return;
      }
    }
  }

  // Unblocks Run from another thread.
  void Shutdown() { h2_.Shutdown(); }
  int64_t resets() const { return resets_.load(); }

 private:
  struct Stream {
    int64_t window = 0;
    int64_t sent = 0;
  };

  void OpenStream() {
    const uint32_t id = next_stream_;
    next_stream_ += 2;
    if (!h2_.SendRequestHeaders(id, "/jagrank.v1.Ranker/Rank")) return;
    open_[id].window = initial_stream_window_;
  }

  // False when the connection is finished (GOAWAY).
  bool Apply(const RawH2Client::Frame& frame) {
    switch (frame.type) {
      case RawH2Client::kSettings:
        if (frame.flags & RawH2Client::kAck) break;
        for (size_t at = 0; at + 6 <= frame.payload.size(); at += 6) {
          const uint16_t id = (static_cast<uint8_t>(frame.payload[at]) << 8) | static_cast<uint8_t>(frame.payload[at + 1]);
          const int64_t value = (int64_t{static_cast<uint8_t>(frame.payload[at + 2])} << 24) |
                                (static_cast<uint8_t>(frame.payload[at + 3]) << 16) |
                                (static_cast<uint8_t>(frame.payload[at + 4]) << 8) |
                                static_cast<uint8_t>(frame.payload[at + 5]);
          if (id == 0x4) {  // SETTINGS_INITIAL_WINDOW_SIZE: applies to open streams too
            for (auto& [stream_id, stream] : open_) stream.window += value - initial_stream_window_;
            initial_stream_window_ = value;
          }
        }
        break;
      case RawH2Client::kWindowUpdate: {
        const int64_t increment = ((int64_t{static_cast<uint8_t>(frame.payload[0])} & 0x7f) << 24) |
                                  (static_cast<uint8_t>(frame.payload[1]) << 16) |
                                  (static_cast<uint8_t>(frame.payload[2]) << 8) |
                                  static_cast<uint8_t>(frame.payload[3]);
        if (frame.stream == 0) {
          connection_window_ += increment;
        } else if (open_.count(frame.stream)) {
          open_[frame.stream].window += increment;
        }
        break;
      }
      case RawH2Client::kRstStream:
      case RawH2Client::kHeaders:  // trailers: the server ended the call
        if (open_.erase(frame.stream) > 0) {
          resets_.fetch_add(1);
          OpenStream();
        }
        break;
      case RawH2Client::kGoaway:
        return false;
      default:
        break;
    }
    return true;
  }

  const int port_;
  const int streams_;
  std::atomic<bool>* const stop_;
  std::atomic<int64_t>* const pushed_;
  RawH2Client h2_;
  std::map<uint32_t, Stream> open_;
  uint32_t next_stream_ = 1;
  int64_t connection_window_ = 65535;
  int64_t initial_stream_window_ = 65535;
  std::atomic<int64_t> resets_{0};
};

// 64 hostile connections with 4 streams each could make an unbounded server
// take 64 x 4 x 15 MB = 3.75 GiB (it took 1 GiB in about 1.5 s here, where
// the attack is stopped). With a 64 MiB quota the server reads 2 messages at
// a time (half the quota over the 16 MiB receive cap), evicts the reads that
// do not finish, and gRPC shrinks the windows of the streams left unread:
// the process stays within the quota plus kSlackBytes (gRPC's per-connection
// state and what the allocator keeps of the freed buffers; it settled about
// 110 MiB above the start here while over 1 GiB went through), and a normal
// call meanwhile answers in well under a second.
TEST(ServerHostileTest, UnfinishedLargeMessagesStayWithinTheMemoryQuota) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Under a sanitizer the process's RSS also holds the freed-memory
  // quarantine and shadow memory, so it does not measure what gRPC holds;
  // the bound is checked by the plain build (make test).
  GTEST_SKIP() << "RSS bound not meaningful under a sanitizer";
#endif
  constexpr int64_t kQuotaBytes = 64ll << 20;
  constexpr int64_t kSlackBytes = 128ll << 20;
  constexpr int64_t kSafetyStopBytes = 1ll << 30;  // RSS growth at which an unbounded server is stopped
  ServerConfig config;
  config.grpc_address = "127.0.0.1:0";
  config.metrics_address = "";
  config.drain_linger_ms = 0;
  config.grpc_memory_quota_bytes = kQuotaBytes;
  const ModelConfig model_config = server_test::SmallModelConfig();
  server_test::CountingMetrics metrics;
  std::unique_ptr<JagrankServer> server;
  Status s = JagrankServer::CreateWithModel(config, server_test::MakeCpuModel(model_config), &metrics, &server);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Ranker::NewStub(channel);
  const v1::RankRequest probe = MakeRequest(900, 8, 16, model_config);
  auto rank = [&](double* seconds) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::RankResponse response;
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status status = stub->Rank(&context, probe, &response);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return status.ok() && response.scores_size() == probe.candidate_item_ids_size();
  };
  double seconds = 0;
  ASSERT_TRUE(rank(&seconds));
  const int64_t base = ResidentBytes();

  std::atomic<bool> stop{false};
  std::atomic<int64_t> pushed{0};
  std::vector<std::unique_ptr<HostileConnection>> hostile;
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    hostile.push_back(std::make_unique<HostileConnection>(server->port(), 4, &stop, &pushed));
    threads.emplace_back([h = hostile.back().get()] { h->Run(); });
  }
  int64_t peak = base;
  bool probe_ok = false;
  double probe_seconds = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 3s && peak - base < kSafetyStopBytes) {
    std::this_thread::sleep_for(20ms);
    peak = std::max(peak, ResidentBytes());
    if (!probe_ok && std::chrono::steady_clock::now() - start > 1500ms) {
      probe_ok = rank(&probe_seconds);
      peak = std::max(peak, ResidentBytes());
    }
  }
  peak = std::max(peak, ResidentBytes());
  stop = true;
  for (auto& h : hostile) h->Shutdown();
  for (std::thread& t : threads) t.join();
  int64_t resets = 0;
  for (auto& h : hostile) resets += h->resets();

  std::printf("hostile: pushed %.1f MiB, %lld streams reset by the server, RSS %.1f -> peak %.1f MiB, probe %.1f ms\n",
              pushed.load() / 1048576.0, static_cast<long long>(resets), base / 1048576.0, peak / 1048576.0,
              probe_seconds * 1e3);
  EXPECT_LE(peak - base, kQuotaBytes + kSlackBytes);
  EXPECT_TRUE(probe_ok) << "no answer to a normal call during the attack";
  EXPECT_LT(probe_seconds, 1.0);
  // Afterwards the server still answers.
  ASSERT_TRUE(rank(&seconds));
  EXPECT_TRUE(server->Drain().ok());
}

// The memory and connection keys parse, refuse bad values naming the key,
// and the quota's default follows the machine.
TEST(ServerHostileTest, MemoryAndConnectionKeysParseAndValidate) {
  ServerConfig c;
  Status s = ParseServerConfig(
      "grpc_memory_quota_bytes: 1073741824\ngrpc_max_connection_idle_ms: 1000\n"
      "grpc_max_connection_age_ms: 0\ngrpc_max_connection_age_grace_ms: 5\n",
      &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(GrpcMemoryQuotaBytes(c), 1073741824);
  EXPECT_EQ(c.grpc_max_connection_idle_ms, 1000);
  EXPECT_EQ(c.grpc_max_connection_age_ms, 0);
  EXPECT_EQ(c.grpc_max_connection_age_grace_ms, 5);
  s = ParseServerConfig("grpc_memory_quota_bytes: -1\n", &c);
  EXPECT_NE(s.message().find("grpc_memory_quota_bytes"), std::string::npos) << s.ToString();
  s = ParseServerConfig("grpc_max_connection_age_ms: 99999999999\n", &c);
  EXPECT_NE(s.message().find("grpc_max_connection_age_ms"), std::string::npos) << s.ToString();
  const ServerConfig defaults;
  const int64_t machine = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(GrpcMemoryQuotaBytes(defaults), 0);
  EXPECT_LE(GrpcMemoryQuotaBytes(defaults), machine / 4);
}

}  // namespace
}  // namespace jagrank
