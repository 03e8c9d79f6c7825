// Builds the model's jagged Batch (model/batch.h) from queued requests:
// values are appended request after request and each field gets its offsets
// [R+1]; request-level data (dense, sparse, history) is copied once per
// request, never once per candidate.
#ifndef JAGRANK_SERVER_BATCH_ASSEMBLY_H_
#define JAGRANK_SERVER_BATCH_ASSEMBLY_H_

#include <cstdint>
#include <vector>

#include "jagrank/v1/ranker.pb.h"
#include "model/batch.h"
#include "model/config.h"

namespace jagrank {

// Kept history length of a request: min(len, max_history_len).
int64_t KeptHistoryLength(const v1::RankRequest& request, const ModelConfig& model);

// Fills `*batch` (reset first, capacity kept) from `requests` in order.
// Histories keep their most recent max_history_len ids; a sparse feature
// absent from a request is an empty list. Returns R * (longest kept history)
// in `*padded_history_tokens` (what a padded layout would hold).
// REQUIRES: every request passed ValidateRankRequest.
void AssembleBatch(const std::vector<const v1::RankRequest*>& requests, const ModelConfig& model, Batch* batch,
                   int64_t* padded_history_tokens);

}  // namespace jagrank

#endif  // JAGRANK_SERVER_BATCH_ASSEMBLY_H_
