#include "server/server_config.h"

#include <grpc/grpc.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <type_traits>

#include "common/flags.h"
#include "common/socket_address.h"
#include "model/config.h"
#include "server/model_repository.h"

namespace jagrank {
namespace {

// Where a value came from, for errors: "server config key 'x'" or
// "flag --x (server config key x)".
std::string KeyLabel(const std::string& key) { return "server config key '" + key + "'"; }

Status Problem(const std::string& label, const std::string& value, const std::string& problem) {
  return Status::InvalidArgument(label + " = '" + value + "': " + problem);
}

// The member a row binds, in ServerConfig or in its BatchingConfig.
template <typename T>
struct Top {
  T ServerConfig::*member;
  T& operator()(ServerConfig& c) const { return c.*member; }
  const T& operator()(const ServerConfig& c) const { return c.*member; }
};
template <typename T>
struct InBatching {
  T BatchingConfig::*member;
  T& operator()(ServerConfig& c) const { return c.batching.*member; }
  const T& operator()(const ServerConfig& c) const { return c.batching.*member; }
};
template <typename T>
Top<T> Member(T ServerConfig::*member) { return {member}; }
template <typename T>
InBatching<T> Member(T BatchingConfig::*member) { return {member}; }

using TextCheck = std::function<Status(const std::string& label, const std::string& value)>;

// One row of the table: everything about a knob except its CPU default,
// which is the struct's in-class initializer.
struct Knob {
  std::string key;
  std::string help;
  std::string cuda_default;  // YAML text; empty = the struct's default on every device
  bool is_bool = false;
  // Reads `text` (a YAML scalar or a flag's value) into the member and checks it.
  std::function<Status(const std::string& label, const std::string& text, ServerConfig*)> set;
  std::function<std::string(const ServerConfig&)> get;  // the member as YAML text
  std::function<Status(const std::string& label, const ServerConfig&)> check;
};

Status CheckRange(const std::string& label, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return Status::Ok();
  return Problem(label, std::to_string(value),
                 "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// A whole number in [lo, hi]; `cuda_default` (YAML text) replaces the
// struct's default on a CUDA device.
template <typename Field>
Knob Int(const char* key, Field field, int64_t lo, int64_t hi, const char* help, const char* cuda_default = "") {
  Knob k;
  k.key = key;
  k.help = help;
  k.cuda_default = cuda_default;
  k.check = [field, lo, hi](const std::string& label, const ServerConfig& c) {
    return CheckRange(label, field(c), lo, hi);
  };
  k.set = [field, lo, hi](const std::string& label, const std::string& text, ServerConfig* c) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0) return Problem(label, text, "must be a whole number");
    RETURN_IF_ERROR(CheckRange(label, value, lo, hi));
    field(*c) = static_cast<std::remove_reference_t<decltype(field(*c))>>(value);
    return Status::Ok();
  };
  k.get = [field](const ServerConfig& c) { return std::to_string(field(c)); };
  return k;
}

// A finite number in [lo, hi].
template <typename Field>
Knob Double(const char* key, Field field, double lo, double hi, const char* help) {
  Knob k;
  k.key = key;
  k.help = help;
  auto in_range = [lo, hi](const std::string& label, double value) {
    if (value >= lo && value <= hi) return Status::Ok();
    std::ostringstream range;
    range << "must be a number in [" << lo << ", " << hi << "]";
    return Problem(label, std::to_string(value), range.str());
  };
  k.check = [field, in_range](const std::string& label, const ServerConfig& c) { return in_range(label, field(c)); };
  k.set = [field, in_range](const std::string& label, const std::string& text, ServerConfig* c) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0) return Problem(label, text, "must be a number");
    RETURN_IF_ERROR(in_range(label, value));
    field(*c) = value;
    return Status::Ok();
  };
  k.get = [field](const ServerConfig& c) {
    std::ostringstream text;
    text << field(c);
    return text.str();
  };
  return k;
}

