// Batch: many ranking requests assembled into jagged tensors (values +
// offsets, no padding), the layout every backend computes from (docs/model.md).
// R = num_requests. Every `*_offsets` vector has R+1 entries, starts at 0 and
// is non-decreasing; len(r) = offsets[r+1] - offsets[r].
#ifndef JAGRANK_MODEL_BATCH_H_
#define JAGRANK_MODEL_BATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace jagrank {

struct Batch {
  int num_requests = 0;                            // R
  std::vector<float> dense;                        // [R, num_dense_features], row-major
  // One entry per configured sparse feature, in config (interaction) order.
  std::vector<std::vector<int64_t>> sparse_ids;    // [F][sum of lengths]
  std::vector<std::vector<int32_t>> sparse_offsets;// [F][R+1]
  // History already truncated to the most recent max_history_len ids, oldest first.
  std::vector<int64_t> history_ids;                // [T]
  std::vector<int32_t> history_offsets;            // [R+1]
  std::vector<int64_t> candidate_ids;              // [C]
  std::vector<int32_t> candidate_offsets;          // [R+1]

  int64_t num_candidates() const { return candidate_ids.size(); }
  int64_t num_history_tokens() const { return history_ids.size(); }

  // Clears the batch for reuse, keeping capacity. `num_sparse_features`
  // entries are kept in sparse_ids/sparse_offsets, each offsets = {0}.
  void Reset(int num_sparse_features);
  // R * (longest history): what a padded layout of the histories would hold.
  int64_t PaddedHistoryTokens() const;
};

// Per-request kept history lengths and candidate counts of `batch` (each
// resized to [R]) and their maxima; the error names the request whose history
// exceeds max_history_len. REQUIRES: ValidateBatchShape(batch, ...) is OK.
Status BatchLengths(const Batch& batch, int max_history_len, std::vector<int32_t>* history_lengths,
                    std::vector<int32_t>* candidate_lengths, int* max_history, int* max_candidates);

// Checks the batch's internal consistency against the model's shape (offset
// arrays of R+1 non-decreasing entries ending at the value counts, dense size,
// feature count). Names the bad field. Cheap: O(R * F).
Status ValidateBatchShape(const Batch& batch, int num_dense_features, int num_sparse_features);

// One ranking request in the model's terms: owned plain arrays, no
// transport types. The server's gRPC handler converts a RankRequest into one
// (server/rank_request.h); tests and benchmarks build them directly.
struct RankInput {
  std::vector<float> dense;                 // [num_dense_features]
  // One list per configured sparse feature, in config order; an absent or
  // empty feature pools to zero. Fewer lists than features: the rest absent.
  std::vector<std::vector<int64_t>> sparse;
  std::vector<int64_t> history;             // oldest first; only the last max_history_len ids are used
  std::vector<int64_t> candidates;          // the items to score, at least one

  // min(history.size(), max_history_len): what a batch keeps of the history.
  int64_t KeptHistory(int max_history_len) const {
    return history.size() < static_cast<size_t>(max_history_len) ? static_cast<int64_t>(history.size())
                                                                 : max_history_len;
  }
};

// Index of the sparse feature called `name` in config order, or -1.
int SparseFeatureIndex(const ModelConfig& config, const std::string& name);

// The one batch assembly: fills `*batch` (cleared first, capacity kept) with
// `inputs` in order. Values are appended request after request and each
// field gets its offsets [R+1]; request-level data is copied once per
// request, never once per candidate; histories keep their most recent
// max_history_len ids. On error (wrong dense count, more sparse lists than
// features, no candidates, a batch past 2^31-1 values) the message names the
// request and the field, and the batch is left empty.
Status AssembleBatch(const std::vector<const RankInput*>& inputs, const ModelConfig& config, Batch* batch);

}  // namespace jagrank

#endif  // JAGRANK_MODEL_BATCH_H_
