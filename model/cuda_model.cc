// CUDA backend. Weights are uploaded once at Create. With options.cuda_bf16
// (precision bf16) the embedding and position tables, the history chain
// (h, the QKV and output projections, z) and the top MLP past the
// interaction are bf16 with float32 accumulation; the bottom MLP and the
// whole first top layer of small models run TF32 GEMMs; the interaction,
// the candidate embeddings and u are float32. Without it, float32
// throughout. Per batch, in two phases (Stage on the caller's staging
// thread, Run on its compute thread, see model.h):
//   Stage: the host batch is packed into the slot's pinned buffer and copied
//     to the slot's device buffer with one async H2D copy on the copy stream,
//     between two timed events.
//   Launch (Run = Launch + Wait): the compute stream waits for that copy's
//     event, then runs the steps of model/forward.h: every intermediate
//     comes from a stream-ordered memory pool that keeps its memory (no
//     cudaMalloc per batch) and goes back to it once its last reader is
//     queued; GEMMs through cuBLASLt with bias, ReLU and residual adds in
//     the epilogue. One D2H copy of the scores into the slot's pinned
//     buffer. Wait: one event wait per batch.
// The attention strategies are CudaJagged, CudaPaddedFlash and
// CudaPaddedDense below. Stage(a) and Run(b) share only the device, the
// weights (read-only) and the copy stream handle: Stage touches slots_[a] and
// copy_stream_, Run touches slots_[b] and the compute-side members (stream_,
// pool_, live_). Launch(b) queues the pass and the scores' D2H copy into
// slots_[b].scores on the compute stream and returns; Wait(b) waits for
// slots_[b].d2h_done. The pass's workspace goes back to the pool at the end
// of Launch (stream-ordered frees: the next pass on the stream reuses it
// only after this one), so two launched batches take no more memory than one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/cuda_check.h"
#include "kernels/cuda_ops.h"
#include "model/backends.h"
#include "model/cuda_resources.h"
#include "model/forward.h"

namespace jagrank {
namespace {

bool FlashSupportsHeadDim(int head_dim) {
  for (int d : kFlashSupportedHeadDims) {
    if (d == head_dim) return true;
  }
  return false;
}

// Offsets of the packed host->device batch, 256-byte aligned sections.
struct StagingLayout {
  size_t total = 0;
  size_t Place(size_t bytes) {
    const size_t at = total;
    total += (bytes + 255) / 256 * 256 + 256;  // never empty: every section has a valid pointer
    return at;
  }
};

// One staging slot: a batch packed into pinned host memory and its copy on
// the device. Both buffers only grow and are reused batch after batch; the
// device one is a plain cudaMalloc, not pool workspace, since it lives from
// Stage to the end of Run across calls.
struct StageSlot {
  PinnedBuffer host;
  DeviceBuffer dev;
  CudaEvent copy_start;  // recorded on the copy stream around the H2D copy
  CudaEvent copy_done;
  bool staged = false;    // a batch is staged and not yet launched
  bool launched = false;  // launched and not yet waited for
  // The launched batch's scores: copied here by the compute stream (D2H,
  // between the two events) and handed out by Wait.
  PinnedBuffer scores;
  CudaEvent d2h_start, d2h_done;

  // The staged batch: sizes, lengths and where each array sits in host/dev.
  int num_requests = 0, num_candidates = 0, num_history_tokens = 0;
  int max_history = 0, max_candidates = 0;
  int64_t padding_saved_bytes = 0;  // jagged strategy with history only
  std::vector<int32_t> lengths, cand_lengths, padded_offsets;
  size_t at_dense = 0, at_hist_ids = 0, at_hist_offsets = 0, at_cand_ids = 0, at_cand_offsets = 0;
  size_t at_lengths = 0, at_cand_lengths = 0, at_padded_offsets = 0;
  std::vector<size_t> at_sparse_ids, at_sparse_offsets;
};

// One batch on its way through the steps: the staged inputs on the device
// and the intermediates (pool memory, freed after the batch).
struct CudaPass {
  const StageSlot* slot = nullptr;
  int num_requests = 0;        // R
  int num_candidates = 0;      // C
  int num_history_tokens = 0;  // T
  int max_history = 0;         // N
  int max_candidates = 0;
  const char* dev = nullptr;   // the slot's device buffer
  const float* dense = nullptr;
  const int64_t* hist_ids = nullptr;
  const int32_t* hist_offsets = nullptr;
  const int64_t* cand_ids = nullptr;
  const int32_t* cand_offsets = nullptr;
  const int32_t* lengths = nullptr;         // [R] kept history lengths
  const int32_t* cand_lengths = nullptr;    // [R]
  const int32_t* padded_offsets = nullptr;  // [R+1] = r * N
  float* x = nullptr;       // [R, d]
  float* pooled = nullptr;  // [F, R, d]
  void* e = nullptr;        // [C, d] of the model's vector dtype
  void* h = nullptr;        // [T, d] of the attention dtype
  const void* z = nullptr;  // jagged [T, d] or padded [R, N, d], of the attention dtype
  int64_t z_rows = 0;
  void* u = nullptr;        // [C, d] of the model's vector dtype
  float* inter = nullptr;           // [C, d + n(n-1)/2]: the whole rows (small n)
  void* request_part = nullptr;     // [R, request stride]: x and the request's own pairs (split form)
  void* candidate_part = nullptr;   // [C, candidate stride]: the pairs with u_c or e_c (split form)
  float* logits = nullptr;  // [C] -> scores after the sigmoid
};

class CudaModel;

// The split first top-MLP layer's input widths are padded to a multiple of
// this (zero columns): 16-byte aligned rows for the GEMMs, in float32 and bf16.
constexpr int kSplitWidthAlign = 8;

// Jagged and padded_flash run the same flash kernel: over the jagged [T, d]
// histories, or over histories padded to [R, N, d] with each request's valid
// key count as a mask.
class CudaFlash : public AttentionStep<CudaPass> {
 public:
  CudaFlash(CudaModel* model, bool padded) : m_(model), padded_(padded) {}
  int64_t BatchCost(int64_t r, int64_t sum_sq, int64_t longest) const override {
    return padded_ ? PaddedAttentionCost(r, sum_sq, longest) : JaggedAttentionCost(r, sum_sq, longest);
  }
  Status SelfAttention(CudaPass* pass) override;
  Status TargetAttention(CudaPass* pass) override;