template <typename Field>
Knob Bool(const char* key, Field field, const char* help) {
  Knob k;
  k.key = key;
  k.help = help;
  k.is_bool = true;
  k.check = [](const std::string&, const ServerConfig&) { return Status::Ok(); };
  k.set = [field](const std::string& label, const std::string& text, ServerConfig* c) {
    if (text == "true") {
      field(*c) = true;
    } else if (text == "false") {
      field(*c) = false;
    } else {
      return Problem(label, text, "must be true or false");
    }
    return Status::Ok();
  };
  k.get = [field](const ServerConfig& c) { return std::string(field(c) ? "true" : "false"); };
  return k;
}

template <typename Field>
Knob Text(const char* key, Field field, TextCheck check, const char* help) {
  Knob k;
  k.key = key;
  k.help = help;
  k.check = [field, check](const std::string& label, const ServerConfig& c) { return check(label, field(c)); };
  k.set = [field, check](const std::string& label, const std::string& text, ServerConfig* c) {
    RETURN_IF_ERROR(check(label, text));
    field(*c) = text;
    return Status::Ok();
  };
  k.get = [field](const ServerConfig& c) { return field(c); };
  return k;
}

TextCheck OneOf(std::vector<std::string> allowed) {
  return [allowed](const std::string& label, const std::string& value) {
    std::string list;
    for (const std::string& a : allowed) {
      if (a == value) return Status::Ok();
      list += (list.empty() ? "" : ", ") + a;
    }
    return Problem(label, value, "must be one of " + list);
  };
}

Status AnyText(const std::string&, const std::string&) { return Status::Ok(); }

Status OneDeviceName(const std::string& value) {
  if (value == "auto" || value == "cpu" || value == "cuda") return Status::Ok();
  if (value.rfind("cuda:", 0) == 0 && value.size() > 5 && value.size() <= 8 &&
      value.find_first_not_of("0123456789", 5) == std::string::npos) {
    return Status::Ok();
  }
  return Status::InvalidArgument("must be auto, cpu, cuda or cuda:N");
}

// One device, or a comma-separated list of them (one set of executors each).
Status DeviceName(const std::string& label, const std::string& value) {
  for (const std::string& device : DeviceList(value)) {
    if (!OneDeviceName(device).ok()) {
      return Problem(label, value,
                     "entry '" + device + "' must be auto, cpu, cuda or cuda:N (a list separates devices with commas)");
    }
  }
  return Status::Ok();
}

// gRPC listens on host:port or unix:/path.
Status GrpcAddress(const std::string& label, const std::string& value) {
  SocketAddress address;
  return ParseSocketAddress(label, value, &address);
}

// The metrics exposer listens on host:port only; empty = no endpoint.
Status MetricsAddress(const std::string& label, const std::string& value) {
  if (value.empty()) return Status::Ok();
  SocketAddress address;
  RETURN_IF_ERROR(ParseSocketAddress(label, value, &address));
  if (address.is_unix) return Problem(label, value, "must be host:port (the metrics endpoint takes no unix socket)");
  return Status::Ok();
}

Status ChannelArgs(const std::string& label, const std::string& value) {
  std::vector<GrpcChannelArg> args;
  return ParseGrpcChannelArgs(value, ServerReservedGrpcChannelArgs(), label, &args);
}

constexpr int64_t kMaxInt = INT32_MAX;
constexpr int64_t kHourMs = 3600LL * 1000;
constexpr int64_t kHourUs = 3600LL * 1000 * 1000;

