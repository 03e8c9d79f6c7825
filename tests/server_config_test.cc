// ServerConfig: the key table drives YAML, flags, validation and the
// summary; device-aware defaults; flag parsing; the Status -> gRPC map.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/flags.h"
#include "model/config.h"
#include "server/grpc_status.h"
#include "server/server.h"
#include "server/server_config.h"

namespace jagrank {
namespace {

// The YAML that sets `key` ("batching.x" nested) to `value`.
std::string YamlFor(const std::string& key, const std::string& value) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return key + ": " + value + "\n";
  return key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + value + "\n";
}

// "key=value" as the summary writes it.
bool SummaryHas(const std::string& summary, const std::string& key, const std::string& value) {
  return (" " + summary + " ").find(" " + key + "=" + value + " ") != std::string::npos;
}

// Runs ParseServerCommandLine on {"jagrank-server", args...}.
Status ParseArgs(std::vector<std::string> args, ServerCommandLine* out) {
  args.insert(args.begin(), "jagrank-server");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseServerCommandLine(static_cast<int>(argv.size()), argv.data(), out);
}

class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/jagrank_server_config_XXXXXX";
    path_ = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& file, const std::string& text) const {
    std::ofstream(path_ + "/" + file) << text;
    return path_ + "/" + file;
  }

 private:
  std::string path_;
};

bool IsWholeNumber(const std::string& s) {
  return !s.empty() && s.find_first_not_of("-0123456789") == std::string::npos;
}

// A valid value other than the default, per key; whole-number keys take
// their default + 1.
std::string OtherValue(const ServerConfigKey& k) {
  static const std::map<std::string, std::string> kText = {
      {"grpc_address", "127.0.0.1:1234"}, {"metrics_address", "127.0.0.1:9"},
      {"device", "cpu"},                  {"precision", "fp32"},
      {"model_config", "/m.yaml"},        {"model_weights", "/w.safetensors"},
      {"attention", "padded_flash"},      {"grpc_channel_args", "grpc.http2.bdp_probe=0"},
      {"log_level", "warn"},
      {"model_repository", "/models"},    {"model_poll_interval_s", "2.5"},
  };
  if (k.is_bool) return k.default_value == "true" ? "false" : "true";
  if (IsWholeNumber(k.default_value)) return std::to_string(std::stoll(k.default_value) + 1);
  return kText.at(k.key);
}

TEST(ServerConfigTest, EmbeddedYamlListsEveryKeyAtItsDefaultAndBudgetsAsAuto) {
  ServerConfig parsed;
  GivenKeys given;
  Status s = ParseServerConfig(EmbeddedServerYaml(), &parsed, &given);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ServerConfigSummary(parsed, given), ServerConfigSummary(ServerConfig(), {}));
  for (const ServerConfigKey& k : ServerConfigKeys()) {
    // Every key is in the file; those with a CUDA default say `auto`.
    EXPECT_EQ(given.count(k.key), k.cuda_default_value.empty() ? 1u : 0u) << k.key;
    EXPECT_EQ(k.flag.find('_'), std::string::npos) << k.flag;
  }
}

