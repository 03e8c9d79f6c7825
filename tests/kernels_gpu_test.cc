// CUDA launchers of kernels/ (and the C ABI of kernels/c_api/jagrank_c.h)
// against the CPU functions of kernels/<family>/ on random jagged batches whose
// lengths include 0, 1 and long ones. Every device output is poisoned first
// (0xFF bytes: NaN in fp32 and bf16) so that an element a kernel forgets to
// write shows up as a non-finite value. Tests that need a device skip without
// one; the bad-argument tests run everywhere (launchers reject before any
// CUDA call).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention.h"
#include "kernels/c_api/jagrank_c.h"
#include "kernels/cuda_ops.h"
#include "kernels/dtype.h"
#include "kernels/embedding/embedding.h"
#include "kernels/interaction/interaction.h"
#include "kernels/layout/layout.h"
#include "kernels/linear/linear.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::CountNonFinite;
using testing::IsInvalidArgumentNaming;
using testing::OffsetsFromLengths;
using testing::RandomFloats;
using testing::RandomIds;
using testing::RandomLengths;
using testing::RelativeError;

#define ASSERT_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define ASSERT_STATUS_OK(expr)                 \
  do {                                         \
    const ::jagrank::Status s_ = (expr);       \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

// A device array of T, freed on destruction. Size 0 allocates nothing
// (data() is null), as an empty tensor would.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : count_(count) {
    void* ptr = nullptr;
    if (count_ > 0 && cudaMalloc(&ptr, count_ * sizeof(T)) != cudaSuccess) {
      ptr = nullptr;
      count_ = 0;
      ADD_FAILURE() << "cudaMalloc of " << count * sizeof(T) << " bytes failed";
    }
    ptr_ = static_cast<T*>(ptr);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (count_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  T* data() const { return ptr_; }
  size_t size() const { return count_; }
  // 0xFF in every byte: a NaN in fp32 and in bf16.
  void Poison() {
    if (count_ > 0) {
      EXPECT_EQ(cudaMemset(ptr_, 0xFF, count_ * sizeof(T)), cudaSuccess);
    }
  }
  std::vector<T> ToHost() const {
    std::vector<T> host(count_);
    if (count_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBFloat16(v[i]);
  return out;
}

std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = BFloat16ToFloat(v[i]);
  return out;
}

// Host and device copies of one fp32-or-bf16 tensor built from float values;
// `host_f32` holds exactly what the device stores (bf16-rounded for bf16).
struct Operand {
  Operand(const std::vector<float>& values, DType dtype) : dtype(dtype) {
    if (dtype == DType::kFloat32) {
      host_f32 = values;
      f32 = std::make_unique<DeviceArray<float>>(values);
    } else {
      host_bf16 = ToBf16(values);
      host_f32 = FromBf16(host_bf16);
      bf16 = std::make_unique<DeviceArray<uint16_t>>(host_bf16);
    }
  }
  const void* device() const { return f32 ? static_cast<const void*>(f32->data()) : bf16->data(); }
  const void* host() const {
    return dtype == DType::kFloat32 ? static_cast<const void*>(host_f32.data()) : host_bf16.data();
  }

  DType dtype;
  std::vector<float> host_f32;
  std::vector<uint16_t> host_bf16;
  std::unique_ptr<DeviceArray<float>> f32;
  std::unique_ptr<DeviceArray<uint16_t>> bf16;
};

// A device output of fp32 or bf16 elements, poisoned, read back as float.
struct Output {
  Output(size_t count, DType dtype) : dtype(dtype) {
    if (dtype == DType::kFloat32) {
      f32 = std::make_unique<DeviceArray<float>>(count);
      f32->Poison();
    } else {
      bf16 = std::make_unique<DeviceArray<uint16_t>>(count);
      bf16->Poison();
    }
  }
  void* device() const { return f32 ? static_cast<void*>(f32->data()) : bf16->data(); }
  std::vector<float> ToHostFloat() const { return f32 ? f32->ToHost() : FromBf16(bf16->ToHost()); }

  DType dtype;
  std::unique_ptr<DeviceArray<float>> f32;
  std::unique_ptr<DeviceArray<uint16_t>> bf16;
};

class KernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    ASSERT_CUDA_OK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void Sync() { ASSERT_CUDA_OK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream_ = nullptr;
};

const DType kDTypes[] = {DType::kFloat32, DType::kBFloat16};

// ---------------------------------------------------------------- embeddings

TEST_F(KernelsGpuTest, EmbeddingBagMatchesCpu) {
  std::mt19937_64 rng(11);
  for (DType dtype : kDTypes) {
    for (int dim : {3, 64, 200}) {  // below a warp, one pass, several passes per thread
      const int64_t rows = 1009;
      const Operand table(RandomFloats(rng, rows * dim), dtype);
      for (int batch : {1, 37}) {
        for (int32_t max_len : {1, 300}) {
          const auto offsets = OffsetsFromLengths(RandomLengths(rng, batch, max_len));
          const auto ids = RandomIds(rng, offsets.back());
          EmbeddingBagParams p = {};
          p.batch = batch;
          p.table_dtype = dtype;
          p.num_rows = rows;
          p.dim = dim;
          std::vector<float> expected(static_cast<size_t>(batch) * dim);
          p.ids = ids.data();
          p.offsets = offsets.data();
          p.table = table.host();
          p.out = expected.data();
          ASSERT_STATUS_OK(EmbeddingBagCpu(p));

          const DeviceArray<int64_t> d_ids(ids);
          const DeviceArray<int32_t> d_offsets(offsets);
          DeviceArray<float> d_out(expected.size());
          d_out.Poison();
          p.ids = d_ids.data();
          p.offsets = d_offsets.data();
          p.table = table.device();
          p.out = d_out.data();
          ASSERT_STATUS_OK(EmbeddingBagCuda(p, stream_));
          Sync();
          const auto got = d_out.ToHost();
          EXPECT_EQ(CountNonFinite(got), 0);
          EXPECT_LT(RelativeError(got, expected), 1e-5)
              << DTypeName(dtype) << " dim " << dim << " batch " << batch << " max_len " << max_len;
        }
      }
    }
  }
}

// Many bag sums in one call: 40 features (two launches of at most 32),
// batches differing per feature (one empty), and a set with a different dim
// (one launch per bag): each equal to EmbeddingBagCpu's.
TEST_F(KernelsGpuTest, EmbeddingBagsMatchCpuPerFeature) {
  std::mt19937_64 rng(12);
  for (const bool mixed_dims : {false, true}) {
    const int features = 40;
    const int64_t rows = 501;
    std::vector<std::unique_ptr<Operand>> tables;
    std::vector<std::vector<int64_t>> ids(features);
    std::vector<std::vector<int32_t>> offsets(features);
    std::vector<std::vector<float>> expected(features);
    std::vector<std::unique_ptr<DeviceArray<int64_t>>> d_ids;
    std::vector<std::unique_ptr<DeviceArray<int32_t>>> d_offsets;
    std::vector<std::unique_ptr<DeviceArray<float>>> d_out;
    std::vector<EmbeddingBagParams> bags(features);
    for (int f = 0; f < features; ++f) {
      const int dim = mixed_dims && f == 7 ? 40 : 64;
      const int batch = f == 3 ? 0 : 1 + f * 5;
      tables.push_back(std::make_unique<Operand>(RandomFloats(rng, rows * dim), DType::kBFloat16));
      offsets[f] = OffsetsFromLengths(RandomLengths(rng, batch, 9));
      ids[f] = RandomIds(rng, offsets[f].back());
      expected[f].resize(static_cast<size_t>(batch) * dim);
      EmbeddingBagParams& p = bags[f];
      p.batch = batch;
      p.table_dtype = DType::kBFloat16;
      p.num_rows = rows;
      p.dim = dim;
      p.ids = ids[f].data();
      p.offsets = offsets[f].data();
      p.table = tables[f]->host();
      p.out = expected[f].data();
      ASSERT_STATUS_OK(EmbeddingBagCpu(p));
      d_ids.push_back(std::make_unique<DeviceArray<int64_t>>(ids[f]));
      d_offsets.push_back(std::make_unique<DeviceArray<int32_t>>(offsets[f]));
      d_out.push_back(std::make_unique<DeviceArray<float>>(expected[f].size()));
      d_out[f]->Poison();
      p.ids = d_ids[f]->data();
      p.offsets = d_offsets[f]->data();
      p.table = tables[f]->device();
      p.out = d_out[f]->data();
    }
    ASSERT_STATUS_OK(EmbeddingBagsCuda(bags.data(), features, stream_));
    Sync();
    for (int f = 0; f < features; ++f) {
      const auto got = d_out[f]->ToHost();
      EXPECT_EQ(CountNonFinite(got), 0);
      EXPECT_LT(RelativeError(got, expected[f]), 1e-6) << "feature " << f << " mixed dims " << mixed_dims;
    }
  }
}

TEST_F(KernelsGpuTest, GatherRowsMatchesCpu) {
  std::mt19937_64 rng(12);
  for (DType dtype : kDTypes) {
    for (int dim : {5, 64, 130}) {
      const int64_t rows = 517;
      const Operand table(RandomFloats(rng, rows * dim), dtype);
      for (int64_t count : {1, 2, 1001}) {
        const auto ids = RandomIds(rng, count);
        GatherRowsParams p = {};
        p.count = count;
        p.table_dtype = dtype;
        p.num_rows = rows;
        p.dim = dim;
        std::vector<float> expected(count * dim);
        p.ids = ids.data();
        p.table = table.host();
        p.out = expected.data();
        ASSERT_STATUS_OK(GatherRowsCpu(p));

        const DeviceArray<int64_t> d_ids(ids);
        DeviceArray<float> d_out(expected.size());
        d_out.Poison();
        p.ids = d_ids.data();
        p.table = table.device();
        p.out = d_out.data();
        ASSERT_STATUS_OK(GatherRowsCuda(p, stream_));
        Sync();
        const auto got = d_out.ToHost();
        EXPECT_EQ(CountNonFinite(got), 0);
        EXPECT_EQ(got, expected) << DTypeName(dtype) << " dim " << dim << " count " << count;  // a copy: exact
        if (dtype != DType::kBFloat16) continue;
        // bf16 rows gathered as bf16 (the CUDA model's split interaction): the same values.
        Output bf16_out(expected.size(), DType::kBFloat16);
        p.out = bf16_out.device();
        p.out_dtype = DType::kBFloat16;
        ASSERT_STATUS_OK(GatherRowsCuda(p, stream_));
        Sync();
        EXPECT_EQ(bf16_out.ToHostFloat(), expected) << "bf16 out, dim " << dim << " count " << count;
        p.out_dtype = DType::kFloat32;
      }
    }
  }
}

TEST_F(KernelsGpuTest, HistoryGatherMatchesCpu) {
  std::mt19937_64 rng(13);
  for (DType dtype : kDTypes) {
    for (int dim : {7, 64, 256}) {
      const int64_t item_rows = 2003;
      const int max_len = 600;  // several grid.y chunks of tokens per sequence
      const Operand items(RandomFloats(rng, item_rows * dim), dtype);
      const Operand positions(RandomFloats(rng, static_cast<size_t>(max_len) * dim), dtype);
      for (int batch : {1, 29}) {
        for (int32_t longest : {1, max_len}) {
          const auto offsets = OffsetsFromLengths(RandomLengths(rng, batch, longest));
          const auto ids = RandomIds(rng, offsets.back());
          HistoryGatherParams p = {};
          p.batch = batch;
          p.table_dtype = dtype;
          p.item_rows = item_rows;
          p.max_len = max_len;
          p.dim = dim;
          std::vector<float> expected(static_cast<size_t>(offsets.back()) * dim);
          p.ids = ids.data();
          p.offsets = offsets.data();
          p.item_table = items.host();
          p.position_table = positions.host();
          p.out = expected.data();
          ASSERT_STATUS_OK(HistoryGatherCpu(p));

          const DeviceArray<int64_t> d_ids(ids);
          const DeviceArray<int32_t> d_offsets(offsets);
          DeviceArray<float> d_out(expected.size());
          d_out.Poison();
          p.ids = d_ids.data();
          p.offsets = d_offsets.data();
          p.item_table = items.device();
          p.position_table = positions.device();
          p.out = d_out.data();
          ASSERT_STATUS_OK(HistoryGatherCuda(p, stream_));
          Sync();
          const auto got = d_out.ToHost();
          EXPECT_EQ(CountNonFinite(got), 0);
          EXPECT_LT(RelativeError(got, expected), 1e-6)
              << DTypeName(dtype) << " dim " << dim << " batch " << batch << " longest " << longest;

          // bf16 out, the grid bounded by the batch's longest history: the
          // same sums, rounded once.
          DeviceArray<uint16_t> d_out_bf16(expected.size());
          d_out_bf16.Poison();
          p.out = d_out_bf16.data();
          p.out_dtype = DType::kBFloat16;
          p.longest = longest;
          ASSERT_STATUS_OK(HistoryGatherCuda(p, stream_));
          Sync();
          EXPECT_EQ(FromBf16(d_out_bf16.ToHost()), FromBf16(ToBf16(expected)))
              << DTypeName(dtype) << " dim " << dim << " batch " << batch << " longest " << longest;
        }
      }
    }
  }
}

TEST_F(KernelsGpuTest, HistoryGatherOfOnlyEmptyHistoriesAcceptsEmptyTensors) {
  // T = 0: ids and out are empty tensors (null pointers); nothing is read or written.
  const std::vector<int32_t> offsets = {0, 0, 0, 0};
  const DeviceArray<int32_t> d_offsets(offsets);
  const DeviceArray<float> table(std::vector<float>(8, 1.0f));
  HistoryGatherParams p = {};
  p.offsets = d_offsets.data();
  p.batch = 3;
  p.item_table = table.data();
  p.table_dtype = DType::kFloat32;
  p.item_rows = 2;
  p.position_table = table.data();
  p.max_len = 2;
  p.dim = 4;
  ASSERT_STATUS_OK(HistoryGatherCuda(p, stream_));
  Sync();
}

// --------------------------------------------------------------- interaction

TEST_F(KernelsGpuTest, DotInteractionMatchesCpu) {
  std::mt19937_64 rng(14);
  // (num_sparse, dim), n = num_sparse + 3 vectors. Up to 10 vectors run the
  // register kernel: the model's shape (6, 64); dims off the warp size; up
  // to 9 vectors its candidate pairs fit in 16 partials, 10 vectors (7
  // features) take 32. Above 10,
  // the shared-memory kernel: 16 and 17 vectors; 43 (903 pairs, lanes take
  // many rounds, rows beyond 32 banks); and 33 vectors of 1000 floats, whose
  // 132 KB of shared memory leave room for one candidate per block only.
  const int shapes[][2] = {{0, 8},  {0, 64},  {1, 100}, {1, 31},  {6, 64},  {6, 100},  {6, 33},
                           {7, 47}, {7, 5},   {7, 64},  {13, 64}, {14, 64}, {40, 64}, {30, 1000}};
  for (const auto& shape : shapes) {
    const int num_sparse = shape[0], dim = shape[1];
    // 1100 requests: a deep binary search over the offsets (the CPU reference
    // of the two large shapes would take minutes there).
    // Requests of up to 150 candidates, and of up to 3 (the register
    // kernel's warps take 16 (F <= 6) or 8 consecutive candidates, two at a
    // time when they share a request: these span several requests, some
    // without candidates, and pairs straddle request boundaries).
    for (const auto& [num_requests, max_candidates] : {std::pair{1, 150}, {23, 150}, {1100, 150}, {300, 3}}) {
      if (num_requests > 23 && (num_sparse + 3) * dim > 1000) continue;
      // Candidates per request include 0 (a request with none) and long runs.
      const auto offsets = OffsetsFromLengths(RandomLengths(rng, num_requests, max_candidates));
      const int num_candidates = offsets.back();
      const auto x = RandomFloats(rng, static_cast<size_t>(num_requests) * dim);
      const auto pooled = RandomFloats(rng, static_cast<size_t>(num_sparse) * num_requests * dim);
      const auto u = RandomFloats(rng, static_cast<size_t>(num_candidates) * dim);
      const auto e = RandomFloats(rng, static_cast<size_t>(num_candidates) * dim);
      const int width = DotInteractionOutputWidth(num_sparse, dim);
      DotInteractionParams p = {};
      p.num_sparse = num_sparse;
      p.num_requests = num_requests;
      p.num_candidates = num_candidates;
      p.dim = dim;
      std::vector<float> expected(static_cast<size_t>(num_candidates) * width);
      p.x = x.data();
      p.pooled = num_sparse > 0 ? pooled.data() : nullptr;
      p.u = u.data();
      p.e = e.data();
      p.candidate_offsets = offsets.data();
      p.out = expected.data();
      ASSERT_STATUS_OK(DotInteractionCpu(p));

      const DeviceArray<float> d_x(x), d_pooled(pooled), d_u(u), d_e(e);
      const DeviceArray<int32_t> d_offsets(offsets);
      DeviceArray<float> d_out(expected.size());
      d_out.Poison();
      p.x = d_x.data();
      p.pooled = d_pooled.data();
      p.u = d_u.data();
      p.e = d_e.data();
      p.candidate_offsets = d_offsets.data();
      p.out = d_out.data();
      ASSERT_STATUS_OK(DotInteractionCuda(p, stream_));
      Sync();
      const auto got = d_out.ToHost();
      EXPECT_EQ(CountNonFinite(got), 0);
      EXPECT_LT(RelativeError(got, expected), 1e-5)
          << "F " << num_sparse << " dim " << dim << " requests " << num_requests << " of <= " << max_candidates;
    }
  }
}

// The split form (what the CUDA model runs): request rows and candidate rows
// padded to strides, against DotInteractionSplitCpu; the production model's
// 26 features (27 request vectors: two rounds of 16 in the candidate
// kernel), dims off the warp size, requests without candidates.
TEST_F(KernelsGpuTest, DotInteractionSplitMatchesCpuWithZeroPadding) {
  std::mt19937_64 rng(15);
  const int shapes[][2] = {{0, 8}, {1, 31}, {6, 64}, {15, 64}, {16, 33}, {26, 128}, {40, 100}};
  for (const auto& shape : shapes) {
    const int num_sparse = shape[0], dim = shape[1];
    for (const auto& [num_requests, max_candidates] : {std::pair{1, 150}, {37, 150}, {300, 3}}) {
      const auto offsets = OffsetsFromLengths(RandomLengths(rng, num_requests, max_candidates));
      const int num_candidates = offsets.back();
      const auto x = RandomFloats(rng, static_cast<size_t>(num_requests) * dim);
      const auto pooled = RandomFloats(rng, static_cast<size_t>(num_sparse) * num_requests * dim);
      const auto u = RandomFloats(rng, static_cast<size_t>(num_candidates) * dim);
      const auto e = RandomFloats(rng, static_cast<size_t>(num_candidates) * dim);
      const int m = num_sparse + 1;
      const int request_width = dim + m * (m - 1) / 2, candidate_width = 2 * m + 1;
      const int request_stride = request_width + 3, candidate_stride = candidate_width + 5;
      DotInteractionParams p = {};
      p.num_sparse = num_sparse;
      p.num_requests = num_requests;
      p.num_candidates = num_candidates;
      p.dim = dim;
      p.x = x.data();
      p.pooled = num_sparse > 0 ? pooled.data() : nullptr;
      p.u = u.data();
      p.e = e.data();
      p.candidate_offsets = offsets.data();
      std::vector<float> request_cpu(static_cast<size_t>(num_requests) * request_width);
      std::vector<float> candidate_cpu(static_cast<size_t>(num_candidates) * candidate_width);
      ASSERT_STATUS_OK(DotInteractionSplitCpu(p, request_cpu.data(), candidate_cpu.data()));
      // The CPU rows at the strides, zeros in the padding.
      std::vector<float> request_expected(static_cast<size_t>(num_requests) * request_stride, 0.0f);
      std::vector<float> candidate_expected(static_cast<size_t>(num_candidates) * candidate_stride, 0.0f);
      for (int r = 0; r < num_requests; ++r) {
        std::copy_n(request_cpu.begin() + size_t(r) * request_width, request_width,
                    request_expected.begin() + size_t(r) * request_stride);
      }
      for (int c = 0; c < num_candidates; ++c) {
        std::copy_n(candidate_cpu.begin() + size_t(c) * candidate_width, candidate_width,
                    candidate_expected.begin() + size_t(c) * candidate_stride);
      }

      const DeviceArray<float> d_x(x), d_pooled(pooled), d_u(u), d_e(e);
      const DeviceArray<int32_t> d_offsets(offsets);
      // max_candidates 0: a warp per candidate found by search; > 0: a block
      // per request chunk with the request's vectors in shared memory.
      for (const int bound : {0, max_candidates}) {
        p.max_candidates = bound;
        DeviceArray<float> d_request(request_expected.size()), d_candidate(candidate_expected.size());
        d_request.Poison();
        d_candidate.Poison();
        p.x = d_x.data();
        p.pooled = d_pooled.data();
        p.u = d_u.data();
        p.e = d_e.data();
        p.candidate_offsets = d_offsets.data();
        ASSERT_STATUS_OK(DotInteractionSplitCuda(p, d_request.data(), request_stride, d_candidate.data(),
                                                 candidate_stride, DType::kFloat32, stream_));
        Sync();
        if (num_candidates == 0) continue;  // nothing is computed (as on the CPU)
        const auto request_got = d_request.ToHost();
        const auto candidate_got = d_candidate.ToHost();
        EXPECT_EQ(CountNonFinite(request_got), 0);
        EXPECT_EQ(CountNonFinite(candidate_got), 0);
        EXPECT_LT(RelativeError(request_got, request_expected), 1e-5) << "F " << num_sparse << " dim " << dim;
        EXPECT_LT(RelativeError(candidate_got, candidate_expected), 1e-5)
            << "F " << num_sparse << " dim " << dim << " requests " << num_requests << " max_candidates " << bound;
        for (int r = 0; r < num_requests; ++r) {
          for (int i = request_width; i < request_stride; ++i) {
            ASSERT_EQ(request_got[size_t(r) * request_stride + i], 0.0f);
          }
        }
        for (int c = 0; c < num_candidates; ++c) {
          for (int i = candidate_width; i < candidate_stride; ++i) {
            ASSERT_EQ(candidate_got[size_t(c) * candidate_stride + i], 0.0f);
          }
        }
      }
      if (num_candidates == 0) continue;
      // u and e in bf16 (what the CUDA model passes with a bf16 attention):
      // the same dots as float32 copies of the same bf16 values give.
      const Operand u16(u, DType::kBFloat16), e16(e, DType::kBFloat16);
      p.u = u16.host_f32.data();
      p.e = e16.host_f32.data();
      p.x = x.data();
      p.pooled = num_sparse > 0 ? pooled.data() : nullptr;
      p.candidate_offsets = offsets.data();
      ASSERT_STATUS_OK(DotInteractionSplitCpu(p, request_cpu.data(), candidate_cpu.data()));
      for (const int bound : {0, max_candidates}) {
        p.max_candidates = bound;
        DeviceArray<float> d_request(request_expected.size()), d_candidate(candidate_expected.size());
        p.x = d_x.data();
        p.pooled = d_pooled.data();
        p.u = u16.device();
        p.e = e16.device();
        p.vector_dtype = DType::kBFloat16;
        p.candidate_offsets = d_offsets.data();
        ASSERT_STATUS_OK(DotInteractionSplitCuda(p, d_request.data(), request_stride, d_candidate.data(),
                                                 candidate_stride, DType::kFloat32, stream_));
        Sync();
        const auto candidate_got = d_candidate.ToHost();
        std::vector<float> candidate_rows(candidate_cpu.size());
        for (int c = 0; c < num_candidates; ++c) {
          std::copy_n(candidate_got.begin() + size_t(c) * candidate_stride, candidate_width,
                      candidate_rows.begin() + size_t(c) * candidate_width);
        }
        EXPECT_LT(RelativeError(candidate_rows, candidate_cpu), 1e-5)
            << "bf16 u, e: F " << num_sparse << " dim " << dim << " requests " << num_requests << " bound " << bound;
        p.vector_dtype = DType::kFloat32;
        p.x = x.data();
        p.pooled = num_sparse > 0 ? pooled.data() : nullptr;
        p.candidate_offsets = offsets.data();
      }
      // The unsplit form and the CPU take float32 u and e only.
      p.vector_dtype = DType::kBFloat16;
      EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, request_cpu.data(), candidate_cpu.data()),
                                          "vector_dtype"));
      p.vector_dtype = DType::kFloat32;
    }
  }
}

