// CPU backend: float32 throughout, OpenBLAS GEMMs (kernels/linear.h) and the
// CPU kernels of kernels/. Weights are used in place (the mmap'ed file or the
// random-init buffers); only the fused [3d, d] QKV projection and the top
// MLP's first layer split by columns are copies. The steps of the forward
// pass are model/forward.h's; the attention strategies are CpuJagged,
// CpuPaddedFlash and CpuPaddedDense below.
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
#include "model/forward.h"

namespace jagrank {
namespace {

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

// One batch on its way through the steps. Pointers point into CpuModel's
// reusable buffers (or the batch).
struct CpuPass {
  const Batch* batch = nullptr;
  std::vector<float>* scores = nullptr;
  int num_requests = 0;        // R
  int num_candidates = 0;      // C
  int num_history_tokens = 0;  // T
  int max_history = 0;         // N, the longest kept history
  int max_candidates = 0;
  float* x = nullptr;       // [R, d]
  float* pooled = nullptr;  // [F, R, d]
  float* e = nullptr;       // [C, d]
  float* h = nullptr;       // [T, d]
  float* z = nullptr;       // jagged [T, d] or padded [R, N, d], as the strategy lays it out
  float* u = nullptr;       // [C, d]
  float* request_part = nullptr;    // interaction columns shared by a request's candidates [R, *]
  float* candidate_part = nullptr;  // the candidate's own columns [C, *]
};

class CpuModel;

// The CPU attention strategies (model/forward.h AttentionStep).
class CpuJagged final : public BackendAttention<CpuPass, CpuModel, /*kPadded=*/false> {
 public:
  using BackendAttention::BackendAttention;
  Status SelfAttention(CpuPass* pass) override;
  Status TargetAttention(CpuPass* pass) override;
};

// Both padded strategies pad h to [R, N, d] and keep z padded; they differ
// in the attention core (masked flash-style kernel vs materialised scores).
class CpuPadded : public BackendAttention<CpuPass, CpuModel, /*kPadded=*/true> {
 public:
  using BackendAttention::BackendAttention;
  Status SelfAttention(CpuPass* pass) override;

 protected:
  // MHA over the padded hp [R, N, d] into op [R, N, d].
  virtual Status SelfAttentionCore(CpuPass* pass, const float* hp, float* op) = 0;
};

class CpuPaddedFlash final : public CpuPadded {
 public:
  using CpuPadded::CpuPadded;
  Status TargetAttention(CpuPass* pass) override;

 private:
  Status SelfAttentionCore(CpuPass* pass, const float* hp, float* op) override;
};

class CpuPaddedDense final : public CpuPadded {
 public:
  using CpuPadded::CpuPadded;
  Status TargetAttention(CpuPass* pass) override;

 private:
  Status SelfAttentionCore(CpuPass* pass, const float* hp, float* op) override;
};

class CpuModel final : public Model, public ForwardSteps<CpuPass> {
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
    // Interaction): W1 = [W_req | W_cand] up to a column permutation.
    std::vector<int> request_columns, candidate_columns;
    DotInteractionSplitColumns(NumSparse(), d, &request_columns, &candidate_columns);
    const MlpLayer& first = top_.front();
    top1_request_w_ = GatherColumns(static_cast<const float*>(first.weight), first.out, first.in, request_columns, request_columns.size());
    top1_candidate_w_ =
        GatherColumns(static_cast<const float*>(first.weight), first.out, first.in, candidate_columns, candidate_columns.size());
    top_rest_.assign(top_.begin() + 1, top_.end());
    weights_bytes_ = weights_.total_bytes() +
                     static_cast<int64_t>((wqkv_.size() + top1_request_w_.size() + top1_candidate_w_.size()) *
                                          sizeof(float));
    switch (options_.attention) {
      case AttentionStrategy::kJagged: attention_ = std::make_unique<CpuJagged>(this); break;
      case AttentionStrategy::kPaddedFlash: attention_ = std::make_unique<CpuPaddedFlash>(this); break;
      case AttentionStrategy::kPaddedDense: attention_ = std::make_unique<CpuPaddedDense>(this); break;
    }
  }