 private:
  CudaModel* const m_;
  const bool padded_;
};

class CudaJagged final : public CudaFlash {
 public:
  explicit CudaJagged(CudaModel* model) : CudaFlash(model, /*padded=*/false) {}
};

class CudaPaddedFlash final : public CudaFlash {
 public:
  explicit CudaPaddedFlash(CudaModel* model) : CudaFlash(model, /*padded=*/true) {}
};

// The dense baseline: histories and candidates padded, the score matrix
// materialised, masked softmax, batched GEMMs.
class CudaPaddedDense final : public BackendAttention<CudaPass, CudaModel, /*kPadded=*/true> {
 public:
  using BackendAttention::BackendAttention;
  Status SelfAttention(CudaPass* pass) override;
  Status TargetAttention(CudaPass* pass) override;
};

class CudaModel final : public Model, public ForwardSteps<CudaPass> {
 public:
  CudaModel(const ModelConfig& config, const ModelOptions& options, int device, std::string version)
      : config_(config), options_(options), device_(device), version_(std::move(version)) {
    attn_dtype_ = options.cuda_bf16 ? DType::kBFloat16 : DType::kFloat32;
    mlp_dtype_ = attn_dtype_;
    tf32_ = options.cuda_bf16;
    table_dtype_ = attn_dtype_;
    switch (options_.attention) {
      case AttentionStrategy::kJagged: attention_ = std::make_unique<CudaJagged>(this); break;
      case AttentionStrategy::kPaddedFlash: attention_ = std::make_unique<CudaPaddedFlash>(this); break;
      case AttentionStrategy::kPaddedDense: attention_ = std::make_unique<CudaPaddedDense>(this); break;
    }
  }
  ~CudaModel() override {
    // Members free themselves (streams wait for their work first); the pool
    // allocations of a batch that failed mid-way go back here.
    cudaSetDevice(device_);
    FreeBatchWorkspace();
  }

  Status Init(const ModelWeights& weights);
  Status Forward(const Batch& batch, std::vector<float>* scores) override;
  Status Stage(const Batch& batch, int slot) override;
  Status Run(int slot, std::vector<float>* scores, ForwardTimings* timings) override;
  Status Launch(int slot) override;
  Status Wait(int slot, std::vector<float>* scores, ForwardTimings* timings) override;
  bool AsyncLaunch() const override { return true; }
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cuda:" + std::to_string(device_); }
  AttentionStrategy attention() const override { return options_.attention; }
  int64_t AttentionCost(int64_t requests, int64_t sum_of_squares, int64_t longest) const override {
    return attention_->BatchCost(requests, sum_of_squares, longest);
  }
  std::string version() const override { return version_; }
  ModelMemory Memory() const override;

  // ForwardSteps.
  Status BottomMlp(CudaPass* pass) override;
  Status PoolSparseFeatures(CudaPass* pass) override;
  Status EmbedCandidates(CudaPass* pass) override;
  Status EmbedHistory(CudaPass* pass) override;
  Status NoHistory(CudaPass* pass) override;
  Status Interaction(CudaPass* pass) override;
  Status TopMlp(CudaPass* pass) override;
  // x, the pooled features, u and e: read by the interaction only.
  void ReleaseInteractionInputs(CudaPass* pass);

 private:
  friend class CudaFlash;
  friend class CudaPaddedDense;

  Status Upload(const void* host, size_t bytes, void** out);
  Status UploadF32(const WeightTensor& t, const float** out);
  Status UploadTable(const WeightTensor& t, const void** out);
  // float32 [count] on the host -> the device in `dtype`.
  Status UploadAs(const float* data, size_t count, DType dtype, const void** out);
  template <typename T>
  Status Alloc(size_t count, T** out) {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(count * sizeof(T), 256);
    RETURN_IF_CUDA_ERROR(cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream_.get()));
    live_.emplace_back(p, bytes);
    live_bytes_ += static_cast<int64_t>(bytes);
    pass_peak_bytes_ = std::max(pass_peak_bytes_, live_bytes_);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }
  // Gives an intermediate of this pass back to the pool once the kernels
  // that read it are queued. The free is stream-ordered: a later allocation
  // of the pass reuses the memory only after those kernels ran, so the
  // pass's peak is that of its widest step, not the sum of its steps. A
  // pointer that is not one of this pass's allocations (an alias such as z
  // over h, or a staged input) is left alone.
  void Release(const void* p) {
    auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& a) { return a.first == p; });
    if (it == live_.end()) return;
    cudaFreeAsync(it->first, stream_.get());
    live_bytes_ -= static_cast<int64_t>(it->second);
    live_.erase(it);
  }
  Status AllocAttn(int64_t count, void** out) {
    char* p = nullptr;
    RETURN_IF_ERROR(Alloc(static_cast<size_t>(count) * DTypeSize(attn_dtype_), &p));
    *out = p;
    return Status::Ok();
  }
  // float32 [count] -> attention dtype (aliases `src` when that is float32).
  Status ToAttn(const float* src, int64_t count, const void** out);
  // float32 [count] -> dtype (aliases `src` when that is float32).
  Status ToDType(const float* src, int64_t count, DType dtype, const void** out);
  // attention dtype [count] -> vec_dtype_ (aliases `src` when they are the same).
  Status FromAttn(const void* src, int64_t count, void** out);
  void FreeBatchWorkspace();
  Status PackAndCopy(const Batch& batch, StageSlot* slot);
  // Queues the pass over `slot` and the scores' D2H copy on stream_.
  Status LaunchStaged(StageSlot* slot);
  // layers over x [m, in] of `dtype` (weights of that dtype); every output
  // in `dtype` but the last layer's, in last_dtype.
  // Releases x after the first layer when release_x (x is then an
  // intermediate of the pass); each layer's output after the next layer.
  Status Mlp(const std::vector<MlpLayer>& layers, bool relu_last, const void* x, int m, DType dtype,
             DType last_dtype, void** out, bool release_x = false);
  // The split first top-MLP layer: *out_top1 [C, out] of out_dtype = (ReLU
  // of) W_req r_req + b1 repeated over each request's candidates, plus
  // W_cand r_cand.
  Status SplitTop1(CudaPass* pass, bool relu, DType out_dtype, void** out_top1);
  // LinearCuda on stream_ with the model's cuBLASLt workspace.
  Status RunLinear(LinearParams p);
  // Pads h [T, d] to [R, N, d] (zeros past each length), attention dtype.
  Status PadHistory(const CudaPass& pass, void** out);
  // y [m, n] (+)= x [m, k] W^T, every operand of the attention dtype.
  Status AttnLinear(const void* x, const void* w, int m, int n, int k, void* y, bool accumulate);
  // Target attention's operands in the attention dtype: e [C, d], z as laid
  // out by the strategy, and room for u [C, d].
  Status TargetOperands(const CudaPass& pass, const void** e_attn, const void** z_attn, void** u_attn);
  // After the target attention: z (and h under it), and e's cast copy.
  // Nulls pass->z and pass->h: a released address may come back from the
  // pool for a later allocation of the pass.
  void ReleaseTargetOperands(CudaPass* pass, const void* e_attn);
  // z [rows, d] = tokens + o Wo^T, in place over `tokens`; attention dtype.
  Status ProjectOutAndAdd(const void* o_attn, void* tokens, int64_t rows, CudaPass* pass);

  ModelConfig config_;
  ModelOptions options_;
  int device_;
  std::string version_;
  std::unique_ptr<AttentionStep<CudaPass>> attention_;
  DType attn_dtype_, table_dtype_;
  // The top MLP's weights and activations past the interaction (bf16 GEMM
  // operands, float32 accumulation and bias, with cuda_bf16); the logits
  // are float32.
  DType mlp_dtype_;
  // u and e, the candidate vectors of the interaction: float32, or bf16 with
  // the split first top layer (see Init).
  DType vec_dtype_ = DType::kFloat32;
  bool tf32_ = false;  // GEMMs in TF32 (with cuda_bf16)
  // Declared before everything that uses them, so destroyed after: the
  // streams' destructors wait for their work before the memory goes.
  std::vector<DeviceBuffer> weight_allocs_;
  DeviceBuffer linear_workspace_;  // cuBLASLt's, used on stream_ only
  CudaMemPool pool_;
  StageSlot slots_[kStageSlots];
  CudaStream stream_;       // compute stream (Run)
  CudaStream copy_stream_;  // H2D copies of staged batches (Stage)
  int64_t weights_bytes_ = 0;
  std::vector<MlpLayer> bottom_;
  // The top MLP: its first layer whole (top1_, small n: see
  // DotInteractionCudaHasRegisterKernel) or split by the interaction's
  // columns (W1 [x, t] = W_req r_req + W_cand r_cand, see TopMlp), each
  // part's width padded to a multiple of kSplitWidthAlign (zero columns);
  // then the rest of the layers.
  bool split_top1_ = false;
  MlpLayer top1_ = {}, top1_request_ = {}, top1_candidate_ = {};
  std::vector<MlpLayer> top_rest_;
  std::vector<const void*> sparse_tables_;
  const void* item_table_ = nullptr;
  const void* position_table_ = nullptr;
  const void* wqkv_ = nullptr;  // [3d, d] = Wq; Wk; Wv, of the attention dtype
  const void* wo_ = nullptr;    // [d, d], of the attention dtype
  std::vector<std::pair<void*, size_t>> live_;  // this batch's pool allocations not yet released, with their bytes
  int64_t live_bytes_ = 0;
  int64_t pass_peak_bytes_ = 0;  // the most live_bytes_ reached in this batch
  std::atomic<int64_t> workspace_peak_bytes_{0};
  std::atomic<int64_t> padding_saved_bytes_{0};
};

