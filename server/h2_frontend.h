// H2Frontend: a second listener that serves jagrank.v1.Ranker/Rank,
// jagrank.v1.Ranker/GetModelInfo and grpc.health.v1.Health/Check in gRPC's
// wire protocol (HTTP/2 POST, `application/grpc`, length-prefixed messages,
// `grpc-status` trailers) with libnghttp2's framing and HPACK. Any gRPC
// client can call it over plaintext HTTP/2; the main listener (gRPC C++)
// keeps serving everything, reflection and health Watch included.
//
// Why: on the H200 host, jagged h1024 stops at ~165-200k calls/s in gRPC
// 1.51's transport with the GPU 35% busy and cores idle (bench/results/
// serving_h200.md, session 10). The same wire protocol over nghttp2 took
// ~11 us of client CPU per call against gRPC's ~31 (jagrank-loadgen
// --engine nghttp2). This is the server side of that: a few event loops,
// each owning its connections, with no completion queues, no per-call
// contexts or filter stacks, and replies written in batches.
//
//   accept thread --fd--> loop k (round robin): read -> nghttp2 -> on a
//     request's END_STREAM: parse, RankerService::Admit (validate, queue)
//   executor thread (a batch done) -> serialize the reply -> loop's mailbox
//     -> loop: submit HEADERS/DATA/trailers -> one send per connection
//
// What it does not do: TLS, compression (a compressed request gets
// UNIMPLEMENTED), server reflection, health Watch, keepalive pings of its
// own (it answers the client's).
#ifndef JAGRANK_SERVER_H2_FRONTEND_H_
#define JAGRANK_SERVER_H2_FRONTEND_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/metrics.h"
#include "server/ranker_service.h"
#include "server/server_config.h"

namespace jagrank {

class H2Frontend {
 public:
  // `config`, `service` and `metrics` must outlive the front end.
  H2Frontend(const ServerConfig& config, RankerService* service, ServerMetrics* metrics);
  ~H2Frontend();  // Stop()s.
  H2Frontend(const H2Frontend&) = delete;
  H2Frontend& operator=(const H2Frontend&) = delete;

  // Binds config.h2_address and starts the accept thread and the loops.
  // Rank answers whatever the service's state says (UNAVAILABLE while it
  // loads or drains).
  Status Start();
  // The bound TCP port (0 for a unix socket).
  int port() const { return port_; }

  // Stops accepting, answers the replies already handed over, sends GOAWAY
  // on every connection, closes them and joins the threads. REQUIRES: every
  // call admitted through this front end has had its done callback (the
  // executor is joined). Idempotent.
  void Stop();

 private:
  struct Call;
  struct Connection;
  struct Loop;
  friend struct H2ServerCallbacks;

  void Accept();  // the accept thread

  const ServerConfig& config_;
  RankerService* const service_;
  ServerMetrics* const metrics_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd that wakes the accept thread to stop
  int port_ = 0;
  std::string unix_path_;  // unlinked on Stop
  std::thread acceptor_;
  std::vector<std::unique_ptr<Loop>> loops_;
  bool stopped_ = false;
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_H2_FRONTEND_H_
