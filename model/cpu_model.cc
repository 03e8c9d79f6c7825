// CPU backend: float32 throughout, OpenBLAS GEMMs (kernels/linear.h) and the
// CPU kernels of kernels/. Weights are used in place (the mmap'ed file or the
// random-init buffers); only the fused [3d, d] QKV projection is a copy.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/embedding/embedding.h"
#include "kernels/interaction/interaction.h"
#include "kernels/layout/layout.h"
#include "kernels/linear/linear.h"
#include "model/backends.h"

namespace jagrank {
namespace {

struct Layer {
  const float* weight;  // [out, in]
  const float* bias;    // [out]
  int in, out;
};

// A grow-only float buffer; reports its size for the workspace peak.
class Buffer {
 public:
  float* Get(size_t n) {
    if (data_.size() < std::max<size_t>(n, 1)) data_.resize(std::max<size_t>(n, 1));
    return data_.data();
  }
  size_t bytes() const { return data_.size() * sizeof(float); }

 private:
  std::vector<float> data_;
};

class CpuModel final : public Model {
 public:
  CpuModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options)
      : config_(config), weights_(std::move(weights)), options_(options) {
    const int d = config_.embedding_dim;
    int in = config_.num_dense_features;
    for (size_t i = 0; i < config_.bottom_mlp.size(); ++i) {
      const std::string p = "bottom_mlp." + std::to_string(i);
      bottom_.push_back({T(p + ".weight"), T(p + ".bias"), in, config_.bottom_mlp[i]});
      in = config_.bottom_mlp[i];
    }
    in = config_.top_mlp_input_width();
    for (size_t i = 0; i < config_.top_mlp.size(); ++i) {
      const std::string p = "top_mlp." + std::to_string(i);
      top_.push_back({T(p + ".weight"), T(p + ".bias"), in, config_.top_mlp[i]});
      in = config_.top_mlp[i];
    }
    for (const SparseFeatureConfig& f : config_.sparse_features) sparse_tables_.push_back(T("embeddings." + f.name));
    item_table_ = T("embeddings.item");
    position_table_ = T("history.position");
    wq_ = T("history.attn.q");
    wk_ = T("history.attn.k");
    wv_ = T("history.attn.v");
    wo_ = T("history.attn.o");
    // [3d, d]: rows 0..d-1 = Wq, d..2d-1 = Wk, 2d..3d-1 = Wv, so one GEMM
    // gives [T, 3d] with q, k, v as column blocks (row stride 3d).
    wqkv_.resize(size_t{3} * d * d);
    std::memcpy(wqkv_.data(), wq_, sizeof(float) * d * d);
    std::memcpy(wqkv_.data() + d * d, wk_, sizeof(float) * d * d);
    std::memcpy(wqkv_.data() + 2 * d * d, wv_, sizeof(float) * d * d);
    // The top MLP's first layer split by the interaction's columns (see
    // Forward, step 7): W1 = [W_req | W_cand] up to a column permutation.
    std::vector<int> request_columns, candidate_columns;
    DotInteractionSplitColumns(NumSparse(), d, &request_columns, &candidate_columns);
    const Layer& first = top_.front();
    top1_request_w_ = GatherColumns(first.weight, first.out, first.in, request_columns);
    top1_candidate_w_ = GatherColumns(first.weight, first.out, first.in, candidate_columns);
    top_rest_.assign(top_.begin() + 1, top_.end());
    weights_bytes_ = weights_.total_bytes() +
                     static_cast<int64_t>((wqkv_.size() + top1_request_w_.size() + top1_candidate_w_.size()) *
                                          sizeof(float));
  }

  Status Forward(const Batch& batch, std::vector<float>* scores) override;
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cpu"; }
  AttentionStrategy attention() const override { return options_.attention; }
  std::string version() const override { return weights_.version(); }
  ModelMemory Memory() const override {
    ModelMemory m;
    m.weights_bytes = weights_bytes_;
    m.workspace_peak_bytes = workspace_peak_bytes_.load();
    m.padding_saved_bytes = padding_saved_bytes_.load();
    return m;
  }

