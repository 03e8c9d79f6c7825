#include "server/ranker_service.h"

#include <google/protobuf/arena.h>
#include <grpc/support/time.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/async_unary_call.h>
#include <pthread.h>

#include <algorithm>
#include <utility>

#include "common/process.h"
#include "server/grpc_status.h"

namespace jagrank {
namespace {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr char kRankMethod[] = "/jagrank.v1.Ranker/Rank";
constexpr char kGetModelInfoMethod[] = "/jagrank.v1.Ranker/GetModelInfo";
constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatchMethod[] = "/grpc.health.v1.Health/Watch";

grpc::health::v1::HealthCheckResponse HealthResponse(int status) {
  grpc::health::v1::HealthCheckResponse response;
  response.set_status(static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(status));
  return response;
}

// A deadline further away than this counts as none (gRPC caps grpc-timeout
// at 99999999 hours; such a deadline is past what the clocks represent).
constexpr int64_t kNoDeadlineBeyondSeconds = int64_t{100} * 365 * 24 * 3600;

}  // namespace

// Read from gRPC's own timespec and saturated, not through
// ServerContext::deadline(): that converts to system_clock nanoseconds and
// overflows (signed, undefined) for a grpc-timeout of 2562048H or more, which
// then read as a deadline long past.
Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context) {
  const gpr_timespec deadline = context.raw_deadline();
  if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0) return Clock::time_point::max();
  const gpr_timespec left = gpr_time_sub(deadline, gpr_now(deadline.clock_type));
  if (left.tv_sec >= kNoDeadlineBeyondSeconds) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(left.tv_sec) +
                                                                    std::chrono::nanoseconds(left.tv_nsec));
}

// One Rank call from its request on a queue to its last event. It arrives
// through the generic service with its message unread; the message is read
// (Read) once the call holds one of the read slots, then parsed once, by
// Handle, which converts the RankRequest into the QueuedRequest's RankInput.
// Its events (requested, read, finished, done) all come back on its queue,
// so only that queue's polling thread touches `finished` and `done`. Freed
// by that thread once both the finish and the done notification have come
// back (or at once when the request failed because the server shut down:
// then the call never started and no other event comes).
class RankerService::RankCall {
 public:
  enum class Event { kRequested, kRead, kWritten, kFinished, kDone };
  // What the call is, from its method: Rank, or one of the health
  // service's (GetModelInfo is answered at once and never read).
  enum class Kind { kRank, kHealthCheck, kHealthWatch };
  explicit RankCall(Queue* queue) : queue(queue) { context.AsyncNotifyWhenDone(&done_tag); }

  // Notes the reply's start (a Finish is called next).
  void StartReply() {
    reply_started = Clock::now();
    queue->replies_pending->fetch_add(1, std::memory_order_relaxed);
  }
  // Answers with `status` and no message.
  void FinishWithStatus(const grpc::Status& status) {
    StartReply();
    stream.Finish(status, &finished_tag);
  }
  // Answers OK with `message` (serialised into response_bytes), or INTERNAL
  // naming `what` when it cannot be serialised.
  template <typename Message>
  void FinishWithMessage(const Message& message, const char* what) {
    bool own_buffer = false;
    const grpc::Status serialized = grpc::SerializationTraits<Message>::Serialize(message, &response_bytes, &own_buffer);
    if (!serialized.ok()) {
      FinishWithStatus(ToGrpcStatus(
          Status::Internal(std::string("cannot serialise ") + what + ": " + serialized.error_message()),
          request_id()));
      return;
    }
    StartReply();
    stream.WriteAndFinish(response_bytes, grpc::WriteOptions(), grpc::Status::OK, &finished_tag);
  }

  // The last event (of finish and done) frees the call.
  void OnFinished() {
    finished = true;
    if (done) delete this;
  }
  void OnDone() {
    done = true;
    if (finished) delete this;
  }

  // The request id for the answer's status ("" until the request parsed).
  const std::string& request_id() const {
    static const std::string kNone;
    return request == nullptr ? kNone : request->request_id();
  }

