// CUDA backend. Weights are uploaded once at Create: MLP and attention
// projection weights in float32, embedding and position tables in bf16
// (options.cuda_bf16; float32 otherwise). Per batch, in two phases (Stage on
// the caller's staging thread, Run on its compute thread, see model.h):
//   Stage: the host batch is packed into the slot's pinned buffer and copied
//     to the slot's device buffer with one async H2D copy on the copy stream,
//     between two timed events.
//   Run: the compute stream waits for that copy's event; every intermediate
//     comes from a stream-ordered memory pool whose release threshold keeps
//     its memory (cudaMallocFromPoolAsync / cudaFreeAsync, no cudaMalloc per
//     batch); attention operands are bf16 with float32 accumulation (flash
//     kernel, or the padded dense baseline), GEMMs take TF32 inputs on
//     tensor cores (cuBLASLt, with cuda_bf16), everything else float32.
//     One D2H copy of the scores into pinned memory, one stream
//     synchronisation per batch.
// Stage(a) and Run(b) share only the device, the weights (read-only) and the
// copy stream handle: Stage touches slots_[a] and copy_stream_, Run touches
// slots_[b] and the compute-side members (stream_, pool_, live_,
// host_scores_, the D2H events).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/cuda_check.h"
#include "kernels/cuda_ops.h"
#include "model/backends.h"

namespace jagrank {
namespace {

struct DeviceLayer {
  const float* weight;  // [out, in]
  const float* bias;    // [out]
  int in, out;
};

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
  char* host = nullptr;  // pinned
  size_t host_bytes = 0;
  char* dev = nullptr;
  size_t dev_bytes = 0;
  cudaEvent_t copy_start = nullptr;  // recorded on the copy stream around the H2D copy
  cudaEvent_t copy_done = nullptr;
  bool staged = false;  // a batch is staged and its Run has not started

  // The staged batch: sizes, lengths and where each array sits in host/dev.
  int num_requests = 0, num_candidates = 0, num_history_tokens = 0;
  int max_history = 0, max_candidates = 0;
  int64_t padding_saved_bytes = 0;  // jagged strategy with history only
  std::vector<int32_t> lengths, cand_lengths, padded_offsets;
  size_t at_dense = 0, at_hist_ids = 0, at_hist_offsets = 0, at_cand_ids = 0, at_cand_offsets = 0;
  size_t at_lengths = 0, at_cand_lengths = 0, at_padded_offsets = 0;
  std::vector<size_t> at_sparse_ids, at_sparse_offsets;
};

class CudaModel final : public Model {
 public:
  CudaModel(const ModelConfig& config, const ModelOptions& options, int device, std::string version)
      : config_(config), options_(options), device_(device), version_(std::move(version)) {
    attn_dtype_ = options.cuda_bf16 ? DType::kBFloat16 : DType::kFloat32;
    tf32_ = options.cuda_bf16;
    table_dtype_ = attn_dtype_;
  }
  ~CudaModel() override;

  Status Init(const ModelWeights& weights);
  Status Forward(const Batch& batch, std::vector<float>* scores) override;
  Status Stage(const Batch& batch, int slot) override;
  Status Run(int slot, std::vector<float>* scores, ForwardTimings* timings) override;
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cuda:" + std::to_string(device_); }
  AttentionStrategy attention() const override { return options_.attention; }
  std::string version() const override { return version_; }
  ModelMemory Memory() const override;

 private:
  Status Upload(const void* host, size_t bytes, void** out);
  Status UploadF32(const WeightTensor& t, const float** out);
  Status UploadTable(const WeightTensor& t, const void** out);
  template <typename T>
  Status Alloc(size_t count, T** out) {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(count * sizeof(T), 256);
    RETURN_IF_CUDA_ERROR(cudaMallocFromPoolAsync(&p, bytes, pool_, stream_));
    live_.push_back(p);
    live_bytes_ += static_cast<int64_t>(bytes);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }
  Status AllocAttn(int64_t count, void** out) {
    char* p = nullptr;
    RETURN_IF_ERROR(Alloc(static_cast<size_t>(count) * DTypeSize(attn_dtype_), &p));
    *out = p;
    return Status::Ok();
  }
  // float32 [count] -> attention dtype (aliases `src` when that is float32).
  Status ToAttn(const float* src, int64_t count, const void** out);
  // attention dtype [count] -> float32 (aliases `src` when that is float32).
  Status FromAttn(const void* src, int64_t count, float** out);
  void FreeBatchWorkspace();
  Status PackAndCopy(const Batch& batch, StageSlot* slot);
  Status RunStaged(const StageSlot& slot, std::vector<float>* scores, ForwardTimings* timings);
  Status Mlp(const std::vector<DeviceLayer>& layers, bool relu_last, const float* x, int m, float** out);
  Status Linear(const float* x, const float* w, int m, int n, int k, float* y);
  // LinearCuda on stream_ with the model's cuBLASLt workspace.
  Status RunLinear(LinearParams p);

