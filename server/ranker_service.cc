#include "server/ranker_service.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>
#include <pthread.h>

#include <algorithm>
#include <utility>

#include "server/grpc_status.h"

namespace jagrank {
namespace {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The call's deadline on the steady clock (max when the client set none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return Clock::time_point::max();
  }
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

}  // namespace

// One Rank call from its request on a queue to its last event. Its events
// (requested, finished, done) all come back on its queue, so only that
// queue's polling thread touches `finished` and `done`. Freed by that thread
// once both the finish and the done notification have come back (or at once
// when the request failed because the server shut down: then the call never
// started and no other event comes). The request proto is read once, by
// Handle, which converts it into the QueuedRequest's RankInput.
class RankerService::RankCall {
 public:
  enum class Event { kRequested, kFinished, kDone };
  struct Tag {
    RankCall* call;
    Event event;
  };

  explicit RankCall(Queue* queue) : queue(queue) { context.AsyncNotifyWhenDone(&done_tag); }

  // The last event (of finish and done) frees the call.
  void OnFinished() {
    finished = true;
    if (done) delete this;
  }
  void OnDone() {
    done = true;
    if (finished) delete this;
  }

  Queue* const queue;
  grpc::ServerContext context;
  v1::RankRequest request;
  v1::RankResponse response;
  grpc::ServerAsyncResponseWriter<v1::RankResponse> responder{&context};
  Clock::time_point arrival;
  Clock::time_point reply_started;  // when Finish or FinishWithError was called
  Tag requested_tag{this, Event::kRequested};
  Tag finished_tag{this, Event::kFinished};
  Tag done_tag{this, Event::kDone};
  bool finished = false;  // the finish event came back
  bool done = false;      // the done notification came back
};

RankerService::RankerService(const ServerConfig& config, ServerMetrics* metrics)
    : config_(config), metrics_(metrics) {}

RankerService::~RankerService() { StopPolling(); }

int RankerService::CompletionQueueCount() const {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 2), 2, 8);
}

void RankerService::AddCompletionQueues(grpc::ServerBuilder* builder) {
  for (int i = CompletionQueueCount(); i > 0; --i) {
    auto queue = std::make_unique<Queue>();
    queue->cq = builder->AddCompletionQueue();
    queues_.push_back(std::move(queue));
  }
}

void RankerService::StartPolling() {
  for (auto& queue : queues_) {
    for (int i = 0; i < kCallsRequestedPerQueue; ++i) RequestCall(queue.get());
    queue->poller = std::thread([this, q = queue.get()] { Poll(q); });
    // Named here, not in the thread, so the name is set when this returns
    // (bench/serving_h200.sh reports CPU per thread name).
    pthread_setname_np(queue->poller.native_handle(), "jr-rank-cq");
  }
}

void RankerService::StopPolling() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& queue : queues_) {
    {
      std::lock_guard<std::mutex> lock(queue->mu);
      queue->shut_down = true;
    }
    queue->cq->Shutdown();
  }
  for (auto& queue : queues_) {
    if (queue->poller.joinable()) {
      queue->poller.join();
    } else {
      Poll(queue.get());  // never polled (the server did not start): drain it here
    }
  }
}

void RankerService::RequestCall(Queue* queue) {
  auto call = std::make_unique<RankCall>(queue);
  std::lock_guard<std::mutex> lock(queue->mu);
  if (queue->shut_down) return;
  RankCall* raw = call.release();  // owned by its events from here on
  RequestRank(&raw->context, &raw->request, &raw->responder, queue->cq.get(), queue->cq.get(), &raw->requested_tag);
}

void RankerService::Poll(Queue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->cq->Next(&tag, &ok)) {
    RankCall::Tag* event = static_cast<RankCall::Tag*>(tag);
    RankCall* call = event->call;
    switch (event->event) {
      case RankCall::Event::kRequested:
        if (!ok) {  // the server is shutting down: the call never started
          delete call;
          break;
        }
        RequestCall(queue);  // keep kCallsRequestedPerQueue waiting
        Handle(call);
        break;
      case RankCall::Event::kFinished:
        metrics_->OnResponseSent(SecondsSince(call->reply_started));
        call->OnFinished();
        break;
      case RankCall::Event::kDone:
        call->OnDone();
        break;
    }
  }
}

void RankerService::SetReady(const Model* model, Batcher* batcher) {
  model_ = model;
  batcher_ = batcher;
  RequestLimits limits;
  limits.max_candidates_per_request = config_.max_candidates_per_request;
  limits.max_request_bytes = config_.max_request_bytes;
  converter_ = std::make_unique<RankRequestConverter>(model->config(), limits);
  state_.store(kServing, std::memory_order_release);
}