// The knobs. The CUDA column is bench/serving_h200.sh's tuned batching for
// the H200 (the same budgets for every attention strategy): batches of up to
// 512 requests, which one forward pass on the GPU takes in well under the
// 1 ms queue delay; the attention budget (2^30) does not bind at history
// length 1024 and keeps a padded batch at 4096 to 64 requests.
const std::vector<Knob>& Knobs() {
  using S = ServerConfig;
  using B = BatchingConfig;
  static const std::vector<Knob> kKnobs = {
      Text("grpc_address", Member(&S::grpc_address), GrpcAddress,
           "gRPC listener: host:port (port 0 = any free port) or unix:/path"),
      Text("metrics_address", Member(&S::metrics_address), MetricsAddress,
           "Prometheus /metrics and the status page, host:port; '' = off"),
      Text("device", Member(&S::device), DeviceName,
           "auto (cuda:0 when a GPU is usable, else cpu) | cpu | cuda | cuda:N, or a list cuda:0,cuda:1 "
           "(instances_per_device executors on each)"),
      Text("precision", Member(&S::precision), OneOf({"auto", "fp32", "bf16"}),
           "CUDA numerics: bf16 (bf16 tables and attention, TF32 GEMMs) | fp32 (float32 throughout) | "
           "auto (bf16); checked but ignored on the CPU"),
      Text("model_config", Member(&S::model_config), AnyText,
           "model YAML; '' = the embedded config/model.yaml"),
      Text("model_weights", Member(&S::model_weights), AnyText,
           "safetensors weights; '' = deterministic random weights from the model config's seed"),
      Text("attention", Member(&S::attention), OneOf({"jagged", "padded_flash", "padded_dense"}),
           "attention strategy: jagged | padded_flash | padded_dense"),
      Int("cpu_threads", Member(&S::cpu_threads), 0, 4096,
          "CPU backend threads (every kernel, GEMMs included); 0 = the usable cores (affinity, cgroup quota)"),
      Int("grpc_polling_threads", Member(&S::grpc_polling_threads), 0, 64,
          "gRPC completion queues, each polled by its own thread, for every call; 0 = half the usable cores, 1 to 8"),
      Int("grpc_max_concurrent_streams", Member(&S::grpc_max_concurrent_streams), 0, 1 << 20,
          "calls open at once per client connection (more wait in the client); 0 = no limit"),
      Text("grpc_channel_args", Member(&S::grpc_channel_args), ChannelArgs,
           "further gRPC server channel arguments, grpc.name=value[,...] (whole numbers go as integers); '' = none"),
      Int("max_candidates_per_request", Member(&S::max_candidates_per_request), 1, kMaxInt,
          "more candidates in a request -> INVALID_ARGUMENT"),
      Int("max_request_bytes", Member(&S::max_request_bytes), 1, kMaxInt,
          "larger serialized RankRequest -> INVALID_ARGUMENT"),
      Int("grpc_max_receive_message_bytes", Member(&S::grpc_max_receive_message_bytes), 1, kMaxInt,
          "gRPC's receive cap, >= max_request_bytes (gRPC answers RESOURCE_EXHAUSTED above it)"),
      Int("drain_timeout_ms", Member(&S::drain_timeout_ms), 1, kHourMs,
          "on SIGTERM, accepted requests get this long to finish; then what is left is cancelled"),
      Int("drain_linger_ms", Member(&S::drain_linger_ms), 0, kHourMs,
          "after the drain, keep answering UNAVAILABLE this long before closing the listener"),
      Text("log_level", Member(&S::log_level), OneOf({"trace", "debug", "info", "warn", "error"}),
           "trace | debug | info | warn | error"),
      Int("rank_stream_max_outstanding", Member(&S::rank_stream_max_outstanding), 1, 1 << 16,
          "RankStream: requests one stream may have read and not yet answered; at the cap the server stops "
          "reading it until answers are written"),
      Int("rank_stream_max_streams", Member(&S::rank_stream_max_streams), 1, 1 << 20,
          "RankStream calls open at once (all connections); more -> RESOURCE_EXHAUSTED"),
      Int("batching.max_queue_delay_us", Member(&B::max_queue_delay_us), 0, kHourUs,
          "the oldest queued request waits at most this long for its batch", "1000"),
      Bool("batching.dispatch_when_idle", Member(&B::dispatch_when_idle),
           "also close a batch at once when the executor has none waiting to run"),
      Int("batching.max_batch_requests", Member(&B::max_batch_requests), 1, kMaxInt,
          "budget: requests per batch", "512"),
      Int("batching.max_batch_candidates", Member(&B::max_batch_candidates), 1, INT64_MAX,
          "budget: candidate rows per batch", "65536"),
      Int("batching.max_batch_history_tokens", Member(&B::max_batch_history_tokens), 1, INT64_MAX,
          "budget: kept history ids per batch", "1048576"),
      Int("batching.max_batch_attention_cost", Member(&B::max_batch_attention_cost), 1, INT64_MAX,
          "budget: attention work per batch (jagged: sum of L^2; padded: requests x (max L)^2)", "1073741824"),
      Int("batching.max_queue_requests", Member(&B::max_queue_requests), 1, kMaxInt,
          "queued requests; more -> RESOURCE_EXHAUSTED at once", "8192"),
      // Model repository.
      Text("model_repository", Member(&S::model_repository), AnyText,
           "serve DIR/<n>/model.yaml + DIR/<n>/model.safetensors, the highest complete n that loads, swapped "
           "without downtime; excludes model_config/model_weights; '' = off"),
      Double("model_poll_interval_s", Member(&S::model_poll_interval_s), 0, 86400,
             "rescan model_repository this often (seconds); 0 = only on SIGHUP"),
      // Several executors.
      Int("instances_per_device", Member(&S::instances_per_device), 1, 16,
          "executors per device entry, each with its own model instance, all fed by one batcher"),
      // Hostile load: memory bound, connection limits, TLS.
      Int("grpc_memory_quota_bytes", Member(&S::grpc_memory_quota_bytes), 0, INT64_MAX,
          "bytes gRPC may hold for all connections (partly received messages, buffers); 0 = a quarter of the "
          "machine's or the cgroup's memory"),
      Int("grpc_max_connection_idle_ms", Member(&S::grpc_max_connection_idle_ms), 0, kMaxInt,
          "close a connection with no call for this long; 0 = never"),
      Int("grpc_max_connection_age_ms", Member(&S::grpc_max_connection_age_ms), 0, kMaxInt,
          "ask a connection older than this to go away (clients reconnect); 0 = no age limit"),
      Int("grpc_max_connection_age_grace_ms", Member(&S::grpc_max_connection_age_grace_ms), 0, kMaxInt,
          "after that, its calls get this long to finish before it is closed"),
      Text("tls_cert", Member(&S::tls_cert), AnyText,
           "PEM certificate chain of the gRPC port (with tls_key: TLS); '' = plaintext"),
      Text("tls_key", Member(&S::tls_key), AnyText, "PEM private key of tls_cert"),
      Text("tls_client_ca", Member(&S::tls_client_ca), AnyText,
           "PEM CA bundle: clients must present a certificate it signed (mTLS); '' = no client certificates"),
      Int("tls_reload_interval_s", Member(&S::tls_reload_interval_s), 1, 86400,
          "re-read the TLS files this often (a renewed certificate needs no restart)"),
  };
  return kKnobs;
}

