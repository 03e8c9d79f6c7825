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

Status AppendRequestToBatch(const ModelConfig& config, const RequestFeatures& request, Batch* batch) {
  const size_t num_features = config.sparse_features.size();
  if (request.num_dense != static_cast<size_t>(config.num_dense_features) ||
      (request.num_dense > 0 && request.dense == nullptr)) {
    return Status::InvalidArgument("dense_features: got " + std::to_string(request.num_dense) + " values, expected " +
                                   std::to_string(config.num_dense_features));
  }
  if (request.sparse.size() > num_features) {
    return Status::InvalidArgument("sparse_features: " + std::to_string(request.sparse.size()) +
                                   " entries, the model has " + std::to_string(num_features));
  }
  if (request.candidates.size == 0 || request.candidates.data == nullptr) {
    return Status::InvalidArgument("candidate_item_ids: empty, at least 1 required");
  }
  // Offsets are int32: refuse a request that would overflow them.
  const size_t kLimit = static_cast<size_t>(INT32_MAX);
  if (batch->candidate_ids.size() + request.candidates.size > kLimit) {
    return Status::ResourceExhausted("candidate_item_ids: batch would exceed 2^31-1 candidates");
  }
  const size_t kept = std::min(request.history.size, static_cast<size_t>(config.max_history_len));
  if (kept > 0 && request.history.data == nullptr) return Status::InvalidArgument("history: null data");
  if (batch->history_ids.size() + kept > kLimit) {
    return Status::ResourceExhausted("history: batch would exceed 2^31-1 history ids");
  }
  if (batch->sparse_ids.size() != num_features || batch->history_offsets.empty() ||
      batch->candidate_offsets.empty()) {
    return Status::InvalidArgument("batch: not Reset for this model (expected " + std::to_string(num_features) +
                                   " sparse features)");
  }
  for (size_t f = 0; f < request.sparse.size(); ++f) {
    if (request.sparse[f].size > 0 && request.sparse[f].data == nullptr) {
      return Status::InvalidArgument("sparse_features['" + config.sparse_features[f].name + "']: null data");
    }
    if (batch->sparse_ids[f].size() + request.sparse[f].size > kLimit) {
      return Status::ResourceExhausted("sparse_features['" + config.sparse_features[f].name +
                                       "']: batch would exceed 2^31-1 ids");
    }
  }

  batch->dense.insert(batch->dense.end(), request.dense, request.dense + request.num_dense);
  for (size_t f = 0; f < num_features; ++f) {
    std::vector<int64_t>& ids = batch->sparse_ids[f];
    if (f < request.sparse.size() && request.sparse[f].size > 0) {
      ids.insert(ids.end(), request.sparse[f].data, request.sparse[f].data + request.sparse[f].size);
    }
    batch->sparse_offsets[f].push_back(static_cast<int32_t>(ids.size()));
  }
  if (kept > 0) {
    const int64_t* first = request.history.data + (request.history.size - kept);  // most recent kept
    batch->history_ids.insert(batch->history_ids.end(), first, first + kept);
  }
  batch->history_offsets.push_back(static_cast<int32_t>(batch->history_ids.size()));
  batch->candidate_ids.insert(batch->candidate_ids.end(), request.candidates.data,
                              request.candidates.data + request.candidates.size);
  batch->candidate_offsets.push_back(static_cast<int32_t>(batch->candidate_ids.size()));
  ++batch->num_requests;
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
