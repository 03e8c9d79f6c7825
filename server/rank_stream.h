// RankStreamService: the bidirectional RankStream method of jagrank.v1.Ranker
// (docs/rank_stream.md), for clients that send at a high rate: many
// RankRequests on one call, so gRPC's per-call cost (a new HTTP/2 stream,
// its headers and trailers, the call's events) is paid once per stream, not
// once per request.
//
// Served on gRPC's raw async API (the messages arrive as bytes and are
// parsed here, so bytes that are not a RankStreamRequest get an error reply
// and the stream goes on) on the RankerService's completion queues, by their
// polling threads (RankerService::queues(): one set of threads polls for
// every method). Each message passes RankerService::Submit, the
// door of a unary Rank call: the same parse-then-admission-then-conversion,
// the same limits, error messages and metrics. Its answer (scores, or the
// status a Rank call would have ended with) is written back as a
// RankStreamResponse when its batch finishes: in completion order, each
// tagged with its request_id.
//
// Per stream:
//   - one Read in flight at a time, and at most
//     config.rank_stream_max_outstanding requests read and not yet answered
//     (written): at the cap the stream is not read until answers drain
//     (gRPC's flow control then holds the client back), never dropped;
//   - writes are serialized: answers wait in the stream's reply queue, one
//     Write in flight;
//   - a request's deadline is the earlier of the call's deadline and its
//     arrival + timeout_ms (timeout_ms 0: the call's deadline alone);
//   - the client's half-close: the outstanding answers are written, then the
//     stream finishes with OK.
// Server-wide, at most config.rank_stream_max_streams streams are open;
// more are finished at once with RESOURCE_EXHAUSTED. A stream opened while
// the model loads or the server drains is finished at once with UNAVAILABLE.
// While draining, each message read gets an UNAVAILABLE error reply (Submit
// refuses it) and the requests already accepted are answered; then
// FinishOpenStreams ends every stream still open, after its answers.
#ifndef JAGRANK_SERVER_RANK_STREAM_H_
#define JAGRANK_SERVER_RANK_STREAM_H_

#include <absl/base/thread_annotations.h>
#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/batcher.h"
#include "server/metrics.h"
#include "server/ranker_service.h"
#include "server/server_config.h"

namespace jagrank {

class RankStreamService {
 public:
  // `config`, `metrics` and `ranker` must outlive the service. `ranker`
  // registers the RankStream method (marked raw there); this class requests
  // its calls and serves them.
  // Its streams' events come back on the ranker's queues: the ranker's
  // StopPolling must have run before this is destroyed.
  RankStreamService(const ServerConfig& config, ServerMetrics* metrics, RankerService* ranker);

  // Requests the first streams on every queue of the ranker. Call once,
  // after BuildAndStart() succeeded (with the ranker's StartPolling).
  void RequestStreams();
  // The end of a drain: no stream opens from now on, and every open stream
  // stops reading and finishes once its outstanding answers are written
  // (OK when its client had half-closed, otherwise UNAVAILABLE "server is
  // shutting down"; messages not read by then are not answered). Waits
  // until every stream is finished and freed, or until `give_up`; false
  // when some are still open. REQUIRES: the ranker is draining and the
  // executors are joined, so that every accepted request has its answer
  // queued. Thread-safe; the drain calls it once.
  bool FinishOpenStreams(Clock::time_point give_up);
  // Streams open now (accepted and not yet freed). Thread-safe.
  int64_t open_streams() const;

  // A stream's messages all arrive on one queue and are parsed and
  // converted by its thread: on the 16-core GPU host 4 queues held the
  // production model's streams to ~120k requests/s with p99 past 20 ms from
  // 512 requests in flight (the ranker has grpc_polling_threads queues).
  // Streams requested ahead of time on each queue.
  static constexpr int kStreamsRequestedPerQueue = 8;

 private:
  class Stream;  // one RankStream call: its context, reader-writer, reply queue and events

  // The ranker's queue; its mu is held while starting any operation on a
  // stream of it (taken after the stream's own lock), so that none starts
  // after its Shutdown.
  using Queue = RankerService::Queue;

  // Requests one new stream on `queue` unless it is shut down.
  void RequestStream(Queue* queue);
  // A Stream's event (Stream::Event) came back on its queue.
  static void RunEvent(void* owner, int event, bool ok);
  void OnEvent(Stream* stream, int event, bool ok);
  // A new stream: refused (finished at once) or registered and read.
  void Open(Stream* stream);
  // A message arrived on `stream`: parsed and submitted; its answer queued
  // now when it is refused.
  void HandleMessage(Stream* stream);
  // `stream` answers its request `request_id` with `status` (and the scores
  // when OK). Any thread.
  void Answer(Stream* stream, const std::string& request_id, const Status& status, const float* scores,
              int64_t count, const std::string& version);
  // Queues a serialized RankStreamResponse for writing. Any thread.
  void QueueReply(Stream* stream, grpc::ByteBuffer bytes);
  // Takes `stream` out of the open set and frees it.
  void Free(Stream* stream);

  const ServerConfig& config_;
  ServerMetrics* const metrics_;
  RankerService* const ranker_;
  mutable std::mutex streams_mu_;
  std::set<Stream*> open_ ABSL_GUARDED_BY(streams_mu_);  // registered, not yet freed
  bool closing_ ABSL_GUARDED_BY(streams_mu_) = false;    // FinishOpenStreams ran: no stream opens
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_RANK_STREAM_H_