TEST_F(KernelsGpuTest, RepeatRowsMatchesCpu) {
  std::mt19937_64 rng(16);
  for (const int width : {1, 37, 1024}) {
    const int batch = 45;
    const auto lengths = RandomLengths(rng, batch, 40);
    const auto offsets = OffsetsFromLengths(lengths);
    const int max_len = *std::max_element(lengths.begin(), lengths.end());
    const auto rows = RandomFloats(rng, static_cast<size_t>(batch) * width);
    std::vector<float> expected(static_cast<size_t>(offsets.back()) * width);
    RepeatRowsParams p = {};
    p.rows = rows.data();
    p.offsets = offsets.data();
    p.batch = batch;
    p.max_len = max_len;
    p.width = width;
    p.dtype = DType::kFloat32;
    p.values = expected.data();
    ASSERT_STATUS_OK(RepeatRowsCpu(p));
    const DeviceArray<float> d_rows(rows);
    const DeviceArray<int32_t> d_offsets(offsets);
    DeviceArray<float> d_values(expected.size());
    d_values.Poison();
    p.rows = d_rows.data();
    p.offsets = d_offsets.data();
    p.values = d_values.data();
    ASSERT_STATUS_OK(RepeatRowsCuda(p, stream_));
    Sync();
    EXPECT_EQ(d_values.ToHost(), expected) << "width " << width;
  }
}

