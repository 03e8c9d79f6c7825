#include "server/rank_request.h"

#include <algorithm>
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

RankRequestConverter::RankRequestConverter(const ModelConfig& model, const RequestLimits& limits)
    : model_(model), limits_(limits) {
  for (size_t f = 0; f < model_.sparse_features.size(); ++f) {
    feature_index_[model_.sparse_features[f].name] = static_cast<int>(f);
    feature_names_ += (f == 0 ? "" : ", ") + model_.sparse_features[f].name;
  }
}

Status RankRequestConverter::Convert(const v1::RankRequest& request, RankInput* input) const {
  if (RankRequestByteSizeBound(request) > static_cast<size_t>(limits_.max_request_bytes)) {
    const size_t bytes = request.ByteSizeLong();
    if (bytes > static_cast<size_t>(limits_.max_request_bytes)) {
      return Status::InvalidArgument("request message is " + std::to_string(bytes) +
                                     " bytes: exceeds max_request_bytes = " + std::to_string(limits_.max_request_bytes));
    }
  }
  if (request.dense_features_size() != model_.num_dense_features) {
    return Status::InvalidArgument("dense_features has " + std::to_string(request.dense_features_size()) +
                                   " values: expected exactly num_dense_features = " +
                                   std::to_string(model_.num_dense_features));
  }
  for (int i = 0; i < request.dense_features_size(); ++i) {
    if (!std::isfinite(request.dense_features(i))) {
      return Status::InvalidArgument("dense_features[" + std::to_string(i) +
                                     "] is NaN or Inf: every dense value must be finite");
    }
  }
  if (request.candidate_item_ids_size() == 0) {
    return Status::InvalidArgument("candidate_item_ids is empty: need 1 to max_candidates_per_request = " +
                                   std::to_string(limits_.max_candidates_per_request));
  }
  if (request.candidate_item_ids_size() > limits_.max_candidates_per_request) {
    return Status::InvalidArgument("candidate_item_ids has " + std::to_string(request.candidate_item_ids_size()) +
                                   " ids: exceeds max_candidates_per_request = " +
                                   std::to_string(limits_.max_candidates_per_request));
  }
  input->sparse.resize(model_.sparse_features.size());
  for (std::vector<int64_t>& ids : input->sparse) ids.clear();
  for (const auto& entry : request.sparse_features()) {
    const auto found = feature_index_.find(entry.first);
    if (found == feature_index_.end()) {
      // The name is the client's: quote at most kMaxQuoted bytes of it, so
      // that a huge one cannot turn the answer into an oversized trailer.
      constexpr size_t kMaxQuoted = 64;
      const std::string& name = entry.first;
      const std::string quoted = name.size() <= kMaxQuoted
                                     ? "'" + name + "'"
                                     : "'" + name.substr(0, kMaxQuoted) + "...' (" + std::to_string(name.size()) +
                                           " bytes)";
      return Status::InvalidArgument("sparse_features has unknown feature name " + quoted +
                                     ": the model's features are [" + feature_names_ + "]");
    }
    input->sparse[found->second].assign(entry.second.ids().begin(), entry.second.ids().end());
  }
  input->dense.assign(request.dense_features().begin(), request.dense_features().end());
  const int kept = std::min(request.history_size(), model_.max_history_len);
  input->history.assign(request.history().end() - kept, request.history().end());
  input->candidates.assign(request.candidate_item_ids().begin(), request.candidate_item_ids().end());
  return Status::Ok();
}

void FillRankResponse(const std::string& request_id, const std::string& model_version, const float* scores,
                      int64_t count, v1::RankResponse* response) {
  response->set_request_id(request_id);
  response->mutable_scores()->Add(scores, scores + count);
  response->set_model_version(model_version);
}

}  // namespace jagrank