Status CudaModel::Upload(const void* host, size_t bytes, void** out) {
  DeviceBuffer buffer;
  RETURN_IF_ERROR(buffer.Reserve(std::max<size_t>(bytes, 256)));
  RETURN_IF_CUDA_ERROR(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice));
  weights_bytes_ += static_cast<int64_t>(bytes);
  *out = buffer.data();
  weight_allocs_.push_back(std::move(buffer));
  return Status::Ok();
}

Status CudaModel::UploadF32(const WeightTensor& t, const float** out) {
  void* p = nullptr;
  RETURN_IF_ERROR(Upload(t.data, static_cast<size_t>(t.num_elements()) * sizeof(float), &p));
  *out = static_cast<const float*>(p);
  return Status::Ok();
}

Status CudaModel::UploadAs(const float* data, size_t count, DType dtype, const void** out) {
  void* p = nullptr;
  if (dtype == DType::kFloat32) {
    RETURN_IF_ERROR(Upload(data, count * sizeof(float), &p));
  } else {
    std::vector<uint16_t> bf16(count);
    for (size_t i = 0; i < count; ++i) bf16[i] = FloatToBFloat16(data[i]);
    RETURN_IF_ERROR(Upload(bf16.data(), count * sizeof(uint16_t), &p));
  }
  *out = p;
  return Status::Ok();
}

Status CudaModel::UploadTable(const WeightTensor& t, const void** out) {
  if (table_dtype_ == DType::kFloat32) return UploadF32(t, reinterpret_cast<const float**>(out));
  const size_t n = static_cast<size_t>(t.num_elements());
  DeviceBuffer buffer;
  RETURN_IF_ERROR(buffer.Reserve(std::max<size_t>(n * 2, 256)));
  weights_bytes_ += static_cast<int64_t>(n * 2);
  // Converted on the host in chunks (bounded host memory for 1M-row tables).
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint16_t> bf16(std::min(n, kChunk));
  uint16_t* dst = reinterpret_cast<uint16_t*>(buffer.data());
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    for (size_t i = 0; i < count; ++i) bf16[i] = FloatToBFloat16(t.data[begin + i]);
    RETURN_IF_CUDA_ERROR(cudaMemcpy(dst + begin, bf16.data(), count * 2, cudaMemcpyHostToDevice));
  }
  *out = buffer.data();
  weight_allocs_.push_back(std::move(buffer));
  return Status::Ok();
}

