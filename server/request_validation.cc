#include "server/request_validation.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace jagrank {

size_t RankRequestByteSizeBound(const v1::RankRequest& request) {
  if (!request.GetReflection()->GetUnknownFields(request).empty()) return SIZE_MAX;
  // A field's tag (fields 1-5: one byte) and a length prefix (at most 10).
  constexpr size_t kHeader = 1 + 10;
  constexpr size_t kMaxVarint = 10;
  size_t bound = kHeader + request.request_id().size();
  bound += kHeader + sizeof(float) * static_cast<size_t>(request.dense_features_size());
  for (const auto& entry : request.sparse_features()) {
    // The map entry, its key, its IdList value and the packed ids inside it.
    bound += kHeader + (kHeader + entry.first.size()) +
             (kHeader + kHeader + kMaxVarint * static_cast<size_t>(entry.second.ids_size()));
  }
  bound += kHeader + kMaxVarint * static_cast<size_t>(request.history_size());
  bound += kHeader + kMaxVarint * static_cast<size_t>(request.candidate_item_ids_size());
  return bound;
}

Status ValidateRankRequest(const v1::RankRequest& request, const ModelConfig& model,
                           const ServerConfig& server) {
  if (RankRequestByteSizeBound(request) > static_cast<size_t>(server.max_request_bytes)) {
    const size_t bytes = request.ByteSizeLong();
    if (bytes > static_cast<size_t>(server.max_request_bytes)) {
      return Status::InvalidArgument("request message is " + std::to_string(bytes) +
                                     " bytes: exceeds max_request_bytes = " + std::to_string(server.max_request_bytes));
    }
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