  Queue* const queue;
  grpc::GenericServerContext context;
  grpc::GenericServerAsyncReaderWriter stream{&context};
  grpc::ByteBuffer request_bytes;  // as received; consumed by the parse
  // Holds the parsed request and the response: one arena per call, so a
  // request's many repeated fields cost a few block allocations, not one
  // each. Blocks are allocated on the first message only.
  google::protobuf::Arena arena;
  v1::RankRequest* request = nullptr;  // on `arena`, once parsed
  grpc::ByteBuffer response_bytes;     // the serialised RankResponse
  Clock::time_point reply_started;     // when the Finish was called
  // Read slots (guarded by the service's slots_mu_): waiting for a slot, or
  // reading since `read_started` (and evicted: cancelled to free its slot).
  bool waiting_for_slot = false;
  bool reading = false;
  bool evicted = false;
  Clock::time_point read_started;
  QueueTag requested_tag{this, static_cast<int>(Event::kRequested), &RankerService::RunEvent};
  QueueTag read_tag{this, static_cast<int>(Event::kRead), &RankerService::RunEvent};
  QueueTag written_tag{this, static_cast<int>(Event::kWritten), &RankerService::RunEvent};  // a health Watch update
  QueueTag finished_tag{this, static_cast<int>(Event::kFinished), &RankerService::RunEvent};
  QueueTag done_tag{this, static_cast<int>(Event::kDone), &RankerService::RunEvent};
  Kind kind = Kind::kRank;
  // Health Watch (guarded by the service's health_mu_): the service asked
  // about, the status last written, a write in flight, and the Finish
  // started (no more writes).
  std::string watched_service;
  int watch_sent = -1;
  bool watch_writing = false;
  bool watch_finished = false;
  bool finished = false;  // the finish event came back (or none will come)
  bool done = false;      // the done notification came back
};

RankerService::RankerService(const ServerConfig& config, ServerMetrics* metrics)
    : config_(config), metrics_(metrics) {}

RankerService::~RankerService() { StopPolling(); }

int RankerService::CompletionQueueCount() const {
  if (config_.grpc_polling_threads > 0) return config_.grpc_polling_threads;
  return std::clamp(UsableCores() / 2, 1, 8);
}

int64_t RankerService::ReadSlotCount() const {
  const int64_t slots = GrpcMemoryQuotaBytes(config_) / (2 * config_.grpc_max_receive_message_bytes);
  return std::clamp<int64_t>(slots, 1, kMaxReadSlots);
}

void RankerService::AddToBuilder(grpc::ServerBuilder* builder) {
  builder->RegisterService(this);
  builder->RegisterService(&health_service_);
  builder->RegisterAsyncGenericService(&generic_service_);
  free_read_slots_ = ReadSlotCount();
  for (int i = CompletionQueueCount(); i > 0; --i) {
    auto queue = std::make_unique<Queue>();
    queue->cq = builder->AddCompletionQueue();
    queue->replies_pending = &replies_pending_;
    queue->service = this;
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
  generic_service_.RequestCall(&raw->context, &raw->stream, queue->cq.get(), queue->cq.get(), &raw->requested_tag);
}

void RankerService::ReadWhenASlotIsFree(RankCall* call) {
  RankCall* victim = nullptr;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    if (free_read_slots_ > 0) {
      --free_read_slots_;
      StartReadLocked(call);
      return;
    }
    call->waiting_for_slot = true;
    waiting_.push_back(call);
    victim = EvictLocked(Clock::now());
  }
  if (victim != nullptr) victim->context.TryCancel();
}

void RankerService::StartReadLocked(RankCall* call) {
  call->reading = true;
  call->read_started = Clock::now();
  reading_.push_back(call);
  call->stream.Read(&call->request_bytes, &call->read_tag);
}

RankerService::RankCall* RankerService::EvictLocked(Clock::time_point now) {
  if (waiting_.empty()) return nullptr;
  for (RankCall* oldest : reading_) {
    if (oldest->evicted) continue;
    if (now - oldest->read_started < kEvictReadAfter) return nullptr;
    oldest->evicted = true;
    return oldest;
  }
  return nullptr;
}