Status CudaModel::Init(const ModelWeights& w) {
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  RETURN_IF_ERROR(stream_.Create());
  RETURN_IF_ERROR(copy_stream_.Create());
  // Every event here is timed (cudaEventElapsedTime), so none is created
  // with cudaEventDisableTiming.
  for (StageSlot& slot : slots_) {
    RETURN_IF_ERROR(slot.copy_start.Create());
    RETURN_IF_ERROR(slot.copy_done.Create());
    RETURN_IF_ERROR(slot.d2h_start.Create());
    RETURN_IF_ERROR(slot.d2h_done.Create());
  }
  RETURN_IF_ERROR(pool_.Create(device_));
  RETURN_IF_ERROR(linear_workspace_.Reserve(kLinearWorkspaceBytes));

  int in = config_.num_dense_features;
  for (size_t i = 0; i < config_.bottom_mlp.size(); ++i) {
    const std::string p = "bottom_mlp." + std::to_string(i);
    MlpLayer layer = {nullptr, nullptr, in, config_.bottom_mlp[i]};
    const WeightTensor& weight = *w.Find(p + ".weight");
    RETURN_IF_ERROR(UploadAs(weight.data, weight.num_elements(), DType::kFloat32, &layer.weight));
    const WeightTensor& bias = *w.Find(p + ".bias");
    RETURN_IF_ERROR(UploadAs(bias.data, bias.num_elements(), DType::kFloat32, &layer.bias));
    bottom_.push_back(layer);
    in = layer.out;
  }
  split_top1_ = !DotInteractionCudaHasRegisterKernel(static_cast<int>(config_.sparse_features.size()));
  // The split interaction reads u and e as the attention gives them (bf16
  // rows of the bf16 item table, the attention's bf16 output: float32
  // copies of them would hold the same values).
  vec_dtype_ = split_top1_ && attn_dtype_ == DType::kBFloat16 && table_dtype_ == DType::kBFloat16
                   ? DType::kBFloat16
                   : DType::kFloat32;
  if (!split_top1_) {
    // float32 (TF32 GEMM) over the interaction's float32 rows.
    top1_ = {nullptr, nullptr, config_.top_mlp_input_width(), config_.top_mlp[0]};
    const WeightTensor& weight = *w.Find("top_mlp.0.weight");
    RETURN_IF_ERROR(UploadAs(weight.data, weight.num_elements(), DType::kFloat32, &top1_.weight));
    const WeightTensor& bias = *w.Find("top_mlp.0.bias");
    RETURN_IF_ERROR(UploadAs(bias.data, bias.num_elements(), DType::kFloat32, &top1_.bias));
  } else {
    const int d = config_.embedding_dim;
    const int out = config_.top_mlp[0];
    std::vector<int> request_columns, candidate_columns;
    DotInteractionSplitColumns(static_cast<int>(config_.sparse_features.size()), d, &request_columns,
                               &candidate_columns);
    const WeightTensor& w1 = *w.Find("top_mlp.0.weight");
    auto upload_part = [&](const std::vector<int>& columns, MlpLayer* layer) -> Status {
      const size_t stride = (columns.size() + kSplitWidthAlign - 1) / kSplitWidthAlign * kSplitWidthAlign;
      const std::vector<float> part = GatherColumns(w1.data, out, config_.top_mlp_input_width(), columns, stride);
      *layer = {nullptr, nullptr, static_cast<int>(stride), out};
      return UploadAs(part.data(), part.size(), mlp_dtype_, &layer->weight);
    };
    RETURN_IF_ERROR(upload_part(request_columns, &top1_request_));
    RETURN_IF_ERROR(upload_part(candidate_columns, &top1_candidate_));
    // Added once per request, in the first layer's output dtype (SplitTop1).
    const WeightTensor& bias = *w.Find("top_mlp.0.bias");
    const DType out_dtype = config_.top_mlp.size() > 1 ? mlp_dtype_ : DType::kFloat32;
    RETURN_IF_ERROR(UploadAs(bias.data, bias.num_elements(), out_dtype, &top1_request_.bias));
  }
  in = config_.top_mlp[0];
  for (size_t i = 1; i < config_.top_mlp.size(); ++i) {
    const std::string p = "top_mlp." + std::to_string(i);
    MlpLayer layer = {nullptr, nullptr, in, config_.top_mlp[i]};
    const WeightTensor& weight = *w.Find(p + ".weight");
    RETURN_IF_ERROR(UploadAs(weight.data, weight.num_elements(), mlp_dtype_, &layer.weight));
    // The bias in the layer's output dtype: the last layer's logits are float32.
    const WeightTensor& bias = *w.Find(p + ".bias");
    const DType out_dtype = i + 1 < config_.top_mlp.size() ? mlp_dtype_ : DType::kFloat32;
    RETURN_IF_ERROR(UploadAs(bias.data, bias.num_elements(), out_dtype, &layer.bias));
    top_rest_.push_back(layer);
    in = layer.out;
  }
  for (const SparseFeatureConfig& f : config_.sparse_features) {
    const void* table = nullptr;
    RETURN_IF_ERROR(UploadTable(*w.Find("embeddings." + f.name), &table));
    sparse_tables_.push_back(table);
  }
  RETURN_IF_ERROR(UploadTable(*w.Find("embeddings.item"), &item_table_));
  RETURN_IF_ERROR(UploadTable(*w.Find("history.position"), &position_table_));
  const int d = config_.embedding_dim;
  std::vector<float> qkv(size_t{3} * d * d);
  std::memcpy(qkv.data(), w.Find("history.attn.q")->data, sizeof(float) * d * d);
  std::memcpy(qkv.data() + d * d, w.Find("history.attn.k")->data, sizeof(float) * d * d);
  std::memcpy(qkv.data() + 2 * d * d, w.Find("history.attn.v")->data, sizeof(float) * d * d);
  // The projections run on the attention dtype's operands (bf16 GEMMs with
  // float32 accumulation, or float32).
  RETURN_IF_ERROR(UploadAs(qkv.data(), qkv.size(), attn_dtype_, &wqkv_));
  const WeightTensor& wo = *w.Find("history.attn.o");
  RETURN_IF_ERROR(UploadAs(wo.data, wo.num_elements(), attn_dtype_, &wo_));
  RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize());
  return Status::Ok();
}

ModelMemory CudaModel::Memory() const {
  ModelMemory m;
  m.weights_bytes = weights_bytes_;
  m.workspace_peak_bytes = workspace_peak_bytes_.load();
  m.padding_saved_bytes = padding_saved_bytes_.load();
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(device_) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    m.device_used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
    m.device_total_bytes = static_cast<int64_t>(total_bytes);
  }
  return m;
}

Status CudaModel::ToAttn(const float* src, int64_t count, const void** out) {
  return ToDType(src, count, attn_dtype_, out);
}

Status CudaModel::ToDType(const float* src, int64_t count, DType dtype, const void** out) {
  if (dtype == DType::kFloat32) {
    *out = src;
    return Status::Ok();
  }
  void* dst = nullptr;
  RETURN_IF_ERROR(Alloc(static_cast<size_t>(count) * DTypeSize(dtype), reinterpret_cast<char**>(&dst)));
  CastParams p = {};
  p.in = src;
  p.in_dtype = DType::kFloat32;
  p.out = dst;
  p.out_dtype = dtype;
  p.count = count;
  RETURN_IF_ERROR(CastCuda(p, stream_.get()));
  *out = dst;
  return Status::Ok();
}

Status CudaModel::FromAttn(const void* src, int64_t count, void** out) {
  if (attn_dtype_ == vec_dtype_) {
    *out = const_cast<void*>(src);
    return Status::Ok();
  }
  float* dst = nullptr;
  RETURN_IF_ERROR(Alloc(static_cast<size_t>(count), &dst));
  *out = dst;
  CastParams p = {};
  p.in = src;
  p.in_dtype = attn_dtype_;
  p.out = *out;
  p.out_dtype = DType::kFloat32;
  p.count = count;
  return CastCuda(p, stream_.get());
}

void CudaModel::FreeBatchWorkspace() {
  for (const auto& a : live_) cudaFreeAsync(a.first, stream_.get());
  live_.clear();
  live_bytes_ = 0;
  pass_peak_bytes_ = 0;
}

Status CudaModel::RunLinear(LinearParams p) {
  p.workspace = linear_workspace_.data();
  p.workspace_bytes = kLinearWorkspaceBytes;
  return LinearCuda(p, stream_.get(), tf32_);
}

Status CudaModel::Mlp(const std::vector<MlpLayer>& layers, bool relu_last, const void* x, int m, DType dtype,
                      DType last_dtype, void** out, bool release_x) {
  const void* in = x;
  char* y = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool last = i + 1 == layers.size();
    const DType out_dtype = last ? last_dtype : dtype;
    RETURN_IF_ERROR(Alloc(size_t(m) * layers[i].out * DTypeSize(out_dtype), &y));
    LinearParams p = MlpLayerParams(layers[i], relu_last || !last, in, m, y);
    p.in_dtype = dtype;
    p.out_dtype = out_dtype;
    RETURN_IF_ERROR(RunLinear(p));
    if (i > 0 || release_x) Release(in);
    in = y;
  }
  *out = y;
  return Status::Ok();
}

Status CudaModel::Forward(const Batch& batch, std::vector<float>* scores) {
  RETURN_IF_ERROR(Stage(batch, 0));
  return Run(0, scores, nullptr);
}

Status CudaModel::Stage(const Batch& batch, int slot_index) {
  RETURN_IF_ERROR(CheckSlot(slot_index));
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));  // per thread: Stage may run on another thread than Run
  StageSlot& slot = slots_[slot_index];
  slot.staged = false;
  // The slot's previous copy may still read `host` and write `dev`; its Run
  // (if any) has returned and left nothing in flight (Run's contract). An
  // event never recorded counts as complete.
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.copy_done.get()));
  const Status s = PackAndCopy(batch, &slot);
  slot.staged = s.ok();
  return s;
}

