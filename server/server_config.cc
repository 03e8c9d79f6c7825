#include "server/server_config.h"

#include <grpc/grpc.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "common/process.h"

namespace jagrank {
namespace {

template <typename T>
Status Read(const YAML::Node& node, const std::string& key, T* out) {
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("server config key '" + key + "': cannot read value: " + e.what());
  }
  return Status::Ok();
}

Status ParseBatching(const YAML::Node& node, BatchingConfig* b) {
  if (!node.IsMap()) return Status::InvalidArgument("server config key 'batching': must be a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = "batching." + key;
    const YAML::Node& v = kv.second;
    if (key == "max_queue_delay_us") {
      RETURN_IF_ERROR(Read(v, full, &b->max_queue_delay_us));
    } else if (key == "dispatch_when_idle") {
      RETURN_IF_ERROR(Read(v, full, &b->dispatch_when_idle));
    } else if (key == "max_batch_requests") {
      RETURN_IF_ERROR(Read(v, full, &b->max_batch_requests));
    } else if (key == "max_batch_candidates") {
      RETURN_IF_ERROR(Read(v, full, &b->max_batch_candidates));
    } else if (key == "max_batch_history_tokens") {
      RETURN_IF_ERROR(Read(v, full, &b->max_batch_history_tokens));
    } else if (key == "max_batch_attention_cost") {
      RETURN_IF_ERROR(Read(v, full, &b->max_batch_attention_cost));
    } else if (key == "max_queue_requests") {
      RETURN_IF_ERROR(Read(v, full, &b->max_queue_requests));
    } else {
      return Status::InvalidArgument("server config: unknown key '" + full + "'");
    }
  }
  return Status::Ok();
}

Status Positive(int64_t value, const char* name) {
  if (value <= 0) {
    return Status::InvalidArgument(std::string("server config ") + name + " = " + std::to_string(value) +
                                   ": must be > 0");
  }
  return Status::Ok();
}

// ---- Hostile load keys (memory bound, connection limits, admission, TLS) ----

bool IsHostileLoadKey(const std::string& key) {
  static const std::set<std::string> kKeys = {
      "grpc_memory_quota_bytes", "grpc_max_connection_idle_ms", "grpc_max_connection_age_ms",
      "grpc_max_connection_age_grace_ms", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
      "tls_reload_interval_s"};
  return kKeys.count(key) > 0;
}

Status ParseHostileLoadKey(const std::string& key, const YAML::Node& v, ServerConfig* c) {
  if (key == "grpc_memory_quota_bytes") return Read(v, key, &c->grpc_memory_quota_bytes);
  if (key == "grpc_max_connection_idle_ms") return Read(v, key, &c->grpc_max_connection_idle_ms);
  if (key == "grpc_max_connection_age_ms") return Read(v, key, &c->grpc_max_connection_age_ms);
  if (key == "grpc_max_connection_age_grace_ms") return Read(v, key, &c->grpc_max_connection_age_grace_ms);
  if (key == "tls_cert_file") return Read(v, key, &c->tls_cert_file);
  if (key == "tls_key_file") return Read(v, key, &c->tls_key_file);
  if (key == "tls_client_ca_file") return Read(v, key, &c->tls_client_ca_file);
  if (key == "tls_reload_interval_s") return Read(v, key, &c->tls_reload_interval_s);
  return Status::InvalidArgument("server config: unknown key '" + key + "'");
}

Status ValidateHostileLoadKeys(const ServerConfig& c) {
  if (c.grpc_memory_quota_bytes < 0) {
    return Status::InvalidArgument("server config grpc_memory_quota_bytes: must be >= 0 (0 = a quarter of memory)");
  }
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"grpc_max_connection_idle_ms",
                                                                     c.grpc_max_connection_idle_ms},
                                    {"grpc_max_connection_age_ms", c.grpc_max_connection_age_ms},
                                    {"grpc_max_connection_age_grace_ms", c.grpc_max_connection_age_grace_ms}}) {
    if (value < 0 || value > INT32_MAX) {
      return Status::InvalidArgument(std::string("server config ") + name + " = " + std::to_string(value) +
                                     ": must be in [0, 2^31-1] (0 = no limit)");
    }
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return Status::InvalidArgument(
        "server config tls_cert_file and tls_key_file: give both (TLS) or neither (plaintext)");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return Status::InvalidArgument("server config tls_client_ca_file: needs tls_cert_file and tls_key_file");
  }
  if (c.tls_reload_interval_s < 1 || c.tls_reload_interval_s > 86400) {
    return Status::InvalidArgument("server config tls_reload_interval_s = " + std::to_string(c.tls_reload_interval_s) +
                                   ": must be in [1, 86400]");
  }
  return Status::Ok();
}

