// Batch: many ranking requests assembled into jagged tensors (values +
// offsets, no padding), exactly the layout of DESIGN.md's data flow.
// R = num_requests. Every `*_offsets` vector has R+1 entries, starts at 0 and
// is non-decreasing; len(r) = offsets[r+1] - offsets[r].
#ifndef JAGRANK_MODEL_BATCH_H_
#define JAGRANK_MODEL_BATCH_H_

#include <cstddef>
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

// A read-only view of one request's features, in the model's terms. The
// pointers must stay valid during AppendRequestToBatch only (it copies).
struct IdSpan {
  const int64_t* data = nullptr;
  size_t size = 0;
};
struct RequestFeatures {
  const float* dense = nullptr;   // [num_dense], must equal the config's num_dense_features
  size_t num_dense = 0;
  // One entry per configured sparse feature, in config order; an absent
  // feature is an empty span. Fewer entries than features = the rest absent.
  std::vector<IdSpan> sparse;
  IdSpan history;                 // oldest first, any length (truncated here)
  IdSpan candidates;              // 1..: the items to score
};

// Index of the sparse feature called `name` in config order, or -1.
int SparseFeatureIndex(const ModelConfig& config, const std::string& name);

// Appends one request as the next row r = batch->num_requests: copies its
// dense values, sparse ids, the most recent min(len, max_history_len) history
// ids (oldest first) and its candidates. On error (wrong dense count, more
// sparse entries than features, no candidates) the batch is left unchanged
// and the message names the field. REQUIRES: batch was Reset(F) for this
// config (or built by earlier appends).
Status AppendRequestToBatch(const ModelConfig& config, const RequestFeatures& request, Batch* batch);

}  // namespace jagrank

#endif  // JAGRANK_MODEL_BATCH_H_