Status CudaModel::PackAndCopy(const Batch& batch, StageSlot* slot) {
  const int F = static_cast<int>(config_.sparse_features.size());
  RETURN_IF_ERROR(ValidateBatchShape(batch, config_.num_dense_features, F));
  const int R = batch.num_requests;
  const int C = static_cast<int>(batch.num_candidates());
  const int T = static_cast<int>(batch.num_history_tokens());
  slot->num_requests = R;
  slot->num_candidates = C;
  slot->num_history_tokens = T;
  if (R == 0 || C == 0) return Status::Ok();  // nothing to copy: Run answers no scores

  RETURN_IF_ERROR(BatchLengths(batch, config_.max_history_len, &slot->lengths, &slot->cand_lengths,
                               &slot->max_history, &slot->max_candidates));
  slot->padded_offsets.resize(R + 1);
  for (int r = 0; r <= R; ++r) slot->padded_offsets[r] = r * slot->max_history;
  slot->padding_saved_bytes = options_.attention == AttentionStrategy::kJagged && T > 0
                                  ? PaddingSavedBytes(batch, config_.embedding_dim)
                                  : 0;

  // Pack the batch into pinned memory and copy it with one H2D transfer.
  StagingLayout layout;
  slot->at_dense = layout.Place(batch.dense.size() * sizeof(float));
  slot->at_sparse_ids.resize(F);
  slot->at_sparse_offsets.resize(F);
  for (int f = 0; f < F; ++f) {
    slot->at_sparse_ids[f] = layout.Place(batch.sparse_ids[f].size() * sizeof(int64_t));
    slot->at_sparse_offsets[f] = layout.Place(batch.sparse_offsets[f].size() * sizeof(int32_t));
  }
  slot->at_hist_ids = layout.Place(batch.history_ids.size() * sizeof(int64_t));
  slot->at_hist_offsets = layout.Place(batch.history_offsets.size() * sizeof(int32_t));
  slot->at_cand_ids = layout.Place(batch.candidate_ids.size() * sizeof(int64_t));
  slot->at_cand_offsets = layout.Place(batch.candidate_offsets.size() * sizeof(int32_t));
  slot->at_lengths = layout.Place(slot->lengths.size() * sizeof(int32_t));
  slot->at_cand_lengths = layout.Place(slot->cand_lengths.size() * sizeof(int32_t));
  slot->at_padded_offsets = layout.Place(slot->padded_offsets.size() * sizeof(int32_t));
  // Grow-only, amortised. The old buffers are idle (copy done, Run returned).
  RETURN_IF_ERROR(slot->host.Reserve(layout.total));
  RETURN_IF_ERROR(slot->dev.Reserve(layout.total));
  char* host = slot->host.data();
  auto put = [&](size_t at, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(host + at, src, bytes);
  };
  put(slot->at_dense, batch.dense.data(), batch.dense.size() * sizeof(float));
  for (int f = 0; f < F; ++f) {
    put(slot->at_sparse_ids[f], batch.sparse_ids[f].data(), batch.sparse_ids[f].size() * sizeof(int64_t));
    put(slot->at_sparse_offsets[f], batch.sparse_offsets[f].data(),
        batch.sparse_offsets[f].size() * sizeof(int32_t));
  }
  put(slot->at_hist_ids, batch.history_ids.data(), batch.history_ids.size() * sizeof(int64_t));
  put(slot->at_hist_offsets, batch.history_offsets.data(), batch.history_offsets.size() * sizeof(int32_t));
  put(slot->at_cand_ids, batch.candidate_ids.data(), batch.candidate_ids.size() * sizeof(int64_t));
  put(slot->at_cand_offsets, batch.candidate_offsets.data(), batch.candidate_offsets.size() * sizeof(int32_t));
  put(slot->at_lengths, slot->lengths.data(), slot->lengths.size() * sizeof(int32_t));
  put(slot->at_cand_lengths, slot->cand_lengths.data(), slot->cand_lengths.size() * sizeof(int32_t));
  put(slot->at_padded_offsets, slot->padded_offsets.data(), slot->padded_offsets.size() * sizeof(int32_t));
  cudaError_t e = cudaEventRecord(slot->copy_start.get(), copy_stream_.get());
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(slot->dev.data(), host, layout.total, cudaMemcpyHostToDevice, copy_stream_.get());
  }
  if (e == cudaSuccess) e = cudaEventRecord(slot->copy_done.get(), copy_stream_.get());
  if (e != cudaSuccess) {
    // copy_done may not cover an issued copy: wait for it here instead.
    cudaStreamSynchronize(copy_stream_.get());
    return CudaErrorStatus(e, "H2D copy of the staged batch", __FILE__, __LINE__);
  }
  return Status::Ok();
}

Status CudaModel::Run(int slot_index, std::vector<float>* scores, ForwardTimings* timings) {
  RETURN_IF_ERROR(Launch(slot_index));
  return Wait(slot_index, scores, timings);
}

Status CudaModel::Launch(int slot_index) {
  RETURN_IF_ERROR(CheckSlot(slot_index));
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  StageSlot& slot = slots_[slot_index];
  if (!slot.staged) {
    return Status::Internal("Launch(slot = " + std::to_string(slot_index) + "): no batch is staged in this slot");
  }
  slot.staged = false;
  const Status s = LaunchStaged(&slot);
  if (pass_peak_bytes_ > workspace_peak_bytes_.load()) workspace_peak_bytes_.store(pass_peak_bytes_);
  FreeBatchWorkspace();
  if (!s.ok()) {
    // Leave nothing in flight that reads the slot's buffers (the next
    // Stage(slot) may overwrite them as soon as this returns).
    cudaStreamSynchronize(stream_.get());
    return s;
  }
  slot.launched = true;
  return Status::Ok();
}

Status CudaModel::Wait(int slot_index, std::vector<float>* scores, ForwardTimings* timings) {
  RETURN_IF_ERROR(CheckSlot(slot_index));
  if (timings != nullptr) *timings = ForwardTimings();
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  StageSlot& slot = slots_[slot_index];
  if (!slot.launched) {
    return Status::Internal("Wait(slot = " + std::to_string(slot_index) + "): nothing is launched in this slot");
  }
  slot.launched = false;
  const int C = slot.num_candidates;
  scores->assign(C, 0.0f);
  if (slot.num_requests == 0 || C == 0) return Status::Ok();
  // d2h_done is the batch's last work on the stream: its scores, and every
  // read of the slot's buffers, are done once it is.
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.d2h_done.get()));
  std::memcpy(scores->data(), slot.scores.data(), size_t(C) * sizeof(float));
  if (timings != nullptr) {
    float ms = 0;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, slot.copy_start.get(), slot.copy_done.get()));
    timings->h2d_seconds = ms * 1e-3;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, slot.d2h_start.get(), slot.d2h_done.get()));
    timings->d2h_seconds = ms * 1e-3;
  }
  return Status::Ok();
}