// Physical memory, or the cgroup (v2) memory limit when that is lower.
int64_t MachineMemoryBytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::ifstream limit("/sys/fs/cgroup/memory.max");
  std::string text;
  if (limit >> text && text != "max") {
    char* end = nullptr;
    const long long cgroup = std::strtoll(text.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && cgroup > 0 && cgroup < bytes) bytes = cgroup;
  }
  return bytes;
}

}  // namespace

int64_t GrpcMemoryQuotaBytes(const ServerConfig& config) {
  if (config.grpc_memory_quota_bytes > 0) return config.grpc_memory_quota_bytes;
  return MachineMemoryBytes() / 4;
}

Status ParseServerConfig(const std::string& yaml_text, ServerConfig* out) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("server config: YAML error: ") + e.what());
  }
  ServerConfig c;
  if (root.IsNull()) {
    *out = c;
    return Status::Ok();
  }
  if (!root.IsMap()) return Status::InvalidArgument("server config: top level must be a map");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "grpc_address") {
      RETURN_IF_ERROR(Read(v, key, &c.grpc_address));
    } else if (key == "metrics_address") {
      RETURN_IF_ERROR(Read(v, key, &c.metrics_address));
    } else if (key == "device") {
      RETURN_IF_ERROR(Read(v, key, &c.device));
    } else if (key == "model_config") {
      RETURN_IF_ERROR(Read(v, key, &c.model_config));
    } else if (key == "model_weights") {
      RETURN_IF_ERROR(Read(v, key, &c.model_weights));
    } else if (key == "attention") {
      RETURN_IF_ERROR(Read(v, key, &c.attention));
    } else if (key == "cpu_threads") {
      RETURN_IF_ERROR(Read(v, key, &c.cpu_threads));
    } else if (key == "cuda_sync") {
      RETURN_IF_ERROR(Read(v, key, &c.cuda_sync));
    } else if (key == "grpc_completion_queues") {
      RETURN_IF_ERROR(Read(v, key, &c.grpc_completion_queues));
    } else if (key == "grpc_max_concurrent_streams") {
      RETURN_IF_ERROR(Read(v, key, &c.grpc_max_concurrent_streams));
    } else if (key == "grpc_channel_args") {
      RETURN_IF_ERROR(Read(v, key, &c.grpc_channel_args));
    } else if (key == "max_candidates_per_request") {
      RETURN_IF_ERROR(Read(v, key, &c.max_candidates_per_request));
    } else if (key == "max_request_bytes") {
      RETURN_IF_ERROR(Read(v, key, &c.max_request_bytes));
    } else if (key == "grpc_max_receive_message_bytes") {
      RETURN_IF_ERROR(Read(v, key, &c.grpc_max_receive_message_bytes));
    } else if (key == "keepalive_time_ms") {
      RETURN_IF_ERROR(Read(v, key, &c.keepalive_time_ms));
    } else if (key == "keepalive_timeout_ms") {
      RETURN_IF_ERROR(Read(v, key, &c.keepalive_timeout_ms));
    } else if (key == "keepalive_min_client_ping_interval_ms") {
      RETURN_IF_ERROR(Read(v, key, &c.keepalive_min_client_ping_interval_ms));
    } else if (key == "warmup_batches") {
      RETURN_IF_ERROR(Read(v, key, &c.warmup_batches));
    } else if (key == "drain_timeout_ms") {
      RETURN_IF_ERROR(Read(v, key, &c.drain_timeout_ms));
    } else if (key == "drain_linger_ms") {
      RETURN_IF_ERROR(Read(v, key, &c.drain_linger_ms));
    } else if (key == "log_level") {
      RETURN_IF_ERROR(Read(v, key, &c.log_level));
    } else if (key == "batching") {
      RETURN_IF_ERROR(ParseBatching(v, &c.batching));
    } else if (IsHostileLoadKey(key)) {
      RETURN_IF_ERROR(ParseHostileLoadKey(key, v, &c));
    } else {
      return Status::InvalidArgument("server config: unknown key '" + key + "'");
    }
  }
  RETURN_IF_ERROR(ValidateServerConfig(c));
  *out = c;
  return Status::Ok();
}

