#include "server/request_validation.h"

#include <cmath>
#include <string>

namespace jagrank {

Status ValidateRankRequest(const v1::RankRequest& request, const ModelConfig& model,
                           const ServerConfig& server) {
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > server.max_request_bytes) {
    return Status::InvalidArgument("request message is " + std::to_string(bytes) +
                                   " bytes: exceeds max_request_bytes = " + std::to_string(server.max_request_bytes));
  }
  if (request.dense_features_size() != model.num_dense_features) {
    return Status::InvalidArgument("dense_features has " + std::to_string(request.dense_features_size()) +
                                   " values: expected exactly num_dense_features = " +
                                   std::to_string(model.num_dense_features));
  }
  for (int i = 0; i < request.dense_features_size(); ++i) {
    if (!std::isfinite(request.dense_features(i))) {
      return Status::InvalidArgument("dense_features[" + std::to_string(i) +
                                     "] is NaN or Inf: every dense value must be finite");
    }
  }
  for (const auto& entry : request.sparse_features()) {
    bool known = false;
    for (const SparseFeatureConfig& f : model.sparse_features) {
      if (f.name == entry.first) {
        known = true;
        break;
      }
    }
    if (!known) {
      std::string names;
      for (const SparseFeatureConfig& f : model.sparse_features) names += (names.empty() ? "" : ", ") + f.name;
      return Status::InvalidArgument("sparse_features has unknown feature name '" + entry.first +
                                     "': the model's features are [" + names + "]");
    }
  }
  if (request.candidate_item_ids_size() == 0) {
    return Status::InvalidArgument("candidate_item_ids is empty: need 1 to max_candidates_per_request = " +
                                   std::to_string(server.max_candidates_per_request));
  }
  if (request.candidate_item_ids_size() > server.max_candidates_per_request) {
    return Status::InvalidArgument("candidate_item_ids has " + std::to_string(request.candidate_item_ids_size()) +
                                   " ids: exceeds max_candidates_per_request = " +
                                   std::to_string(server.max_candidates_per_request));
  }
  return Status::Ok();
}

}  // namespace jagrank
