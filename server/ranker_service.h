// RankerService: the jagrank.v1.Ranker gRPC service. Rank runs on the async
// completion-queue API: CompletionQueueCount() server completion queues,
// each polled by its own thread, with kCallsRequestedPerQueue calls
// requested on each ahead of time. A polling thread converts a new call's
// RankRequest into a RankInput (server/rank_request.h: the protobuf stops
// there), queues it on the batcher and goes back to its queue; the executor
// finishes the call when its batch is computed. (On the H200 host, jagged
// h1024: the callback API peaked at 49.7k QPS at 128 calls in flight and
// fell to 38.3k at 512; these queues reached 67.3k at 512 with p99 19.5 ms,
// at about the same server CPU per call.) GetModelInfo is rare and stays on
// the callback API.
#ifndef JAGRANK_SERVER_RANKER_SERVICE_H_
#define JAGRANK_SERVER_RANKER_SERVICE_H_

#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jagrank/v1/ranker.grpc.pb.h"
#include "model/model.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/rank_request.h"
#include "server/server_config.h"

namespace jagrank {

class RankerService final
    : public v1::Ranker::WithAsyncMethod_Rank<v1::Ranker::WithCallbackMethod_GetModelInfo<v1::Ranker::Service>> {
 public:
  // Starts in the loading state: every call answers UNAVAILABLE until
  // SetReady. `config` and `metrics` must outlive the service.
  RankerService(const ServerConfig& config, ServerMetrics* metrics);
  // StopPolling()s. REQUIRES: the grpc::Server is shut down (or was never built).
  ~RankerService();

  // Adds the completion queues Rank is served on. Call once, before
  // builder->BuildAndStart().
  void AddCompletionQueues(grpc::ServerBuilder* builder);
  // Requests the first calls on every queue and starts one polling thread
  // per queue. Call once, after BuildAndStart() succeeded.
  void StartPolling();
  // Shuts the queues down, drains them (every call object still held is
  // freed as its last event comes back) and joins the polling threads.
  // REQUIRES: grpc::Server::Shutdown() has returned (or the server was never
  // built), and every call handed to the batcher has been finished.
  // Idempotent; not thread-safe (the server's drain calls it once).
  void StopPolling();

  // After load and warm-up. `model` (read-only here: config, version, info)
  // and `batcher` must outlive the service.
  void SetReady(const Model* model, Batcher* batcher);
  // From now on Rank answers UNAVAILABLE; already accepted calls complete.
  void SetDraining();

  // Accepted calls not yet finished.
  int64_t inflight() const { return inflight_.load(); }
  // SetReady ran and SetDraining did not: what health reports as SERVING.
  bool serving() const { return state_.load(std::memory_order_acquire) == kServing; }
  // SetReady ran (the model is there, draining or not).
  bool loaded() const { return state_.load(std::memory_order_acquire) != kLoading; }
  // The model's version, as Rank reports it. REQUIRES: loaded().
  std::string model_version() const { return model_->version(); }

  // Admission of a converted request: refuses while loading or draining,
  // and queues it on the batcher. OK: the request is accepted and its
  // `finish` will run (wrapped here to count it in the metrics). Otherwise the
  // status to answer with (the rejection is already counted) and `finish`
  // never runs. Thread-safe.
  Status Admit(std::unique_ptr<QueuedRequest> request);
  // GetModelInfo's answer. REQUIRES: SetReady ran.
  void FillModelInfo(v1::ModelInfo* info) const;

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request, v1::ModelInfo* response) override;

  // Completion queues (= polling threads) Rank is served on: half the
  // cores, 2 to 8 (the executor's own threads need the rest; on the 16-core
  // H200 host 4 queues served less and 16 no more than these 8).
  int CompletionQueueCount() const;
  // Calls requested ahead of time on each queue, so that a burst of new
  // calls finds requested ones waiting instead of queueing inside gRPC
  // until a polling thread requests the next.
  static constexpr int kCallsRequestedPerQueue = 32;

 private:
  class RankCall;  // one Rank call: its context, messages, responder and events
  enum State { kLoading, kServing, kDraining };

  // One queue and what its polling thread owns.
  struct Queue {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread poller;
    std::mutex mu;              // held while requesting a call on `cq`
    bool shut_down = false;     // guarded by mu; no more requests on `cq`
  };

  // Requests one new Rank call on `queue` unless it is shut down.
  void RequestCall(Queue* queue);
  void Poll(Queue* queue);
  // A new call on a completion queue: Admit, or answer at once.
  void Handle(RankCall* call);

  const ServerConfig& config_;
  ServerMetrics* const metrics_;
  const Model* model_ = nullptr;  // set once before state_ becomes kServing
  Batcher* batcher_ = nullptr;    // set once before state_ becomes kServing
  std::unique_ptr<RankRequestConverter> converter_;  // set once before state_ becomes kServing
  std::atomic<int> state_{kLoading};
  std::atomic<int64_t> inflight_{0};
  std::vector<std::unique_ptr<Queue>> queues_;
  bool stopped_ = false;  // StopPolling ran; touched by the owner's thread only
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_RANKER_SERVICE_H_