  Status Forward(const Batch& batch, std::vector<float>* scores) override;
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cpu"; }
  AttentionStrategy attention() const override { return options_.attention; }
  int64_t AttentionCost(int64_t requests, int64_t sum_of_squares, int64_t longest) const override {
    return attention_->BatchCost(requests, sum_of_squares, longest);
  }
  std::string version() const override { return weights_.version(); }
  ModelMemory Memory() const override {
    ModelMemory m;
    m.weights_bytes = weights_bytes_;
    m.workspace_peak_bytes = workspace_peak_bytes_.load();
    m.padding_saved_bytes = padding_saved_bytes_.load();
    return m;
  }

  // ForwardSteps.
  Status BottomMlp(CpuPass* pass) override;
  Status PoolSparseFeatures(CpuPass* pass) override;
  Status EmbedCandidates(CpuPass* pass) override;
  Status EmbedHistory(CpuPass* pass) override;
  Status NoHistory(CpuPass* pass) override;
  Status Interaction(CpuPass* pass) override;
  Status TopMlp(CpuPass* pass) override;

 private:
  friend class CpuJagged;
  friend class CpuPadded;
  friend class CpuPaddedFlash;
  friend class CpuPaddedDense;

  const float* T(const std::string& name) const { return weights_.Find(name)->data; }
  int NumSparse() const { return static_cast<int>(config_.sparse_features.size()); }
  Status Mlp(const std::vector<MlpLayer>& layers, bool relu_last, const float* x, int m, float** out);
  // LinearCpu on the backend's threads (options_.cpu_threads).
  Status RunLinear(LinearParams p) const;
  // y [rows, d] = x [rows, d] Wo^T + residual [rows, d].
  Status ProjectOutAndAdd(const float* x, const float* residual, int64_t rows, float* y);
  AttentionParams SelfAttentionParams() const;
  AttentionParams TargetAttentionParams(const CpuPass& pass) const;

  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions options_;
  std::unique_ptr<AttentionStep<CpuPass>> attention_;
  std::vector<MlpLayer> bottom_, top_;
  std::vector<float> top1_request_w_;    // [top_mlp[0], d + (F+1)F/2]: W1's request columns
  std::vector<float> top1_candidate_w_;  // [top_mlp[0], 2(F+1) + 1]: W1's candidate columns
  std::vector<MlpLayer> top_rest_;          // top_ after the first layer
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
Status CpuModel::Mlp(const std::vector<MlpLayer>& layers, bool relu_last, const float* x, int m, float** out) {
  const float* in = x;
  float* y = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    y = (i % 2 == 0 ? mlp_a_ : mlp_b_).Get(size_t(m) * layers[i].out);
    RETURN_IF_ERROR(RunLinear(MlpLayerParams(layers[i], relu_last || i + 1 < layers.size(), in, m, y)));
    in = y;
  }
  *out = y;
  return Status::Ok();
}

Status CpuModel::ProjectOutAndAdd(const float* x, const float* residual, int64_t rows, float* y) {
  const int d = config_.embedding_dim;
  LinearParams p = {};
  p.x = x;
  p.weight = wo_;
  p.m = static_cast<int>(rows);
  p.n = d;
  p.k = d;
  p.y = y;
  RETURN_IF_ERROR(RunLinear(p));
  for (size_t i = 0; i < size_t(rows) * d; ++i) y[i] += residual[i];
  return Status::Ok();
}

AttentionParams CpuModel::SelfAttentionParams() const {
  AttentionParams p = {};
  p.dtype = DType::kFloat32;
  p.num_heads = config_.attention_heads;
  p.head_dim = config_.embedding_dim / config_.attention_heads;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  p.num_threads = options_.cpu_threads;
  return p;
}

// Target attention, one head of width d: queries e [C, d] by candidate
// offsets; keys = values = z, jagged or padded as the caller sets.
AttentionParams CpuModel::TargetAttentionParams(const CpuPass& pass) const {
  const int d = config_.embedding_dim;
  AttentionParams p = {};
  p.q = pass.e;
  p.k = pass.z;
  p.v = pass.z;
  p.o = pass.u;
  p.dtype = DType::kFloat32;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
  p.q_offsets = pass.batch->candidate_offsets.data();
  p.batch = pass.num_requests;
  p.num_heads = 1;
  p.head_dim = d;
  p.max_q_len = pass.max_candidates;
  p.max_k_len = pass.max_history;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.num_threads = options_.cpu_threads;
  return p;
}

Status CpuModel::Forward(const Batch& batch, std::vector<float>* scores) {
  const int F = NumSparse();
  RETURN_IF_ERROR(ValidateBatchShape(batch, config_.num_dense_features, F));
  CpuPass pass;
  pass.batch = &batch;
  pass.scores = scores;
  pass.num_requests = batch.num_requests;
  pass.num_candidates = static_cast<int>(batch.num_candidates());
  pass.num_history_tokens = static_cast<int>(batch.num_history_tokens());
  scores->assign(pass.num_candidates, 0.0f);
  if (pass.num_requests == 0 || pass.num_candidates == 0) return Status::Ok();
  RETURN_IF_ERROR(BatchLengths(batch, config_.max_history_len, &lengths_, &cand_lengths_, &pass.max_history,
                               &pass.max_candidates));
  RETURN_IF_ERROR(RunForward<CpuPass>(this, attention_.get(), &pass));

  int64_t workspace = 0;
  for (const Buffer* b : {&mlp_a_, &mlp_b_, &x_, &pooled_, &h_, &e_, &qkv_, &attn_, &z_, &u_, &request_part_,
                          &candidate_part_, &request_top1_, &top1_, &hp_, &qp_, &kp_, &vp_, &op_, &scores_ws_, &ep_,
                          &up_}) {
    workspace += static_cast<int64_t>(b->bytes());
  }
  if (workspace > workspace_peak_bytes_.load()) workspace_peak_bytes_.store(workspace);
  return Status::Ok();
}

// 1. Bottom MLP, once per request: x [R, d].
Status CpuModel::BottomMlp(CpuPass* pass) {
  const int R = pass->num_requests;
  const int d = config_.embedding_dim;
  float* mlp_out = nullptr;
  RETURN_IF_ERROR(Mlp(bottom_, /*relu_last=*/true, pass->batch->dense.data(), R, &mlp_out));
  pass->x = x_.Get(size_t(R) * d);
  std::memcpy(pass->x, mlp_out, sizeof(float) * R * d);
  return Status::Ok();
}

// 2. Pooled sparse features, once per request: [F, R, d].
Status CpuModel::PoolSparseFeatures(CpuPass* pass) {
  static const int64_t kNoIds = 0;
  const int F = NumSparse();
  const int R = pass->num_requests;
  const int d = config_.embedding_dim;
  pass->pooled = pooled_.Get(size_t(F) * R * d);
  for (int f = 0; f < F; ++f) {
    EmbeddingBagParams p = {};
    p.ids = pass->batch->sparse_ids[f].empty() ? &kNoIds : pass->batch->sparse_ids[f].data();
    p.offsets = pass->batch->sparse_offsets[f].data();
    p.batch = R;
    p.table = sparse_tables_[f];
    p.table_dtype = DType::kFloat32;
    p.num_rows = config_.sparse_features[f].num_rows;
    p.dim = d;
    p.out = pass->pooled + size_t(f) * R * d;
    RETURN_IF_ERROR(EmbeddingBagCpu(p));
  }
  return Status::Ok();
}

// 5. Candidate embeddings e [C, d].
Status CpuModel::EmbedCandidates(CpuPass* pass) {
  const int C = pass->num_candidates;
  const int d = config_.embedding_dim;
  pass->e = e_.Get(size_t(C) * d);
  GatherRowsParams p = {};
  p.ids = pass->batch->candidate_ids.data();
  p.count = C;
  p.table = item_table_;
  p.table_dtype = DType::kFloat32;
  p.num_rows = config_.item_rows;
  p.dim = d;
  p.out = pass->e;
  p.num_threads = options_.cpu_threads;
  return GatherRowsCpu(p);
}

// 3. History embeddings h [T, d].
Status CpuModel::EmbedHistory(CpuPass* pass) {
  const int d = config_.embedding_dim;
  pass->h = h_.Get(size_t(pass->num_history_tokens) * d);
  HistoryGatherParams p = {};
  p.ids = pass->batch->history_ids.data();
  p.offsets = pass->batch->history_offsets.data();
  p.batch = pass->num_requests;
  p.item_table = item_table_;
  p.table_dtype = DType::kFloat32;
  p.item_rows = config_.item_rows;
  p.position_table = position_table_;
  p.max_len = config_.max_history_len;
  p.dim = d;
  p.out = pass->h;
  p.num_threads = options_.cpu_threads;
  return HistoryGatherCpu(p);
}

Status CpuModel::NoHistory(CpuPass* pass) {
  const size_t count = size_t(pass->num_candidates) * config_.embedding_dim;
  pass->u = u_.Get(count);
  std::fill(pass->u, pass->u + count, 0.0f);
  return Status::Ok();
}

// 7. The interaction, split by request and candidate: r_req (x and the pairs
// among x and the pooled features) is the same for all of a request's
// candidates; r_cand (the pairs that involve u_c or e_c) is per candidate.
Status CpuModel::Interaction(CpuPass* pass) {
  const MlpLayer& first = top_.front();
  const int request_width = static_cast<int>(top1_request_w_.size() / first.out);
  const int candidate_width = static_cast<int>(top1_candidate_w_.size() / first.out);
  pass->request_part = request_part_.Get(size_t(pass->num_requests) * request_width);
  pass->candidate_part = candidate_part_.Get(size_t(pass->num_candidates) * candidate_width);
  DotInteractionParams p = {};
  p.x = pass->x;
  p.pooled = pass->pooled;
  p.num_sparse = NumSparse();
  p.u = pass->u;
  p.e = pass->e;
  p.candidate_offsets = pass->batch->candidate_offsets.data();
  p.num_requests = pass->num_requests;
  p.num_candidates = pass->num_candidates;
  p.dim = config_.embedding_dim;
  p.num_threads = options_.cpu_threads;
  return DotInteractionSplitCpu(p, pass->request_part, pass->candidate_part);
}

// 8. The top MLP's input row is [x, t]. Its first layer is
// W1 [x, t] + b1 = W_req r_req + W_cand r_cand + b1, so a = W_req r_req + b1
// is computed once per request (85 of 100 columns for the default model),
// and per candidate only a + W_cand r_cand (15 columns), then ReLU: the same
// math as the full layer, summed in another order. Then the rest, sigmoid.
Status CpuModel::TopMlp(CpuPass* pass) {
  const int R = pass->num_requests;
  const int C = pass->num_candidates;
  const MlpLayer& first = top_.front();
  const int request_width = static_cast<int>(top1_request_w_.size() / first.out);
  const int candidate_width = static_cast<int>(top1_candidate_w_.size() / first.out);
  float* request_top1 = request_top1_.Get(size_t(R) * first.out);  // a [R, out]
  {
    LinearParams p = {};
    p.x = pass->request_part;
    p.weight = top1_request_w_.data();
    p.maybe_bias = first.bias;
    p.m = R;
    p.n = first.out;
    p.k = request_width;
    p.y = request_top1;
    RETURN_IF_ERROR(RunLinear(p));
  }
  float* top1 = top1_.Get(size_t(C) * first.out);  // each candidate's row starts as its request's a
  const std::vector<int32_t>& offsets = pass->batch->candidate_offsets;
  constexpr double kMinBytesPerThread = 1 << 20;
  ParallelFor(R, ThreadsFor(4.0 * C * first.out, kMinBytesPerThread, options_.cpu_threads), [&](int64_t r) {
    for (int32_t c = offsets[r]; c < offsets[r + 1]; ++c) {
      std::memcpy(top1 + size_t(c) * first.out, request_top1 + size_t(r) * first.out, sizeof(float) * first.out);
    }
  });
  {
    LinearParams p = {};
    p.x = pass->candidate_part;
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
  std::vector<float>& scores = *pass->scores;
  for (int c = 0; c < C; ++c) scores[c] = 1.0f / (1.0f + std::exp(-logits[c]));
  return Status::Ok();
}

// ---- Jagged: z = h + MHA(h) Wo^T over the jagged histories, no padding.

Status CpuJagged::SelfAttention(CpuPass* pass) {
  CpuModel& m = *m_;
  const int T = pass->num_history_tokens;
  const int d = m.config_.embedding_dim;
  float* qkv = m.qkv_.Get(size_t(T) * 3 * d);  // [T, 3d]
  {
    LinearParams p = {};
    p.x = pass->h;
    p.weight = m.wqkv_.data();
    p.m = T;
    p.n = 3 * d;
    p.k = d;
    p.y = qkv;
    RETURN_IF_ERROR(m.RunLinear(p));
  }
  float* attn = m.attn_.Get(size_t(T) * d);  // [T, H, dh]
  {
    AttentionParams p = m.SelfAttentionParams();
    p.q = qkv;
    p.k = qkv + d;
    p.v = qkv + 2 * d;
    p.o = attn;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * d;
    p.o_row_stride = d;
    p.q_offsets = p.k_offsets = pass->batch->history_offsets.data();
    p.batch = pass->num_requests;
    p.max_q_len = p.max_k_len = pass->max_history;
    RETURN_IF_ERROR(JaggedAttentionCpu(p));
  }
  pass->z = m.z_.Get(size_t(T) * d);
  RETURN_IF_ERROR(m.ProjectOutAndAdd(attn, pass->h, T, pass->z));
  m.padding_saved_bytes_ += PaddingSavedBytes(*pass->batch, d);
  return Status::Ok();
}

Status CpuJagged::TargetAttention(CpuPass* pass) {
  CpuModel& m = *m_;
  pass->u = m.u_.Get(size_t(pass->num_candidates) * m.config_.embedding_dim);
  AttentionParams p = m.TargetAttentionParams(*pass);
  p.o = pass->u;
  p.k_offsets = pass->batch->history_offsets.data();
  return JaggedAttentionCpu(p);
}

// ---- Padded: hp [R, N, d] (zeros past each length), zp = hp + MHA(hp) Wo^T
// still padded; rows past a length are never attended to (masked).

Status CpuPadded::SelfAttention(CpuPass* pass) {
  CpuModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int d = m.config_.embedding_dim;
  const size_t padded_tokens = size_t(R) * N;
  float* hp = m.hp_.Get(padded_tokens * d);
  {
    JaggedToPaddedParams p = {};
    p.values = pass->h;
    p.offsets = pass->batch->history_offsets.data();
    p.batch = R;
    p.max_len = N;
    p.width = d;
    p.dtype = DType::kFloat32;
    p.padded = hp;
    RETURN_IF_ERROR(JaggedToPaddedCpu(p));
  }
  float* op = m.op_.Get(padded_tokens * d);  // [R, N, H, dh]
  RETURN_IF_ERROR(SelfAttentionCore(pass, hp, op));
  pass->z = m.z_.Get(padded_tokens * d);
  return m.ProjectOutAndAdd(op, hp, static_cast<int64_t>(padded_tokens), pass->z);
}

Status CpuPaddedFlash::SelfAttentionCore(CpuPass* pass, const float* hp, float* op) {
  CpuModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int d = m.config_.embedding_dim;
  const size_t padded_tokens = size_t(R) * N;
  m.padded_offsets_.resize(R + 1);
  for (int r = 0; r <= R; ++r) m.padded_offsets_[r] = r * N;
  float* qkv = m.qkv_.Get(padded_tokens * 3 * d);
  LinearParams lp = {};
  lp.x = hp;
  lp.weight = m.wqkv_.data();
  lp.m = static_cast<int>(padded_tokens);
  lp.n = 3 * d;
  lp.k = d;
  lp.y = qkv;
  RETURN_IF_ERROR(m.RunLinear(lp));
  AttentionParams p = m.SelfAttentionParams();
  p.q = qkv;
  p.k = qkv + d;
  p.v = qkv + 2 * d;
  p.o = op;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * d;
  p.o_row_stride = d;
  p.q_offsets = p.k_offsets = m.padded_offsets_.data();
  p.batch = R;
  p.max_q_len = p.max_k_len = N;
  p.maybe_k_valid_len = m.lengths_.data();
  return JaggedAttentionCpu(p);
}

Status CpuPaddedFlash::TargetAttention(CpuPass* pass) {
  CpuModel& m = *m_;
  pass->u = m.u_.Get(size_t(pass->num_candidates) * m.config_.embedding_dim);
  AttentionParams p = m.TargetAttentionParams(*pass);
  p.o = pass->u;
  p.k_offsets = m.padded_offsets_.data();
  p.maybe_k_valid_len = m.lengths_.data();
  return JaggedAttentionCpu(p);
}

Status CpuPaddedDense::SelfAttentionCore(CpuPass* pass, const float* hp, float* op) {
  CpuModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int d = m.config_.embedding_dim;
  const int H = m.config_.attention_heads;
  const size_t padded_tokens = size_t(R) * N;
  float* proj[3] = {m.qp_.Get(padded_tokens * d), m.kp_.Get(padded_tokens * d), m.vp_.Get(padded_tokens * d)};
  const float* w[3] = {m.wq_, m.wk_, m.wv_};
  for (int i = 0; i < 3; ++i) {
    LinearParams lp = {};
    lp.x = hp;
    lp.weight = w[i];
    lp.m = static_cast<int>(padded_tokens);
    lp.n = d;
    lp.k = d;
    lp.y = proj[i];
    RETURN_IF_ERROR(m.RunLinear(lp));
  }
  PaddedDenseAttentionParams p = {};
  p.q = proj[0];
  p.k = proj[1];
  p.v = proj[2];
  p.q_len = p.k_len = m.lengths_.data();
  p.batch = R;
  p.max_q_len = p.max_k_len = N;
  p.num_heads = H;
  p.head_dim = d / H;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d / H));
  p.dtype = DType::kFloat32;
  p.o = op;
  p.workspace = m.scores_ws_.Get(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float)));
  p.num_threads = m.options_.cpu_threads;
  return PaddedDenseAttentionCpu(p);
}