// -------------------------------------------------------------------- padded

TEST_F(KernelsGpuTest, JaggedPaddedRoundTripMatchesCpuBitForBit) {
  std::mt19937_64 rng(15);
  for (DType dtype : kDTypes) {
    for (int64_t width : {1, 64, 384}) {
      for (int batch : {1, 17}) {
        const int max_len = 260;
        const auto offsets = OffsetsFromLengths(RandomLengths(rng, batch, max_len));
        const Operand values(RandomFloats(rng, static_cast<size_t>(offsets.back()) * width), dtype);
        const size_t padded_count = static_cast<size_t>(batch) * max_len * width;
        const size_t esize = DTypeSize(dtype);

        JaggedToPaddedParams to = {};
        to.batch = batch;
        to.max_len = max_len;
        to.width = width;
        to.dtype = dtype;
        std::vector<uint8_t> expected_padded(padded_count * esize);
        to.values = values.host();
        to.offsets = offsets.data();
        to.padded = expected_padded.data();
        ASSERT_STATUS_OK(JaggedToPaddedCpu(to));

        const DeviceArray<int32_t> d_offsets(offsets);
        DeviceArray<uint8_t> d_padded(padded_count * esize);
        d_padded.Poison();
        to.values = values.device();
        to.offsets = d_offsets.data();
        to.padded = d_padded.data();
        ASSERT_STATUS_OK(JaggedToPaddedCuda(to, stream_));
        Sync();
        EXPECT_TRUE(d_padded.ToHost() == expected_padded) << DTypeName(dtype) << " width " << width;

        // Back: every jagged element written from the padded tensor.
        PaddedToJaggedParams back = {};
        back.batch = batch;
        back.max_len = max_len;
        back.width = width;
        back.dtype = dtype;
        back.padded = d_padded.data();
        back.offsets = d_offsets.data();
        DeviceArray<uint8_t> d_values(static_cast<size_t>(offsets.back()) * width * esize);
        d_values.Poison();
        back.values = d_values.data();
        ASSERT_STATUS_OK(PaddedToJaggedCuda(back, stream_));
        Sync();
        const auto round_trip = d_values.ToHost();
        ASSERT_EQ(round_trip.size(), offsets.back() * width * esize);
        EXPECT_EQ(std::memcmp(round_trip.data(), values.host(), round_trip.size()), 0)
            << DTypeName(dtype) << " width " << width;
      }
    }
  }
}

