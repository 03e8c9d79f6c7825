// ServerConfig parsing and validation, flag parsing, the Status -> gRPC map
// and request validation messages.
#include <gtest/gtest.h>

#include "common/flags.h"
#include "server/grpc_status.h"
#include "server/server.h"
#include "server/server_config.h"

namespace jagrank {
namespace {

TEST(ServerConfigTest, EmbeddedServerYamlParsesToTheDefaults) {
  ServerConfig parsed;
  Status s = ParseServerConfig(EmbeddedServerYaml(), &parsed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const ServerConfig defaults;
  EXPECT_EQ(parsed.grpc_address, "0.0.0.0:8500");
  EXPECT_EQ(parsed.metrics_address, "0.0.0.0:9100");
  EXPECT_EQ(parsed.batching.max_queue_delay_us, defaults.batching.max_queue_delay_us);
  EXPECT_EQ(parsed.batching.max_batch_candidates, defaults.batching.max_batch_candidates);
  EXPECT_EQ(parsed.batching.max_queue_requests, defaults.batching.max_queue_requests);
  EXPECT_EQ(parsed.max_candidates_per_request, defaults.max_candidates_per_request);
}

TEST(ServerConfigTest, KeysOverrideAndErrorsNameTheKey) {
  ServerConfig c;
  ASSERT_TRUE(ParseServerConfig("attention: padded_dense\nbatching:\n  max_queue_delay_us: 500\n", &c).ok());
  EXPECT_EQ(c.attention, "padded_dense");
  EXPECT_EQ(c.batching.max_queue_delay_us, 500);
  EXPECT_FALSE(c.batching.dispatch_when_idle);
  ASSERT_TRUE(ParseServerConfig("batching:\n  dispatch_when_idle: true\n", &c).ok());
  EXPECT_TRUE(c.batching.dispatch_when_idle);
  // Each value of `key` is refused, naming the key and the upper limit.
  auto expect_refused = [&c](const std::string& key, std::initializer_list<const char*> values, const char* limit) {
    for (const char* value : values) {
      const std::string yaml = key + ": " + value + "\n";
      Status s = ParseServerConfig(yaml, &c);
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << yaml;
      EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(limit), std::string::npos) << s.message();
    }
  };
  ASSERT_TRUE(ParseServerConfig("grpc_completion_queues: 3\n", &c).ok());
  EXPECT_EQ(c.grpc_completion_queues, 3);
  expect_refused("grpc_completion_queues", {"65", "-1"}, "64");
  ASSERT_TRUE(ParseServerConfig("grpc_max_concurrent_streams: 128\n", &c).ok());
  EXPECT_EQ(c.grpc_max_concurrent_streams, 128);
  expect_refused("grpc_max_concurrent_streams", {"-1", "1048577"}, "1048576");
  ASSERT_TRUE(ParseServerConfig("grpc_channel_args: grpc.http2.bdp_probe=0,grpc.optimization_target=throughput\n",
                                &c).ok());
  EXPECT_EQ(c.grpc_channel_args, "grpc.http2.bdp_probe=0,grpc.optimization_target=throughput");
  expect_refused("grpc_channel_args", {"grpc.max_concurrent_streams=4"}, "set it with grpc_max_concurrent_streams");
  expect_refused("grpc_channel_args", {"grpc.keepalive_time_ms=5"}, "set it with keepalive_time_ms");
  expect_refused("grpc_channel_args", {"grpc.minimal_stack=1"}, "receive-size cap");
  expect_refused("grpc_channel_args", {"minimal_stack=1"}, "names start with 'grpc.'");
  EXPECT_EQ(c.cuda_sync, "spin");
  ASSERT_TRUE(ParseServerConfig("cuda_sync: block\n", &c).ok());
  EXPECT_EQ(c.cuda_sync, "block");
  expect_refused("cuda_sync", {"yield", "\"\""}, "must be spin or block");
  Status bad = ParseServerConfig("batching:\n  dispatch_when_idle: sometimes\n", &c);
  EXPECT_NE(bad.message().find("batching.dispatch_when_idle"), std::string::npos) << bad.message();

  Status s = ParseServerConfig("max_queue_delay: 5\n", &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("max_queue_delay"), std::string::npos) << s.message();
  s = ParseServerConfig("batching:\n  max_batch_candidates: 0\n", &c);
  EXPECT_NE(s.message().find("batching.max_batch_candidates"), std::string::npos) << s.message();
  s = ParseServerConfig("attention: sparse\n", &c);
  EXPECT_NE(s.message().find("attention"), std::string::npos) << s.message();
  s = ParseServerConfig("max_candidates_per_request: many\n", &c);
  EXPECT_NE(s.message().find("max_candidates_per_request"), std::string::npos) << s.message();
}

TEST(FlagParserTest, ParsesBothFormsAndRejectsUnknown) {
  std::string address = "a";
  int64_t delay = 1;
  bool health = false;
  double rate = 0;
  FlagParser flags("test");
  flags.Add("grpc-address", &address, "");
  flags.Add("max-queue-delay-us", &delay, "");
  flags.Add("health", &health, "");
  flags.Add("rate", &rate, "");
  const char* argv[] = {"prog", "--grpc-address=1.2.3.4:5", "--max-queue-delay-us", "250", "--health", "--rate=2.5"};
  ASSERT_TRUE(flags.Parse(6, const_cast<char**>(argv)).ok());
  EXPECT_EQ(address, "1.2.3.4:5");
  EXPECT_EQ(delay, 250);
  EXPECT_TRUE(health);
  EXPECT_DOUBLE_EQ(rate, 2.5);
  EXPECT_TRUE(flags.IsSet("rate"));

  const char* bad[] = {"prog", "--max-queue-delay-us=soon"};
  Status s = flags.Parse(2, const_cast<char**>(bad));
  EXPECT_NE(s.message().find("max-queue-delay-us"), std::string::npos);
  const char* unknown[] = {"prog", "--nope=1"};
  EXPECT_EQ(flags.Parse(2, const_cast<char**>(unknown)).code(), Status::Code::kInvalidArgument);
}

TEST(GrpcStatusTest, MapsEveryCodeAndNamesTheRequest) {
  EXPECT_TRUE(ToGrpcStatus(Status::Ok(), "r").ok());
  const std::pair<Status, grpc::StatusCode> cases[] = {
      {Status::InvalidArgument("x"), grpc::StatusCode::INVALID_ARGUMENT},
      {Status::NotFound("x"), grpc::StatusCode::NOT_FOUND},
      {Status::ResourceExhausted("x"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {Status::DeadlineExceeded("x"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {Status::Unavailable("x"), grpc::StatusCode::UNAVAILABLE},
      {Status::Cancelled("x"), grpc::StatusCode::CANCELLED},
      {Status::Unimplemented("x"), grpc::StatusCode::UNIMPLEMENTED},
      {Status::Internal("x"), grpc::StatusCode::INTERNAL},
  };
  for (const auto& [status, code] : cases) {
    const grpc::Status g = ToGrpcStatus(status, "abc-1");
    EXPECT_EQ(g.error_code(), code) << status.ToString();
    EXPECT_EQ(g.error_message(), "request abc-1: x");
  }
  EXPECT_EQ(ToGrpcStatus(Status::Internal("y"), "").error_message(), "request -: y");
}

}  // namespace
}  // namespace jagrank