Status CudaModel::LaunchStaged(StageSlot* slot_ptr) {
  const StageSlot& slot = *slot_ptr;
  const int C = slot.num_candidates;
  if (slot.num_requests == 0 || C == 0) return Status::Ok();
  RETURN_IF_ERROR(slot_ptr->scores.Reserve(size_t(C) * sizeof(float)));

  CudaPass pass;
  pass.slot = &slot;
  pass.num_requests = slot.num_requests;
  pass.num_candidates = C;
  pass.num_history_tokens = slot.num_history_tokens;
  pass.max_history = slot.max_history;
  pass.max_candidates = slot.max_candidates;
  const char* dev = slot.dev.data();
  pass.dev = dev;
  pass.dense = reinterpret_cast<const float*>(dev + slot.at_dense);
  pass.hist_ids = reinterpret_cast<const int64_t*>(dev + slot.at_hist_ids);
  pass.hist_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_hist_offsets);
  pass.cand_ids = reinterpret_cast<const int64_t*>(dev + slot.at_cand_ids);
  pass.cand_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_cand_offsets);
  pass.lengths = reinterpret_cast<const int32_t*>(dev + slot.at_lengths);
  pass.cand_lengths = reinterpret_cast<const int32_t*>(dev + slot.at_cand_lengths);
  pass.padded_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_padded_offsets);

  // The compute stream starts once the slot's H2D copy has landed.
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(stream_.get(), slot.copy_done.get(), 0));
  RETURN_IF_ERROR(RunForward<CudaPass>(this, attention_.get(), &pass));

  RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.d2h_start.get(), stream_.get()));
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(slot.scores.data(), pass.logits, size_t(C) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_.get()));
  RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.d2h_done.get(), stream_.get()));
  return Status::Ok();
}

// 1. Bottom MLP, once per request: x [R, d].
Status CudaModel::BottomMlp(CudaPass* pass) {
  void* x = nullptr;
  RETURN_IF_ERROR(
      Mlp(bottom_, /*relu_last=*/true, pass->dense, pass->num_requests, DType::kFloat32, DType::kFloat32, &x));
  pass->x = static_cast<float*>(x);
  return Status::Ok();
}

// 2. Pooled sparse features [F, R, d].
Status CudaModel::PoolSparseFeatures(CudaPass* pass) {
  const int F = static_cast<int>(config_.sparse_features.size());
  const int R = pass->num_requests;
  const int d = config_.embedding_dim;
  RETURN_IF_ERROR(Alloc(size_t(F) * R * d, &pass->pooled));
  std::vector<EmbeddingBagParams> bags(F);
  for (int f = 0; f < F; ++f) {
    EmbeddingBagParams& p = bags[f];
    p.ids = reinterpret_cast<const int64_t*>(pass->dev + pass->slot->at_sparse_ids[f]);
    p.offsets = reinterpret_cast<const int32_t*>(pass->dev + pass->slot->at_sparse_offsets[f]);
    p.batch = R;
    p.table = sparse_tables_[f];
    p.table_dtype = table_dtype_;
    p.num_rows = config_.sparse_features[f].num_rows;
    p.dim = d;
    p.out = pass->pooled + size_t(f) * R * d;
  }
  return EmbeddingBagsCuda(bags.data(), F, stream_.get());
}

// 5. Candidate embeddings e [C, d].
Status CudaModel::EmbedCandidates(CudaPass* pass) {
  const int C = pass->num_candidates;
  const int d = config_.embedding_dim;
  char* e = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(C) * d * DTypeSize(vec_dtype_), &e));
  pass->e = e;
  GatherRowsParams p = {};
  p.ids = pass->cand_ids;
  p.count = C;
  p.table = item_table_;
  p.table_dtype = table_dtype_;
  p.num_rows = config_.item_rows;
  p.dim = d;
  p.out = pass->e;
  p.out_dtype = vec_dtype_;
  return GatherRowsCuda(p, stream_.get());
}

// 3. History embeddings h [T, d].
Status CudaModel::EmbedHistory(CudaPass* pass) {
  const int d = config_.embedding_dim;
  char* h = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(pass->num_history_tokens) * d * DTypeSize(attn_dtype_), &h));
  pass->h = h;
  HistoryGatherParams p = {};
  p.ids = pass->hist_ids;
  p.offsets = pass->hist_offsets;
  p.batch = pass->num_requests;
  p.item_table = item_table_;
  p.table_dtype = table_dtype_;
  p.item_rows = config_.item_rows;
  p.position_table = position_table_;
  p.max_len = config_.max_history_len;
  p.dim = d;
  p.out = pass->h;
  p.out_dtype = attn_dtype_;
  p.longest = pass->max_history;
  return HistoryGatherCuda(p, stream_.get());
}

// No request has history: every u_c is the zero vector (docs/model.md, step 6).
Status CudaModel::NoHistory(CudaPass* pass) {
  const size_t bytes = size_t(pass->num_candidates) * config_.embedding_dim * DTypeSize(vec_dtype_);
  char* u = nullptr;
  RETURN_IF_ERROR(Alloc(bytes, &u));
  pass->u = u;
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(pass->u, 0, bytes, stream_.get()));
  return Status::Ok();
}

// 7. Interaction, split by what each column depends on
// (DotInteractionSplitColumns): the request rows [R, request stride] once
// per request, the candidate rows [C, candidate stride] per candidate.
Status CudaModel::Interaction(CudaPass* pass) {
  DotInteractionParams p = {};
  p.x = pass->x;
  p.pooled = pass->pooled;
  p.num_sparse = static_cast<int>(config_.sparse_features.size());
  p.u = pass->u;
  p.e = pass->e;
  p.vector_dtype = vec_dtype_;
  p.candidate_offsets = pass->cand_offsets;
  p.num_requests = pass->num_requests;
  p.num_candidates = pass->num_candidates;
  p.dim = config_.embedding_dim;
  if (!split_top1_) {
    RETURN_IF_ERROR(Alloc(size_t(pass->num_candidates) * top1_.in, &pass->inter));
    p.out = pass->inter;
    RETURN_IF_ERROR(DotInteractionCuda(p, stream_.get()));
    ReleaseInteractionInputs(pass);
    return Status::Ok();
  }
  const size_t esize = DTypeSize(mlp_dtype_);
  char* request_part = nullptr;
  char* candidate_part = nullptr;
  p.max_candidates = pass->max_candidates;
  RETURN_IF_ERROR(Alloc(size_t(pass->num_requests) * top1_request_.in * esize, &request_part));
  RETURN_IF_ERROR(Alloc(size_t(pass->num_candidates) * top1_candidate_.in * esize, &candidate_part));
  pass->request_part = request_part;
  pass->candidate_part = candidate_part;
  RETURN_IF_ERROR(DotInteractionSplitCuda(p, request_part, top1_request_.in, candidate_part, top1_candidate_.in,
                                          mlp_dtype_, stream_.get()));
  ReleaseInteractionInputs(pass);
  return Status::Ok();
}

void CudaModel::ReleaseInteractionInputs(CudaPass* pass) {
  Release(pass->x);
  Release(pass->pooled);
  Release(pass->u);
  Release(pass->e);
  pass->x = pass->pooled = nullptr;
  pass->u = pass->e = nullptr;
}