Status LoadServerConfig(const std::string& path, ServerConfig* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("server config file '" + path + "' cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  Status s = ParseServerConfig(text.str(), out);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return Status::Ok();
}

const std::vector<ReservedGrpcChannelArg>& ServerReservedGrpcChannelArgs() {
  static const std::vector<ReservedGrpcChannelArg> kReserved = {
      {GRPC_ARG_MAX_CONCURRENT_STREAMS, "set it with grpc_max_concurrent_streams"},
      {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, "set it with grpc_max_receive_message_bytes"},
      {GRPC_ARG_KEEPALIVE_TIME_MS, "set it with keepalive_time_ms"},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, "set it with keepalive_timeout_ms"},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, "jagrank-server always permits client pings without calls"},
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, "set it with keepalive_min_client_ping_interval_ms"},
      {GRPC_ARG_ALLOW_REUSEPORT, "jagrank-server never shares its port with a second server"},
      {GRPC_ARG_MAX_CONNECTION_IDLE_MS, "set it with grpc_max_connection_idle_ms"},
      {GRPC_ARG_MAX_CONNECTION_AGE_MS, "set it with grpc_max_connection_age_ms"},
      {GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, "set it with grpc_max_connection_age_grace_ms"},
      {GRPC_ARG_RESOURCE_QUOTA, "set it with grpc_memory_quota_bytes"},
      // Measured on gRPC 1.51 (server_grpc_test): with it a request above the
      // cap reaches jagrank's parser whole instead of being refused by gRPC.
      {GRPC_ARG_MINIMAL_STACK, "it drops gRPC's receive-size cap (grpc_max_receive_message_bytes)"},
  };
  return kReserved;
}