void RankerService::SetDraining() { state_.store(kDraining, std::memory_order_release); }

Status RankerService::Admit(std::unique_ptr<QueuedRequest> queued) {
  const Clock::time_point arrival = queued->arrival;
  auto reject = [&](const Status& status, const char* reason) {
    metrics_->OnRejected(reason);
    metrics_->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(arrival));
    return status;
  };
  const int state = state_.load(std::memory_order_acquire);
  if (state == kLoading) return reject(Status::Unavailable("model is still loading"), "not_ready");
  if (state == kDraining) return reject(Status::Unavailable("server is shutting down"), "shutting_down");

  const int64_t kept = static_cast<int64_t>(queued->input.history.size());  // truncated at the door
  queued->candidates = static_cast<int64_t>(queued->input.candidates.size());
  queued->history_tokens = kept;
  queued->attention_cost = kept * kept;
  queued->finish = [this, arrival, done = std::move(queued->finish)](const Status& status, const float* scores,
                                                                    int64_t count, const std::string& version) {
    metrics_->OnRequestDone(StatusCodeName(status.code()), status.ok() ? count : 0, SecondsSince(arrival));
    metrics_->SetInflight(inflight_.fetch_sub(1) - 1);
    done(status, scores, count, version);
  };

  metrics_->SetInflight(inflight_.fetch_add(1) + 1);
  Status queued_status = batcher_->Enqueue(&queued);
  if (!queued_status.ok()) {
    metrics_->SetInflight(inflight_.fetch_sub(1) - 1);
    const bool full = queued_status.code() == Status::Code::kResourceExhausted;
    return reject(queued_status, full ? "queue_full" : "shutting_down");
  }
  return Status::Ok();
}

void RankerService::Handle(RankCall* call) {
  auto queued = std::make_unique<QueuedRequest>();
  queued->arrival = Clock::now();
  queued->deadline = SteadyDeadline(call->context);
  Status admitted;
  if (state_.load(std::memory_order_acquire) == kServing) {
    // The protobuf stops here: converted and validated into a RankInput.
    admitted = converter_->Convert(call->request, &queued->input);
    if (!admitted.ok()) {
      metrics_->OnRejected("invalid_argument");
      metrics_->OnRequestDone(StatusCodeName(admitted.code()), 0, SecondsSince(queued->arrival));
    }
  }
  if (admitted.ok()) {
    queued->request_id = call->request.request_id();
    // True only once the done notification has come back (the async API's
    // IsCancelled), which is when a cancelled call can be told apart.
    queued->is_cancelled = [call] { return call->context.IsCancelled(); };
    // Runs on an executor thread; the call may be freed as soon as Finish is
    // started, so nothing touches it after.
    queued->finish = [call](const Status& status, const float* scores, int64_t count, const std::string& version) {
      if (status.ok()) FillRankResponse(call->request.request_id(), version, scores, count, &call->response);
      call->reply_started = Clock::now();
      call->responder.Finish(call->response, ToGrpcStatus(status, call->request.request_id()), &call->finished_tag);
    };
    admitted = Admit(std::move(queued));
  }
  if (!admitted.ok()) {
    call->reply_started = Clock::now();
    call->responder.FinishWithError(ToGrpcStatus(admitted, call->request.request_id()), &call->finished_tag);
  }
}

void RankerService::FillModelInfo(v1::ModelInfo* response) const {
  const ModelConfig& c = model_->config();
  response->set_name(c.name);
  response->set_version(model_->version());
  response->set_embedding_dim(c.embedding_dim);
  response->set_num_dense_features(c.num_dense_features);
  for (const SparseFeatureConfig& f : c.sparse_features) response->add_sparse_feature_names(f.name);
  response->set_max_history_len(c.max_history_len);
  response->set_max_candidates_per_request(config_.max_candidates_per_request);
  response->set_device(model_->device());
  response->set_attention(AttentionStrategyName(model_->attention()));
  response->set_attention_heads(c.attention_heads);
  response->set_item_rows(c.item_rows);
  response->set_weights_bytes(model_->Memory().weights_bytes);
}

grpc::ServerUnaryReactor* RankerService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest* /*request*/,
                                                      v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (state_.load(std::memory_order_acquire) == kLoading) {
    reactor->Finish(ToGrpcStatus(Status::Unavailable("model is still loading"), ""));
    return reactor;
  }
  FillModelInfo(response);
  reactor->Finish(ToGrpcStatus(Status::Ok(), ""));
  return reactor;
}

}  // namespace jagrank