// Each key of the table, set through YAML and through its flag, reaches the
// config (seen in the summary) and counts as given; a flag overrides the
// file.
TEST(ServerConfigTest, EveryKeyParsesFromYamlAndFromItsFlag) {
  TempDir dir;
  for (const ServerConfigKey& k : ServerConfigKeys()) {
    SCOPED_TRACE(k.key);
    // The TLS files come as a pair (cert and key) and must exist: the TLS
    // test (server_process_test TlsAndMutualTls) sets them together.
    if (k.key == "tls_cert" || k.key == "tls_key" || k.key == "tls_client_ca") continue;
    const std::string value = OtherValue(k);
    ServerConfig c;
    GivenKeys given;
    Status s = ParseServerConfig(YamlFor(k.key, value), &c, &given);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(SummaryHas(ServerConfigSummary(c, given), k.key, value)) << ServerConfigSummary(c, given);
    EXPECT_EQ(given, GivenKeys{k.key});

    ServerCommandLine cmd;
    std::vector<std::string> args = {"--" + k.flag};
    if (!k.is_bool) args.push_back(value);
    s = ParseArgs(args, &cmd);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(SummaryHas(ServerConfigSummary(cmd.config), k.key, value)) << ServerConfigSummary(cmd.config);
    EXPECT_EQ(cmd.given_keys.count(k.key), 1u);

    // The file sets the default explicitly; the flag wins.
    const std::string file = dir.Write("server.yaml", YamlFor(k.key, k.default_value.empty() ? "''" : k.default_value));
    args.insert(args.begin(), {"--config", file});
    s = ParseArgs(args, &cmd);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(SummaryHas(ServerConfigSummary(cmd.config), k.key, value)) << ServerConfigSummary(cmd.config);
  }
  // --help lists every flag, and the CUDA default of the budgets.
  ServerCommandLine cmd;
  ASSERT_TRUE(ParseArgs({"--help"}, &cmd).ok());
  EXPECT_TRUE(cmd.help);
  for (const ServerConfigKey& k : ServerConfigKeys()) {
    EXPECT_NE(cmd.usage.find("--" + k.flag + " "), std::string::npos) << k.flag;
  }
  EXPECT_NE(cmd.usage.find("auto = 16384 on the CPU, 65536 on CUDA"), std::string::npos) << cmd.usage;
  EXPECT_NE(cmd.usage.find("--check-config"), std::string::npos);
}