Status ValidateServerConfig(const ServerConfig& c) {
  if (c.grpc_address.empty()) return Status::InvalidArgument("server config grpc_address: must not be empty");
  static const std::set<std::string> kAttention = {"jagged", "padded_flash", "padded_dense"};
  if (!kAttention.count(c.attention)) {
    return Status::InvalidArgument("server config attention = '" + c.attention +
                                   "': must be jagged, padded_flash or padded_dense");
  }
  if (c.device != "auto" && c.device != "cpu" && c.device.rfind("cuda", 0) != 0) {
    return Status::InvalidArgument("server config device = '" + c.device + "': must be auto, cpu, cuda or cuda:N");
  }
  if (c.cpu_threads < 0) return Status::InvalidArgument("server config cpu_threads: must be >= 0");
  if (c.cuda_sync != "spin" && c.cuda_sync != "block") {
    return Status::InvalidArgument("server config cuda_sync = '" + c.cuda_sync + "': must be spin or block");
  }
  if (c.grpc_completion_queues < 0 || c.grpc_completion_queues > kMaxGrpcCompletionQueues) {
    return Status::InvalidArgument("server config grpc_completion_queues = " +
                                   std::to_string(c.grpc_completion_queues) + ": must be in [0, " +
                                   std::to_string(kMaxGrpcCompletionQueues) + "] (0 = automatic)");
  }
  if (c.grpc_max_concurrent_streams < 0 || c.grpc_max_concurrent_streams > kMaxGrpcConcurrentStreams) {
    return Status::InvalidArgument("server config grpc_max_concurrent_streams = " +
                                   std::to_string(c.grpc_max_concurrent_streams) + ": must be in [0, " +
                                   std::to_string(kMaxGrpcConcurrentStreams) + "] (0 = gRPC's default, no limit)");
  }
  std::vector<GrpcChannelArg> channel_args;
  RETURN_IF_ERROR(ParseGrpcChannelArgs(c.grpc_channel_args, ServerReservedGrpcChannelArgs(),
                                       "server config grpc_channel_args", &channel_args));
  RETURN_IF_ERROR(Positive(c.max_candidates_per_request, "max_candidates_per_request"));
  RETURN_IF_ERROR(Positive(c.max_request_bytes, "max_request_bytes"));
  if (c.grpc_max_receive_message_bytes < c.max_request_bytes || c.grpc_max_receive_message_bytes > INT32_MAX) {
    return Status::InvalidArgument("server config grpc_max_receive_message_bytes = " +
                                   std::to_string(c.grpc_max_receive_message_bytes) +
                                   ": must be in [max_request_bytes, 2^31-1]");
  }
  RETURN_IF_ERROR(Positive(c.keepalive_time_ms, "keepalive_time_ms"));
  RETURN_IF_ERROR(Positive(c.keepalive_timeout_ms, "keepalive_timeout_ms"));
  RETURN_IF_ERROR(Positive(c.keepalive_min_client_ping_interval_ms, "keepalive_min_client_ping_interval_ms"));
  if (c.warmup_batches < 0) return Status::InvalidArgument("server config warmup_batches: must be >= 0");
  RETURN_IF_ERROR(Positive(c.drain_timeout_ms, "drain_timeout_ms"));
  if (c.drain_linger_ms < 0) return Status::InvalidArgument("server config drain_linger_ms: must be >= 0");
  const BatchingConfig& b = c.batching;
  if (b.max_queue_delay_us < 0) {
    return Status::InvalidArgument("server config batching.max_queue_delay_us: must be >= 0");
  }
  RETURN_IF_ERROR(Positive(b.max_batch_requests, "batching.max_batch_requests"));
  RETURN_IF_ERROR(Positive(b.max_batch_candidates, "batching.max_batch_candidates"));
  RETURN_IF_ERROR(Positive(b.max_batch_history_tokens, "batching.max_batch_history_tokens"));
  RETURN_IF_ERROR(Positive(b.max_batch_attention_cost, "batching.max_batch_attention_cost"));
  RETURN_IF_ERROR(Positive(b.max_queue_requests, "batching.max_queue_requests"));
  RETURN_IF_ERROR(ValidateHostileLoadKeys(c));
  return Status::Ok();
}

std::string ServerConfigSummary(const ServerConfig& c) {
  std::ostringstream s;
  s << "grpc=" << c.grpc_address << " metrics=" << (c.metrics_address.empty() ? "off" : c.metrics_address)
    << " device=" << c.device << " attention=" << c.attention << " cuda_sync=" << c.cuda_sync
    << " model_config=" << (c.model_config.empty() ? "<embedded>" : c.model_config)
    << " weights=" << (c.model_weights.empty() ? "<random from seed>" : c.model_weights)
    << " max_queue_delay_us=" << c.batching.max_queue_delay_us
    << " dispatch_when_idle=" << (c.batching.dispatch_when_idle ? "true" : "false")
    << " max_batch_requests=" << c.batching.max_batch_requests
    << " max_batch_candidates=" << c.batching.max_batch_candidates
    << " max_batch_history_tokens=" << c.batching.max_batch_history_tokens
    << " max_batch_attention_cost=" << c.batching.max_batch_attention_cost
    << " max_queue_requests=" << c.batching.max_queue_requests
    << " grpc_completion_queues=" << c.grpc_completion_queues
    << " grpc_max_concurrent_streams=" << c.grpc_max_concurrent_streams
    << " grpc_channel_args=" << (c.grpc_channel_args.empty() ? "none" : c.grpc_channel_args)
    << " max_candidates_per_request=" << c.max_candidates_per_request
    << " max_request_bytes=" << c.max_request_bytes
    << " grpc_memory_quota_bytes=" << GrpcMemoryQuotaBytes(c)
    << " grpc_max_connection_idle_ms=" << c.grpc_max_connection_idle_ms
    << " grpc_max_connection_age_ms=" << c.grpc_max_connection_age_ms
    << " grpc_max_connection_age_grace_ms=" << c.grpc_max_connection_age_grace_ms
    << " tls=" << (c.tls_cert_file.empty() ? "off" : c.tls_client_ca_file.empty() ? "on" : "mtls");
  return s.str();
}

}  // namespace jagrank
