// RankerService: the jagrank.v1.Ranker gRPC service on the callback API (no
// thread per request). Rank validates the request, queues it on the batcher
// and returns; the executor finishes the call when its batch is computed.
#ifndef JAGRANK_SERVER_RANKER_SERVICE_H_
#define JAGRANK_SERVER_RANKER_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "jagrank/v1/ranker.grpc.pb.h"
#include "model/model.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace jagrank {

class RankerService final : public v1::Ranker::CallbackService {
 public:
  // Starts in the loading state: every call answers UNAVAILABLE until
  // SetReady. `config` and `metrics` must outlive the service.
  RankerService(const ServerConfig& config, ServerMetrics* metrics);

  // After load and warm-up. `model` (read-only here: config, version, info)
  // and `batcher` must outlive the service.
  void SetReady(const Model* model, Batcher* batcher);
  // From now on Rank answers UNAVAILABLE; already accepted calls complete.
  void SetDraining();

  // Accepted calls not yet finished.
  int64_t inflight() const { return inflight_.load(); }

  grpc::ServerUnaryReactor* Rank(grpc::CallbackServerContext* context, const v1::RankRequest* request,
                                 v1::RankResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request, v1::ModelInfo* response) override;

 private:
  enum State { kLoading, kServing, kDraining };

  const ServerConfig& config_;
  ServerMetrics* const metrics_;
  const Model* model_ = nullptr;  // set once before state_ becomes kServing
  Batcher* batcher_ = nullptr;    // set once before state_ becomes kServing
  std::atomic<int> state_{kLoading};
  std::atomic<int64_t> inflight_{0};
};

}  // namespace jagrank

#endif  // JAGRANK_SERVER_RANKER_SERVICE_H_