 private:
  const float* T(const std::string& name) const { return weights_.Find(name)->data; }
  int NumSparse() const { return static_cast<int>(config_.sparse_features.size()); }
  // w [rows, cols] -> [rows, columns.size()] keeping `columns` in order.
  static std::vector<float> GatherColumns(const float* w, int rows, int cols, const std::vector<int>& columns) {
    std::vector<float> out(static_cast<size_t>(rows) * columns.size());
    for (int r = 0; r < rows; ++r) {
      for (size_t j = 0; j < columns.size(); ++j) {
        out[r * columns.size() + j] = w[static_cast<size_t>(r) * cols + columns[j]];
      }
    }
    return out;
  }
  // Steps 7 and 8 from u: the interaction split by request and candidate,
  // the top MLP's first layer factored, the rest of it, the sigmoid.
  Status InteractionAndTopMlp(const Batch& batch, const float* x, const float* pooled, const float* u,
                              const float* e, std::vector<float>* scores);
  Status Mlp(const std::vector<Layer>& layers, bool relu_last, const float* x, int m, float** out);
  // LinearCpu on the backend's threads (options_.cpu_threads).
  Status RunLinear(LinearParams p) const;
  Status SelfAttentionJagged(const Batch& batch, int max_len, const float* h, float* z);
  Status TargetAttention(const Batch& batch, int max_len, int max_candidates, const float* z, const float* e,
                         float* u);

  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions options_;
  std::vector<Layer> bottom_, top_;
  std::vector<float> top1_request_w_;    // [top_mlp[0], d + (F+1)F/2]: W1's request columns
  std::vector<float> top1_candidate_w_;  // [top_mlp[0], 2(F+1) + 1]: W1's candidate columns
  std::vector<Layer> top_rest_;          // top_ after the first layer
  std::vector<const float*> sparse_tables_;
  const float *item_table_, *position_table_, *wq_, *wk_, *wv_, *wo_;
  std::vector<float> wqkv_;
  int64_t weights_bytes_ = 0;
  std::atomic<int64_t> workspace_peak_bytes_{0};
  std::atomic<int64_t> padding_saved_bytes_{0};

  // Per-batch workspace, reused (Forward is single-threaded by contract).
  Buffer mlp_a_, mlp_b_, x_, pooled_, h_, e_, qkv_, attn_, z_, u_, request_part_, candidate_part_, request_top1_,
      top1_;
  Buffer hp_, qp_, kp_, vp_, op_, scores_ws_, ep_, up_;
  std::vector<int32_t> lengths_, padded_offsets_, cand_lengths_;
};

Status CpuModel::RunLinear(LinearParams p) const {
  p.num_threads = options_.cpu_threads;
  return LinearCpu(p);
}

// Runs the layers; ReLU after each one, the last only if relu_last.
// *out points into mlp_a_ or mlp_b_.
Status CpuModel::Mlp(const std::vector<Layer>& layers, bool relu_last, const float* x, int m, float** out) {
  const float* in = x;
  float* y = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    y = (i % 2 == 0 ? mlp_a_ : mlp_b_).Get(size_t(m) * layers[i].out);
    LinearParams p = {};
    p.x = in;
    p.weight = layers[i].weight;
    p.maybe_bias = layers[i].bias;
    p.relu = relu_last || i + 1 < layers.size();
    p.m = m;
    p.n = layers[i].out;
    p.k = layers[i].in;
    p.y = y;
    RETURN_IF_ERROR(RunLinear(p));
    in = y;
  }
  *out = y;
  return Status::Ok();
}

AttentionParams SelfAttentionParams(const ModelConfig& c, int num_threads) {
  AttentionParams p = {};
  p.dtype = DType::kFloat32;
  p.num_heads = c.attention_heads;
  p.head_dim = c.embedding_dim / c.attention_heads;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  p.num_threads = num_threads;
  return p;
}