void RankerService::MaybeEvict() {
  RankCall* victim = nullptr;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    victim = EvictLocked(Clock::now());
  }
  if (victim != nullptr) victim->context.TryCancel();
}

bool RankerService::ReleaseReadSlot(RankCall* call) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  call->reading = false;
  reading_.erase(std::find(reading_.begin(), reading_.end(), call));
  if (waiting_.empty()) {
    ++free_read_slots_;
  } else {
    // Newest first: a stream that never finishes its message is evicted and
    // opened again, so in arrival order a new call would wait behind every
    // such stream for kEvictReadAfter each; the newest is most likely a call
    // whose message has just arrived whole.
    RankCall* next = waiting_.back();
    waiting_.pop_back();
    next->waiting_for_slot = false;
    StartReadLocked(next);  // the slot passes on
  }
  return call->evicted;
}

bool RankerService::ForgetWaiting(RankCall* call) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  if (!call->waiting_for_slot) return false;
  call->waiting_for_slot = false;
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), call));
  return true;
}

void RankerService::Poll(Queue* queue) {
  void* tag = nullptr;
  bool ok = false;
  for (;;) {
    // Wakes up at least every kEvictReadAfter / 2 so that calls waiting for
    // a read slot get one even while nothing else happens.
    const auto next = queue->cq->AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kEvictReadAfter / 2);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      MaybeEvict();
      continue;
    }
    QueueTag* event = static_cast<QueueTag*>(tag);
    event->run(event->owner, event->event, ok);
  }
}

void RankerService::RunEvent(void* owner, int event, bool ok) {
  RankCall* call = static_cast<RankCall*>(owner);
  call->queue->service->OnEvent(call, event, ok);
}

void RankerService::OnEvent(RankCall* call, int event, bool ok) {
  switch (static_cast<RankCall::Event>(event)) {
    case RankCall::Event::kRequested:
      if (!ok) {  // the server is shutting down: the call never started
        delete call;
        break;
      }
      RequestCall(call->queue);  // keep kCallsRequestedPerQueue waiting
      if (call->context.method() == kGetModelInfoMethod) {
        AnswerModelInfo(call);
        break;
      }
      if (call->context.method() == kHealthCheckMethod || call->context.method() == kHealthWatchMethod) {
        call->kind = call->context.method() == kHealthCheckMethod ? RankCall::Kind::kHealthCheck
                                                                  : RankCall::Kind::kHealthWatch;
        ReadWhenASlotIsFree(call);
        break;
      }
      if (call->context.method() != kRankMethod) {
        call->FinishWithStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                            "unknown method '" + call->context.method().substr(0, 128) + "'"));
        break;
      }
      if (RefusedBeforeRead(call)) break;
      ReadWhenASlotIsFree(call);
      break;
    case RankCall::Event::kRead: {
      const bool evicted = ReleaseReadSlot(call);
      if (ok) {
        if (call->kind == RankCall::Kind::kRank) {
          Handle(call);
        } else {
          HandleHealth(call);
        }
        break;
      }
      if (call->kind != RankCall::Kind::kRank) {  // not counted: the metrics are Rank's
        call->FinishWithStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
        break;
      }
      // No message: evicted to free its slot, cancelled by its client, or
      // the client closed its side without sending one.
      const Status status =
          evicted ? Status::ResourceExhausted(
                        "request message not received within " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(kEvictReadAfter).count()) +
                        " ms while other calls waited to be read")
                  : Status::InvalidArgument("no request message");
      metrics_->OnRejected(evicted ? "slow_request" : "invalid_argument");
      metrics_->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(call->read_started));
      call->FinishWithStatus(ToGrpcStatus(status, ""));
      break;
    }
    case RankCall::Event::kWritten:
      OnWatchWritten(call, ok);
      break;
    case RankCall::Event::kFinished:
      if (call->kind == RankCall::Kind::kRank) metrics_->OnResponseSent(SecondsSince(call->reply_started));
      replies_pending_.fetch_sub(1, std::memory_order_release);
      call->OnFinished();
      break;
    case RankCall::Event::kDone:
      // A call still waiting for a read slot whose client went away gets
      // no read and no answer: it is done here.
      if (ForgetWaiting(call)) call->finished = true;
      if (call->kind == RankCall::Kind::kHealthWatch) OnWatchDone(call);
      call->OnDone();
      break;
  }
}