const Knob* FindKnob(const std::string& key) {
  for (const Knob& k : Knobs()) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::string FlagName(const std::string& key) {
  std::string flag = key.substr(key.rfind('.') + 1);
  for (char& ch : flag) {
    if (ch == '_') ch = '-';
  }
  return flag;
}

// Sets `knob` from `text`. `auto` on a key with a CUDA default goes back to
// "not given": ResolveServerConfig then applies the device's default.
Status SetKnob(const Knob& knob, const std::string& label, const std::string& text, ServerConfig* config,
               GivenKeys* given) {
  if (!knob.cuda_default.empty() && text == "auto") {
    RETURN_IF_ERROR(knob.set(label, knob.get(ServerConfig()), config));
    given->erase(knob.key);
    return Status::Ok();
  }
  RETURN_IF_ERROR(knob.set(label, text, config));
  given->insert(knob.key);
  return Status::Ok();
}

// Walks a YAML map; nested maps are the sections of keys "section.name".
Status ParseMap(const YAML::Node& map, const std::string& prefix, ServerConfig* config, GivenKeys* given,
                std::set<std::string>* seen) {
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) {
      return Status::InvalidArgument("server config: a key under '" + prefix + "' is not a name");
    }
    const std::string key = prefix + kv.first.Scalar();
    if (!seen->insert(key).second) {
      return Status::InvalidArgument("server config: key '" + key + "' appears twice");
    }
    const YAML::Node& value = kv.second;
    bool is_section = false;
    for (const Knob& k : Knobs()) is_section |= k.key.rfind(key + ".", 0) == 0;
    if (is_section) {
      if (value.IsNull()) continue;  // `batching:` with nothing under it
      if (!value.IsMap()) return Status::InvalidArgument(KeyLabel(key) + ": must be a map of keys");
      RETURN_IF_ERROR(ParseMap(value, key + ".", config, given, seen));
      continue;
    }
    const Knob* knob = FindKnob(key);
    if (knob == nullptr) return Status::InvalidArgument("server config: unknown key '" + key + "'");
    if (!value.IsScalar() && !value.IsNull()) {
      return Status::InvalidArgument(KeyLabel(key) + ": must be a single value");
    }
    // `key:` with nothing, or `~`: the empty value.
    const std::string text = value.IsNull() ? "" : value.Scalar();
    RETURN_IF_ERROR(SetKnob(*knob, KeyLabel(key), text, config, given));
  }
  return Status::Ok();
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
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return Status::InvalidArgument(
        "server config tls_cert and tls_key: give both (TLS) or neither (plaintext)");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return Status::InvalidArgument("server config tls_client_ca: needs tls_cert and tls_key");
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