Status CpuModel::Forward(const Batch& batch, std::vector<float>* scores) {
  const int F = static_cast<int>(config_.sparse_features.size());
  RETURN_IF_ERROR(ValidateBatchShape(batch, config_.num_dense_features, F));
  const int R = batch.num_requests;
  const int C = static_cast<int>(batch.num_candidates());
  const int T = static_cast<int>(batch.num_history_tokens());
  const int d = config_.embedding_dim;
  scores->assign(C, 0.0f);
  if (R == 0 || C == 0) return Status::Ok();

  int max_len = 0, max_candidates = 0;
  RETURN_IF_ERROR(
      BatchLengths(batch, config_.max_history_len, &lengths_, &cand_lengths_, &max_len, &max_candidates));
  static const int64_t kNoIds = 0;
  const int64_t* history_ids = T > 0 ? batch.history_ids.data() : &kNoIds;

  // 1. Bottom MLP, once per request: x [R, d].
  float* mlp_out = nullptr;
  RETURN_IF_ERROR(Mlp(bottom_, /*relu_last=*/true, batch.dense.data(), R, &mlp_out));
  float* x = x_.Get(size_t(R) * d);
  std::memcpy(x, mlp_out, sizeof(float) * R * d);

  // 2. Pooled sparse features, once per request: [F, R, d].
  float* pooled = pooled_.Get(size_t(F) * R * d);
  for (int f = 0; f < F; ++f) {
    EmbeddingBagParams p = {};
    p.ids = batch.sparse_ids[f].empty() ? &kNoIds : batch.sparse_ids[f].data();
    p.offsets = batch.sparse_offsets[f].data();
    p.batch = R;
    p.table = sparse_tables_[f];
    p.table_dtype = DType::kFloat32;
    p.num_rows = config_.sparse_features[f].num_rows;
    p.dim = d;
    p.out = pooled + size_t(f) * R * d;
    RETURN_IF_ERROR(EmbeddingBagCpu(p));
  }

  // 3. History embeddings h [T, d].
  float* h = h_.Get(size_t(T) * d);
  {
    HistoryGatherParams p = {};
    p.ids = history_ids;
    p.offsets = batch.history_offsets.data();
    p.batch = R;
    p.item_table = item_table_;
    p.table_dtype = DType::kFloat32;
    p.item_rows = config_.item_rows;
    p.position_table = position_table_;
    p.max_len = config_.max_history_len;
    p.dim = d;
    p.out = h;
    p.num_threads = options_.cpu_threads;
    RETURN_IF_ERROR(HistoryGatherCpu(p));
  }

  // 5. Candidate embeddings e [C, d].
  float* e = e_.Get(size_t(C) * d);
  {
    GatherRowsParams p = {};
    p.ids = batch.candidate_ids.data();
    p.count = C;
    p.table = item_table_;
    p.table_dtype = DType::kFloat32;
    p.num_rows = config_.item_rows;
    p.dim = d;
    p.out = e;
    p.num_threads = options_.cpu_threads;
    RETURN_IF_ERROR(GatherRowsCpu(p));
  }

  // 4 + 6. Self-attention to z, target attention to u [C, d].
  float* u = u_.Get(size_t(C) * d);
  if (options_.attention == AttentionStrategy::kJagged) {
    float* z = z_.Get(size_t(T) * d);
    RETURN_IF_ERROR(SelfAttentionJagged(batch, max_len, h, z));
    RETURN_IF_ERROR(TargetAttention(batch, max_len, max_candidates, z, e, u));
    padding_saved_bytes_ += PaddingSavedBytes(batch, d);
  } else {
    RETURN_IF_ERROR(TargetAttention(batch, max_len, max_candidates, h, e, u));  // padded paths start from h
  }

  // 7 + 8. Interaction, top MLP, sigmoid.
  RETURN_IF_ERROR(InteractionAndTopMlp(batch, x, pooled, u, e, scores));

  int64_t workspace = 0;
  for (const Buffer* b : {&mlp_a_, &mlp_b_, &x_, &pooled_, &h_, &e_, &qkv_, &attn_, &z_, &u_, &request_part_,
                          &candidate_part_, &request_top1_, &top1_, &hp_, &qp_, &kp_, &vp_, &op_, &scores_ws_, &ep_,
                          &up_}) {
    workspace += static_cast<int64_t>(b->bytes());
  }
  if (workspace > workspace_peak_bytes_.load()) workspace_peak_bytes_.store(workspace);
  return Status::Ok();
}