// 8. Top MLP and sigmoid: pass->logits holds the scores on the device.
// Past the first layer the activations are mlp_dtype_; the logits float32.
Status CudaModel::TopMlp(CudaPass* pass) {
  const int C = pass->num_candidates;
  const bool relu1 = !top_rest_.empty();  // ReLU after every layer but the last
  const DType top1_dtype = top_rest_.empty() ? DType::kFloat32 : mlp_dtype_;
  const void* top1 = nullptr;
  if (!split_top1_) {
    float* full = nullptr;
    RETURN_IF_ERROR(Alloc(size_t(C) * top1_.out, &full));
    RETURN_IF_ERROR(RunLinear(MlpLayerParams(top1_, relu1, pass->inter, C, full)));
    Release(pass->inter);
    RETURN_IF_ERROR(ToDType(full, int64_t{C} * top1_.out, top1_dtype, &top1));
    if (top1 != full) Release(full);
  } else {
    void* split = nullptr;
    RETURN_IF_ERROR(SplitTop1(pass, relu1, top1_dtype, &split));
    top1 = split;
  }
  void* logits = const_cast<void*>(top1);
  if (!top_rest_.empty()) {
    RETURN_IF_ERROR(Mlp(top_rest_, /*relu_last=*/false, top1, C, mlp_dtype_, DType::kFloat32, &logits,
                        /*release_x=*/true));
  }
  pass->logits = static_cast<float*>(logits);
  return SigmoidInPlaceCuda(pass->logits, C, stream_.get());
}

// The split first layer: W1 [x, t] + b1 = W_req r_req + W_cand r_cand + b1
// (the same sum in another order): a = W_req r_req + b1 once per request,
// repeated over the request's candidates, then W_cand r_cand added in place
// with the ReLU (55 of 534 input columns per candidate for the production
// model). Operands in mlp_dtype_, the result in out_dtype.
Status CudaModel::SplitTop1(CudaPass* pass, bool relu, DType out_dtype, void** out_top1) {
  const int R = pass->num_requests;
  const int C = pass->num_candidates;
  const int out = top1_request_.out;
  char* request_top1 = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(R) * out * DTypeSize(out_dtype), &request_top1));
  LinearParams request = MlpLayerParams(top1_request_, /*relu=*/false, pass->request_part, R, request_top1);
  request.in_dtype = mlp_dtype_;
  request.out_dtype = out_dtype;
  RETURN_IF_ERROR(RunLinear(request));
  char* top1 = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(C) * out * DTypeSize(out_dtype), &top1));
  RepeatRowsParams repeat = {};
  repeat.rows = request_top1;
  repeat.offsets = pass->cand_offsets;
  repeat.batch = R;
  repeat.max_len = pass->max_candidates;
  repeat.width = out;
  repeat.dtype = out_dtype;
  repeat.values = top1;
  RETURN_IF_ERROR(RepeatRowsCuda(repeat, stream_.get()));
  Release(request_top1);
  Release(pass->request_part);
  LinearParams candidate = MlpLayerParams(top1_candidate_, relu, pass->candidate_part, C, top1);
  candidate.in_dtype = mlp_dtype_;
  candidate.out_dtype = out_dtype;
  candidate.accumulate = true;
  RETURN_IF_ERROR(RunLinear(candidate));
  Release(pass->candidate_part);
  *out_top1 = top1;
  return Status::Ok();
}

Status CudaModel::PadHistory(const CudaPass& pass, void** out) {
  const int d = config_.embedding_dim;
  RETURN_IF_ERROR(AllocAttn(int64_t{pass.num_requests} * pass.max_history * d, out));
  JaggedToPaddedParams p = {};
  p.values = pass.h;
  p.offsets = pass.hist_offsets;
  p.batch = pass.num_requests;
  p.max_len = pass.max_history;
  p.width = d;
  p.dtype = attn_dtype_;
  p.padded = *out;
  return JaggedToPaddedCuda(p, stream_.get());
}

Status CudaModel::TargetOperands(const CudaPass& pass, const void** e_attn, const void** z_attn,
                                 void** u_attn) {
  const int64_t count = int64_t{pass.num_candidates} * config_.embedding_dim;
  if (vec_dtype_ == attn_dtype_) {
    *e_attn = pass.e;
  } else {
    RETURN_IF_ERROR(ToAttn(static_cast<const float*>(pass.e), count, e_attn));
  }
  *z_attn = pass.z;
  return AllocAttn(count, u_attn);
}

void CudaModel::ReleaseTargetOperands(CudaPass* pass, const void* e_attn) {
  if (e_attn != pass->e) Release(e_attn);
  Release(pass->z);
  Release(pass->h);
  pass->z = nullptr;
  pass->h = nullptr;
}

Status CudaModel::AttnLinear(const void* x, const void* w, int m, int n, int k, void* y, bool accumulate) {
  LinearParams p = {};
  p.x = x;
  p.weight = w;
  p.m = m;
  p.n = n;
  p.k = k;
  p.y = y;
  p.accumulate = accumulate;
  p.in_dtype = attn_dtype_;
  p.out_dtype = attn_dtype_;
  return RunLinear(p);
}

Status CudaModel::ProjectOutAndAdd(const void* o_attn, void* tokens, int64_t rows, CudaPass* pass) {
  const int d = config_.embedding_dim;
  // z = tokens + o Wo^T, accumulated in place over the tokens (float32 sums).
  RETURN_IF_ERROR(AttnLinear(o_attn, wo_, static_cast<int>(rows), d, d, tokens, /*accumulate=*/true));
  pass->z = tokens;
  pass->z_rows = rows;
  return Status::Ok();
}

// ---- Jagged and padded_flash: the flash kernel over the fused [rows, 3d] QKV.

Status CudaFlash::SelfAttention(CudaPass* pass) {
  CudaModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int d = m.config_.embedding_dim;
  const int H = m.config_.attention_heads;
  void* tokens = pass->h;  // the rows the projections run over
  int64_t rows = pass->num_history_tokens;
  if (padded_) {
    RETURN_IF_ERROR(m.PadHistory(*pass, &tokens));
    rows = int64_t{R} * N;
  }
  void* qkv_attn = nullptr;
  RETURN_IF_ERROR(m.AllocAttn(rows * 3 * d, &qkv_attn));
  RETURN_IF_ERROR(m.AttnLinear(tokens, m.wqkv_, static_cast<int>(rows), 3 * d, d, qkv_attn, /*accumulate=*/false));
  void* o_attn = nullptr;
  RETURN_IF_ERROR(m.AllocAttn(rows * d, &o_attn));
  const size_t esize = DTypeSize(m.attn_dtype_);
  const char* base = static_cast<const char*>(qkv_attn);
  AttentionParams p = {};
  p.dtype = m.attn_dtype_;
  p.num_heads = H;
  p.head_dim = d / H;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d / H));
  p.batch = R;
  p.q = base;
  p.k = base + d * esize;
  p.v = base + 2 * d * esize;
  p.o = o_attn;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * d;
  p.o_row_stride = d;
  p.q_offsets = p.k_offsets = padded_ ? pass->padded_offsets : pass->hist_offsets;
  p.max_q_len = p.max_k_len = N;
  p.q_tokens_hint = rows;
  p.maybe_k_valid_len = padded_ ? pass->lengths : nullptr;
  RETURN_IF_ERROR(JaggedAttentionCuda(p, m.stream_.get()));
  m.Release(qkv_attn);
  RETURN_IF_ERROR(m.ProjectOutAndAdd(o_attn, tokens, rows, pass));
  m.Release(o_attn);
  if (padded_) {
    m.Release(pass->h);  // z is the padded copy
    pass->h = nullptr;
  }
  if (!padded_) m.padding_saved_bytes_ += pass->slot->padding_saved_bytes;
  return Status::Ok();
}

