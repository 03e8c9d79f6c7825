// ServerConfig: every knob of jagrank-server. Each knob is declared once, as
// a row of the table in server_config.cc (key, check, CUDA default, help);
// that table drives the YAML parsing, the command-line flags, the validation
// and the start-up summary. The struct holds the built-in defaults (on a CUDA
// device the rows with a CUDA default replace them). Units are in the names.
// Everything below main takes `const ServerConfig&`.
//
//   ServerCommandLine cmd;
//   RETURN_IF_ERROR(ParseServerCommandLine(argc, argv, &cmd));  // --config, then flags
//   RETURN_IF_ERROR(ResolveServerConfig(cmd.given_keys, CudaDeviceAvailable, &cmd.config));
#ifndef JAGRANK_SERVER_SERVER_CONFIG_H_
#define JAGRANK_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/status.h"

namespace jagrank {

// The dynamic batcher's policy (server/batcher.h). A batch closes when any
// budget is reached or the oldest queued request has waited
// max_queue_delay_us (or, with dispatch_when_idle, as soon as the executor
// has no batch waiting to run); a single request above a budget runs alone.
// The defaults size batches for the CPU backend; a CUDA device gets larger
// ones (the table's CUDA column) unless the config or a flag sets them.
struct BatchingConfig {
  int64_t max_queue_delay_us = 2000;          // longest wait of the oldest request before its batch closes
  bool dispatch_when_idle = false;            // also close a batch at once when the executor has none waiting to run
  int max_batch_requests = 256;               // requests per batch
  int64_t max_batch_candidates = 16384;       // candidate rows per batch
  int64_t max_batch_history_tokens = 131072;  // sum of kept history lengths per batch
  int64_t max_batch_attention_cost = 64LL << 20;  // jagged: sum of L^2 over kept histories; padded strategies: R * (max L)^2
  int max_queue_requests = 2048;              // queued requests (beyond the <= 2 batches the executor holds); more -> RESOURCE_EXHAUSTED
};

struct ServerConfig {
  std::string grpc_address = "0.0.0.0:8500";     // host:port or unix:/path of the gRPC listener (port 0 = pick one)
  std::string metrics_address = "0.0.0.0:9100";  // host:port of /metrics and the status page; empty = off
  std::string device = "auto";                   // auto | cpu | cuda | cuda:N, or a list "cuda:0,cuda:1" (ResolveServerConfig resolves auto)
  std::string precision = "auto";                // auto | fp32 | bf16: CUDA numerics (auto = bf16); ignored on CPU
  std::string model_config;                      // model YAML path; empty = the embedded config/model.yaml
  std::string model_weights;                     // safetensors path; empty = random weights from the config's seed
  std::string attention = "jagged";              // jagged | padded_flash | padded_dense
  int cpu_threads = 0;                           // CPU backend threads; 0 = the usable cores
  int grpc_polling_threads = 0;                  // gRPC completion queues, one polling thread each; 0 = auto
  int grpc_max_concurrent_streams = 128;         // calls open at once per client connection; 0 = no limit
  std::string grpc_channel_args;                 // further gRPC server channel arguments, "grpc.name=value[,...]"
  int max_candidates_per_request = 1024;         // more -> INVALID_ARGUMENT
  int64_t max_request_bytes = 4LL << 20;         // serialized RankRequest; more -> INVALID_ARGUMENT
  int64_t grpc_max_receive_message_bytes = 16LL << 20;  // transport cap; above it gRPC answers RESOURCE_EXHAUSTED
  int64_t drain_timeout_ms = 30000;              // drain longer than this: cancel what is left
  int64_t drain_linger_ms = 300;                 // then keep answering UNAVAILABLE this long before closing
  std::string log_level = "info";                // trace | debug | info | warn | error
  // RankStream (server/rank_stream.h): requests one stream may have read
  // and not yet answered (written); at the cap the server stops reading
  // that stream until answers drain. And streams open at once, server-wide;
  // more are refused with RESOURCE_EXHAUSTED.
  int rank_stream_max_outstanding = 256;
  int rank_stream_max_streams = 1024;
  BatchingConfig batching;

  // Model repository (server/model_repository.h, server/model_manager.h):
  // DIR/<n>/model.yaml + DIR/<n>/model.safetensors; the highest complete
  // version that loads is served and replaced without downtime. Excludes
  // model_config and model_weights. Empty = serve model_config/model_weights.
  std::string model_repository;
  double model_poll_interval_s = 10;             // rescan the repository this often; 0 = only on SIGHUP

  // Several executors (server/executor.h): this many per entry of the
  // device list, each with its own model instance, all fed by one batcher.
  int instances_per_device = 1;