  ModelConfig config_;
  ModelOptions options_;
  int device_;
  std::string version_;
  DType attn_dtype_, table_dtype_;
  bool tf32_ = false;  // GEMMs in TF32 (with cuda_bf16)
  cudaStream_t stream_ = nullptr;       // compute stream (Run)
  cudaStream_t copy_stream_ = nullptr;  // H2D copies of staged batches (Stage)
  cudaMemPool_t pool_ = nullptr;
  std::vector<void*> weight_allocs_;
  void* linear_workspace_ = nullptr;  // cuBLASLt's, used on stream_ only
  int64_t weights_bytes_ = 0;
  std::vector<DeviceLayer> bottom_, top_;
  std::vector<const void*> sparse_tables_;
  const void* item_table_ = nullptr;
  const void* position_table_ = nullptr;
  const float* wqkv_ = nullptr;  // [3d, d] = Wq; Wk; Wv
  const float* wo_ = nullptr;

  StageSlot slots_[kStageSlots];
  cudaEvent_t d2h_start_ = nullptr, d2h_done_ = nullptr;  // around the scores' D2H copy
  float* host_scores_ = nullptr; // pinned [C]
  size_t host_scores_count_ = 0;
  std::vector<void*> live_;      // this batch's pool allocations
  int64_t live_bytes_ = 0;
  std::atomic<int64_t> workspace_peak_bytes_{0};
  std::atomic<int64_t> padding_saved_bytes_{0};
};

CudaModel::~CudaModel() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) {
    FreeBatchWorkspace();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (copy_stream_ != nullptr) {
    cudaStreamSynchronize(copy_stream_);
    cudaStreamDestroy(copy_stream_);
  }
  for (StageSlot& slot : slots_) {
    if (slot.copy_start != nullptr) cudaEventDestroy(slot.copy_start);
    if (slot.copy_done != nullptr) cudaEventDestroy(slot.copy_done);
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    if (slot.dev != nullptr) cudaFree(slot.dev);
  }
  if (d2h_start_ != nullptr) cudaEventDestroy(d2h_start_);
  if (d2h_done_ != nullptr) cudaEventDestroy(d2h_done_);
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
  for (void* p : weight_allocs_) cudaFree(p);
  if (linear_workspace_ != nullptr) cudaFree(linear_workspace_);
  if (host_scores_ != nullptr) cudaFreeHost(host_scores_);
}