Status CudaFlash::TargetAttention(CudaPass* pass) {
  CudaModel& m = *m_;
  const int C = pass->num_candidates;
  const int d = m.config_.embedding_dim;
  const void* e_attn = nullptr;
  const void* z_attn = nullptr;
  void* u_attn = nullptr;
  RETURN_IF_ERROR(m.TargetOperands(*pass, &e_attn, &z_attn, &u_attn));
  AttentionParams p = {};
  p.q = e_attn;
  p.k = z_attn;
  p.v = z_attn;
  p.o = u_attn;
  p.dtype = m.attn_dtype_;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
  p.q_offsets = pass->cand_offsets;
  p.k_offsets = padded_ ? pass->padded_offsets : pass->hist_offsets;
  p.batch = pass->num_requests;
  p.num_heads = 1;
  p.head_dim = d;
  p.max_q_len = pass->max_candidates;
  p.q_tokens_hint = C;
  p.max_k_len = pass->max_history;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.maybe_k_valid_len = padded_ ? pass->lengths : nullptr;
  RETURN_IF_ERROR(JaggedAttentionCuda(p, m.stream_.get()));
  m.ReleaseTargetOperands(pass, e_attn);
  return m.FromAttn(u_attn, int64_t{C} * d, &pass->u);
}

// ---- padded_dense: separate Q, K, V projections over the padded tokens,
// the score matrix materialised.

Status CudaPaddedDense::SelfAttention(CudaPass* pass) {
  CudaModel& m = *m_;
  const int R = pass->num_requests;
  const int N = pass->max_history;
  const int d = m.config_.embedding_dim;
  const int H = m.config_.attention_heads;
  void* hp = nullptr;
  RETURN_IF_ERROR(m.PadHistory(*pass, &hp));
  const int64_t rows = int64_t{R} * N;
  const void* proj[3];
  for (int i = 0; i < 3; ++i) {  // Wq, Wk, Wv: row blocks of wqkv_
    const void* w = static_cast<const char*>(m.wqkv_) + size_t(i) * d * d * DTypeSize(m.attn_dtype_);
    void* y = nullptr;
    RETURN_IF_ERROR(m.AllocAttn(rows * d, &y));
    RETURN_IF_ERROR(m.AttnLinear(hp, w, static_cast<int>(rows), d, d, y, /*accumulate=*/false));
    proj[i] = y;
  }
  void* o_attn = nullptr;
  RETURN_IF_ERROR(m.AllocAttn(rows * d, &o_attn));
  PaddedDenseAttentionParams p = {};
  p.q = proj[0];
  p.k = proj[1];
  p.v = proj[2];
  p.q_len = p.k_len = pass->lengths;
  p.batch = R;
  p.max_q_len = p.max_k_len = N;
  p.num_heads = H;
  p.head_dim = d / H;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d / H));
  p.dtype = m.attn_dtype_;
  p.o = o_attn;
  RETURN_IF_ERROR(m.Alloc(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / 4), &p.workspace));
  RETURN_IF_ERROR(PaddedDenseAttentionCuda(p, m.stream_.get()));
  for (const void* y : proj) m.Release(y);
  m.Release(p.workspace);
  RETURN_IF_ERROR(m.ProjectOutAndAdd(o_attn, hp, rows, pass));
  m.Release(o_attn);
  m.Release(pass->h);  // z is the padded copy
  pass->h = nullptr;
  return Status::Ok();
}

Status CudaPaddedDense::TargetAttention(CudaPass* pass) {
  CudaModel& m = *m_;
  const int R = pass->num_requests;
  const int C = pass->num_candidates;
  const int Cmax = pass->max_candidates;
  const int d = m.config_.embedding_dim;
  const void* e_attn = nullptr;
  const void* z_attn = nullptr;
  void* u_attn = nullptr;
  RETURN_IF_ERROR(m.TargetOperands(*pass, &e_attn, &z_attn, &u_attn));
  void* ep = nullptr;
  void* up = nullptr;
  RETURN_IF_ERROR(m.AllocAttn(int64_t{R} * Cmax * d, &ep));
  RETURN_IF_ERROR(m.AllocAttn(int64_t{R} * Cmax * d, &up));
  JaggedToPaddedParams tp = {};
  tp.values = e_attn;
  tp.offsets = pass->cand_offsets;
  tp.batch = R;
  tp.max_len = Cmax;
  tp.width = d;
  tp.dtype = m.attn_dtype_;
  tp.padded = ep;
  RETURN_IF_ERROR(JaggedToPaddedCuda(tp, m.stream_.get()));
  PaddedDenseAttentionParams p = {};
  p.q = ep;
  p.k = z_attn;
  p.v = z_attn;
  p.q_len = pass->cand_lengths;
  p.k_len = pass->lengths;
  p.batch = R;
  p.max_q_len = Cmax;
  p.max_k_len = pass->max_history;
  p.num_heads = 1;
  p.head_dim = d;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.dtype = m.attn_dtype_;
  p.o = up;
  RETURN_IF_ERROR(m.Alloc(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / 4), &p.workspace));
  RETURN_IF_ERROR(PaddedDenseAttentionCuda(p, m.stream_.get()));
  PaddedToJaggedParams bp = {};
  bp.padded = up;
  bp.offsets = pass->cand_offsets;
  bp.batch = R;
  bp.max_len = Cmax;
  bp.width = d;
  bp.dtype = m.attn_dtype_;
  bp.values = u_attn;
  RETURN_IF_ERROR(PaddedToJaggedCuda(bp, m.stream_.get()));
  m.Release(ep);
  m.Release(up);
  m.Release(p.workspace);
  m.ReleaseTargetOperands(pass, e_attn);
  return m.FromAttn(u_attn, int64_t{C} * d, &pass->u);
}

}  // namespace

Status CreateCudaModel(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                       int device_index, std::unique_ptr<Model>* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return Status::Unavailable("device = '" + options.device + "': no CUDA device is visible");
  }
  if (device_index >= count) {
    return Status::InvalidArgument("device = '" + options.device + "': only " + std::to_string(count) +
                                   " CUDA device(s)");
  }
  const int d = config.embedding_dim;
  const int dh = d / config.attention_heads;
  if (!FlashSupportsHeadDim(dh)) {
    return Status::Unimplemented("attention head dim embedding_dim / attention_heads = " + std::to_string(dh) +
                                 " is not supported by the CUDA attention (32, 64 or 128)");
  }
  if (!FlashSupportsHeadDim(d)) {
    return Status::Unimplemented("embedding_dim = " + std::to_string(d) +
                                 " is not supported by the CUDA target attention (32, 64 or 128)");
  }
  std::unique_ptr<CudaModel> model(new CudaModel(config, options, device_index, weights.version()));
  RETURN_IF_ERROR(model->Init(weights));
  *out = std::move(model);
  return Status::Ok();
}

}  // namespace jagrank