// The top MLP's input row is [x, t] with t the interaction's pairs. Its
// first layer is W1 [x, t] + b1 = W_req r_req + W_cand r_cand + b1, where
// r_req (x and the pairs among x and the pooled features: 85 of 100 columns
// for the default model) is the same for all of a request's candidates. So
// a = W_req r_req + b1 is computed once per request, and per candidate only
// a + W_cand r_cand (15 columns), then ReLU: the same math as the full
// layer, summed in another order.
Status CpuModel::InteractionAndTopMlp(const Batch& batch, const float* x, const float* pooled, const float* u,
                                      const float* e, std::vector<float>* scores) {
  const int R = batch.num_requests;
  const int C = static_cast<int>(batch.num_candidates());
  const Layer& first = top_.front();
  const int request_width = static_cast<int>(top1_request_w_.size() / first.out);
  const int candidate_width = static_cast<int>(top1_candidate_w_.size() / first.out);
  float* request_part = request_part_.Get(size_t(R) * request_width);
  float* candidate_part = candidate_part_.Get(size_t(C) * candidate_width);
  {
    DotInteractionParams p = {};
    p.x = x;
    p.pooled = pooled;
    p.num_sparse = NumSparse();
    p.u = u;
    p.e = e;
    p.candidate_offsets = batch.candidate_offsets.data();
    p.num_requests = R;
    p.num_candidates = C;
    p.dim = config_.embedding_dim;
    p.num_threads = options_.cpu_threads;
    RETURN_IF_ERROR(DotInteractionSplitCpu(p, request_part, candidate_part));
  }
  float* request_top1 = request_top1_.Get(size_t(R) * first.out);  // a = W_req r_req + b1, [R, out]
  {
    LinearParams p = {};
    p.x = request_part;
    p.weight = top1_request_w_.data();
    p.maybe_bias = first.bias;
    p.m = R;
    p.n = first.out;
    p.k = request_width;
    p.y = request_top1;
    RETURN_IF_ERROR(RunLinear(p));
  }
  float* top1 = top1_.Get(size_t(C) * first.out);  // each candidate's row starts as its request's a
  constexpr double kMinBytesPerThread = 1 << 20;
  ParallelFor(R, ThreadsFor(4.0 * C * first.out, kMinBytesPerThread, options_.cpu_threads), [&](int64_t r) {
    for (int32_t c = batch.candidate_offsets[r]; c < batch.candidate_offsets[r + 1]; ++c) {
      std::memcpy(top1 + size_t(c) * first.out, request_top1 + size_t(r) * first.out, sizeof(float) * first.out);
    }
  });
  {
    LinearParams p = {};
    p.x = candidate_part;
    p.weight = top1_candidate_w_.data();
    p.relu = !top_rest_.empty();  // ReLU after every layer but the last
    p.m = C;
    p.n = first.out;
    p.k = candidate_width;
    p.y = top1;
    p.accumulate = true;
    RETURN_IF_ERROR(RunLinear(p));
  }
  const float* logits = top1;
  if (!top_rest_.empty()) {
    float* out = nullptr;
    RETURN_IF_ERROR(Mlp(top_rest_, /*relu_last=*/false, top1, C, &out));
    logits = out;
  }
  for (int c = 0; c < C; ++c) (*scores)[c] = 1.0f / (1.0f + std::exp(-logits[c]));
  return Status::Ok();
}