Status CudaModel::Upload(const void* host, size_t bytes, void** out) {
  void* p = nullptr;
  RETURN_IF_CUDA_ERROR(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  weight_allocs_.push_back(p);
  RETURN_IF_CUDA_ERROR(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  weights_bytes_ += static_cast<int64_t>(bytes);
  *out = p;
  return Status::Ok();
}

Status CudaModel::UploadF32(const WeightTensor& t, const float** out) {
  void* p = nullptr;
  RETURN_IF_ERROR(Upload(t.data, static_cast<size_t>(t.num_elements()) * sizeof(float), &p));
  *out = static_cast<const float*>(p);
  return Status::Ok();
}

Status CudaModel::UploadTable(const WeightTensor& t, const void** out) {
  if (table_dtype_ == DType::kFloat32) return UploadF32(t, reinterpret_cast<const float**>(out));
  const size_t n = static_cast<size_t>(t.num_elements());
  void* p = nullptr;
  RETURN_IF_CUDA_ERROR(cudaMalloc(&p, std::max<size_t>(n * 2, 256)));
  weight_allocs_.push_back(p);
  weights_bytes_ += static_cast<int64_t>(n * 2);
  // Converted on the host in chunks (bounded host memory for 1M-row tables).
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint16_t> bf16(std::min(n, kChunk));
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    for (size_t i = 0; i < count; ++i) bf16[i] = FloatToBFloat16(t.data[begin + i]);
    RETURN_IF_CUDA_ERROR(
        cudaMemcpy(static_cast<uint16_t*>(p) + begin, bf16.data(), count * 2, cudaMemcpyHostToDevice));
  }
  *out = p;
  return Status::Ok();
}

Status CudaModel::Init(const ModelWeights& w) {
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  // Every event here is timed (cudaEventElapsedTime), so none is created
  // with cudaEventDisableTiming.
  // The events Run waits on block the thread with cuda_blocking_sync.
  const unsigned wait_flags = options_.cuda_blocking_sync ? cudaEventBlockingSync : cudaEventDefault;
  for (StageSlot& slot : slots_) {
    RETURN_IF_CUDA_ERROR(cudaEventCreate(&slot.copy_start));
    RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&slot.copy_done, wait_flags));
  }
  RETURN_IF_CUDA_ERROR(cudaEventCreate(&d2h_start_));
  RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&d2h_done_, wait_flags));
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
  RETURN_IF_CUDA_ERROR(cudaMemPoolCreate(&pool_, &props));
  uint64_t keep_everything = std::numeric_limits<uint64_t>::max();  // never trimmed at synchronisation
  RETURN_IF_CUDA_ERROR(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything));

  RETURN_IF_CUDA_ERROR(cudaMalloc(&linear_workspace_, kLinearWorkspaceBytes));

  int in = config_.num_dense_features;
  for (size_t i = 0; i < config_.bottom_mlp.size(); ++i) {
    const std::string p = "bottom_mlp." + std::to_string(i);
    DeviceLayer layer = {nullptr, nullptr, in, config_.bottom_mlp[i]};
    RETURN_IF_ERROR(UploadF32(*w.Find(p + ".weight"), &layer.weight));
    RETURN_IF_ERROR(UploadF32(*w.Find(p + ".bias"), &layer.bias));
    bottom_.push_back(layer);
    in = layer.out;
  }
  in = config_.top_mlp_input_width();
  for (size_t i = 0; i < config_.top_mlp.size(); ++i) {
    const std::string p = "top_mlp." + std::to_string(i);
    DeviceLayer layer = {nullptr, nullptr, in, config_.top_mlp[i]};
    RETURN_IF_ERROR(UploadF32(*w.Find(p + ".weight"), &layer.weight));
    RETURN_IF_ERROR(UploadF32(*w.Find(p + ".bias"), &layer.bias));
    top_.push_back(layer);
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
  void* p = nullptr;
  RETURN_IF_ERROR(Upload(qkv.data(), qkv.size() * sizeof(float), &p));
  wqkv_ = static_cast<const float*>(p);
  RETURN_IF_ERROR(UploadF32(*w.Find("history.attn.o"), &wo_));
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
  if (attn_dtype_ == DType::kFloat32) {
    *out = src;
    return Status::Ok();
  }
  void* dst = nullptr;
  RETURN_IF_ERROR(AllocAttn(count, &dst));
  CastParams p = {};
  p.in = src;
  p.in_dtype = DType::kFloat32;
  p.out = dst;
  p.out_dtype = attn_dtype_;
  p.count = count;
  RETURN_IF_ERROR(CastCuda(p, stream_));
  *out = dst;
  return Status::Ok();
}

Status CudaModel::FromAttn(const void* src, int64_t count, float** out) {
  if (attn_dtype_ == DType::kFloat32) {
    *out = static_cast<float*>(const_cast<void*>(src));
    return Status::Ok();
  }
  RETURN_IF_ERROR(Alloc(static_cast<size_t>(count), out));
  CastParams p = {};
  p.in = src;
  p.in_dtype = attn_dtype_;
  p.out = *out;
  p.out_dtype = DType::kFloat32;
  p.count = count;
  return CastCuda(p, stream_);
}

