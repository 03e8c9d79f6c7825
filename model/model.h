// Model: the DLRM-style ranking model of docs/model.md on one backend.
//
//   std::unique_ptr<Model> model;
//   RETURN_IF_ERROR(Model::Create(config, weights, options, &model));
//   std::vector<float> scores;                 // one per candidate, in (0, 1)
//   RETURN_IF_ERROR(model->Forward(batch, &scores));
//
// Or in two phases, so that moving one batch to the device overlaps the
// compute of another (the executor's pipeline):
//
//   RETURN_IF_ERROR(model->Stage(batch_a, 0));  // thread 1
//   RETURN_IF_ERROR(model->Run(0, &scores_a, &timings));  // thread 2, while
//   RETURN_IF_ERROR(model->Stage(batch_b, 1));  // thread 1 copies the next
//
// Run is Launch then Wait. Split, the next batch is queued on the device
// before the current one is waited for, so the device never idles between
// two batches (AsyncLaunch() says whether Launch returns before the batch
// is computed):
//
//   RETURN_IF_ERROR(model->Launch(1));               // batch_b queued behind batch_a
//   RETURN_IF_ERROR(model->Wait(0, &scores_a, &timings));
//
// Backends: "cpu" (float32, OpenBLAS + the CPU kernels; the weights are used
// in place, e.g. straight from the mmap'ed safetensors file; Stage only
// remembers the batch, Run computes it) and "cuda:N" (weights uploaded once
// at Create, tables and attention operands in bf16 unless
// ModelOptions::cuda_bf16 is false; per staging slot a pinned host buffer and
// a device input buffer, Stage packs the batch into the pinned one and issues
// one async H2D copy on a copy stream; Launch queues the pass on the compute
// stream with per-batch workspace from a stream-ordered pool that keeps its
// memory, then one D2H copy of the scores; Wait waits for that copy).
//
// Thread safety: Forward, Stage and Run are NOT thread-safe in general (they
// own per-backend workspace, streams and handles). Exactly this concurrency
// is allowed: Stage(batch, a) on one thread while Run(b) or Stage(other, b)
// runs on another, for slots a != b. Calls on one slot must be ordered by the
// caller (Stage(s) happens-before Run(s) happens-before the next Stage(s);
// with the split form, Stage(s) before Launch(s) before Wait(s) before the
// next Stage(s)), Run, Launch and Wait are called from one thread at a time,
// and Forward (which uses slot 0) must not overlap any other call. The accessors and Memory() may be called from any thread.
#ifndef JAGRANK_MODEL_MODEL_H_
#define JAGRANK_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"

namespace jagrank {

enum class AttentionStrategy { kJagged, kPaddedFlash, kPaddedDense };
const char* AttentionStrategyName(AttentionStrategy s);  // "jagged", ...
Status ParseAttentionStrategy(const std::string& name, AttentionStrategy* out);

// What a batch of `requests` histories costs a strategy, in the unit of the
// batcher's max_batch_attention_cost budget: the jagged strategy computes
// the sum over requests of L^2; the padded ones compute and allocate
// R * (longest L)^2.
inline int64_t JaggedAttentionCost(int64_t /*requests*/, int64_t sum_of_squares, int64_t /*longest*/) {
  return sum_of_squares;
}
inline int64_t PaddedAttentionCost(int64_t requests, int64_t /*sum_of_squares*/, int64_t longest) {
  return requests * longest * longest;
}

struct ModelOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N" ("auto" is resolved by the caller)
  AttentionStrategy attention = AttentionStrategy::kJagged;
  int cpu_threads = 0;         // 0 = hardware concurrency
  // CUDA only: embedding/position tables and attention operands in bf16, and
  // the MLP / projection GEMMs on tensor cores in TF32 (float32 accumulation
  // throughout); false keeps everything float32 (the GEMMs were ~40% of a
  // forward pass's GPU time as fp32 SIMT kernels on the H200).
  bool cuda_bf16 = true;
};

