// Internal to model/: the forward pass of docs/model.md as one fixed
// sequence of steps, shared by the backends. Each backend (cpu_model.cc,
// cuda_model.cc) implements the steps over its own per-batch state `Pass`
// (host buffers, or device memory on its streams), and implements each
// attention strategy (jagged, padded_flash, padded_dense) as one
// AttentionStep object: the strategy decides how the histories are laid out
// for attention, so self and target attention belong to it.
#ifndef JAGRANK_MODEL_FORWARD_H_
#define JAGRANK_MODEL_FORWARD_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/linear/linear_params.h"
#include "model/model.h"

namespace jagrank {

// One MLP layer of the weights: y = x W^T + b.
struct MlpLayer {
  const void* weight;   // [out, in] of the backend's MLP dtype (CPU: float32)
  const void* bias;     // [out] of the layer's output dtype (CPU: float32)
  int in, out;
};

// The LinearParams of `layer` over x [m, in] into y [m, out], with or
// without the ReLU; the backend adds its threads or workspace.
inline LinearParams MlpLayerParams(const MlpLayer& layer, bool relu, const void* x, int m, void* y) {
  LinearParams p = {};
  p.x = x;
  p.weight = layer.weight;
  p.maybe_bias = layer.bias;
  p.relu = relu;
  p.m = m;
  p.n = layer.out;
  p.k = layer.in;
  p.y = y;
  return p;
}

// w [rows, cols] -> [rows, stride]: the given columns in order, then zeros
// up to stride (>= columns.size()). The top MLP's first layer split by the
// interaction's columns (DotInteractionSplitColumns), padded for aligned GEMMs.
inline std::vector<float> GatherColumns(const float* w, int rows, int cols, const std::vector<int>& columns,
                                        size_t stride) {
  std::vector<float> out(static_cast<size_t>(rows) * stride, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (size_t j = 0; j < columns.size(); ++j) out[r * stride + j] = w[static_cast<size_t>(r) * cols + columns[j]];
  }
  return out;
}

// A strategy's two attention steps on one backend, and its batch cost.
template <typename Pass>
class AttentionStep {
 public:
  virtual ~AttentionStep() = default;
  // JaggedAttentionCost or PaddedAttentionCost, as the strategy computes.
  virtual int64_t BatchCost(int64_t requests, int64_t sum_of_squares, int64_t longest) const = 0;
  // 4. z = h + MHA(h) Wo^T, in the strategy's layout of the histories
  //    (jagged [T, d], or padded [R, N, d]).
  virtual Status SelfAttention(Pass* pass) = 0;
  // 6. u [C, d]: each candidate's attention over its own request's z.
  virtual Status TargetAttention(Pass* pass) = 0;
};

// A strategy object of backend model `Backend`, jagged or padded, with that
// layout's batch cost.
template <typename Pass, typename Backend, bool kPadded>
class BackendAttention : public AttentionStep<Pass> {
 public:
  explicit BackendAttention(Backend* model) : m_(model) {}
  int64_t BatchCost(int64_t requests, int64_t sum_of_squares, int64_t longest) const override {
    return kPadded ? PaddedAttentionCost(requests, sum_of_squares, longest)
                   : JaggedAttentionCost(requests, sum_of_squares, longest);
  }

 protected:
  Backend* const m_;
};

// The steps of the forward pass that do not depend on the strategy.
template <typename Pass>
class ForwardSteps {
 public:
  virtual ~ForwardSteps() = default;
  virtual Status BottomMlp(Pass* pass) = 0;           // 1. x [R, d], once per request
  virtual Status PoolSparseFeatures(Pass* pass) = 0;  // 2. p [F, R, d], once per request
  virtual Status EmbedCandidates(Pass* pass) = 0;     // 5. e [C, d]
  virtual Status EmbedHistory(Pass* pass) = 0;        // 3. h [T, d] (item + position)
  virtual Status NoHistory(Pass* pass) = 0;           // 6 when no request has history: u = 0
  virtual Status Interaction(Pass* pass) = 0;         // 7. the pairwise dot products
  virtual Status TopMlp(Pass* pass) = 0;              // 8. logits, sigmoid: the scores
};

// The forward pass: every backend runs exactly this order. `Pass` exposes
// num_history_tokens (T of the batch).
template <typename Pass>
Status RunForward(ForwardSteps<Pass>* steps, AttentionStep<Pass>* attention, Pass* pass) {
  RETURN_IF_ERROR(steps->BottomMlp(pass));
  RETURN_IF_ERROR(steps->PoolSparseFeatures(pass));
  RETURN_IF_ERROR(steps->EmbedCandidates(pass));
  if (pass->num_history_tokens == 0) {
    RETURN_IF_ERROR(steps->NoHistory(pass));
  } else {
    RETURN_IF_ERROR(steps->EmbedHistory(pass));
    RETURN_IF_ERROR(attention->SelfAttention(pass));
    RETURN_IF_ERROR(attention->TargetAttention(pass));
  }
  RETURN_IF_ERROR(steps->Interaction(pass));
  return steps->TopMlp(pass);
}

}  // namespace jagrank

#endif  // JAGRANK_MODEL_FORWARD_H_
