// The front door: a RankRequest from the wire becomes a transport-free
// RankInput (model/batch.h) here, validated against the model's shape and
// the server's limits. Nothing past this file sees the protobuf: the
// batcher and the executor hold the RankInput, and the answer goes back
// through RankCompletion (server/batcher.h).
#ifndef JAGRANK_SERVER_RANK_REQUEST_H_
#define JAGRANK_SERVER_RANK_REQUEST_H_

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "jagrank/v1/ranker.pb.h"
#include "model/batch.h"
#include "model/config.h"

namespace jagrank {

// The limits a request is checked against (from the server config).
struct RequestLimits {
  int max_candidates_per_request = 1024;
  int64_t max_request_bytes = 4LL << 20;
};

// Converts and validates RankRequests for one model. Thread-safe (const).
class RankRequestConverter {
 public:
  RankRequestConverter(const ModelConfig& model, const RequestLimits& limits);

  // OK and `*input` filled (history already truncated to the most recent
  // max_history_len ids), or INVALID_ARGUMENT whose message names the field
  // and the limit: message size over max_request_bytes, dense_features count
  // != num_dense_features, a NaN/Inf dense value (with its index), an
  // unknown sparse_features name, no candidate_item_ids, more than
  // max_candidates_per_request. A history longer than max_history_len is
  // fine (the most recent are kept).
  Status Convert(const v1::RankRequest& request, RankInput* input) const;

 private:
  const ModelConfig model_;
  const RequestLimits limits_;
  std::unordered_map<std::string, int> feature_index_;  // sparse feature name -> config order
  std::string feature_names_;                           // "a, b, c" for error messages
};

// An upper bound of request.ByteSizeLong() from the fields' element counts
// alone (every int64 at 10 bytes, every tag and length at its largest), or
// SIZE_MAX when the request carries unknown fields. ByteSizeLong sizes each
// varint; validation calls it only when this bound is over the limit (it was
// 1.3% of the server's CPU on the H200 host with ~440 ids per request).
size_t RankRequestByteSizeBound(const v1::RankRequest& request);

// A Rank call's answer: the request's id, one score per candidate, the
// version that computed them.
void FillRankResponse(const std::string& request_id, const std::string& model_version, const float* scores,
                      int64_t count, v1::RankResponse* response);

}  // namespace jagrank

#endif  // JAGRANK_SERVER_RANK_REQUEST_H_
