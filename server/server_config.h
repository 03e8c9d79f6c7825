// ServerConfig: every knob of jagrank-server, parsed once from
// config/server.yaml (yaml-cpp) and then overridden by command-line flags.
// Everything below main takes `const ServerConfig&`. Units are in the names.
#ifndef JAGRANK_SERVER_SERVER_CONFIG_H_
#define JAGRANK_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/process.h"

namespace jagrank {

// The dynamic batcher's policy (server/batcher.h). A batch closes when any
// budget is reached or the oldest queued request has waited
// max_queue_delay_us (or, with dispatch_when_idle, as soon as the executor
// has no batch waiting to run); a single request above a budget runs alone.
struct BatchingConfig {
  int64_t max_queue_delay_us = 2000;          // longest wait of the oldest request before its batch closes
  bool dispatch_when_idle = false;            // also close a batch at once when the executor has none waiting to run
  int max_batch_requests = 256;               // requests per batch
  int64_t max_batch_candidates = 16384;       // candidate rows per batch
  int64_t max_batch_history_tokens = 131072;  // sum of kept history lengths per batch
  int64_t max_batch_attention_cost = 64LL << 20;  // jagged: sum of L^2 over kept histories; padded strategies: R * (max L)^2
  int max_queue_requests = 2048;              // queued requests (beyond the <= 2 batches the executor holds); more -> RESOURCE_EXHAUSTED
};

// Upper limit of ServerConfig::grpc_completion_queues.
constexpr int kMaxGrpcCompletionQueues = 64;
// Upper limit of ServerConfig::grpc_max_concurrent_streams.
constexpr int kMaxGrpcConcurrentStreams = 1 << 20;

struct ServerConfig {
  std::string grpc_address = "0.0.0.0:8500";     // host:port of the gRPC listener (port 0 = pick one)
  std::string metrics_address = "0.0.0.0:9100";  // host:port of /metrics; empty = no metrics endpoint
  std::string device = "auto";                   // auto | cpu | cuda | cuda:N
  std::string model_config;                      // model YAML path; empty = the embedded config/model.yaml
  std::string model_weights;                     // safetensors path; empty = random weights from the config's seed
  std::string attention = "jagged";              // jagged | padded_flash | padded_dense
  int cpu_threads = 0;                           // CPU backend threads; 0 = all cores
  // CUDA: how the executor waits for a batch's scores. spin = CUDA's default
  // (a core spins while the GPU computes); block = sleep on a blocking-sync
  // event (the core goes to gRPC's threads; one wake-up per batch).
  std::string cuda_sync = "spin";                // spin | block
  int grpc_completion_queues = 0;                // Rank's completion queues, one polling thread each; 0 = half the cores, 2 to 8
  // Calls open at once per client connection (HTTP/2 SETTINGS); more wait in
  // the client. 0 = no limit, which on the H200 host let an overloaded open
  // loop pile ~20000 streams on the server and its reads stall (118k calls/s
  // offered, 42k answered); 64-256 held ~96-100k answered.
  int grpc_max_concurrent_streams = 128;
  // Further gRPC server channel arguments, "grpc.name=value[,...]" (see
  // grpc/impl/codegen/grpc_types.h); whole numbers go as integers. Names
  // jagrank sets from its own keys, and grpc.minimal_stack, are refused
  // (ServerReservedGrpcChannelArgs). Empty = none.
  std::string grpc_channel_args;
  int max_candidates_per_request = 1024;         // more -> INVALID_ARGUMENT
  int64_t max_request_bytes = 4LL << 20;         // serialized RankRequest; more -> INVALID_ARGUMENT
  int64_t grpc_max_receive_message_bytes = 16LL << 20;  // transport cap; above it gRPC answers RESOURCE_EXHAUSTED
  int64_t keepalive_time_ms = 30000;             // server pings an idle connection this often
  int64_t keepalive_timeout_ms = 10000;          // and closes it when the ping is not answered in time
  int64_t keepalive_min_client_ping_interval_ms = 10000;  // clients may ping no more often than this
  int warmup_batches = 2;                        // forward passes before reporting SERVING
  int64_t drain_timeout_ms = 30000;              // drain longer than this: cancel what is left
  int64_t drain_linger_ms = 300;                 // after the accepted work is done, keep answering UNAVAILABLE this long before closing the listener
  std::string log_level = "info";                // trace | debug | info | warn | error
  BatchingConfig batching;

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
  // private key (both, or neither = plaintext). With tls_client_ca_file,
  // clients must present a certificate signed by one of its CAs (mTLS).
  // The files are re-read every tls_reload_interval_s, so a renewed
  // certificate takes effect without a restart.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int64_t tls_reload_interval_s = 60;
};

// The resource quota the server gives gRPC: config.grpc_memory_quota_bytes,
// or when that is 0 a quarter of the physical memory or of the cgroup's
// memory limit, whichever is lower.
int64_t GrpcMemoryQuotaBytes(const ServerConfig& config);

// Parses YAML text (keys as the field names above; batching keys nested under
// `batching:`). Unknown keys are errors that name the key.
Status ParseServerConfig(const std::string& yaml_text, ServerConfig* out);
Status LoadServerConfig(const std::string& path, ServerConfig* out);
// The channel arguments grpc_channel_args refuses: those jagrank-server sets
// from its own keys, and grpc.minimal_stack, which drops gRPC's receive-size
// cap (a message above grpc_max_receive_message_bytes would be read whole).
const std::vector<ReservedGrpcChannelArg>& ServerReservedGrpcChannelArgs();

// Checks ranges; the error names the field and the limit.
Status ValidateServerConfig(const ServerConfig& config);
// One line for the start-up log.
std::string ServerConfigSummary(const ServerConfig& config);

}  // namespace jagrank

#endif  // JAGRANK_SERVER_SERVER_CONFIG_H_
