// RankerService: the jagrank.v1.Ranker gRPC service. Rank runs on the async
// completion-queue API: CompletionQueueCount() server completion queues,
// each polled by its own thread, with kCallsRequestedPerQueue calls
// requested on each ahead of time. A polling thread converts a new call's
// RankRequest into a RankInput (server/rank_request.h: the protobuf stops
// there), queues it on the batcher and goes back to its queue; the executor
// finishes the call when its batch is computed. (On the H200 host, jagged
// h1024: the callback API peaked at 49.7k QPS at 128 calls in flight and
// fell to 38.3k at 512; these queues reached 67.3k at 512 with p99 19.5 ms,
// at about the same server CPU per call.) RankStream is served on the raw
// async API by RankStreamService (server/rank_stream.h), on these same
// queues; each of its requests passes the same door as a Rank call (Submit).
#ifndef JAGRANK_SERVER_RANKER_SERVICE_H_
#define JAGRANK_SERVER_RANKER_SERVICE_H_

#include <absl/base/thread_annotations.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server_builder.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "jagrank/v1/ranker.grpc.pb.h"
#include "model/model.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/model_manager.h"
#include "server/rank_request.h"
#include "server/server_config.h"

namespace jagrank {

// The health service names reported SERVING once the server is ready ("" is
// the server as a whole).
inline constexpr const char* kRankerServiceName = "jagrank.v1.Ranker";

// A call's deadline on the steady clock (max when the client set none, or
// one further away than clocks represent).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context);

// Rank is served through gRPC's async generic service (MarkMethodGeneric):
// its calls arrive before their message is read, and the service reads a
// message only while it holds one of ReadSlotCount() read slots. gRPC opens
// a stream's flow-control window to the whole declared message size once a
// read is pending, so the slots bound the bytes that partly received
// messages can hold: slots x grpc_max_receive_message_bytes (half the memory
// quota); calls beyond them wait unread, each holding at most the stream's
// initial window. When calls wait, a read that has taken longer than
// kEvictReadAfter is cancelled (RESOURCE_EXHAUSTED, rejection
// "slow_request") to free its slot: streams that declare a large message
// and never finish it cannot hold the slots. The handler parses the bytes
// itself, onto a per-call protobuf arena, so bytes that are not a
// RankRequest get INVALID_ARGUMENT naming the problem.
//
// GetModelInfo and the standard health service (grpc.health.v1.Health:
// Check and Watch for "" and kRankerServiceName, SERVING exactly while
// serving()) arrive the same way, on the same queues and polling threads.
// Every call the server takes is so served by these threads alone: a
// callback-API method (gRPC's own health service is one) would start
// gRPC's callback threads, which then poll the connections as well and hand
// every Rank event over to a queue thread, one more wake-up per event (at 3x
// overload on one core they took ~0.10 cores and cost ~8 % of goodput).
class RankerService final
    : public v1::Ranker::WithRawMethod_RankStream<
          v1::Ranker::WithGenericMethod_Rank<v1::Ranker::WithGenericMethod_GetModelInfo<v1::Ranker::Service>>> {
 public:
  // Starts in the loading state: every call answers UNAVAILABLE until
  // SetReady. `config` and `metrics` must outlive the service.
  RankerService(const ServerConfig& config, ServerMetrics* metrics);
  // StopPolling()s. REQUIRES: the grpc::Server is shut down (or was never built).
  ~RankerService();

  // Registers the service (and the generic service Rank arrives through)
  // and adds the completion queues Rank is served on. Call once, before
  // builder->BuildAndStart().
  void AddToBuilder(grpc::ServerBuilder* builder);
  // Requests the first calls on every queue and starts one polling thread
  // per queue. Call once, after BuildAndStart() succeeded.
  void StartPolling();
  // Shuts the queues down, drains them (every call object still held is
  // freed as its last event comes back) and joins the polling threads.
  // REQUIRES: grpc::Server::Shutdown() has returned (or the server was never
  // built), and every call handed to the batcher has been finished.
  // Idempotent; not thread-safe (the server's drain calls it once).
  void StopPolling();

  // After load and warm-up. `models` and `batcher` must outlive the
  // service. Each Rank call is validated by the converter of the version
  // current when it arrives (ServedModel::converter) and tagged with that
  // version's request contract; GetModelInfo describes the current version.
  void SetReady(ModelManager* models, Batcher* batcher);
  // From now on Rank answers UNAVAILABLE; already accepted calls complete.
  void SetDraining();

  // Accepted calls not yet finished.
  int64_t inflight() const { return inflight_.load(); }
  // Waits until every Rank reply handed to gRPC (answers and refusals) is
  // reported sent, or until `give_up`; false when some are still pending.
  // Thread-safe.
  bool WaitRepliesSent(Clock::time_point give_up) const;
  // SetReady ran and SetDraining did not: what health reports as SERVING.
  bool serving() const { return state_.load(std::memory_order_acquire) == kServing; }
  // SetReady ran (the model is there, draining or not).
  bool loaded() const { return state_.load(std::memory_order_acquire) != kLoading; }
  // The serving model's version, as Rank reports it. REQUIRES: loaded().
  std::string model_version() const { return models_->Current()->version; }

  // Admission of a converted request: refuses while loading or draining,
  // and queues it on the batcher. OK: the request is accepted and its
  // `finish` will run (wrapped here to count it in the metrics). Otherwise the
  // status to answer with (the rejection is already counted) and `finish`
  // never runs. Thread-safe.
  Status Admit(std::unique_ptr<QueuedRequest> request);
  // The door of every request, a Rank call's or one message of a
  // RankStream: `parsed` is how its parse went (OK, or INVALID_ARGUMENT
  // naming the problem). While serving: the deadline-aware admission for
  // `queued->deadline`, then `request` is converted and validated by the
  // version current now (into queued->input), then Admit. `queued` comes
  // with arrival, deadline, request_id, is_cancelled and finish set. OK:
  // accepted, and its `finish` will run. Otherwise the status to answer
  // with (already counted in the metrics), and `finish` never runs.
  // Thread-safe.
  Status Submit(const Status& parsed, const v1::RankRequest& request, std::unique_ptr<QueuedRequest> queued);
  // Ends every health Watch call (UNAVAILABLE, after the NOT_SERVING
  // update SetDraining sent) and finishes later ones at once, so that open
  // watches do not hold the listener's shutdown. Thread-safe.
  void EndWatches();
  // GetModelInfo's answer. REQUIRES: SetReady ran.
  void FillModelInfo(v1::ModelInfo* info) const;

  // Completion queues (= polling threads) every call is served on:
  // grpc_polling_threads, or by default half the usable cores, 1 to 8 (the
  // executor's own threads need the rest; on the 16-core H200 host 4 queues
  // served less and 16 no more than these 8, when RankStream and the
  // callback API still had polling threads of their own).
  int CompletionQueueCount() const;
  // Calls requested ahead of time on each queue, so that a burst of new
  // calls finds requested ones waiting instead of queueing inside gRPC
  // until a polling thread requests the next.
  static constexpr int kCallsRequestedPerQueue = 32;
  // Rank messages read at once: half of GrpcMemoryQuotaBytes(config) over
  // grpc_max_receive_message_bytes, 1 to kMaxReadSlots.
  int64_t ReadSlotCount() const;
  static constexpr int64_t kMaxReadSlots = 4096;
  // A read this old is cancelled when other calls wait for a slot. A
  // request of a few KiB arrives with its call; 4 MiB over a 1 Gbit/s link
  // take ~35 ms.
  static constexpr std::chrono::milliseconds kEvictReadAfter{100};

  // The server's completion queues, each polled by its own thread: every
  // event of every call (Rank, RankStream, GetModelInfo, health) comes back
  // on one of them, so one thread per queue does all of gRPC's polling.
  // (A second set of queues for RankStream, polled by threads of its own,
  // took part of the connections' polling and handed events over: ~0.06
  // cores under 3x overload on one core, with no stream open.)
  // A tag on these queues: the polling thread runs run(owner, event, ok).
  struct QueueTag {
    void* owner;
    int event;
    void (*run)(void* owner, int event, bool ok);
  };
  struct Queue {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread poller;
    // Held while requesting a call or stream on `cq` (and by RankStream
    // while starting any operation), so that none starts after Shutdown.
    std::mutex mu;
    bool shut_down = false;     // guarded by mu; no more operations on `cq`
    RankerService* service = nullptr;
    std::atomic<int64_t>* replies_pending = nullptr;  // the service's replies_pending_
  };
  // Valid from AddToBuilder on. RankStreamService requests its streams on
  // them, and must outlive StopPolling (its events drain there).
  const std::vector<std::unique_ptr<Queue>>& queues() const { return queues_; }

 private:
  class RankCall;  // one Rank call: its context, stream, messages and events
  enum State { kLoading, kServing, kDraining };

  // Requests one new Rank call on `queue` unless it is shut down.
  void RequestCall(Queue* queue);
  // Read slots. Reads `call`'s message now if a slot is free, otherwise
  // queues it (and evicts the oldest read if it is past kEvictReadAfter).
  void ReadWhenASlotIsFree(RankCall* call);
  void StartReadLocked(RankCall* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slots_mu_);
  // The oldest read past kEvictReadAfter while calls wait, marked evicted
  // (the caller cancels it outside the lock), or null.
  RankCall* EvictLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slots_mu_);
  void MaybeEvict();
  // `call`'s read came back: its slot goes to the newest waiting call (whose
  // read starts) or back to the pool. True when `call` had been evicted.
  bool ReleaseReadSlot(RankCall* call);
  // Takes `call` off the waiting list; false when it was not on it.
  bool ForgetWaiting(RankCall* call);
  void Poll(Queue* queue);
  // A RankCall's event (RankCall::Event) came back on its queue.
  static void RunEvent(void* owner, int event, bool ok);
  void OnEvent(RankCall* call, int event, bool ok);
  // OK in kServing; otherwise UNAVAILABLE, counted (rejection "not_ready" or
  // "shutting_down").
  Status RefuseUnlessServing(int state, Clock::time_point arrival);
  // Deadline-aware admission before the message is read: under overload a
  // call the queue could not finish before its deadline is refused (and
  // counted, "deadline_unmeetable") without reading, parsing or converting
  // its request, so refusals cost little of the CPU the admitted calls need.
  // True when `call` was refused. Admission is checked again after the parse.
  bool RefusedBeforeRead(RankCall* call);
  // Adds `delta` to the accepted calls not yet finished and sets the
  // inflight gauge to the new count, in the order the count changes.
  void CountInflight(int delta);
  // Parses the call's request bytes onto its arena: INVALID_ARGUMENT when
  // they exceed max_request_bytes or are not a RankRequest.
  Status ParseRequest(RankCall* call);
  // A GetModelInfo call (its empty request is never read): the current
  // model's description, or UNAVAILABLE while loading.
  void AnswerModelInfo(RankCall* call);
  // Health: the status reported for `service` (SERVICE_UNKNOWN for other names).
  int HealthStatusOf(const std::string& service) const;
  // A health call's request has been read: Check answers; Watch writes the
  // status and joins watches_.
  void HandleHealth(RankCall* call);
  // Writes the watched status unless a write is in flight or it is the one
  // last written.
  void WriteWatchLocked(RankCall* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  void FinishWatchLocked(RankCall* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  void OnWatchWritten(RankCall* call, bool ok);
  void OnWatchDone(RankCall* call);
  // After a state change: every watch is sent the new status.
  void UpdateWatches();
  // A new call on a completion queue: parse, convert, Admit, or answer at once.
  void Handle(RankCall* call);

  const ServerConfig& config_;
  ServerMetrics* const metrics_;
  ModelManager* models_ = nullptr;  // set once before state_ becomes kServing
  Batcher* batcher_ = nullptr;      // set once before state_ becomes kServing
  std::atomic<int> state_{kLoading};
  std::mutex inflight_mu_;  // orders the gauge's updates (CountInflight)
  std::atomic<int64_t> inflight_{0};  // changed only by CountInflight
  std::atomic<int64_t> replies_pending_{0};  // Finish/FinishWithError called, finish event not back yet
  std::vector<std::unique_ptr<Queue>> queues_;
  grpc::AsyncGenericService generic_service_;  // Rank's calls arrive here, unread
  std::mutex slots_mu_;
  int64_t free_read_slots_ ABSL_GUARDED_BY(slots_mu_) = 0;
  std::deque<RankCall*> reading_ ABSL_GUARDED_BY(slots_mu_);  // oldest read first
  std::deque<RankCall*> waiting_ ABSL_GUARDED_BY(slots_mu_);  // for a slot, in arrival order (served newest first)
  // Registers grpc.health.v1.Health (for reflection and the method table);
  // its calls arrive through generic_service_.
  grpc::health::v1::Health::WithGenericMethod_Check<grpc::health::v1::Health::WithGenericMethod_Watch<
      grpc::health::v1::Health::Service>>
      health_service_;
  std::mutex health_mu_;
  std::vector<RankCall*> watches_ ABSL_GUARDED_BY(health_mu_);  // health Watch calls read and not finished
  bool watches_ended_ ABSL_GUARDED_BY(health_mu_) = false;
  bool stopped_ = false;  // StopPolling ran; touched by the owner's thread only
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_RANKER_SERVICE_H_