std::string ShownValue(const std::string& text) { return text.empty() ? "''" : text; }

// ParseServerConfig without the checks between keys (flags may still change
// the keys involved).
Status ParseServerYaml(const std::string& yaml_text, ServerConfig* out, GivenKeys* given) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("server config: YAML error: ") + e.what());
  }
  ServerConfig config;
  GivenKeys keys;
  if (!root.IsNull()) {
    if (!root.IsMap()) return Status::InvalidArgument("server config: top level must be a map");
    std::set<std::string> seen;
    RETURN_IF_ERROR(ParseMap(root, "", &config, &keys, &seen));
  }
  *out = config;
  *given = keys;
  return Status::Ok();
}

Status LoadServerYaml(const std::string& path, ServerConfig* out, GivenKeys* given) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("server config file '" + path + "' cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  Status s = ParseServerYaml(text.str(), out, given);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return Status::Ok();
}


}  // namespace

const std::vector<ServerConfigKey>& ServerConfigKeys() {
  static const std::vector<ServerConfigKey> kKeys = [] {
    std::vector<ServerConfigKey> keys;
    const ServerConfig defaults;
    for (const Knob& k : Knobs()) {
      keys.push_back({k.key, FlagName(k.key), k.help, k.get(defaults), k.cuda_default, k.is_bool});
    }
    return keys;
  }();
  return kKeys;
}

Status ParseServerConfig(const std::string& yaml_text, ServerConfig* out, GivenKeys* given) {
  ServerConfig config;
  GivenKeys keys;
  RETURN_IF_ERROR(ParseServerYaml(yaml_text, &config, &keys));
  RETURN_IF_ERROR(ValidateServerConfig(config));
  *out = config;
  if (given != nullptr) *given = keys;
  return Status::Ok();
}

Status LoadServerConfig(const std::string& path, ServerConfig* out, GivenKeys* given) {
  ServerConfig config;
  GivenKeys keys;
  RETURN_IF_ERROR(LoadServerYaml(path, &config, &keys));
  Status s = ValidateServerConfig(config);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  *out = config;
  if (given != nullptr) *given = keys;
  return Status::Ok();
}