// Bad values, from the file and from the flag, are refused with a message
// that names the key (and the flag) and the limit or the allowed values.
TEST(ServerConfigTest, EachBadValueIsRefusedNamingItsKey) {
  struct Case {
    const char* key;
    const char* value;
    const char* says;
  };
  const Case cases[] = {
      {"grpc_address", "nowhere", "not host:port or unix:/path"},
      {"grpc_address", "127.0.0.1:65536", "0..65535"},
      {"grpc_address", "", "not host:port"},
      {"metrics_address", "unix:/tmp/m.sock", "must be host:port"},
      {"metrics_address", "localhost", "not host:port"},
      {"device", "gpu", "must be auto, cpu, cuda or cuda:N"},
      {"device", "cuda:x", "must be auto, cpu, cuda or cuda:N"},
      {"precision", "fp16", "must be one of auto, fp32, bf16"},
      {"attention", "sparse", "must be one of jagged, padded_flash, padded_dense"},
      {"cpu_threads", "-1", "[0, 4096]"},
      {"grpc_max_concurrent_streams", "1048577", "[0, 1048576]"},
      {"grpc_polling_threads", "65", "[0, 64]"},
      {"grpc_channel_args", "grpc.minimal_stack=1", "receive-size cap"},
      {"grpc_channel_args", "grpc.max_concurrent_streams=4", "set it with grpc_max_concurrent_streams"},
      {"grpc_channel_args", "minimal_stack=1", "names start with 'grpc.'"},
      {"max_candidates_per_request", "many", "must be a whole number"},
      {"max_request_bytes", "0", "[1, 2147483647]"},
      {"grpc_max_receive_message_bytes", "1024", "must be >= max_request_bytes"},
      {"drain_timeout_ms", "0", "[1, 3600000]"},
      {"drain_linger_ms", "-5", "[0, 3600000]"},
      {"log_level", "loud", "must be one of trace, debug, info, warn, error"},
      {"log_level", "off", "must be one of trace, debug, info, warn, error"},
      {"rank_stream_max_outstanding", "0", "[1, 65536]"},
      {"rank_stream_max_streams", "1048577", "[1, 1048576]"},
      {"batching.max_queue_delay_us", "-1", "[0, 3600000000]"},
      {"batching.dispatch_when_idle", "sometimes", "true or false"},
      {"batching.max_batch_requests", "0", "[1, 2147483647]"},
      {"batching.max_batch_candidates", "0", "must be in [1, "},
      {"batching.max_batch_history_tokens", "1.5", "must be a whole number"},
      {"batching.max_batch_attention_cost", "-1", "must be in [1, "},
      {"batching.max_queue_requests", "99999999999", "[1, 2147483647]"},
      {"model_poll_interval_s", "-1", "must be a number in [0, 86400]"},
      {"model_poll_interval_s", "soon", "must be a number"},
      {"instances_per_device", "0", "[1, 16]"},
      {"device", "cuda:0,gpu", "entry 'gpu' must be auto, cpu, cuda or cuda:N"},
      {"grpc_memory_quota_bytes", "-1", "must be in [0, "},
      {"grpc_max_connection_idle_ms", "-1", "[0, 2147483647]"},
      {"grpc_max_connection_age_ms", "2147483648", "[0, 2147483647]"},
      {"grpc_max_connection_age_grace_ms", "soon", "must be a whole number"},
      {"tls_reload_interval_s", "0", "[1, 86400]"},
  };
  std::set<std::string> covered;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + c.value);
    covered.insert(c.key);
    ServerConfig config;
    Status s = ParseServerConfig(YamlFor(c.key, std::string("'") + c.value + "'"), &config);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(s.message().find(std::string("key '") + c.key + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();

    const ServerConfigKey* k = nullptr;
    for (const ServerConfigKey& key : ServerConfigKeys()) {
      if (key.key == c.key) k = &key;
    }
    ASSERT_NE(k, nullptr);
    ServerCommandLine cmd;
    s = ParseArgs({"--" + k->flag + "=" + c.value}, &cmd);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    // The flag or the key (whose last part the flag is) is named.
    EXPECT_TRUE(s.message().find("--" + k->flag) != std::string::npos ||
                s.message().find(c.key) != std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
  // Every key with a check has a case here (the paths take any text).
  for (const ServerConfigKey& k : ServerConfigKeys()) {
    if (k.key == "model_config" || k.key == "model_weights" || k.key == "model_repository" ||
        (k.key.rfind("tls_", 0) == 0 && k.key != "tls_reload_interval_s")) {
      continue;
    }
    EXPECT_EQ(covered.count(k.key), 1u) << "no bad-value case for " << k.key;
  }
}

// The keepalive settings are no keys of their own: they have defaults, and
// grpc_channel_args may set them.
TEST(ServerConfigTest, KeepaliveComesFromChannelArgs) {
  ServerConfig c;
  Status s = ParseServerConfig("grpc_channel_args: grpc.keepalive_time_ms=60000,grpc.keepalive_timeout_ms=5000\n", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::set<std::string> defaults;
  for (const GrpcDefaultChannelArg& arg : ServerDefaultGrpcChannelArgs()) defaults.insert(arg.name);
  EXPECT_EQ(defaults, (std::set<std::string>{"grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms",
                                             "grpc.keepalive_permit_without_calls",
                                             "grpc.http2.min_ping_interval_without_data_ms"}));
  for (const ReservedGrpcChannelArg& reserved : ServerReservedGrpcChannelArgs()) {
    EXPECT_EQ(defaults.count(reserved.name), 0u) << reserved.name;
  }
}

TEST(ServerConfigTest, UnknownAndRepeatedKeysAreRefusedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"max_queue_delay: 5\n", "unknown key 'max_queue_delay'"},
      {"batching:\n  max_batch_size: 3\n", "unknown key 'batching.max_batch_size'"},
      {"grpc:\n  address: x\n", "unknown key 'grpc'"},
      // Removed knobs are unknown keys now.
      {"cuda_sync: spin\n", "unknown key 'cuda_sync'"},
      {"grpc_completion_queues: 4\n", "unknown key 'grpc_completion_queues'"},
      {"keepalive_time_ms: 1000\n", "unknown key 'keepalive_time_ms'"},
      {"warmup_batches: 2\n", "unknown key 'warmup_batches'"},
      // yaml-cpp keeps both entries of a repeated key; the later one would win.
      {"grpc_address: 127.0.0.1:1\nlog_level: info\ngrpc_address: 127.0.0.1:2\n", "key 'grpc_address' appears twice"},
      {"batching:\n  max_batch_requests: 8\n  max_batch_requests: 9\n",
       "key 'batching.max_batch_requests' appears twice"},
      {"batching:\n  max_batch_requests: 8\nbatching:\n  max_queue_requests: 9\n", "key 'batching' appears twice"},
      {"attention: [jagged]\n", "key 'attention': must be a single value"},
      {"batching: 3\n", "key 'batching': must be a map of keys"},
      {"log_level:\n  level: info\n", "key 'log_level': must be a single value"},
      {"- a\n- b\n", "top level must be a map"},
  };
  for (const auto& [yaml, says] : cases) {
    ServerConfig c;
    Status s = ParseServerConfig(yaml, &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << yaml;
    EXPECT_NE(s.message().find(says), std::string::npos) << yaml << " -> " << s.message();
  }
  ServerCommandLine cmd;
  Status s = ParseArgs({"--cuda-sync", "block"}, &cmd);
  EXPECT_NE(s.message().find("unknown flag --cuda-sync"), std::string::npos) << s.message();
}

TEST(ServerConfigTest, DeviceAwareBatchDefaults) {
  const auto gpu = [] { return true; };
  const auto no_gpu = [] { return false; };
  // Out of the box (the embedded file): on a GPU the CUDA budgets.
  ServerCommandLine cmd;
  ASSERT_TRUE(ParseArgs({}, &cmd).ok());
  ServerConfig c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, gpu, &c).ok());
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.precision, "bf16");
  EXPECT_EQ(c.batching.max_queue_delay_us, 1000);
  EXPECT_EQ(c.batching.max_batch_requests, 512);
  EXPECT_EQ(c.batching.max_batch_candidates, 65536);
  EXPECT_EQ(c.batching.max_batch_history_tokens, 1048576);
  EXPECT_EQ(c.batching.max_batch_attention_cost, 1LL << 30);
  EXPECT_EQ(c.batching.max_queue_requests, 8192);
  EXPECT_FALSE(c.batching.dispatch_when_idle);
  std::string summary = ServerConfigSummary(c, cmd.given_keys);
  EXPECT_NE(summary.find("device_defaults=cuda(batching.max_queue_delay_us,batching.max_batch_requests,"),
            std::string::npos)
      << summary;

  // Without a GPU: the CPU budgets, precision left to the CPU (float32).
  c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, no_gpu, &c).ok());
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.precision, "auto");
  const BatchingConfig cpu;
  EXPECT_EQ(c.batching.max_queue_delay_us, cpu.max_queue_delay_us);
  EXPECT_EQ(c.batching.max_batch_requests, cpu.max_batch_requests);
  EXPECT_EQ(c.batching.max_batch_candidates, cpu.max_batch_candidates);
  EXPECT_EQ(c.batching.max_batch_history_tokens, cpu.max_batch_history_tokens);
  EXPECT_EQ(c.batching.max_batch_attention_cost, cpu.max_batch_attention_cost);
  EXPECT_EQ(c.batching.max_queue_requests, cpu.max_queue_requests);
  summary = ServerConfigSummary(c, cmd.given_keys);
  EXPECT_NE(summary.find("device_defaults=cpu(batching.max_queue_delay_us,"), std::string::npos) << summary;

  // A budget the file or a flag sets stays as set on a GPU; `auto` on the
  // command line puts one back to the device's default.
  TempDir dir;
  const std::string file =
      dir.Write("server.yaml", "batching:\n  max_batch_candidates: 20000\n  max_queue_requests: 100\n");
  ASSERT_TRUE(ParseArgs({"--config", file, "--max-batch-requests", "300", "--max-queue-requests", "auto",
                         "--precision", "fp32"},
                        &cmd)
                  .ok());
  c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, gpu, &c).ok());
  EXPECT_EQ(c.batching.max_batch_requests, 300);
  EXPECT_EQ(c.batching.max_batch_candidates, 20000);
  EXPECT_EQ(c.batching.max_queue_requests, 8192);
  EXPECT_EQ(c.batching.max_batch_history_tokens, 1048576);
  EXPECT_EQ(c.precision, "fp32");
  summary = ServerConfigSummary(c, cmd.given_keys);
  EXPECT_NE(summary.find("device_defaults=cuda(batching.max_queue_delay_us,batching.max_batch_history_tokens,"
                         "batching.max_batch_attention_cost,batching.max_queue_requests)"),
            std::string::npos)
      << summary;
  // Every budget set: no device defaults.
  ASSERT_TRUE(ParseArgs({"--max-queue-delay-us", "5", "--max-batch-requests", "6", "--max-batch-candidates", "7",
                         "--max-batch-history-tokens", "8", "--max-batch-attention-cost", "9",
                         "--max-queue-requests", "10"},
                        &cmd)
                  .ok());
  c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, gpu, &c).ok());
  EXPECT_EQ(c.batching.max_queue_delay_us, 5);
  EXPECT_EQ(c.batching.max_queue_requests, 10);
  EXPECT_NE(ServerConfigSummary(c, cmd.given_keys).find("device_defaults=none"), std::string::npos);

  // An explicit device is kept; cuda without a usable GPU is an error.
  ASSERT_TRUE(ParseArgs({"--device", "cpu"}, &cmd).ok());
  c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, gpu, &c).ok());
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.batching.max_batch_requests, cpu.max_batch_requests);
  ASSERT_TRUE(ParseArgs({"--device", "cuda:1"}, &cmd).ok());
  c = cmd.config;
  ASSERT_TRUE(ResolveServerConfig(cmd.given_keys, gpu, &c).ok());
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.batching.max_batch_requests, 512);
  c = cmd.config;
  Status s = ResolveServerConfig(cmd.given_keys, no_gpu, &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("key 'device' = 'cuda:1': no usable CUDA device"), std::string::npos) << s.message();
}