TEST_F(KernelsGpuTest, PaddedDenseAttentionMatchesCpu) {
  std::mt19937_64 rng(16);
  struct Shape {
    int batch, max_q_len, max_k_len, heads, head_dim;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 32}, {6, 40, 40, 2, 32}, {5, 17, 300, 3, 64}, {3, 64, 1000, 1, 128}};
  for (DType dtype : kDTypes) {
    for (const Shape& s : shapes) {
      const int64_t token = int64_t{s.heads} * s.head_dim;
      auto q_len = RandomLengths(rng, s.batch, s.max_q_len);
      auto k_len = RandomLengths(rng, s.batch, s.max_k_len);
      const Operand q(RandomFloats(rng, s.batch * s.max_q_len * token, -2.0f, 2.0f), dtype);
      const Operand k(RandomFloats(rng, s.batch * s.max_k_len * token, -2.0f, 2.0f), dtype);
      const Operand v(RandomFloats(rng, s.batch * s.max_k_len * token), dtype);
      PaddedDenseAttentionParams p = {};
      p.batch = s.batch;
      p.max_q_len = s.max_q_len;
      p.max_k_len = s.max_k_len;
      p.num_heads = s.heads;
      p.head_dim = s.head_dim;
      p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      // The CPU reference is fp32: feed it the values the device holds.
      p.dtype = DType::kFloat32;
      std::vector<float> expected(s.batch * s.max_q_len * token);
      p.q = q.host_f32.data();
      p.k = k.host_f32.data();
      p.v = v.host_f32.data();
      p.q_len = q_len.data();
      p.k_len = k_len.data();
      p.o = expected.data();
      ASSERT_STATUS_OK(PaddedDenseAttentionCpu(p));

      const DeviceArray<int32_t> d_q_len(q_len), d_k_len(k_len);
      DeviceArray<float> workspace(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float));
      workspace.Poison();
      Output o(expected.size(), dtype);
      p.dtype = dtype;
      p.q = q.device();
      p.k = k.device();
      p.v = v.device();
      p.q_len = d_q_len.data();
      p.k_len = d_k_len.data();
      p.o = o.device();
      p.workspace = workspace.data();
      ASSERT_STATUS_OK(PaddedDenseAttentionCuda(p, stream_));
      Sync();
      const auto got = o.ToHostFloat();
      EXPECT_EQ(CountNonFinite(got), 0);
      // fp32: GEMM summation order only. bf16: P and O rounded to 8 bits.
      const double tolerance = dtype == DType::kFloat32 ? 5e-5 : 2e-2;
      EXPECT_LT(RelativeError(got, expected), tolerance)
          << DTypeName(dtype) << " B " << s.batch << " Nq " << s.max_q_len << " Nk " << s.max_k_len;
      for (int b = 0; b < s.batch; ++b) {  // padding query rows and key-less sequences: exact zeros
        for (int i = 0; i < s.max_q_len; ++i) {
          if (i < q_len[b] && k_len[b] > 0) continue;
          for (int64_t x = 0; x < token; ++x) {
            ASSERT_EQ(got[(int64_t{b} * s.max_q_len + i) * token + x], 0.0f) << "b " << b << " i " << i;
          }
        }
      }
    }
  }
}

TEST_F(KernelsGpuTest, PaddedDenseAttentionWithNoKeysWritesZeros) {
  for (DType dtype : kDTypes) {
    const std::vector<int32_t> q_len = {3, 0}, k_len = {0, 0};
    const DeviceArray<int32_t> d_q_len(q_len), d_k_len(k_len);
    Output o(2 * 3 * 2 * 32, dtype);
    PaddedDenseAttentionParams p = {};
    p.batch = 2;
    p.max_q_len = 3;
    p.max_k_len = 0;
    p.num_heads = 2;
    p.head_dim = 32;
    p.softmax_scale = 1.0f;
    p.dtype = dtype;
    p.q_len = d_q_len.data();
    p.k_len = d_k_len.data();
    p.o = o.device();
    ASSERT_STATUS_OK(PaddedDenseAttentionCuda(p, stream_));
    Sync();
    for (float x : o.ToHostFloat()) ASSERT_EQ(x, 0.0f);
  }
}

// -------------------------------------------------------------------- linear

TEST_F(KernelsGpuTest, LinearMatchesCpuWithEveryEpilogue) {
  std::mt19937_64 rng(17);
  struct Shape {
    int m, n, k;
  };
  // The last shape is the top MLP's first layer at 128 requests per batch,
  // where cuBLASLt may pick kernels that use the workspace (split k).
  const Shape shapes[] = {{1, 1, 1}, {37, 65, 13}, {300, 256, 130}, {1024, 1, 479}, {4096, 512, 100}};
  DeviceArray<float> workspace(kLinearWorkspaceBytes / sizeof(float));
  for (const Shape& s : shapes) {
    const auto x = RandomFloats(rng, static_cast<size_t>(s.m) * s.k);
    const auto w = RandomFloats(rng, static_cast<size_t>(s.n) * s.k);
    const auto bias = RandomFloats(rng, s.n);
    const DeviceArray<float> d_x(x), d_w(w), d_bias(bias);
    // accumulate: y += x W^T (+ b) over a y that starts as y0, ReLU on the sum.
    const auto y0 = RandomFloats(rng, static_cast<size_t>(s.m) * s.n);
    for (bool with_bias : {false, true}) {
      for (bool relu : {false, true}) {
        for (int variant = 0; variant < 4; ++variant) {  // fp32; TF32; TF32 with a workspace; accumulate
          const bool tf32 = variant > 0;
          const bool accumulate = variant == 3;
          LinearParams p = {};
          p.accumulate = accumulate;
          if (variant == 2) {
            p.workspace = workspace.data();
            p.workspace_bytes = kLinearWorkspaceBytes;
          }
          p.relu = relu;
          p.m = s.m;
          p.n = s.n;
          p.k = s.k;
          std::vector<float> expected(static_cast<size_t>(s.m) * s.n);
          if (accumulate) expected = y0;
          p.x = x.data();
          p.weight = w.data();
          p.maybe_bias = with_bias ? bias.data() : nullptr;
          p.y = expected.data();
          ASSERT_STATUS_OK(LinearReferenceCpu(p));

          DeviceArray<float> d_y(expected.size());
          d_y.Poison();
          if (accumulate) {
            ASSERT_EQ(cudaMemcpy(d_y.data(), y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice),
                      cudaSuccess);
          }
          p.x = d_x.data();
          p.weight = d_w.data();
          p.maybe_bias = with_bias ? d_bias.data() : nullptr;
          p.y = d_y.data();
          ASSERT_STATUS_OK(LinearCuda(p, stream_, tf32));
          Sync();
          const auto got = d_y.ToHost();
          EXPECT_EQ(CountNonFinite(got), 0);
          // TF32 keeps 10 mantissa bits of each operand.
          EXPECT_LT(RelativeError(got, expected), tf32 ? 5e-3 : 1e-5)
              << "m " << s.m << " n " << s.n << " k " << s.k << " bias " << with_bias << " relu " << relu
              << " variant " << variant;
          if (accumulate) {
            EXPECT_GT(RelativeError(got, y0), 1e-2) << "the sum must differ from y0";
          }
          if (relu) {
            for (float y : got) ASSERT_GE(y, 0.0f);
          }
        }
      }
    }
  }
}