// z = h + MHA(h) Wo^T over the jagged histories, no padding.
Status CpuModel::SelfAttentionJagged(const Batch& batch, int max_len, const float* h, float* z) {
  const int R = batch.num_requests;
  const int T = static_cast<int>(batch.num_history_tokens());
  const int d = config_.embedding_dim;
  if (T == 0) return Status::Ok();
  float* qkv = qkv_.Get(size_t(T) * 3 * d);  // [T, 3d]
  {
    LinearParams p = {};
    p.x = h;
    p.weight = wqkv_.data();
    p.m = T;
    p.n = 3 * d;
    p.k = d;
    p.y = qkv;
    RETURN_IF_ERROR(RunLinear(p));
  }
  float* attn = attn_.Get(size_t(T) * d);  // [T, H, dh]
  {
    AttentionParams p = SelfAttentionParams(config_, options_.cpu_threads);
    p.q = qkv;
    p.k = qkv + d;
    p.v = qkv + 2 * d;
    p.o = attn;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * d;
    p.o_row_stride = d;
    p.q_offsets = p.k_offsets = batch.history_offsets.data();
    p.batch = R;
    p.max_q_len = p.max_k_len = max_len;
    RETURN_IF_ERROR(JaggedAttentionCpu(p));
  }
  {
    LinearParams p = {};
    p.x = attn;
    p.weight = wo_;
    p.m = T;
    p.n = d;
    p.k = d;
    p.y = z;
    RETURN_IF_ERROR(RunLinear(p));
  }
  for (size_t i = 0; i < size_t(T) * d; ++i) z[i] += h[i];
  return Status::Ok();
}

