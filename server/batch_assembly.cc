#include "server/batch_assembly.h"

#include <algorithm>

namespace jagrank {

int64_t KeptHistoryLength(const v1::RankRequest& request, const ModelConfig& model) {
  return std::min<int64_t>(request.history_size(), model.max_history_len);
}

void AssembleBatch(const std::vector<const v1::RankRequest*>& requests, const ModelConfig& model, Batch* batch,
                   int64_t* padded_history_tokens) {
  const int num_features = static_cast<int>(model.sparse_features.size());
  const int R = static_cast<int>(requests.size());
  batch->num_requests = R;
  batch->dense.clear();
  batch->dense.reserve(static_cast<size_t>(R) * model.num_dense_features);
  batch->sparse_ids.resize(num_features);
  batch->sparse_offsets.resize(num_features);
  for (int f = 0; f < num_features; ++f) {
    batch->sparse_ids[f].clear();
    batch->sparse_offsets[f].assign(1, 0);
  }
  batch->history_ids.clear();
  batch->history_offsets.assign(1, 0);
  batch->candidate_ids.clear();
  batch->candidate_offsets.assign(1, 0);

  int64_t longest = 0;
  for (const v1::RankRequest* r : requests) {
    batch->dense.insert(batch->dense.end(), r->dense_features().begin(), r->dense_features().end());
    for (int f = 0; f < num_features; ++f) {
      auto it = r->sparse_features().find(model.sparse_features[f].name);
      if (it != r->sparse_features().end()) {
        batch->sparse_ids[f].insert(batch->sparse_ids[f].end(), it->second.ids().begin(), it->second.ids().end());
      }
      batch->sparse_offsets[f].push_back(static_cast<int32_t>(batch->sparse_ids[f].size()));
    }
    const int64_t kept = KeptHistoryLength(*r, model);
    longest = std::max(longest, kept);
    batch->history_ids.insert(batch->history_ids.end(), r->history().end() - kept, r->history().end());
    batch->history_offsets.push_back(static_cast<int32_t>(batch->history_ids.size()));
    batch->candidate_ids.insert(batch->candidate_ids.end(), r->candidate_item_ids().begin(),
                                r->candidate_item_ids().end());
    batch->candidate_offsets.push_back(static_cast<int32_t>(batch->candidate_ids.size()));
  }
  *padded_history_tokens = longest * R;
}

}  // namespace jagrank