// bf16 operands (x and W), float32 accumulation, y and the bias in float32
// or bf16, with and without accumulation: against the float32 reference on
// the bf16-rounded operands.
TEST_F(KernelsGpuTest, LinearBf16OperandsMatchCpuOnRoundedInputs) {
  std::mt19937_64 rng(18);
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{1, 1, 8}, {37, 64, 56}, {3000, 1024, 480}, {2000, 1, 256}};
  DeviceArray<float> workspace(kLinearWorkspaceBytes / sizeof(float));
  for (const Shape& s : shapes) {
    const auto x_bf16 = ToBf16(RandomFloats(rng, static_cast<size_t>(s.m) * s.k));
    const auto w_bf16 = ToBf16(RandomFloats(rng, static_cast<size_t>(s.n) * s.k));
    const auto y0_bf16 = ToBf16(RandomFloats(rng, static_cast<size_t>(s.m) * s.n));
    const auto x = FromBf16(x_bf16), w = FromBf16(w_bf16), y0 = FromBf16(y0_bf16);
    const auto bias_values = RandomFloats(rng, s.n);
    const DeviceArray<uint16_t> d_x(x_bf16), d_w(w_bf16);
    for (const DType out_dtype : kDTypes) {
      const Operand bias(bias_values, out_dtype);  // host_f32: the values the device holds
      for (const bool accumulate : {false, true}) {
        LinearParams p = {};
        p.relu = true;
        p.m = s.m;
        p.n = s.n;
        p.k = s.k;
        p.accumulate = accumulate;
        std::vector<float> expected = accumulate ? y0 : std::vector<float>(static_cast<size_t>(s.m) * s.n);
        p.x = x.data();
        p.weight = w.data();
        p.maybe_bias = bias.host_f32.data();
        p.y = expected.data();
        ASSERT_STATUS_OK(LinearReferenceCpu(p));

        const bool bf16_out = out_dtype == DType::kBFloat16;
        const Operand y_start(accumulate ? y0 : std::vector<float>(expected.size(), 0.0f), out_dtype);
        p.x = d_x.data();
        p.weight = d_w.data();
        p.maybe_bias = bias.device();
        p.y = const_cast<void*>(y_start.device());
        p.in_dtype = DType::kBFloat16;
        p.out_dtype = out_dtype;
        p.workspace = workspace.data();
        p.workspace_bytes = kLinearWorkspaceBytes;
        ASSERT_STATUS_OK(LinearCuda(p, stream_, /*allow_tf32=*/true));
        Sync();
        const std::vector<float> got = bf16_out ? FromBf16(y_start.bf16->ToHost()) : y_start.f32->ToHost();
        EXPECT_EQ(CountNonFinite(got), 0);
        // bf16 y: one rounding of the result (and of y0 before the sum).
        EXPECT_LT(RelativeError(got, expected), bf16_out ? 1e-2 : 1e-4)
            << "m " << s.m << " n " << s.n << " k " << s.k << " " << DTypeName(out_dtype) << " accumulate "
            << accumulate;
      }
    }
  }
}

TEST_F(KernelsGpuTest, LinearOnUnalignedPointers) {
  // Rows that start 4 bytes into an allocation: the heuristic must be told.
  std::mt19937_64 rng(18);
  const int m = 9, n = 7, k = 5;
  const auto x = RandomFloats(rng, m * k + 1);
  const auto w = RandomFloats(rng, n * k + 1);
  const auto bias = RandomFloats(rng, n + 1);
  const DeviceArray<float> d_x(x), d_w(w), d_bias(bias);
  DeviceArray<float> d_y(m * n + 1);
  d_y.Poison();
  LinearParams p = {};
  p.relu = true;
  p.m = m;
  p.n = n;
  p.k = k;
  std::vector<float> expected(m * n);
  p.x = x.data() + 1;
  p.weight = w.data() + 1;
  p.maybe_bias = bias.data() + 1;
  p.y = expected.data();
  ASSERT_STATUS_OK(LinearReferenceCpu(p));
  p.x = d_x.data() + 1;
  p.weight = d_w.data() + 1;
  p.maybe_bias = d_bias.data() + 1;
  p.y = d_y.data() + 1;
  ASSERT_STATUS_OK(LinearCuda(p, stream_));
  Sync();
  const auto all = d_y.ToHost();
  EXPECT_TRUE(std::isnan(all[0])) << "wrote before y";
  const std::vector<float> got(all.begin() + 1, all.end());
  EXPECT_LT(RelativeError(got, expected), 1e-5);
}

TEST_F(KernelsGpuTest, LinearPlansCachedPerShapeClassStayCorrectAcrossRowCounts) {
  // LinearCuda keeps one cuBLASLt plan per (m rounded up to a power of two,
  // n, k, epilogue, ...) and reuses its algorithm for every m of the class:
  // rows that grow and shrink inside a class, cross classes and come back,
  // with bias pointers that change between calls, must all stay exact.
  std::mt19937_64 rng(21);
  const int n = 96, k = 64;
  const int rows[] = {1000, 513, 1024, 600, 1, 2, 3, 17, 4097, 5000, 8192, 700, 1000, 65, 127, 128};
  const int max_m = 8192;
  const auto x = RandomFloats(rng, static_cast<size_t>(max_m) * k);
  const auto w = RandomFloats(rng, static_cast<size_t>(n) * k);
  const auto bias_a = RandomFloats(rng, n);
  const auto bias_b = RandomFloats(rng, n);
  const DeviceArray<float> d_x(x), d_w(w), d_bias_a(bias_a), d_bias_b(bias_b);
  int call = 0;
  for (int m : rows) {
    for (int variant = 0; variant < 3; ++variant, ++call) {
      const bool with_bias = variant != 0;
      const std::vector<float>& bias = variant == 2 ? bias_b : bias_a;
      LinearParams p = {};
      p.relu = (call % 2) == 1;
      p.m = m;
      p.n = n;
      p.k = k;
      std::vector<float> expected(static_cast<size_t>(m) * n);
      p.x = x.data();
      p.weight = w.data();
      p.maybe_bias = with_bias ? bias.data() : nullptr;
      p.y = expected.data();
      ASSERT_STATUS_OK(LinearReferenceCpu(p));
      DeviceArray<float> d_y(expected.size() + 1);
      d_y.Poison();
      p.x = d_x.data();
      p.weight = d_w.data();
      p.maybe_bias = with_bias ? (variant == 2 ? d_bias_b.data() : d_bias_a.data()) : nullptr;
      p.y = d_y.data();
      ASSERT_STATUS_OK(LinearCuda(p, stream_));
      Sync();
      const auto all = d_y.ToHost();
      EXPECT_TRUE(std::isnan(all.back())) << "wrote past y at m " << m;
      const std::vector<float> got(all.begin(), all.end() - 1);
      EXPECT_EQ(CountNonFinite(got), 0) << "m " << m;
      EXPECT_LT(RelativeError(got, expected), 1e-5) << "m " << m << " variant " << variant << " relu " << p.relu;
    }
  }
}

// --------------------------------------------------------------------- casts

TEST_F(KernelsGpuTest, CastsRoundToNearestEvenAndBack) {
  std::mt19937_64 rng(19);
  auto values = RandomFloats(rng, 100003, -1e3f, 1e3f);
  values[0] = 0.0f;
  values[1] = -0.0f;
  values[2] = std::numeric_limits<float>::infinity();
  values[3] = 1.0f + 1.0f / 256;  // a tie: rounds to even (1.0)
  const DeviceArray<float> d_in(values);
  DeviceArray<uint16_t> d_bf16(values.size());
  d_bf16.Poison();
  CastParams to = {};
  to.in = d_in.data();
  to.in_dtype = DType::kFloat32;
  to.out = d_bf16.data();
  to.out_dtype = DType::kBFloat16;
  to.count = static_cast<int64_t>(values.size());
  ASSERT_STATUS_OK(CastCuda(to, stream_));
  DeviceArray<float> d_back(values.size());
  d_back.Poison();
  CastParams back = {};
  back.in = d_bf16.data();
  back.in_dtype = DType::kBFloat16;
  back.out = d_back.data();
  back.out_dtype = DType::kFloat32;
  back.count = to.count;
  ASSERT_STATUS_OK(CastCuda(back, stream_));
  DeviceArray<float> d_copy(values.size());
  CastParams copy = {};
  copy.in = d_in.data();
  copy.in_dtype = DType::kFloat32;
  copy.out = d_copy.data();
  copy.out_dtype = DType::kFloat32;
  copy.count = to.count;
  ASSERT_STATUS_OK(CastCuda(copy, stream_));
  Sync();
  EXPECT_EQ(d_bf16.ToHost(), ToBf16(values));
  EXPECT_EQ(d_back.ToHost(), FromBf16(ToBf16(values)));
  EXPECT_EQ(d_copy.ToHost(), values);
}

// ------------------------------------------------------------------- C ABI