void CudaModel::FreeBatchWorkspace() {
  for (void* p : live_) cudaFreeAsync(p, stream_);
  live_.clear();
  live_bytes_ = 0;
}

Status CudaModel::Linear(const float* x, const float* w, int m, int n, int k, float* y) {
  LinearParams p = {};
  p.x = x;
  p.weight = w;
  p.m = m;
  p.n = n;
  p.k = k;
  p.y = y;
  return RunLinear(p);
}

Status CudaModel::RunLinear(LinearParams p) {
  p.workspace = linear_workspace_;
  p.workspace_bytes = kLinearWorkspaceBytes;
  return LinearCuda(p, stream_, tf32_);
}

Status CudaModel::Mlp(const std::vector<DeviceLayer>& layers, bool relu_last, const float* x, int m, float** out) {
  const float* in = x;
  float* y = nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    RETURN_IF_ERROR(Alloc(size_t(m) * layers[i].out, &y));
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
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.copy_done));
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
  // Grow-only, amortised. The old buffers are idle (copy done, Run returned);
  // cudaFree may wait for the device, which happens only while growing.
  if (layout.total > slot->host_bytes) {
    const size_t bytes = std::max(layout.total, slot->host_bytes * 2);
    if (slot->host != nullptr) cudaFreeHost(slot->host);
    slot->host = nullptr;
    slot->host_bytes = 0;
    RETURN_IF_CUDA_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&slot->host), bytes, cudaHostAllocDefault));
    slot->host_bytes = bytes;
  }
  if (layout.total > slot->dev_bytes) {
    const size_t bytes = std::max(layout.total, slot->dev_bytes * 2);
    if (slot->dev != nullptr) cudaFree(slot->dev);
    slot->dev = nullptr;
    slot->dev_bytes = 0;
    RETURN_IF_CUDA_ERROR(cudaMalloc(reinterpret_cast<void**>(&slot->dev), bytes));
    slot->dev_bytes = bytes;
  }
  char* host = slot->host;
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
  cudaError_t e = cudaEventRecord(slot->copy_start, copy_stream_);
  if (e == cudaSuccess) e = cudaMemcpyAsync(slot->dev, host, layout.total, cudaMemcpyHostToDevice, copy_stream_);
  if (e == cudaSuccess) e = cudaEventRecord(slot->copy_done, copy_stream_);
  if (e != cudaSuccess) {
    // copy_done may not cover an issued copy: wait for it here instead.
    cudaStreamSynchronize(copy_stream_);
    return CudaErrorStatus(e, "H2D copy of the staged batch", __FILE__, __LINE__);
  }
  return Status::Ok();
}

Status CudaModel::Run(int slot_index, std::vector<float>* scores, ForwardTimings* timings) {
  RETURN_IF_ERROR(CheckSlot(slot_index));
  if (timings != nullptr) *timings = ForwardTimings();
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_));
  StageSlot& slot = slots_[slot_index];
  if (!slot.staged) {
    return Status::Internal("Run(slot = " + std::to_string(slot_index) + "): no batch is staged in this slot");
  }
  slot.staged = false;
  Status s = RunStaged(slot, scores, timings);
  if (live_bytes_ > workspace_peak_bytes_.load()) workspace_peak_bytes_.store(live_bytes_);
  FreeBatchWorkspace();
  // Leave nothing in flight that reads the slot's buffers (the next
  // Stage(slot) may overwrite them as soon as this returns).
  if (!s.ok()) cudaStreamSynchronize(stream_);
  return s;
}