// Jagged strategy: `z` is the jagged [T, d] self-attention output.
// Padded strategies: `z` is h [T, d]; the self-attention runs here over the
// padded [R, N, d] tensor (N = max_len), and the target attention reads the
// padded z with masking, as the baselines do.
Status CpuModel::TargetAttention(const Batch& batch, int max_len, int max_candidates, const float* z,
                                 const float* e, float* u) {
  const int R = batch.num_requests;
  const int C = static_cast<int>(batch.num_candidates());
  const int d = config_.embedding_dim;
  const float target_scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (options_.attention == AttentionStrategy::kJagged) {
    AttentionParams p = {};
    p.q = e;
    p.k = z;
    p.v = z;
    p.o = u;
    p.dtype = DType::kFloat32;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
    p.q_offsets = batch.candidate_offsets.data();
    p.k_offsets = batch.history_offsets.data();
    p.batch = R;
    p.num_heads = 1;
    p.head_dim = d;
    p.max_q_len = max_candidates;
    p.max_k_len = max_len;
    p.softmax_scale = target_scale;
    p.num_threads = options_.cpu_threads;
    return JaggedAttentionCpu(p);
  }

  const int N = max_len;
  const size_t padded_tokens = size_t(R) * N;
  const int H = config_.attention_heads;
  // hp [R, N, d], zeros past each length.
  float* hp = hp_.Get(padded_tokens * d);
  {
    JaggedToPaddedParams p = {};
    p.values = z;
    p.offsets = batch.history_offsets.data();
    p.batch = R;
    p.max_len = N;
    p.width = d;
    p.dtype = DType::kFloat32;
    p.padded = hp;
    RETURN_IF_ERROR(JaggedToPaddedCpu(p));
  }
  float* op = op_.Get(padded_tokens * d);  // [R, N, H, dh]
  if (options_.attention == AttentionStrategy::kPaddedFlash) {
    padded_offsets_.resize(R + 1);
    for (int r = 0; r <= R; ++r) padded_offsets_[r] = r * N;
    float* qkv = qkv_.Get(padded_tokens * 3 * d);
    LinearParams lp = {};
    lp.x = hp;
    lp.weight = wqkv_.data();
    lp.m = static_cast<int>(padded_tokens);
    lp.n = 3 * d;
    lp.k = d;
    lp.y = qkv;
    RETURN_IF_ERROR(RunLinear(lp));
    AttentionParams p = SelfAttentionParams(config_, options_.cpu_threads);
    p.q = qkv;
    p.k = qkv + d;
    p.v = qkv + 2 * d;
    p.o = op;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * d;
    p.o_row_stride = d;
    p.q_offsets = p.k_offsets = padded_offsets_.data();
    p.batch = R;
    p.max_q_len = p.max_k_len = N;
    p.maybe_k_valid_len = lengths_.data();
    RETURN_IF_ERROR(JaggedAttentionCpu(p));
  } else {
    float* proj[3] = {qp_.Get(padded_tokens * d), kp_.Get(padded_tokens * d), vp_.Get(padded_tokens * d)};
    const float* w[3] = {wq_, wk_, wv_};
    for (int i = 0; i < 3; ++i) {
      LinearParams lp = {};
      lp.x = hp;
      lp.weight = w[i];
      lp.m = static_cast<int>(padded_tokens);
      lp.n = d;
      lp.k = d;
      lp.y = proj[i];
      RETURN_IF_ERROR(RunLinear(lp));
    }
    PaddedDenseAttentionParams p = {};
    p.q = proj[0];
    p.k = proj[1];
    p.v = proj[2];
    p.q_len = p.k_len = lengths_.data();
    p.batch = R;
    p.max_q_len = p.max_k_len = N;
    p.num_heads = H;
    p.head_dim = d / H;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d / H));
    p.dtype = DType::kFloat32;
    p.o = op;
    p.workspace = scores_ws_.Get(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float)));
    p.num_threads = options_.cpu_threads;
    RETURN_IF_ERROR(PaddedDenseAttentionCpu(p));
  }
  // zp = hp + op Wo^T, still padded [R, N, d]; rows past a length are never
  // attended to (masked below).
  float* zp = z_.Get(padded_tokens * d);
  {
    LinearParams lp = {};
    lp.x = op;
    lp.weight = wo_;
    lp.m = static_cast<int>(padded_tokens);
    lp.n = d;
    lp.k = d;
    lp.y = zp;
    RETURN_IF_ERROR(RunLinear(lp));
    for (size_t i = 0; i < padded_tokens * d; ++i) zp[i] += hp[i];
  }

  if (options_.attention == AttentionStrategy::kPaddedFlash) {
    AttentionParams p = {};
    p.q = e;
    p.k = zp;
    p.v = zp;
    p.o = u;
    p.dtype = DType::kFloat32;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
    p.q_offsets = batch.candidate_offsets.data();
    p.k_offsets = padded_offsets_.data();
    p.batch = R;
    p.num_heads = 1;
    p.head_dim = d;
    p.max_q_len = max_candidates;
    p.max_k_len = N;
    p.softmax_scale = target_scale;
    p.maybe_k_valid_len = lengths_.data();
    p.num_threads = options_.cpu_threads;
    return JaggedAttentionCpu(p);
  }
  // padded_dense: candidates padded too, [R, Cmax, d], then back to [C, d].
  const int Cmax = max_candidates;
  float* ep = ep_.Get(size_t(R) * Cmax * d);
  {
    JaggedToPaddedParams p = {};
    p.values = e;
    p.offsets = batch.candidate_offsets.data();
    p.batch = R;
    p.max_len = Cmax;
    p.width = d;
    p.dtype = DType::kFloat32;
    p.padded = ep;
    RETURN_IF_ERROR(JaggedToPaddedCpu(p));
  }
  float* up = up_.Get(size_t(R) * Cmax * d);
  {
    PaddedDenseAttentionParams p = {};
    p.q = ep;
    p.k = zp;
    p.v = zp;
    p.q_len = cand_lengths_.data();
    p.k_len = lengths_.data();
    p.batch = R;
    p.max_q_len = Cmax;
    p.max_k_len = N;
    p.num_heads = 1;
    p.head_dim = d;
    p.softmax_scale = target_scale;
    p.dtype = DType::kFloat32;
    p.o = up;
    p.workspace = scores_ws_.Get(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float)));
    p.num_threads = options_.cpu_threads;
    RETURN_IF_ERROR(PaddedDenseAttentionCpu(p));
  }
  PaddedToJaggedParams p = {};
  p.padded = up;
  p.offsets = batch.candidate_offsets.data();
  p.batch = R;
  p.max_len = Cmax;
  p.width = d;
  p.dtype = DType::kFloat32;
  p.values = u;
  (void)C;
  return PaddedToJaggedCpu(p);
}

}  // namespace

Status CreateCpuModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                      std::unique_ptr<Model>* out) {
  out->reset(new CpuModel(config, std::move(weights), options));
  return Status::Ok();
}

}  // namespace jagrank