// Candidates padded too, [R, Cmax, d], the scores materialised, then back
// to the jagged u [C, d].
Status CpuPaddedDense::TargetAttention(CpuPass* pass) {
  CpuModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int Cmax = pass->max_candidates;
  const int d = m.config_.embedding_dim;
  float* ep = m.ep_.Get(size_t(R) * Cmax * d);
  {
    JaggedToPaddedParams p = {};
    p.values = pass->e;
    p.offsets = pass->batch->candidate_offsets.data();
    p.batch = R;
    p.max_len = Cmax;
    p.width = d;
    p.dtype = DType::kFloat32;
    p.padded = ep;
    RETURN_IF_ERROR(JaggedToPaddedCpu(p));
  }
  float* up = m.up_.Get(size_t(R) * Cmax * d);
  {
    PaddedDenseAttentionParams p = {};
    p.q = ep;
    p.k = pass->z;
    p.v = pass->z;
    p.q_len = m.cand_lengths_.data();
    p.k_len = m.lengths_.data();
    p.batch = R;
    p.max_q_len = Cmax;
    p.max_k_len = N;
    p.num_heads = 1;
    p.head_dim = d;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
    p.dtype = DType::kFloat32;
    p.o = up;
    p.workspace = m.scores_ws_.Get(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float)));
    p.num_threads = m.options_.cpu_threads;
    RETURN_IF_ERROR(PaddedDenseAttentionCpu(p));
  }
  pass->u = m.u_.Get(size_t(pass->num_candidates) * d);
  PaddedToJaggedParams p = {};
  p.padded = up;
  p.offsets = pass->batch->candidate_offsets.data();
  p.batch = R;
  p.max_len = Cmax;
  p.width = d;
  p.dtype = DType::kFloat32;
  p.values = pass->u;
  return PaddedToJaggedCpu(p);
}

}  // namespace

Status CreateCpuModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                      std::unique_ptr<Model>* out) {
  out->reset(new CpuModel(config, std::move(weights), options));
  return Status::Ok();
}

}  // namespace jagrank