Status CudaModel::RunStaged(const StageSlot& slot, std::vector<float>* scores, ForwardTimings* timings) {
  const int F = static_cast<int>(config_.sparse_features.size());
  const int R = slot.num_requests;
  const int C = slot.num_candidates;
  const int T = slot.num_history_tokens;
  const int d = config_.embedding_dim;
  const int H = config_.attention_heads;
  scores->assign(C, 0.0f);
  if (R == 0 || C == 0) return Status::Ok();
  const int N = slot.max_history;
  const int max_candidates = slot.max_candidates;

  if (static_cast<size_t>(C) > host_scores_count_) {
    const size_t count = std::max<size_t>(C, 2 * host_scores_count_);
    if (host_scores_ != nullptr) cudaFreeHost(host_scores_);
    host_scores_ = nullptr;
    host_scores_count_ = 0;
    RETURN_IF_CUDA_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&host_scores_), count * sizeof(float),
                                       cudaHostAllocDefault));
    host_scores_count_ = count;
  }

  // The compute stream starts once the slot's H2D copy has landed.
  RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(stream_, slot.copy_done, 0));
  const char* dev = slot.dev;
  const float* d_dense = reinterpret_cast<const float*>(dev + slot.at_dense);
  const int64_t* d_hist_ids = reinterpret_cast<const int64_t*>(dev + slot.at_hist_ids);
  const int32_t* d_hist_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_hist_offsets);
  const int64_t* d_cand_ids = reinterpret_cast<const int64_t*>(dev + slot.at_cand_ids);
  const int32_t* d_cand_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_cand_offsets);
  const int32_t* d_lengths = reinterpret_cast<const int32_t*>(dev + slot.at_lengths);
  const int32_t* d_cand_lengths = reinterpret_cast<const int32_t*>(dev + slot.at_cand_lengths);
  const int32_t* d_padded_offsets = reinterpret_cast<const int32_t*>(dev + slot.at_padded_offsets);

  // 1. Bottom MLP, once per request: x [R, d].
  float* x = nullptr;
  RETURN_IF_ERROR(Mlp(bottom_, /*relu_last=*/true, d_dense, R, &x));

  // 2. Pooled sparse features [F, R, d].
  float* pooled = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(F) * R * d, &pooled));
  for (int f = 0; f < F; ++f) {
    EmbeddingBagParams p = {};
    p.ids = reinterpret_cast<const int64_t*>(dev + slot.at_sparse_ids[f]);
    p.offsets = reinterpret_cast<const int32_t*>(dev + slot.at_sparse_offsets[f]);
    p.batch = R;
    p.table = sparse_tables_[f];
    p.table_dtype = table_dtype_;
    p.num_rows = config_.sparse_features[f].num_rows;
    p.dim = d;
    p.out = pooled + size_t(f) * R * d;
    RETURN_IF_ERROR(EmbeddingBagCuda(p, stream_));
  }

  // 5. Candidate embeddings e [C, d].
  float* e = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(C) * d, &e));
  {
    GatherRowsParams p = {};
    p.ids = d_cand_ids;
    p.count = C;
    p.table = item_table_;
    p.table_dtype = table_dtype_;
    p.num_rows = config_.item_rows;
    p.dim = d;
    p.out = e;
    RETURN_IF_ERROR(GatherRowsCuda(p, stream_));
  }

  float* u = nullptr;  // [C, d]
  if (T == 0) {
    // No request has history: every u_c is the zero vector (DESIGN.md step 6).
    RETURN_IF_ERROR(Alloc(size_t(C) * d, &u));
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(u, 0, size_t(C) * d * sizeof(float), stream_));
  } else {
    // 3. History embeddings h [T, d].
    float* h = nullptr;
    RETURN_IF_ERROR(Alloc(size_t(T) * d, &h));
    {
      HistoryGatherParams p = {};
      p.ids = d_hist_ids;
      p.offsets = d_hist_offsets;
      p.batch = R;
      p.item_table = item_table_;
      p.table_dtype = table_dtype_;
      p.item_rows = config_.item_rows;
      p.position_table = position_table_;
      p.max_len = config_.max_history_len;
      p.dim = d;
      p.out = h;
      RETURN_IF_ERROR(HistoryGatherCuda(p, stream_));
    }
    const size_t esize = DTypeSize(attn_dtype_);
    AttentionParams self = {};
    self.dtype = attn_dtype_;
    self.num_heads = H;
    self.head_dim = d / H;
    self.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d / H));
    self.batch = R;

    // 4. Self-attention: z = h + MHA(h) Wo^T; jagged [T, d] or padded [R, N, d].
    const float* z = nullptr;
    const bool jagged = options_.attention == AttentionStrategy::kJagged;
    const float* tokens = h;  // the rows the projections run over
    int64_t rows = T;
    if (!jagged) {
      float* hp = nullptr;
      RETURN_IF_ERROR(Alloc(size_t(R) * N * d, &hp));
      JaggedToPaddedParams p = {};
      p.values = h;
      p.offsets = d_hist_offsets;
      p.batch = R;
      p.max_len = N;
      p.width = d;
      p.dtype = DType::kFloat32;
      p.padded = hp;
      RETURN_IF_ERROR(JaggedToPaddedCuda(p, stream_));
      tokens = hp;
      rows = int64_t{R} * N;
    }
    void* o_attn = nullptr;
    RETURN_IF_ERROR(AllocAttn(rows * d, &o_attn));
    if (options_.attention != AttentionStrategy::kPaddedDense) {
      float* qkv = nullptr;
      RETURN_IF_ERROR(Alloc(size_t(rows) * 3 * d, &qkv));
      RETURN_IF_ERROR(Linear(tokens, wqkv_, static_cast<int>(rows), 3 * d, d, qkv));
      const void* qkv_attn = nullptr;
      RETURN_IF_ERROR(ToAttn(qkv, rows * 3 * d, &qkv_attn));
      const char* base = static_cast<const char*>(qkv_attn);
      self.q = base;
      self.k = base + d * esize;
      self.v = base + 2 * d * esize;
      self.o = o_attn;
      self.q_row_stride = self.k_row_stride = self.v_row_stride = 3 * d;
      self.o_row_stride = d;
      self.q_offsets = self.k_offsets = jagged ? d_hist_offsets : d_padded_offsets;
      self.max_q_len = self.max_k_len = N;
      self.maybe_k_valid_len = jagged ? nullptr : d_lengths;
      RETURN_IF_ERROR(JaggedAttentionCuda(self, stream_));
    } else {
      const void* proj[3];
      const float* w[3] = {wqkv_, wqkv_ + size_t(d) * d, wqkv_ + size_t(2) * d * d};
      for (int i = 0; i < 3; ++i) {
        float* y = nullptr;
        RETURN_IF_ERROR(Alloc(size_t(rows) * d, &y));
        RETURN_IF_ERROR(Linear(tokens, w[i], static_cast<int>(rows), d, d, y));
        RETURN_IF_ERROR(ToAttn(y, rows * d, &proj[i]));
      }
      PaddedDenseAttentionParams p = {};
      p.q = proj[0];
      p.k = proj[1];
      p.v = proj[2];
      p.q_len = p.k_len = d_lengths;
      p.batch = R;
      p.max_q_len = p.max_k_len = N;
      p.num_heads = H;
      p.head_dim = d / H;
      p.softmax_scale = self.softmax_scale;
      p.dtype = attn_dtype_;
      p.o = o_attn;
      RETURN_IF_ERROR(Alloc(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / 4), &p.workspace));
      RETURN_IF_ERROR(PaddedDenseAttentionCuda(p, stream_));
    }
    float* o = nullptr;
    RETURN_IF_ERROR(FromAttn(o_attn, rows * d, &o));
    float* zw = nullptr;
    RETURN_IF_ERROR(Alloc(size_t(rows) * d, &zw));
    RETURN_IF_ERROR(Linear(o, wo_, static_cast<int>(rows), d, d, zw));
    RETURN_IF_ERROR(AddInPlaceCuda(zw, tokens, rows * d, stream_));
    z = zw;

    // 6. Target attention: u_c over its request's z (padded: masked by length).
    const void* e_attn = nullptr;
    const void* z_attn = nullptr;
    RETURN_IF_ERROR(ToAttn(e, int64_t{C} * d, &e_attn));
    RETURN_IF_ERROR(ToAttn(z, rows * d, &z_attn));
    void* u_attn = nullptr;
    RETURN_IF_ERROR(AllocAttn(int64_t{C} * d, &u_attn));
    const float target_scale = 1.0f / std::sqrt(static_cast<float>(d));
    if (options_.attention != AttentionStrategy::kPaddedDense) {
      AttentionParams p = {};
      p.q = e_attn;
      p.k = z_attn;
      p.v = z_attn;
      p.o = u_attn;
      p.dtype = attn_dtype_;
      p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = d;
      p.q_offsets = d_cand_offsets;
      p.k_offsets = jagged ? d_hist_offsets : d_padded_offsets;
      p.batch = R;
      p.num_heads = 1;
      p.head_dim = d;
      p.max_q_len = max_candidates;
      p.max_k_len = N;
      p.softmax_scale = target_scale;
      p.maybe_k_valid_len = jagged ? nullptr : d_lengths;
      RETURN_IF_ERROR(JaggedAttentionCuda(p, stream_));
    } else {
      const int Cmax = max_candidates;
      void* ep = nullptr;
      void* up = nullptr;
      RETURN_IF_ERROR(AllocAttn(int64_t{R} * Cmax * d, &ep));
      RETURN_IF_ERROR(AllocAttn(int64_t{R} * Cmax * d, &up));
      JaggedToPaddedParams tp = {};
      tp.values = e_attn;
      tp.offsets = d_cand_offsets;
      tp.batch = R;
      tp.max_len = Cmax;
      tp.width = d;
      tp.dtype = attn_dtype_;
      tp.padded = ep;
      RETURN_IF_ERROR(JaggedToPaddedCuda(tp, stream_));
      PaddedDenseAttentionParams p = {};
      p.q = ep;
      p.k = z_attn;
      p.v = z_attn;
      p.q_len = d_cand_lengths;
      p.k_len = d_lengths;
      p.batch = R;
      p.max_q_len = Cmax;
      p.max_k_len = N;
      p.num_heads = 1;
      p.head_dim = d;
      p.softmax_scale = target_scale;
      p.dtype = attn_dtype_;
      p.o = up;
      RETURN_IF_ERROR(Alloc(static_cast<size_t>(PaddedDenseAttentionWorkspaceBytes(p) / 4), &p.workspace));
      RETURN_IF_ERROR(PaddedDenseAttentionCuda(p, stream_));
      PaddedToJaggedParams bp = {};
      bp.padded = up;
      bp.offsets = d_cand_offsets;
      bp.batch = R;
      bp.max_len = Cmax;
      bp.width = d;
      bp.dtype = attn_dtype_;
      bp.values = u_attn;
      RETURN_IF_ERROR(PaddedToJaggedCuda(bp, stream_));
    }
    RETURN_IF_ERROR(FromAttn(u_attn, int64_t{C} * d, &u));
    padding_saved_bytes_ += slot.padding_saved_bytes;
  }

  // 7. Interaction [C, d + n(n-1)/2], request vectors read through candidate offsets.
  float* inter = nullptr;
  RETURN_IF_ERROR(Alloc(size_t(C) * config_.top_mlp_input_width(), &inter));
  {
    DotInteractionParams p = {};
    p.x = x;
    p.pooled = pooled;
    p.num_sparse = F;
    p.u = u;
    p.e = e;
    p.candidate_offsets = d_cand_offsets;
    p.num_requests = R;
    p.num_candidates = C;
    p.dim = d;
    p.out = inter;
    RETURN_IF_ERROR(DotInteractionCuda(p, stream_));
  }
  // 8. Top MLP, sigmoid, scores back to the host.
  float* logits = nullptr;
  RETURN_IF_ERROR(Mlp(top_, /*relu_last=*/false, inter, C, &logits));
  RETURN_IF_ERROR(SigmoidInPlaceCuda(logits, C, stream_));
  RETURN_IF_CUDA_ERROR(cudaEventRecord(d2h_start_, stream_));
  RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(host_scores_, logits, size_t(C) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  RETURN_IF_CUDA_ERROR(cudaEventRecord(d2h_done_, stream_));
  // d2h_done_ is the stream's last work, so either wait covers the whole batch.
  if (options_.cuda_blocking_sync) {
    RETURN_IF_CUDA_ERROR(cudaEventSynchronize(d2h_done_));
  } else {
    RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  }
  std::memcpy(scores->data(), host_scores_, size_t(C) * sizeof(float));
  if (timings != nullptr) {
    // Both copies are complete: the stream waited for copy_done and was synchronised.
    float ms = 0;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, slot.copy_start, slot.copy_done));
    timings->h2d_seconds = ms * 1e-3;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, d2h_start_, d2h_done_));
    timings->d2h_seconds = ms * 1e-3;
  }
  return Status::Ok();
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