// Multi-head self-attention through jagrank_c.h against the CPU reference.
TEST_F(KernelsGpuTest, CAbiSelfAttentionMatchesCpu) {
  std::mt19937_64 rng(20);
  EXPECT_EQ(jagrank_c_api_version(), JAGRANK_C_API_VERSION);
  for (DType dtype : kDTypes) {
    for (int head_dim : {32, 64, 128}) {
      const int batch = 9, heads = 2, max_len = 200;
      const auto offsets = OffsetsFromLengths(RandomLengths(rng, batch, max_len));
      const int64_t token = int64_t{heads} * head_dim;
      const size_t count = static_cast<size_t>(offsets.back()) * token;
      const Operand q(RandomFloats(rng, count, -2.0f, 2.0f), dtype);
      const Operand k(RandomFloats(rng, count, -2.0f, 2.0f), dtype);
      const Operand v(RandomFloats(rng, count), dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

      AttentionParams p = {};
      std::vector<float> expected(count);
      p.q = q.host_f32.data();
      p.k = k.host_f32.data();
      p.v = v.host_f32.data();
      p.o = expected.data();
      p.dtype = DType::kFloat32;
      p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = token;
      p.q_offsets = p.k_offsets = offsets.data();
      p.batch = batch;
      p.num_heads = heads;
      p.head_dim = head_dim;
      p.max_q_len = p.max_k_len = max_len;
      p.softmax_scale = scale;
      ASSERT_STATUS_OK(JaggedAttentionReferenceCpu(p));

      const DeviceArray<int32_t> d_offsets(offsets);
      Output o(count, dtype);
      const int rc = jagrank_jagged_self_attention(
          q.device(), k.device(), v.device(), o.device(),
          dtype == DType::kFloat32 ? JAGRANK_DTYPE_FLOAT32 : JAGRANK_DTYPE_BFLOAT16, d_offsets.data(), batch, heads,
          head_dim, max_len, offsets.back(), scale, stream_);
      ASSERT_EQ(rc, JAGRANK_OK) << jagrank_last_error();
      Sync();
      const auto got = o.ToHostFloat();
      EXPECT_EQ(CountNonFinite(got), 0);
      EXPECT_LT(RelativeError(got, expected), dtype == DType::kFloat32 ? 1e-4 : 2e-2)
          << DTypeName(dtype) << " head_dim " << head_dim;
    }
  }
}

TEST_F(KernelsGpuTest, CAbiTargetAttentionMatchesCpu) {
  std::mt19937_64 rng(21);
  for (DType dtype : kDTypes) {
    const int batch = 11, dim = 64;
    const auto candidate_offsets = OffsetsFromLengths(RandomLengths(rng, batch, 40));
    const auto history_offsets = OffsetsFromLengths(RandomLengths(rng, batch, 500));
    const Operand q(RandomFloats(rng, static_cast<size_t>(candidate_offsets.back()) * dim, -2.0f, 2.0f), dtype);
    const Operand z(RandomFloats(rng, static_cast<size_t>(history_offsets.back()) * dim, -2.0f, 2.0f), dtype);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

    AttentionParams p = {};
    std::vector<float> expected(static_cast<size_t>(candidate_offsets.back()) * dim);
    p.q = q.host_f32.data();
    p.k = p.v = z.host_f32.data();
    p.o = expected.data();
    p.dtype = DType::kFloat32;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = dim;
    p.q_offsets = candidate_offsets.data();
    p.k_offsets = history_offsets.data();
    p.batch = batch;
    p.num_heads = 1;
    p.head_dim = dim;
    p.max_q_len = 40;
    p.max_k_len = 500;
    p.softmax_scale = scale;
    ASSERT_STATUS_OK(JaggedAttentionReferenceCpu(p));

    const DeviceArray<int32_t> d_candidates(candidate_offsets), d_history(history_offsets);
    Output o(expected.size(), dtype);
    const int rc = jagrank_jagged_target_attention(
        q.device(), d_candidates.data(), 40, candidate_offsets.back(), z.device(), d_history.data(), 500, batch, dim,
        dtype == DType::kFloat32 ? JAGRANK_DTYPE_FLOAT32 : JAGRANK_DTYPE_BFLOAT16, scale, o.device(), stream_);
    ASSERT_EQ(rc, JAGRANK_OK) << jagrank_last_error();
    Sync();
    const auto got = o.ToHostFloat();
    EXPECT_EQ(CountNonFinite(got), 0);
    EXPECT_LT(RelativeError(got, expected), dtype == DType::kFloat32 ? 1e-4 : 2e-2) << DTypeName(dtype);
  }
}

TEST_F(KernelsGpuTest, CAbiEmbeddingBagMatchesCpu) {
  std::mt19937_64 rng(22);
  const int batch = 13, dim = 64;
  const int64_t rows = 333;
  const Operand table(RandomFloats(rng, rows * dim), DType::kBFloat16);
  const auto offsets = OffsetsFromLengths(RandomLengths(rng, batch, 70));
  const auto ids = RandomIds(rng, offsets.back());
  EmbeddingBagParams p = {};
  std::vector<float> expected(batch * dim);
  p.ids = ids.data();
  p.offsets = offsets.data();
  p.batch = batch;
  p.table = table.host();
  p.table_dtype = DType::kBFloat16;
  p.num_rows = rows;
  p.dim = dim;
  p.out = expected.data();
  ASSERT_STATUS_OK(EmbeddingBagCpu(p));

  const DeviceArray<int64_t> d_ids(ids);
  const DeviceArray<int32_t> d_offsets(offsets);
  DeviceArray<float> d_out(expected.size());
  d_out.Poison();
  const int rc = jagrank_embedding_bag(d_ids.data(), d_offsets.data(), batch, table.device(), JAGRANK_DTYPE_BFLOAT16,
                                       rows, dim, d_out.data(), stream_);
  ASSERT_EQ(rc, JAGRANK_OK) << jagrank_last_error();
  Sync();
  const auto got = d_out.ToHost();
  EXPECT_EQ(CountNonFinite(got), 0);
  EXPECT_LT(RelativeError(got, expected), 1e-5);
}

// PyTorch hands out null data pointers for empty tensors. Target attention
// where every history is empty: z is null, every candidate row is zeros;
// an embedding bag whose bags are all empty: ids is null, the rows are zeros.
TEST_F(KernelsGpuTest, CAbiNullPointersOfEmptyTensorsOnDevice) {
  const int batch = 3, dim = 64;
  const std::vector<int32_t> candidate_offsets = {0, 2, 2, 5};
  const std::vector<int32_t> history_offsets = {0, 0, 0, 0};
  const DeviceArray<int32_t> d_candidates(candidate_offsets), d_history(history_offsets);
  std::mt19937_64 rng(31);
  for (DType dtype : kDTypes) {
    const Operand q(RandomFloats(rng, 5 * dim), dtype);
    Output o(5 * dim, dtype);
    const int rc = jagrank_jagged_target_attention(
        q.device(), d_candidates.data(), 3, 0, nullptr, d_history.data(), 0, batch, dim,
        dtype == DType::kFloat32 ? JAGRANK_DTYPE_FLOAT32 : JAGRANK_DTYPE_BFLOAT16, 0.125f, o.device(), stream_);
    ASSERT_EQ(rc, JAGRANK_OK) << jagrank_last_error();
    Sync();
    for (float x : o.ToHostFloat()) ASSERT_EQ(x, 0.0f) << DTypeName(dtype);
  }

  const Operand table(std::vector<float>(10 * dim, 1.0f), DType::kFloat32);
  DeviceArray<float> d_out(batch * dim);
  d_out.Poison();
  const int rc = jagrank_embedding_bag(nullptr, d_history.data(), batch, table.device(), JAGRANK_DTYPE_FLOAT32, 10,
                                       dim, d_out.data(), stream_);
  ASSERT_EQ(rc, JAGRANK_OK) << jagrank_last_error();
  Sync();
  for (float x : d_out.ToHost()) ASSERT_EQ(x, 0.0f);
}

// ------------------------------------------------------------------- timing

// Not a check: prints device times of a few launchers at serving-like sizes.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*Timing*'.
TEST_F(KernelsGpuTest, DISABLED_Timing) {
  std::mt19937_64 rng(23);
  cudaEvent_t start = nullptr, stop = nullptr;
  ASSERT_CUDA_OK(cudaEventCreate(&start));
  ASSERT_CUDA_OK(cudaEventCreate(&stop));
  auto time_ms = [&](const std::function<Status()>& launch) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(launch().ok());
    const int reps = 20;
    EXPECT_EQ(cudaEventRecord(start, stream_), cudaSuccess);
    for (int i = 0; i < reps; ++i) EXPECT_TRUE(launch().ok());
    EXPECT_EQ(cudaEventRecord(stop, stream_), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0.0f;
    EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
    return ms / reps;
  };

  {  // embedding bag: 4096 bags of 1..128 ids (mean ~64), d = 64, bf16 table of 1M rows
    const int batch = 4096, dim = 64;
    const int64_t rows = 1 << 20;
    std::vector<int32_t> lengths(batch);
    for (auto& l : lengths) l = 1 + static_cast<int32_t>(rng() % 128);
    const auto offsets = OffsetsFromLengths(lengths);
    const auto ids = RandomIds(rng, offsets.back());
    const DeviceArray<int64_t> d_ids(ids);
    const DeviceArray<int32_t> d_offsets(offsets);
    const DeviceArray<uint16_t> table(rows * dim);
    DeviceArray<float> out(static_cast<size_t>(batch) * dim);
    EmbeddingBagParams p = {};
    p.ids = d_ids.data();
    p.offsets = d_offsets.data();
    p.batch = batch;
    p.table = table.data();
    p.table_dtype = DType::kBFloat16;
    p.num_rows = rows;
    p.dim = dim;
    p.out = out.data();
    const float ms = time_ms([&] { return EmbeddingBagCuda(p, stream_); });
    const double bytes = double(offsets.back()) * (dim * 2 + 8);
    std::printf("timing embedding_bag B=%d ids=%d d=%d bf16: %.4f ms, %.0f GB/s (rows + ids read)\n", batch,
                offsets.back(), dim, ms, bytes / ms / 1e6);
  }
  {  // padded dense attention, ANCHORS shape B=1024 N=256 H=4 D=32 bf16, lengths uniform in [1, N]
    const int batch = 1024, n = 256, heads = 4, dh = 32;
    std::vector<int32_t> lengths(batch);
    for (auto& l : lengths) l = 1 + static_cast<int32_t>(rng() % n);
    const DeviceArray<int32_t> d_len(lengths);
    const size_t count = static_cast<size_t>(batch) * n * heads * dh;
    const Operand q(RandomFloats(rng, count), DType::kBFloat16);
    const Operand k(RandomFloats(rng, count), DType::kBFloat16);
    const Operand v(RandomFloats(rng, count), DType::kBFloat16);
    Output o(count, DType::kBFloat16);
    PaddedDenseAttentionParams p = {};
    p.q = q.device();
    p.k = k.device();
    p.v = v.device();
    p.q_len = p.k_len = d_len.data();
    p.batch = batch;
    p.max_q_len = p.max_k_len = n;
    p.num_heads = heads;
    p.head_dim = dh;
    p.softmax_scale = 1.0f / std::sqrt(float(dh));
    p.dtype = DType::kBFloat16;
    p.o = o.device();
    DeviceArray<float> workspace(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float));
    p.workspace = workspace.data();
    const float ms = time_ms([&] { return PaddedDenseAttentionCuda(p, stream_); });
    std::printf("timing padded_dense_attention B=%d N=%d H=%d D=%d bf16: %.4f ms, workspace %.1f MiB\n", batch, n,
                heads, dh, ms, PaddedDenseAttentionWorkspaceBytes(p) / 1048576.0);
  }
  {  // dot interaction at the default model's shape: 128 requests of 50..500 candidates (~35k), F = 6, d = 64
    const int num_requests = 128, num_sparse = 6, dim = 64;
    std::vector<int32_t> lengths(num_requests);
    for (auto& l : lengths) l = 50 + static_cast<int32_t>(rng() % 451);
    const auto offsets = OffsetsFromLengths(lengths);
    const int num_candidates = offsets.back();
    const DeviceArray<int32_t> d_offsets(offsets);
    const DeviceArray<float> x(RandomFloats(rng, static_cast<size_t>(num_requests) * dim));
    const DeviceArray<float> pooled(RandomFloats(rng, static_cast<size_t>(num_sparse) * num_requests * dim));
    const DeviceArray<float> u(RandomFloats(rng, static_cast<size_t>(num_candidates) * dim));
    const DeviceArray<float> e(RandomFloats(rng, static_cast<size_t>(num_candidates) * dim));
    const int width = DotInteractionOutputWidth(num_sparse, dim);
    DeviceArray<float> out(static_cast<size_t>(num_candidates) * width);
    DotInteractionParams p = {};
    p.num_sparse = num_sparse;
    p.num_requests = num_requests;
    p.num_candidates = num_candidates;
    p.dim = dim;
    p.x = x.data();
    p.pooled = pooled.data();
    p.u = u.data();
    p.e = e.data();
    p.candidate_offsets = d_offsets.data();
    p.out = out.data();
    const float ms = time_ms([&] { return DotInteractionCuda(p, stream_); });
    const double bytes = double(num_candidates) * (2 * dim + width) * 4;  // u, e read; rows written
    std::printf("timing dot_interaction R=%d C=%d F=%d d=%d: %.4f ms, %.0f GB/s (u, e read + rows written)\n",
                num_requests, num_candidates, num_sparse, dim, ms, bytes / ms / 1e6);
  }
  {  // linear with bias + ReLU, fp32 and TF32, without and with a cuBLASLt workspace: a generic shape and the
     // default model's top MLP at ~35k candidates (128 requests per batch: 100 -> 512 -> 256).
    // Also the history projections at ~21k tokens: QKV (64 -> 192) and Wo (64 -> 64).
    const int shapes[][3] = {
        {16384, 512, 1024}, {35000, 512, 100}, {35000, 256, 512}, {21000, 192, 64}, {21000, 64, 64}};
    DeviceArray<float> workspace(kLinearWorkspaceBytes / sizeof(float));
    for (const auto& shape : shapes) {
      const int m = shape[0], n = shape[1], k = shape[2];
      const DeviceArray<float> x(RandomFloats(rng, static_cast<size_t>(m) * k));
      const DeviceArray<float> w(RandomFloats(rng, static_cast<size_t>(n) * k));
      const DeviceArray<float> bias(RandomFloats(rng, n));
      DeviceArray<float> y(static_cast<size_t>(m) * n);
      LinearParams p = {};
      p.x = x.data();
      p.weight = w.data();
      p.maybe_bias = bias.data();
      p.relu = true;
      p.m = m;
      p.n = n;
      p.k = k;
      p.y = y.data();
      for (bool tf32 : {false, true}) {
        for (size_t workspace_bytes : {size_t{0}, kLinearWorkspaceBytes}) {
          p.workspace = workspace_bytes > 0 ? workspace.data() : nullptr;
          p.workspace_bytes = workspace_bytes;
          const float ms = time_ms([&] { return LinearCuda(p, stream_, tf32); });
          std::printf("timing linear m=%d n=%d k=%d bias+relu %s workspace %zu MiB: %.4f ms, %.1f TFLOP/s\n", m, n,
                      k, tf32 ? "tf32" : "fp32", workspace_bytes >> 20, ms, 2.0 * m * n * k / ms / 1e9);
        }
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// ------------------------------------------- bad arguments (no device needed)

TEST(KernelsGpuArgumentsTest, LaunchersRejectBadArgumentsNamingTheField) {
  float dummy[4] = {};
  const int32_t offsets[2] = {0, 0};
  const int64_t ids[1] = {0};

  EmbeddingBagParams bag = {};
  bag.ids = ids;
  bag.offsets = offsets;
  bag.batch = 1;
  bag.table = dummy;
  bag.num_rows = 1;
  bag.dim = 0;
  bag.out = dummy;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCuda(bag, nullptr), "dim"));
  bag.dim = 1;
  bag.num_rows = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCuda(bag, nullptr), "num_rows"));
  bag.num_rows = 1;
  bag.batch = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCuda(bag, nullptr), "batch"));
  bag.batch = 1;
  bag.table = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCuda(bag, nullptr), "table"));
  bag.table = dummy;
  bag.table_dtype = static_cast<DType>(7);
  EXPECT_EQ(EmbeddingBagCuda(bag, nullptr).code(), Status::Code::kUnimplemented);

  GatherRowsParams gather = {};
  gather.count = 1;
  gather.table = dummy;
  gather.num_rows = 1;
  gather.dim = 1;
  gather.out = dummy;
  EXPECT_TRUE(IsInvalidArgumentNaming(GatherRowsCuda(gather, nullptr), "ids"));

  HistoryGatherParams history = {};
  history.ids = ids;
  history.offsets = offsets;
  history.batch = 1;
  history.item_table = dummy;
  history.item_rows = 1;
  history.position_table = dummy;
  history.max_len = 0;
  history.dim = 1;
  history.out = dummy;
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCuda(history, nullptr), "max_len"));
  history.max_len = 1;
  history.position_table = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCuda(history, nullptr), "position_table"));

  DotInteractionParams dot = {};
  dot.x = dot.out = dummy;
  dot.u = dot.e = dummy;
  dot.candidate_offsets = offsets;
  dot.num_sparse = 2;
  dot.num_requests = 1;
  dot.num_candidates = 1;
  dot.dim = 1;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCuda(dot, nullptr), "pooled"));
  dot.num_sparse = 0;
  dot.vector_dtype = DType::kBFloat16;  // the split form only
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCuda(dot, nullptr), "vector_dtype"));
  dot.vector_dtype = DType::kFloat32;
  dot.num_requests = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCuda(dot, nullptr), "num_requests"));

  JaggedToPaddedParams to = {};
  to.values = dummy;
  to.offsets = offsets;
  to.batch = 1;
  to.max_len = 1;
  to.width = 0;
  to.padded = dummy;
  EXPECT_TRUE(IsInvalidArgumentNaming(JaggedToPaddedCuda(to, nullptr), "width"));

  PaddedDenseAttentionParams dense = {};
  dense.q = dense.k = dense.v = dummy;
  dense.o = dummy;
  dense.q_len = dense.k_len = offsets;
  dense.batch = 1;
  dense.max_q_len = dense.max_k_len = 1;
  dense.num_heads = 1;
  dense.head_dim = 1;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCuda(dense, nullptr), "workspace"));
  dense.workspace = dummy;
  dense.head_dim = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCuda(dense, nullptr), "head_dim"));

  LinearParams linear = {};
  linear.x = linear.weight = dummy;
  linear.y = dummy + 2;
  linear.m = linear.n = 1;
  linear.k = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCuda(linear, nullptr), "k"));
  linear.k = 1;
  linear.y = dummy;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCuda(linear, nullptr), "y"));

  CastParams cast = {};
  cast.in = dummy;
  cast.count = 1;
  EXPECT_TRUE(IsInvalidArgumentNaming(CastCuda(cast, nullptr), "out"));
}