struct ModelMemory {
  int64_t weights_bytes = 0;          // model weights as resident on the device
  int64_t device_used_bytes = 0;      // whole device, from cudaMemGetInfo (0 on CPU)
  int64_t device_total_bytes = 0;     // (0 on CPU)
  int64_t workspace_peak_bytes = 0;   // peak per-batch workspace of this model (CUDA: pool allocations of one batch)
  // Cumulative, jagged strategy only: bytes a padded [R, N, d] layout of the
  // six per-token self-attention activations (h, q, k, v, attention output,
  // z) would have needed beyond the jagged [T, d] ones, N = the batch's
  // longest history. 0 for the padded strategies (they pay it).
  int64_t padding_saved_bytes = 0;
};

// What one Run measured on the device. Zeros on the CPU backend.
struct ForwardTimings {
  double h2d_seconds = 0;  // the staged batch's host->device copy, from CUDA events around it
  double d2h_seconds = 0;  // the scores' device->host copy, from CUDA events around it
};

class Model {
 public:
  // Staging slots of Stage/Run: two, so one batch can be copied while the
  // other computes.
  static constexpr int kStageSlots = 2;

  virtual ~Model() = default;

  // Builds the model on options.device. `weights` is consumed (moved onto
  // the device / into the CPU backend); empty weights (a default-constructed
  // ModelWeights) mean the deterministic random model of config.seed
  // (MakeRandomWeights). Errors name the bad input.
  static Status Create(const ModelConfig& config, ModelWeights weights, const ModelOptions& options,
                       std::unique_ptr<Model>* out);

  // scores->size() == batch.num_candidates() on success.
  // REQUIRES: ValidateBatchShape(batch, ...) is OK (Forward re-checks cheaply).
  virtual Status Forward(const Batch& batch, std::vector<float>* scores) = 0;

  // First phase of a forward pass: checks `batch` and starts moving it to the
  // device into staging slot `slot` (0 <= slot < kStageSlots); returns
  // without waiting for the copy. Waits first until the previous use of
  // `slot` is finished (its copy done; its Run or Wait has returned by
  // contract).
  // Staging a slot again before its Run discards the earlier batch.
  // REQUIRES: `batch` stays alive and unchanged until Run(slot) returns or
  // the slot is staged again (the CPU backend computes from it in Run).
  // The default remembers &batch; Run(slot) then calls Forward on it.
  virtual Status Stage(const Batch& batch, int slot);

  // Second phase: computes the batch staged in `slot`, waits for its scores
  // (scores->size() == its num_candidates() on success) and frees the slot
  // for the next Stage, success or not. `timings` may be null. Error (and
  // nothing computed) when nothing is staged in `slot`, e.g. after a failed
  // Stage.
  virtual Status Run(int slot, std::vector<float>* scores, ForwardTimings* timings);

  // Run in two halves. Launch(slot) starts the batch staged in `slot`;
  // Wait(slot, ...) waits for it and is then what Run is (scores, timings,
  // the slot freed). Both slots may be launched at once; they are waited
  // for in launch order. A Launch that fails leaves nothing in flight and
  // the slot free (no Wait). The defaults compute in Wait (it calls Run);
  // the CUDA backend queues the whole
  // pass and the scores' copy on its stream in Launch.
  virtual Status Launch(int slot);
  virtual Status Wait(int slot, std::vector<float>* scores, ForwardTimings* timings);
  // True when Launch returns before the batch is computed (then launching
  // the next batch before waiting for this one keeps the device busy).
  virtual bool AsyncLaunch() const { return false; }

  virtual const ModelConfig& config() const = 0;
  virtual std::string device() const = 0;          // "cpu", "cuda:0"
  virtual AttentionStrategy attention() const = 0;
  // What a batch of `requests` histories, whose squared lengths sum to
  // `sum_of_squares` and whose longest is `longest`, costs this model's
  // attention strategy (the batcher's max_batch_attention_cost unit).
  virtual int64_t AttentionCost(int64_t requests, int64_t sum_of_squares, int64_t longest) const = 0;
  virtual std::string version() const = 0;         // content hash of the weights
  virtual ModelMemory Memory() const = 0;

 protected:
  // InvalidArgument naming `slot` and the limit unless 0 <= slot < kStageSlots.
  static Status CheckSlot(int slot);

 private:
  const Batch* staged_[kStageSlots] = {};  // the default Stage/Run; slot s touched only by calls on s
  bool launched_[kStageSlots] = {};        // the default Launch/Wait; the same
};

}  // namespace jagrank

#endif  // JAGRANK_MODEL_MODEL_H_
