#include "server/ranker_service.h"

#include <memory>
#include <utility>

#include "server/batch_assembly.h"
#include "server/grpc_status.h"
#include "server/request_validation.h"

namespace jagrank {
namespace {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The call's deadline on the steady clock (max when the client set none).
Clock::time_point SteadyDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return Clock::time_point::max();
  }
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

}  // namespace

RankerService::RankerService(const ServerConfig& config, ServerMetrics* metrics)
    : config_(config), metrics_(metrics) {}

void RankerService::SetReady(const Model* model, Batcher* batcher) {
  model_ = model;
  batcher_ = batcher;
  state_.store(kServing, std::memory_order_release);
}

void RankerService::SetDraining() { state_.store(kDraining, std::memory_order_release); }

grpc::ServerUnaryReactor* RankerService::Rank(grpc::CallbackServerContext* context,
                                              const v1::RankRequest* request, v1::RankResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const Clock::time_point arrival = Clock::now();
  auto reject = [&](const Status& status, const char* reason) {
    metrics_->OnRejected(reason);
    metrics_->OnRequestDone(StatusCodeName(status.code()), 0, SecondsSince(arrival));
    reactor->Finish(ToGrpcStatus(status, request->request_id()));
    return reactor;
  };
  const int state = state_.load(std::memory_order_acquire);
  if (state == kLoading) return reject(Status::Unavailable("model is still loading"), "not_ready");
  if (state == kDraining) return reject(Status::Unavailable("server is shutting down"), "shutting_down");

  const ModelConfig& model_config = model_->config();
  Status valid = ValidateRankRequest(*request, model_config, config_);
  if (!valid.ok()) return reject(valid, "invalid_argument");

  auto queued = std::make_unique<QueuedRequest>();
  queued->request = request;
  queued->candidates = request->candidate_item_ids_size();
  queued->history_tokens = KeptHistoryLength(*request, model_config);
  queued->attention_cost = queued->history_tokens * queued->history_tokens;
  queued->arrival = arrival;
  queued->deadline = SteadyDeadline(*context);
  queued->is_cancelled = [context] { return context->IsCancelled(); };
  queued->finish = [this, reactor, request, response, arrival](const Status& status, const float* scores,
                                                                int64_t count) {
    if (status.ok()) {
      response->set_request_id(request->request_id());
      response->mutable_scores()->Add(scores, scores + count);
      response->set_model_version(model_->version());
    }
    metrics_->OnRequestDone(StatusCodeName(status.code()), status.ok() ? count : 0, SecondsSince(arrival));
    metrics_->SetInflight(inflight_.fetch_sub(1) - 1);
    reactor->Finish(ToGrpcStatus(status, request->request_id()));
  };

  metrics_->SetInflight(inflight_.fetch_add(1) + 1);
  Status queued_status = batcher_->Enqueue(&queued);
  if (!queued_status.ok()) {
    metrics_->SetInflight(inflight_.fetch_sub(1) - 1);
    const bool full = queued_status.code() == Status::Code::kResourceExhausted;
    return reject(queued_status, full ? "queue_full" : "shutting_down");
  }
  return reactor;
}

grpc::ServerUnaryReactor* RankerService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest* /*request*/,
                                                      v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (state_.load(std::memory_order_acquire) == kLoading) {
    reactor->Finish(ToGrpcStatus(Status::Unavailable("model is still loading"), ""));
    return reactor;
  }
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
  reactor->Finish(ToGrpcStatus(Status::Ok(), ""));
  return reactor;
}

}  // namespace jagrank