TEST(KernelsGpuArgumentsTest, CAbiReportsCodeAndMessage) {
  float dummy[4] = {};
  const int32_t offsets[2] = {0, 0};
  int rc = jagrank_embedding_bag(nullptr, offsets, 1, dummy, JAGRANK_DTYPE_FLOAT32, 0, 4, dummy, nullptr);
  EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("num_rows"), std::string::npos) << jagrank_last_error();
  rc = jagrank_embedding_bag(nullptr, offsets, 1, dummy, 5, 10, 4, dummy, nullptr);
  EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("table_dtype"), std::string::npos) << jagrank_last_error();
  rc = jagrank_jagged_self_attention(dummy, dummy, dummy, dummy, 9, offsets, 1, 1, 32, 1, 0, 1.0f, nullptr);
  EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("dtype"), std::string::npos) << jagrank_last_error();
  // The token counts are schedule hints, but a negative one is a caller's bug.
  rc = jagrank_jagged_self_attention(dummy, dummy, dummy, dummy, JAGRANK_DTYPE_BFLOAT16, offsets, 1, 1, 32, 1, -1,
                                     1.0f, nullptr);
  EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("total_len = -1"), std::string::npos) << jagrank_last_error();
  rc = jagrank_jagged_target_attention(dummy, offsets, 1, -5, dummy, offsets, 1, 1, 32, JAGRANK_DTYPE_BFLOAT16, 1.0f,
                                       dummy, nullptr);
  EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("total_candidates = -5"), std::string::npos)
      << jagrank_last_error();
}