  // ---- Hostile load: memory bound, connection limits, admission, TLS ----
  // Bytes gRPC may hold for all connections together (partly received
  // messages, read buffers): gRPC's resource quota. Near it gRPC shrinks the
  // flow-control windows it grants and cancels streams (RST_STREAM) to
  // reclaim memory. 0 = a quarter of the machine's memory (or of the
  // cgroup's limit, when lower): GrpcMemoryQuotaBytes().
  int64_t grpc_memory_quota_bytes = 0;
  // A connection with no call for this long is closed (clients reconnect
  // when they need to); 0 = never.
  int64_t grpc_max_connection_idle_ms = 300000;
  // A connection older than this is asked to go away (GOAWAY; clients
  // reconnect), and its calls get grpc_max_connection_age_grace_ms more to
  // finish before it is closed: no stream, finished or not, holds memory
  // longer than the sum. 0 = no age limit.
  int64_t grpc_max_connection_age_ms = 1800000;
  int64_t grpc_max_connection_age_grace_ms = 30000;
  // TLS on the gRPC port: PEM files of the server's certificate chain and
  // private key (both, or neither = plaintext). With tls_client_ca,
  // clients must present a certificate signed by one of its CAs (mTLS).
  // The files are re-read every tls_reload_interval_s, so a renewed
  // certificate takes effect without a restart.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  int64_t tls_reload_interval_s = 60;
};

// The resource quota the server gives gRPC: config.grpc_memory_quota_bytes,
// or when that is 0 a quarter of the physical memory or of the cgroup's
// memory limit, whichever is lower.
int64_t GrpcMemoryQuotaBytes(const ServerConfig& config);


// The entries of a device list ("cuda:0,cuda:1"), as written.
std::vector<std::string> DeviceList(const std::string& device);

// One knob as the table declares it, for --help, tests and docs.
struct ServerConfigKey {
  std::string key;           // YAML key; nested ones as "batching.max_batch_requests"
  std::string flag;          // command-line flag without "--": the key's last part with '-' for '_'
  std::string help;
  std::string default_value;       // the built-in default as YAML text
  std::string cuda_default_value;  // the default on a CUDA device; empty = the same on every device
  bool is_bool = false;            // the flag may be given without a value
};
const std::vector<ServerConfigKey>& ServerConfigKeys();

// The keys a config file or the command line set. A key with a CUDA default
// that is absent here, or was set to `auto`, takes its device's default.
using GivenKeys = std::set<std::string>;

// Parses YAML text (keys as in ServerConfigKeys; "batching.x" nested under
// `batching:`) over the built-in defaults, checking each value. Unknown and
// repeated keys are errors that name the key. `given` (optional) receives the
// keys set.
Status ParseServerConfig(const std::string& yaml_text, ServerConfig* out, GivenKeys* given = nullptr);
Status LoadServerConfig(const std::string& path, ServerConfig* out, GivenKeys* given = nullptr);

// config/server.yaml as it was at build time (the default of --config).
const char* EmbeddedServerYaml();

// What jagrank-server's command line asks for.
struct ServerCommandLine {
  ServerConfig config;   // --config (default: the embedded config/server.yaml), then the flags given; validated
  GivenKeys given_keys;  // keys set by the file or a flag
  bool help = false;     // --help: `usage` holds the text to print
  std::string usage;
  bool check_config = false;  // --check-config: validate, resolve, print the summary, exit
};

// Builds the config as jagrank-server does: the file of --config (or the
// embedded one), then each flag given on the command line overrides its key.
// Errors name the flag or the key and the limit.
Status ParseServerCommandLine(int argc, char** argv, ServerCommandLine* out);

// Resolves config->device ("auto": cuda:0 when cuda_available() says a GPU is
// usable, else cpu; an explicit cuda device without one is an error naming
// `device`), then gives every key with a CUDA default that `given` lacks its
// device's default, and precision auto its device's value (bf16 on CUDA).
// Validates the result.
Status ResolveServerConfig(const GivenKeys& given, const std::function<bool()>& cuda_available,
                           ServerConfig* config);

// Checks the files the config names without loading the model: the model
// config parses and validates (the embedded one when none is named) and the
// weights file can be opened. Errors name the key and the path.
Status CheckServerConfigFiles(const ServerConfig& config);

// Checks every value (each key's own check, then those between keys); the
// error names the key and the limit.
Status ValidateServerConfig(const ServerConfig& config);

// One line for the start-up log: every key=value, and which device's
// defaults the keys absent from `given` took.
std::string ServerConfigSummary(const ServerConfig& config, const GivenKeys& given = {});

// The channel arguments grpc_channel_args refuses: those jagrank-server sets
// from its own keys, and grpc.minimal_stack, which drops gRPC's receive-size
// cap (a message above grpc_max_receive_message_bytes would be read whole).
const std::vector<ReservedGrpcChannelArg>& ServerReservedGrpcChannelArgs();

// Keepalive settings jagrank-server applies unless grpc_channel_args sets
// them: ping an idle connection every 30 s, drop it when the ping is not
// answered in 10 s, allow client pings (also without calls) every 10 s.
struct GrpcDefaultChannelArg {
  const char* name;
  int value;
};
const std::vector<GrpcDefaultChannelArg>& ServerDefaultGrpcChannelArgs();

}  // namespace jagrank

#endif  // JAGRANK_SERVER_SERVER_CONFIG_H_