Status ParseServerCommandLine(int argc, char** argv, ServerCommandLine* out) {
  *out = ServerCommandLine();
  FlagParser flags(
      "jagrank-server: the jagrank gRPC ranking server. Flags override the keys of --config (whose default is "
      "the embedded config/server.yaml); a flag's config key is its name with '_' for '-'. Budgets marked "
      "'auto' take the CPU default or, on a CUDA device, the CUDA one.");
  std::string config_path;
  flags.Add("config", &config_path, "server YAML (default: the embedded config/server.yaml)");
  flags.Add("check-config", &out->check_config,
            "check the config, the flags and the model config file, resolve the device and the defaults, print "
            "the summary and exit (0 = fine) without loading the model or listening");
  const std::vector<Knob>& knobs = Knobs();
  std::vector<std::string> texts(knobs.size());
  std::unique_ptr<bool[]> bools(new bool[knobs.size()]());
  const ServerConfig defaults;
  for (size_t i = 0; i < knobs.size(); ++i) {
    const Knob& k = knobs[i];
    if (k.is_bool) {
      bool* target = &bools[i];
      *target = k.get(defaults) == "true";
      flags.Add(FlagName(k.key), target, k.help);
    } else {
      texts[i] = k.cuda_default.empty()
                     ? k.get(defaults)
                     : "auto = " + k.get(defaults) + " on the CPU, " + k.cuda_default + " on CUDA";
      flags.Add(FlagName(k.key), &texts[i], k.help);
    }
  }
  RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    out->help = true;
    out->usage = flags.Usage();
    return Status::Ok();
  }
  if (flags.IsSet("config")) {
    RETURN_IF_ERROR(LoadServerYaml(config_path, &out->config, &out->given_keys));
  } else {
    Status s = ParseServerYaml(EmbeddedServerYaml(), &out->config, &out->given_keys);
    if (!s.ok()) return Status(s.code(), "embedded config/server.yaml: " + s.message());
  }
  for (size_t i = 0; i < knobs.size(); ++i) {
    const Knob& k = knobs[i];
    const std::string flag = FlagName(k.key);
    if (!flags.IsSet(flag)) continue;
    const std::string text = k.is_bool ? (bools[i] ? "true" : "false") : texts[i];
    RETURN_IF_ERROR(SetKnob(k, "flag --" + flag + " (server config key " + k.key + ")", text, &out->config,
                            &out->given_keys));
  }
  return ValidateServerConfig(out->config);
}

Status ResolveServerConfig(const GivenKeys& given, const std::function<bool()>& cuda_available,
                           ServerConfig* config) {
  std::string devices;
  bool cuda = false;
  for (std::string device : DeviceList(config->device)) {
    if (device == "auto") {
      device = cuda_available() ? "cuda:0" : "cpu";
    } else if (device.rfind("cuda", 0) == 0 && !cuda_available()) {
      return Problem(KeyLabel("device"), config->device,
                     "no usable CUDA device (this build has no CUDA, or no GPU is visible); use auto or cpu");
    }
    cuda |= device != "cpu";
    devices += (devices.empty() ? "" : ",") + device;
  }
  config->device = devices;
  const ServerConfig defaults;
  for (const Knob& k : Knobs()) {
    if (k.cuda_default.empty() || given.count(k.key)) continue;
    RETURN_IF_ERROR(k.set(KeyLabel(k.key), cuda ? k.cuda_default : k.get(defaults), config));
  }
  if (cuda && config->precision == "auto") config->precision = "bf16";
  return ValidateServerConfig(*config);
}