// Where nothing would be read or written (no sequences, no tokens, no
// candidates, no history), null data pointers are accepted: nothing is
// launched, so this runs without a device too. Where data would be read,
// null is still an error naming the argument.
TEST(KernelsGpuArgumentsTest, CAbiAcceptsNullPointersOfEmptyTensors) {
  const int32_t offsets[4] = {0, 0, 0, 0};  // device-side in real use; never read on the host
  alignas(16) static const uint16_t z[64] = {};
  EXPECT_EQ(jagrank_jagged_self_attention(nullptr, nullptr, nullptr, nullptr, JAGRANK_DTYPE_BFLOAT16, nullptr, 0, 2,
                                          64, 0, 0, 0.125f, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
  // Three empty sequences: zero tokens.
  EXPECT_EQ(jagrank_jagged_self_attention(nullptr, nullptr, nullptr, nullptr, JAGRANK_DTYPE_BFLOAT16, offsets, 3, 2,
                                          64, 0, 0, 0.125f, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
  // Zero candidates, over a history or none.
  EXPECT_EQ(jagrank_jagged_target_attention(nullptr, offsets, 0, 0, z, offsets, 1, 3, 64, JAGRANK_DTYPE_BFLOAT16, 0.125f,
                                            nullptr, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
  EXPECT_EQ(jagrank_jagged_target_attention(nullptr, offsets, 0, 0, nullptr, offsets, 0, 3, 64, JAGRANK_DTYPE_FLOAT32,
                                            0.125f, nullptr, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
  // No bags.
  EXPECT_EQ(jagrank_embedding_bag(nullptr, nullptr, 0, z, JAGRANK_DTYPE_BFLOAT16, 64, 1, nullptr, nullptr), JAGRANK_OK)
      << jagrank_last_error();

  // Tokens may exist (max_len > 0): q must be there.
  EXPECT_EQ(jagrank_jagged_self_attention(nullptr, z, z, const_cast<uint16_t*>(z), JAGRANK_DTYPE_BFLOAT16, offsets, 3,
                                          1, 32, 2, 0, 0.125f, nullptr),
            JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("q is null"), std::string::npos) << jagrank_last_error();
  // Candidates and a history may exist: z must be there, named as the C ABI names it.
  EXPECT_EQ(jagrank_jagged_target_attention(z, offsets, 2, 0, nullptr, offsets, 4, 3, 32, JAGRANK_DTYPE_BFLOAT16, 0.125f,
                                            const_cast<uint16_t*>(z), nullptr),
            JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("z is null"), std::string::npos) << jagrank_last_error();
}

// A null pointer that would be read or written is INVALID_ARGUMENT naming the
// C argument, checked on the host before any CUDA call (runs without a device).
TEST(KernelsGpuArgumentsTest, CAbiRejectsNullPointersThatWouldBeUsed) {
  const int32_t offsets[4] = {0, 0, 0, 0};
  alignas(16) static uint16_t z[64] = {};
  const auto expect_null_named = [](int rc, const std::string& argument) {
    EXPECT_EQ(rc, JAGRANK_ERROR_INVALID_ARGUMENT) << argument;
    EXPECT_NE(std::string(jagrank_last_error()).find(argument + " is null"), std::string::npos)
        << "wanted '" << argument << " is null', got: " << jagrank_last_error();
  };
  // Three sequences need four offsets, even when every one is empty.
  expect_null_named(jagrank_jagged_self_attention(nullptr, nullptr, nullptr, nullptr, JAGRANK_DTYPE_BFLOAT16, nullptr,
                                                  3, 2, 64, 0, 0, 0.125f, nullptr),
                    "offsets");
  // Tokens may exist (max_len > 0): each of k, v, o is needed.
  expect_null_named(jagrank_jagged_self_attention(z, nullptr, z, z, JAGRANK_DTYPE_BFLOAT16, offsets, 3, 1, 32, 2, 0,
                                                  0.125f, nullptr),
                    "k");
  expect_null_named(jagrank_jagged_self_attention(z, z, nullptr, z, JAGRANK_DTYPE_BFLOAT16, offsets, 3, 1, 32, 2, 0,
                                                  0.125f, nullptr),
                    "v");
  expect_null_named(jagrank_jagged_self_attention(z, z, z, nullptr, JAGRANK_DTYPE_FLOAT32, offsets, 3, 1, 32, 2, 0,
                                                  0.125f, nullptr),
                    "o");
  // Target attention: both offsets arrays whenever batch > 0; q and o when candidates may exist.
  expect_null_named(jagrank_jagged_target_attention(nullptr, nullptr, 0, 0, nullptr, offsets, 0, 3, 64,
                                                    JAGRANK_DTYPE_BFLOAT16, 0.125f, nullptr, nullptr),
                    "candidate_offsets");
  expect_null_named(jagrank_jagged_target_attention(nullptr, offsets, 0, 0, nullptr, nullptr, 0, 3, 64,
                                                    JAGRANK_DTYPE_BFLOAT16, 0.125f, nullptr, nullptr),
                    "history_offsets");
  expect_null_named(jagrank_jagged_target_attention(nullptr, offsets, 2, 0, z, offsets, 4, 3, 32, JAGRANK_DTYPE_BFLOAT16,
                                                    0.125f, z, nullptr),
                    "q");
  expect_null_named(jagrank_jagged_target_attention(z, offsets, 2, 0, z, offsets, 4, 3, 32, JAGRANK_DTYPE_BFLOAT16,
                                                    0.125f, nullptr, nullptr),
                    "o");
  EXPECT_EQ(jagrank_embedding_bag(nullptr, nullptr, 2, z, JAGRANK_DTYPE_BFLOAT16, 64, 8, nullptr, nullptr),
            JAGRANK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jagrank_last_error()).find("offsets: null"), std::string::npos) << jagrank_last_error();

  // The empty cases next to them stay accepted: no history at all (z unread,
  // candidate rows would be zeros but there are none), and candidates over
  // histories that are all empty, where z is never read.
  EXPECT_EQ(jagrank_jagged_target_attention(nullptr, offsets, 0, 0, nullptr, offsets, 4, 3, 32, JAGRANK_DTYPE_BFLOAT16,
                                            0.125f, nullptr, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
  EXPECT_EQ(jagrank_jagged_target_attention(nullptr, nullptr, 2, 0, nullptr, nullptr, 0, 0, 32, JAGRANK_DTYPE_BFLOAT16,
                                            0.125f, nullptr, nullptr),
            JAGRANK_OK)
      << jagrank_last_error();
}

}  // namespace
}  // namespace jagrank
