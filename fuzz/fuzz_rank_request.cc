// The request path from wire bytes to scores: bytes -> v1::RankRequest ->
// RankRequestConverter::Convert (the server's validation) -> AssembleBatch
// (together with a fixed valid request, so offsets of a batch of two are
// exercised) -> the CPU model's Forward. An accepted request must get exactly
// one score per candidate; with moderate dense values (|x| <= 1e6) every
// score is finite and in [0, 1]. Larger finite values may overflow to a
// non-finite score: that is the server's to refuse, here it only must not
// crash or hit undefined behaviour.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "jagrank/v1/ranker.pb.h"
#include "model/batch.h"
#include "model/model.h"
#include "server/rank_request.h"

namespace jagrank {
namespace {

struct Fixture {
  ModelConfig config = fuzz::TinyModelConfig();
  RequestLimits limits;
  std::unique_ptr<RankRequestConverter> converter;
  std::unique_ptr<Model> model;
  RankInput fixed;  // a valid request batched beside the fuzzed one

  Fixture() {
    limits.max_candidates_per_request = 64;
    limits.max_request_bytes = 64 << 10;
    converter = std::make_unique<RankRequestConverter>(config, limits);
    ModelOptions options;
    options.device = "cpu";
    options.cpu_threads = 1;
    const Status s = Model::Create(config, ModelWeights(), options, &model);
    FUZZ_CHECK(s.ok(), "%s", s.ToString().c_str());
    fixed.dense = {0.5f, -1.0f, 2.0f, 0.0f};
    fixed.sparse = {{1, 2}, {}};
    fixed.history = {3, 4, 5};
    fixed.candidates = {7, 8};
  }
};

}  // namespace
}  // namespace jagrank

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jagrank;
  static Fixture* fx = new Fixture();  // lives for the process: no exit-time destructor races
  v1::RankRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  RankInput input;
  if (!fx->converter->Convert(request, &input).ok()) return 0;
  FUZZ_CHECK(input.dense.size() == static_cast<size_t>(fx->config.num_dense_features), "dense %zu",
             input.dense.size());
  FUZZ_CHECK(!input.candidates.empty() && input.candidates.size() == static_cast<size_t>(request.candidate_item_ids_size()),
             "candidates %zu", input.candidates.size());
  FUZZ_CHECK(input.history.size() <= static_cast<size_t>(fx->config.max_history_len), "history %zu",
             input.history.size());

  // The fuzzed request first or second, from the input's size (stable per input).
  const bool first = size % 2 == 0;
  const std::vector<const RankInput*> inputs =
      first ? std::vector<const RankInput*>{&input, &fx->fixed} : std::vector<const RankInput*>{&fx->fixed, &input};
  Batch batch;
  const Status assembled = AssembleBatch(inputs, fx->config, &batch);
  FUZZ_CHECK(assembled.ok(), "an accepted request failed batch assembly: %s", assembled.ToString().c_str());
  FUZZ_CHECK(ValidateBatchShape(batch, fx->config.num_dense_features,
                                static_cast<int>(fx->config.sparse_features.size())).ok(),
             "assembled batch is inconsistent");
  const int r = first ? 0 : 1;
  FUZZ_CHECK(batch.candidate_offsets[r + 1] - batch.candidate_offsets[r] == static_cast<int32_t>(input.candidates.size()),
             "candidate offsets of the fuzzed request");

  std::vector<float> scores;
  const Status forward = fx->model->Forward(batch, &scores);
  FUZZ_CHECK(forward.ok(), "forward failed on an accepted request: %s", forward.ToString().c_str());
  FUZZ_CHECK(static_cast<int64_t>(scores.size()) == batch.num_candidates(), "%zu scores for %lld candidates",
             scores.size(), static_cast<long long>(batch.num_candidates()));

  float max_abs_dense = 0;
  for (float v : input.dense) max_abs_dense = std::fmax(max_abs_dense, std::fabs(v));
  if (max_abs_dense <= 1e6f) {
    for (size_t i = 0; i < scores.size(); ++i) {
      FUZZ_CHECK(std::isfinite(scores[i]) && scores[i] >= 0.0f && scores[i] <= 1.0f, "score %zu = %g", i,
                 static_cast<double>(scores[i]));
    }
  }
  return 0;
}
