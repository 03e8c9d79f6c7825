#include "model/batch.h"

#include <algorithm>

namespace jagrank {
namespace {

Status CheckOffsets(const std::string& field, const std::vector<int32_t>& offsets, int num_requests,
                    size_t num_values) {
  if (offsets.size() != static_cast<size_t>(num_requests) + 1) {
    return Status::InvalidArgument(field + ": has " + std::to_string(offsets.size()) + " entries, expected R+1 = " +
                                   std::to_string(num_requests + 1));
  }
  if (offsets[0] != 0) return Status::InvalidArgument(field + "[0] = " + std::to_string(offsets[0]) + ", expected 0");
  for (int r = 0; r < num_requests; ++r) {
    if (offsets[r + 1] < offsets[r]) {
      return Status::InvalidArgument(field + ": decreases at entry " + std::to_string(r + 1));
    }
  }
  if (static_cast<size_t>(offsets[num_requests]) != num_values) {
    return Status::InvalidArgument(field + ": last entry " + std::to_string(offsets[num_requests]) +
                                   " != number of values " + std::to_string(num_values));
  }
  return Status::Ok();
}

}  // namespace

void Batch::Reset(int num_sparse_features) {
  num_requests = 0;
  dense.clear();
  sparse_ids.resize(num_sparse_features);
  sparse_offsets.resize(num_sparse_features);
  for (int f = 0; f < num_sparse_features; ++f) {
    sparse_ids[f].clear();
    sparse_offsets[f].assign(1, 0);
  }
  history_ids.clear();
  history_offsets.assign(1, 0);
  candidate_ids.clear();
  candidate_offsets.assign(1, 0);
}

Status ValidateBatchShape(const Batch& batch, int num_dense_features, int num_sparse_features) {
  const int r = batch.num_requests;
  if (r < 0) return Status::InvalidArgument("batch.num_requests = " + std::to_string(r) + ": must be >= 0");
  if (batch.dense.size() != static_cast<size_t>(r) * num_dense_features) {
    return Status::InvalidArgument("batch.dense: has " + std::to_string(batch.dense.size()) + " values, expected R * " +
                                   std::to_string(num_dense_features) + " = " +
                                   std::to_string(static_cast<size_t>(r) * num_dense_features));
  }
  if (batch.sparse_ids.size() != static_cast<size_t>(num_sparse_features) ||
      batch.sparse_offsets.size() != static_cast<size_t>(num_sparse_features)) {
    return Status::InvalidArgument("batch.sparse_ids/sparse_offsets: " + std::to_string(batch.sparse_ids.size()) +
                                   "/" + std::to_string(batch.sparse_offsets.size()) + " features, expected " +
                                   std::to_string(num_sparse_features));
  }
  for (int f = 0; f < num_sparse_features; ++f) {
    RETURN_IF_ERROR(CheckOffsets("batch.sparse_offsets[" + std::to_string(f) + "]", batch.sparse_offsets[f], r,
                                 batch.sparse_ids[f].size()));
  }
  RETURN_IF_ERROR(CheckOffsets("batch.history_offsets", batch.history_offsets, r, batch.history_ids.size()));
  RETURN_IF_ERROR(CheckOffsets("batch.candidate_offsets", batch.candidate_offsets, r, batch.candidate_ids.size()));
  return Status::Ok();
}

int SparseFeatureIndex(const ModelConfig& config, const std::string& name) {
  for (size_t f = 0; f < config.sparse_features.size(); ++f) {
    if (config.sparse_features[f].name == name) return static_cast<int>(f);
  }
  return -1;
}

int64_t Batch::PaddedHistoryTokens() const {
  int64_t longest = 0;
  for (int r = 0; r < num_requests; ++r) {
    longest = std::max<int64_t>(longest, history_offsets[r + 1] - history_offsets[r]);
  }
  return longest * num_requests;
}

namespace {

Status CheckInput(const RankInput& input, size_t index, const ModelConfig& config) {
  const std::string which = "request " + std::to_string(index) + ": ";
  if (input.dense.size() != static_cast<size_t>(config.num_dense_features)) {
    return Status::InvalidArgument(which + "dense has " + std::to_string(input.dense.size()) +
                                   " values, expected num_dense_features = " +
                                   std::to_string(config.num_dense_features));
  }
  if (input.sparse.size() > config.sparse_features.size()) {
    return Status::InvalidArgument(which + "sparse has " + std::to_string(input.sparse.size()) +
                                   " lists, the model has " + std::to_string(config.sparse_features.size()) +
                                   " sparse features");
  }
  if (input.candidates.empty()) return Status::InvalidArgument(which + "candidates is empty, at least 1 required");
  return Status::Ok();
}

}  // namespace

Status AssembleBatch(const std::vector<const RankInput*>& inputs, const ModelConfig& config, Batch* batch) {
  const int num_features = static_cast<int>(config.sparse_features.size());
  batch->Reset(num_features);
  // Offsets are int32: count first, refuse a batch that would overflow them.
  constexpr int64_t kLimit = INT32_MAX;
  int64_t candidates = 0, history = 0;
  std::vector<int64_t> sparse(num_features, 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(CheckInput(*inputs[i], i, config));
    candidates += static_cast<int64_t>(inputs[i]->candidates.size());
    history += inputs[i]->KeptHistory(config.max_history_len);
    for (size_t f = 0; f < inputs[i]->sparse.size(); ++f) sparse[f] += inputs[i]->sparse[f].size();
  }
  int64_t most_sparse = 0;
  for (int64_t n : sparse) most_sparse = std::max(most_sparse, n);
  if (candidates > kLimit || history > kLimit || most_sparse > kLimit) {
    return Status::ResourceExhausted("batch of " + std::to_string(inputs.size()) +
                                     " requests exceeds 2^31-1 candidates, history ids or ids of one feature");
  }
  const int R = static_cast<int>(inputs.size());
  batch->dense.reserve(static_cast<size_t>(R) * config.num_dense_features);
  batch->candidate_ids.reserve(candidates);
  batch->history_ids.reserve(history);
  for (int f = 0; f < num_features; ++f) {
    batch->sparse_ids[f].reserve(sparse[f]);
    batch->sparse_offsets[f].reserve(R + 1);
  }
  batch->history_offsets.reserve(R + 1);
  batch->candidate_offsets.reserve(R + 1);
  for (const RankInput* input : inputs) {
    batch->dense.insert(batch->dense.end(), input->dense.begin(), input->dense.end());
    for (int f = 0; f < num_features; ++f) {
      std::vector<int64_t>& ids = batch->sparse_ids[f];
      if (static_cast<size_t>(f) < input->sparse.size()) {
        ids.insert(ids.end(), input->sparse[f].begin(), input->sparse[f].end());
      }
      batch->sparse_offsets[f].push_back(static_cast<int32_t>(ids.size()));
    }
    const int64_t kept = input->KeptHistory(config.max_history_len);
    batch->history_ids.insert(batch->history_ids.end(), input->history.end() - kept, input->history.end());
    batch->history_offsets.push_back(static_cast<int32_t>(batch->history_ids.size()));
    batch->candidate_ids.insert(batch->candidate_ids.end(), input->candidates.begin(), input->candidates.end());
    batch->candidate_offsets.push_back(static_cast<int32_t>(batch->candidate_ids.size()));
  }
  batch->num_requests = R;
  return Status::Ok();
}

Status BatchLengths(const Batch& batch, int max_history_len, std::vector<int32_t>* history_lengths,
                    std::vector<int32_t>* candidate_lengths, int* max_history, int* max_candidates) {
  const int R = batch.num_requests;
  history_lengths->resize(R);
  candidate_lengths->resize(R);
  *max_history = 0;
  *max_candidates = 0;
  for (int r = 0; r < R; ++r) {
    const int32_t len = batch.history_offsets[r + 1] - batch.history_offsets[r];
    if (len > max_history_len) {
      return Status::InvalidArgument("batch.history_offsets: request " + std::to_string(r) + " has " +
                                     std::to_string(len) + " history ids, above max_history_len = " +
                                     std::to_string(max_history_len));
    }
    (*history_lengths)[r] = len;
    (*candidate_lengths)[r] = batch.candidate_offsets[r + 1] - batch.candidate_offsets[r];
    *max_history = std::max(*max_history, len);
    *max_candidates = std::max(*max_candidates, (*candidate_lengths)[r]);
  }
  return Status::Ok();
}

}  // namespace jagrank