Status CheckServerConfigFiles(const ServerConfig& config) {
  ModelConfig model;
  if (config.model_config.empty()) {
    Status s = DefaultModelConfig(&model);
    if (!s.ok()) return Status(s.code(), "embedded config/model.yaml: " + s.message());
  } else {
    Status s = LoadModelConfig(config.model_config, &model);
    if (!s.ok()) return Status(s.code(), KeyLabel("model_config") + " = '" + config.model_config + "': " + s.message());
  }
  if (!config.model_weights.empty() && !std::ifstream(config.model_weights)) {
    return Status::NotFound(KeyLabel("model_weights") + " = '" + config.model_weights + "': cannot be opened");
  }
  if (!config.model_repository.empty()) {
    std::vector<RepositoryVersion> versions;
    Status s = ListModelRepository(config.model_repository, &versions);
    if (!s.ok()) return Status(s.code(), KeyLabel("model_repository") + ": " + s.message());
    if (versions.empty()) {
      return Status::NotFound(KeyLabel("model_repository") + " = '" + config.model_repository +
                              "': no complete version (<n>/model.yaml and <n>/model.safetensors)");
    }
    s = LoadModelConfig(versions.front().config_path, &model);
    if (!s.ok()) return Status(s.code(), KeyLabel("model_repository") + ": " + s.message());
  }
  return Status::Ok();
}

const std::vector<ReservedGrpcChannelArg>& ServerReservedGrpcChannelArgs() {
  static const std::vector<ReservedGrpcChannelArg> kReserved = {
      {GRPC_ARG_MAX_CONCURRENT_STREAMS, "set it with grpc_max_concurrent_streams"},
      {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, "set it with grpc_max_receive_message_bytes"},
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

const std::vector<GrpcDefaultChannelArg>& ServerDefaultGrpcChannelArgs() {
  static const std::vector<GrpcDefaultChannelArg> kDefaults = {
      {GRPC_ARG_KEEPALIVE_TIME_MS, 30000},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000},
  };
  return kDefaults;
}

Status ValidateServerConfig(const ServerConfig& c) {
  for (const Knob& k : Knobs()) RETURN_IF_ERROR(k.check(KeyLabel(k.key), c));
  if (c.grpc_max_receive_message_bytes < c.max_request_bytes) {
    return Problem(KeyLabel("grpc_max_receive_message_bytes"), std::to_string(c.grpc_max_receive_message_bytes),
                   "must be >= max_request_bytes (" + std::to_string(c.max_request_bytes) + ")");
  }
  if (!c.model_repository.empty() && (!c.model_config.empty() || !c.model_weights.empty())) {
    return Problem(KeyLabel("model_repository"), c.model_repository,
                   "model_repository and model_config/model_weights are mutually exclusive: each repository "
                   "version carries its own model.yaml and model.safetensors");
  }
  RETURN_IF_ERROR(ValidateHostileLoadKeys(c));
  return Status::Ok();
}

int64_t GrpcMemoryQuotaBytes(const ServerConfig& config) {
  if (config.grpc_memory_quota_bytes > 0) return config.grpc_memory_quota_bytes;
  return MachineMemoryBytes() / 4;
}

std::vector<std::string> DeviceList(const std::string& device) {
  std::vector<std::string> entries;
  size_t start = 0;
  for (;;) {
    const size_t comma = device.find(',', start);
    entries.push_back(device.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return entries;
    start = comma + 1;
  }
}

std::string ServerConfigSummary(const ServerConfig& c, const GivenKeys& given) {
  std::ostringstream s;
  std::string defaulted;
  for (const Knob& k : Knobs()) {
    s << k.key << "=" << ShownValue(k.get(c)) << " ";
    if (!k.cuda_default.empty() && !given.count(k.key)) defaulted += (defaulted.empty() ? "" : ",") + k.key;
  }
  const char* device_kind = c.device == "auto" ? "unresolved" : c.device == "cpu" ? "cpu" : "cuda";
  s << "device_defaults=" << (defaulted.empty() ? "none" : device_kind + ("(" + defaulted + ")"));
  return s.str();
}

}  // namespace jagrank