bool RankerService::RefusedBeforeRead(RankCall* call) {
  // Only while serving: loading and draining refusals read the request
  // first, so that they name it.
  if (state_.load(std::memory_order_acquire) != kServing) return false;
  const Status admission = batcher_->CheckAdmission(SteadyDeadline(call->context));
  if (admission.ok()) return false;
  metrics_->OnRejected("deadline_unmeetable");
  metrics_->OnRequestDone(StatusCodeName(admission.code()), 0, 0);
  call->FinishWithStatus(ToGrpcStatus(admission, ""));
  return true;
}

void RankerService::CountInflight(int delta) {
  // Under the lock, so the gauge is set in the order the count changes: two
  // threads finishing at once could otherwise leave it at the older value.
  std::lock_guard<std::mutex> lock(inflight_mu_);
  metrics_->SetInflight(inflight_.fetch_add(delta, std::memory_order_relaxed) + delta);
}

bool RankerService::WaitRepliesSent(Clock::time_point give_up) const {
  // Drain only: a short poll keeps the reply path free of any notification.
  while (replies_pending_.load(std::memory_order_acquire) > 0) {
    if (Clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void RankerService::SetReady(ModelManager* models, Batcher* batcher) {
  models_ = models;
  batcher_ = batcher;
  state_.store(kServing, std::memory_order_release);
  UpdateWatches();
}

void RankerService::SetDraining() {
  state_.store(kDraining, std::memory_order_release);
  UpdateWatches();
}

Status RankerService::RefuseUnlessServing(int state, Clock::time_point arrival) {
  if (state == kServing) return Status::Ok();
  const bool loading = state == kLoading;
  const Status status = Status::Unavailable(loading ? "model is still loading" : "server is shutting down");
  metrics_->OnRejected(loading ? "not_ready" : "shutting_down");
  metrics_->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(arrival));
  return status;
}

Status RankerService::Admit(std::unique_ptr<QueuedRequest> queued) {
  const Clock::time_point arrival = queued->arrival;
  auto reject = [&](const Status& status, const char* reason) {
    metrics_->OnRejected(reason);
    metrics_->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(arrival));
    return status;
  };
  RETURN_IF_ERROR(RefuseUnlessServing(state_.load(std::memory_order_acquire), arrival));

  const int64_t kept = static_cast<int64_t>(queued->input.history.size());  // truncated at the door
  queued->candidates = static_cast<int64_t>(queued->input.candidates.size());
  queued->history_tokens = kept;
  queued->attention_cost = kept * kept;
  queued->finish = [this, arrival, done = std::move(queued->finish)](const Status& status, const float* scores,
                                                                    int64_t count, const std::string& version) {
    metrics_->OnRequestDone(StatusCodeName(status.code()), status.ok() ? count : 0, SecondsSince(arrival));
    CountInflight(-1);
    done(status, scores, count, version);
  };

  CountInflight(+1);
  Status queued_status = batcher_->Enqueue(&queued);
  if (!queued_status.ok()) {
    CountInflight(-1);
    const char* reason = "shutting_down";
    if (queued_status.message().rfind("would not finish", 0) == 0) {
      reason = "deadline_unmeetable";
    } else if (queued_status.code() == Status::Code::kResourceExhausted) {
      reason = "queue_full";
    }
    return reject(queued_status, reason);
  }
  return Status::Ok();
}

Status RankerService::ParseRequest(RankCall* call) {
  const size_t bytes = call->request_bytes.Length();
  call->request = google::protobuf::Arena::CreateMessage<v1::RankRequest>(&call->arena);
  if (!grpc::SerializationTraits<v1::RankRequest>::Deserialize(&call->request_bytes, call->request).ok()) {
    call->request->Clear();  // a partial parse may hold a bogus request_id
    return Status::InvalidArgument("request message (" + std::to_string(bytes) +
                                   " bytes) does not parse as a jagrank.v1.RankRequest");
  }
  // The exact size is known here (gRPC's receive cap bounded the parse).
  if (bytes > static_cast<size_t>(config_.max_request_bytes)) {
    return Status::InvalidArgument("request message is " + std::to_string(bytes) +
                                   " bytes: exceeds max_request_bytes = " + std::to_string(config_.max_request_bytes));
  }
  return Status::Ok();
}

Status RankerService::Submit(const Status& parsed, const v1::RankRequest& request,
                             std::unique_ptr<QueuedRequest> queued) {
  Status admitted = parsed;
  const int state = state_.load(std::memory_order_acquire);
  if (admitted.ok() && state == kServing) {
    // Under overload most requests are refused here: before the conversion,
    // which would cost them more CPU than the parse did.
    Status admission = batcher_->CheckAdmission(queued->deadline);
    if (!admission.ok()) {
      metrics_->OnRejected("deadline_unmeetable");
      metrics_->OnRequestDone(StatusCodeName(admission.code()), 0, SecondsSince(queued->arrival));
      return admission;
    }
    // Held only for this conversion.
    std::shared_ptr<const ServedModel> served = models_->Current();
    admitted = served->converter.Convert(request, &queued->input);
    queued->request_contract = served->request_contract;
  }
  if (!admitted.ok()) {
    metrics_->OnRejected("invalid_argument");
    metrics_->OnRequestDone(StatusCodeName(admitted.code()), 0, SecondsSince(queued->arrival));
    return admitted;
  }
  // Not converted unless serving: refused here, whatever the state is now.
  RETURN_IF_ERROR(RefuseUnlessServing(state, queued->arrival));
  return Admit(std::move(queued));
}

void RankerService::Handle(RankCall* call) {
  auto queued = std::make_unique<QueuedRequest>();
  queued->arrival = Clock::now();
  queued->deadline = SteadyDeadline(call->context);
  // The protobuf stops in Submit: parsed here (also while loading or
  // draining, so that the refusal names the request), then converted and
  // validated into a RankInput for the version serving now.
  const Status parsed = ParseRequest(call);
  queued->request_id = call->request_id();
  // True only once the done notification has come back (the async API's
  // IsCancelled), which is when a cancelled call can be told apart.
  queued->is_cancelled = [call] { return call->context.IsCancelled(); };
  // Runs on an executor thread; the call may be freed as soon as Finish is
  // started, so nothing touches it after.
  queued->finish = [call](const Status& status, const float* scores, int64_t count, const std::string& version) {
    if (!status.ok()) {
      call->FinishWithStatus(ToGrpcStatus(status, call->request_id()));
      return;
    }
    auto* response = google::protobuf::Arena::CreateMessage<v1::RankResponse>(&call->arena);
    FillRankResponse(call->request_id(), version, scores, count, response);
    call->FinishWithMessage(*response, "the response");
  };
  const Status admitted = Submit(parsed, *call->request, std::move(queued));
  if (!admitted.ok()) call->FinishWithStatus(ToGrpcStatus(admitted, call->request_id()));
}

int RankerService::HealthStatusOf(const std::string& service) const {
  using grpc::health::v1::HealthCheckResponse;
  if (service != "" && service != kRankerServiceName) return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving() ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void RankerService::HandleHealth(RankCall* call) {
  grpc::health::v1::HealthCheckRequest request;
  if (!grpc::SerializationTraits<grpc::health::v1::HealthCheckRequest>::Deserialize(&call->request_bytes, &request)
           .ok()) {
    call->FinishWithStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a grpc.health.v1.HealthCheckRequest"));
    return;
  }
  const int status = HealthStatusOf(request.service());
  if (call->kind == RankCall::Kind::kHealthCheck) {
    if (status == grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN) {
      call->FinishWithStatus(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                          "unknown service '" + request.service().substr(0, 128) + "'"));
      return;
    }
    call->FinishWithMessage(HealthResponse(status), "the HealthCheckResponse");
    return;
  }
  // Watch: the status now, then every change, until the client leaves or
  // the server ends the watches (an unknown service stays SERVICE_UNKNOWN).
  std::lock_guard<std::mutex> lock(health_mu_);
  call->watched_service = request.service();
  if (watches_ended_) {
    FinishWatchLocked(call);
    return;
  }
  watches_.push_back(call);
  WriteWatchLocked(call);
}

void RankerService::WriteWatchLocked(RankCall* call) {
  if (call->watch_writing || call->watch_finished) return;
  const int status = HealthStatusOf(call->watched_service);
  if (status == call->watch_sent) return;
  bool own_buffer = false;
  if (!grpc::SerializationTraits<grpc::health::v1::HealthCheckResponse>::Serialize(HealthResponse(status),
                                                                                    &call->response_bytes, &own_buffer)
           .ok()) {
    FinishWatchLocked(call);
    return;
  }
  call->watch_sent = status;
  call->watch_writing = true;
  call->stream.Write(call->response_bytes, &call->written_tag);
}

void RankerService::FinishWatchLocked(RankCall* call) {
  call->watch_finished = true;
  watches_.erase(std::remove(watches_.begin(), watches_.end(), call), watches_.end());
  call->FinishWithStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
}

void RankerService::OnWatchWritten(RankCall* call, bool ok) {
  std::lock_guard<std::mutex> lock(health_mu_);
  call->watch_writing = false;
  if (call->watch_finished) return;
  // A failed write (the client went away) or ended watches: finish now; the
  // status may also have changed while the write was in flight.
  if (!ok || call->done || watches_ended_) {
    FinishWatchLocked(call);
    return;
  }
  WriteWatchLocked(call);
}

void RankerService::OnWatchDone(RankCall* call) {
  std::lock_guard<std::mutex> lock(health_mu_);
  // Not yet read (or read and refused): not watching, nothing to finish here.
  if (call->watch_finished || std::find(watches_.begin(), watches_.end(), call) == watches_.end()) return;
  // With a write in flight its completion finishes the call.
  if (!call->watch_writing) FinishWatchLocked(call);
}

void RankerService::UpdateWatches() {
  std::lock_guard<std::mutex> lock(health_mu_);
  for (RankCall* call : watches_) WriteWatchLocked(call);
}

void RankerService::EndWatches() {
  std::lock_guard<std::mutex> lock(health_mu_);
  watches_ended_ = true;
  const std::vector<RankCall*> open = watches_;
  for (RankCall* call : open) {
    if (!call->watch_writing) FinishWatchLocked(call);
  }
}

void RankerService::AnswerModelInfo(RankCall* call) {
  if (state_.load(std::memory_order_acquire) == kLoading) {
    call->FinishWithStatus(ToGrpcStatus(Status::Unavailable("model is still loading"), ""));
    return;
  }
  v1::ModelInfo info;
  FillModelInfo(&info);
  call->FinishWithMessage(info, "ModelInfo");
}

void RankerService::FillModelInfo(v1::ModelInfo* response) const {
  const std::shared_ptr<const ServedModel> served = models_->Current();
  const Model* model = &served->model();
  const ModelConfig& c = model->config();
  response->set_name(c.name);
  response->set_version(served->version);
  response->set_embedding_dim(c.embedding_dim);
  response->set_num_dense_features(c.num_dense_features);
  for (const SparseFeatureConfig& f : c.sparse_features) response->add_sparse_feature_names(f.name);
  response->set_max_history_len(c.max_history_len);
  response->set_max_candidates_per_request(config_.max_candidates_per_request);
  response->set_device(model->device());
  response->set_attention(AttentionStrategyName(model->attention()));
  response->set_attention_heads(c.attention_heads);
  response->set_item_rows(c.item_rows);
  response->set_weights_bytes(model->Memory().weights_bytes);
}

}  // namespace jagrank