// precision reaches the CUDA backend's options (the CPU ignores them).
TEST(ServerConfigTest, PrecisionSetsTheCudaNumerics) {
  const std::pair<const char*, bool> cases[] = {{"fp32", false}, {"bf16", true}, {"auto", true}};
  for (const auto& [precision, bf16] : cases) {
    ServerCommandLine cmd;
    ASSERT_TRUE(ParseArgs({"--precision", precision, "--attention", "padded_flash", "--cpu-threads", "3"}, &cmd).ok());
    ModelOptions options;
    ASSERT_TRUE(MakeModelOptions(cmd.config, "cuda:0", &options).ok());
    EXPECT_EQ(options.cuda_bf16, bf16) << precision;
    EXPECT_EQ(options.device, "cuda:0");
    EXPECT_EQ(options.attention, AttentionStrategy::kPaddedFlash);
    EXPECT_EQ(options.cpu_threads, 3);
  }
}

TEST(ServerConfigTest, CheckFilesNamesTheKeyAndThePath) {
  TempDir dir;
  ServerConfig c;
  EXPECT_TRUE(CheckServerConfigFiles(c).ok());  // the embedded model config
  c.model_config = dir.Write("model.yaml", "embedding_dim: 64\nnot_a_key: 1\n");
  Status s = CheckServerConfigFiles(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("key 'model_config' = '" + c.model_config + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not_a_key"), std::string::npos) << s.message();
  c.model_config = dir.Write("model.yaml", DefaultModelConfigYaml());
  EXPECT_TRUE(CheckServerConfigFiles(c).ok());
  c.model_weights = "/nonexistent/w.safetensors";
  s = CheckServerConfigFiles(c);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("key 'model_weights' = '/nonexistent/w.safetensors': cannot be opened"),
            std::string::npos)
      << s.message();
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
