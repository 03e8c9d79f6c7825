// JaggedAttentionCuda (kernels/attention/) against the plain CPU reference
// JaggedAttentionReferenceCpu on random jagged batches: lengths 0, 1 and long,
// several heads, strided (fused QKV) layouts, target attention
// (q_offsets != k_offsets, k = v), the padded-flash layout with
// maybe_k_valid_len, bf16 and float32. Outputs are poisoned first: every
// (token, head) slot must be written, the columns outside them must not be.
// Needs a CUDA device (label gpu); the bad-argument cases run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/flash_tile_size.h"
#include "kernels/dtype.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::OffsetsFromLengths;
using testing::RandomFloats;
using testing::RandomLengths;

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Device allocation released at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0 && cudaMalloc(&ptr_, bytes_) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// Host float values -> device operand bytes of `dtype` (bf16 inputs were
// already rounded to bf16 by the caller, so the reference sees the same data).
std::vector<unsigned char> ToDeviceBytes(const std::vector<float>& values, DType dtype) {
  std::vector<unsigned char> bytes(values.size() * DTypeSize(dtype));
  if (dtype == DType::kFloat32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t bits = FloatToBFloat16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> FromDeviceBytes(const std::vector<unsigned char>& bytes, DType dtype) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  if (dtype == DType::kFloat32) {
    std::memcpy(values.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = BFloat16ToFloat(bits);
    }
  }
  return values;
}

std::vector<float> RandomOperand(std::mt19937_64& rng, size_t count, DType dtype) {
  std::vector<float> v = RandomFloats(rng, count, -2.f, 2.f);
  if (dtype == DType::kBFloat16) {
    for (float& x : v) x = BFloat16ToFloat(FloatToBFloat16(x));
  }
  return v;
}

struct Case {
  DType dtype = DType::kBFloat16;
  int num_heads = 1;
  int head_dim = 64;
  std::vector<int32_t> q_lengths;
  std::vector<int32_t> k_lengths;       // empty: self-attention (k_offsets = q_offsets)
  std::vector<int32_t> k_valid_len;     // empty: no mask
  bool fused_qkv = false;               // q, k, v column blocks of one [T, 3 H dh] tensor
  bool shared_kv = false;               // k and v are the same tensor (target attention)
  int64_t o_extra_columns = 8;          // o row stride = H dh + this (left untouched)
  float scale = 0.f;                    // 0: 1 / sqrt(head_dim)
};

// Runs `c` on the GPU and on the CPU reference; returns the max-norm relative
// error over every (token, head) slot and checks poison / untouched columns.
void RunCase(const Case& c, uint64_t seed, double tolerance) {
  std::mt19937_64 rng(seed);
  const bool self = c.k_lengths.empty();
  const std::vector<int32_t>& k_lengths = self ? c.q_lengths : c.k_lengths;
  const std::vector<int32_t> q_offsets = OffsetsFromLengths(c.q_lengths);
  const std::vector<int32_t> k_offsets = OffsetsFromLengths(k_lengths);
  const int batch = static_cast<int>(c.q_lengths.size());
  const int64_t tq = q_offsets.back(), tk = k_offsets.back();
  const int64_t width = int64_t{c.num_heads} * c.head_dim;

  // Host operands (float values, bf16-exact for bf16 cases).
  std::vector<float> q, k, v;
  int64_t q_stride = width, k_stride = width, v_stride = width;
  int64_t k_col = 0, v_col = 0;
  if (c.fused_qkv) {
    ASSERT_TRUE(self) << "fused QKV needs self-attention";
    q = RandomOperand(rng, tq * 3 * width, c.dtype);
    q_stride = k_stride = v_stride = 3 * width;
    k_col = width;
    v_col = 2 * width;
  } else {
    q = RandomOperand(rng, tq * width, c.dtype);
    k = RandomOperand(rng, tk * width, c.dtype);
    v = c.shared_kv ? k : RandomOperand(rng, tk * width, c.dtype);
  }
  const int64_t o_stride = width + c.o_extra_columns;

  AttentionParams params = {};
  params.dtype = c.dtype;
  params.q_row_stride = q_stride;
  params.k_row_stride = k_stride;
  params.v_row_stride = v_stride;
  params.o_row_stride = o_stride;
  params.batch = batch;
  params.num_heads = c.num_heads;
  params.head_dim = c.head_dim;
  params.max_q_len = *std::max_element(c.q_lengths.begin(), c.q_lengths.end());
  params.max_k_len = *std::max_element(k_lengths.begin(), k_lengths.end());
  params.softmax_scale = c.scale > 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.head_dim));

  // CPU reference (float32 operands).
  std::vector<float> ref(tq * o_stride, 0.f);
  {
    AttentionParams cpu = params;
    cpu.dtype = DType::kFloat32;
    cpu.q = q.data();
    cpu.k = c.fused_qkv ? q.data() + k_col : k.data();
    cpu.v = c.fused_qkv ? q.data() + v_col : v.data();
    cpu.o = ref.data();
    cpu.q_offsets = q_offsets.data();
    cpu.k_offsets = k_offsets.data();
    cpu.maybe_k_valid_len = c.k_valid_len.empty() ? nullptr : c.k_valid_len.data();
    const Status status = JaggedAttentionReferenceCpu(cpu);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }

  // Device copies.
  const size_t elem = DTypeSize(c.dtype);
  DeviceBuffer d_q(std::max<size_t>(1, q.size()) * elem), d_k(std::max<size_t>(1, k.size()) * elem),
      d_v(std::max<size_t>(1, v.size()) * elem), d_o(std::max<int64_t>(1, tq * o_stride) * elem),
      d_qoff(q_offsets.size() * 4), d_koff(k_offsets.size() * 4),
      d_valid(std::max<size_t>(1, c.k_valid_len.size()) * 4);
  ASSERT_NE(d_q.get(), nullptr);
  ASSERT_NE(d_o.get(), nullptr);
  auto upload = [&](const DeviceBuffer& dst, const std::vector<float>& src) {
    const std::vector<unsigned char> bytes = ToDeviceBytes(src, c.dtype);
    return cudaMemcpy(dst.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  };
  ASSERT_CUDA(upload(d_q, q));
  if (!c.fused_qkv) {
    ASSERT_CUDA(upload(d_k, k));
    if (!c.shared_kv) {
      ASSERT_CUDA(upload(d_v, v));
    }
  }
  ASSERT_CUDA(cudaMemcpy(d_qoff.get(), q_offsets.data(), q_offsets.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d_koff.get(), k_offsets.data(), k_offsets.size() * 4, cudaMemcpyHostToDevice));
  if (!c.k_valid_len.empty()) {
    ASSERT_CUDA(cudaMemcpy(d_valid.get(), c.k_valid_len.data(), c.k_valid_len.size() * 4,
                           cudaMemcpyHostToDevice));
  }
  // Poison: all-ones bytes are NaN in both float32 and bf16.
  ASSERT_CUDA(cudaMemset(d_o.get(), 0xff, d_o.bytes()));

  auto* base_q = static_cast<unsigned char*>(d_q.get());
  params.q = base_q;
  params.k = c.fused_qkv ? base_q + k_col * elem : d_k.get();
  params.v = c.fused_qkv ? base_q + v_col * elem : (c.shared_kv ? d_k.get() : d_v.get());
  params.o = d_o.get();
  params.q_offsets = static_cast<const int32_t*>(d_qoff.get());
  params.k_offsets = static_cast<const int32_t*>(d_koff.get());
  params.maybe_k_valid_len = c.k_valid_len.empty() ? nullptr : static_cast<const int32_t*>(d_valid.get());
  const Status status = JaggedAttentionCuda(params, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_CUDA(cudaDeviceSynchronize());

  std::vector<unsigned char> out_bytes(tq * o_stride * elem);
  ASSERT_CUDA(cudaMemcpy(out_bytes.data(), d_o.get(), out_bytes.size(), cudaMemcpyDeviceToHost));
  const std::vector<float> out = FromDeviceBytes(out_bytes, c.dtype);

  std::vector<float> got, want;
  int64_t untouched_overwritten = 0;
  for (int64_t t = 0; t < tq; ++t) {
    for (int64_t col = 0; col < o_stride; ++col) {
      const float value = out[t * o_stride + col];
      if (col < width) {
        got.push_back(value);
        want.push_back(ref[t * o_stride + col]);
      } else if (!std::isnan(value)) {
        ++untouched_overwritten;
      }
    }
  }
  EXPECT_EQ(testing::CountNonFinite(got), 0) << "unwritten (poisoned) or NaN output slots";
  EXPECT_EQ(untouched_overwritten, 0) << "wrote outside the heads' columns of o";
  const double error = testing::RelativeError(got, want);
  EXPECT_LE(error, tolerance) << "dtype " << DTypeName(c.dtype) << " H " << c.num_heads << " D " << c.head_dim;
  // Rows of sequences with no valid key are exact zeros.
  for (int b = 0; b < batch; ++b) {
    int valid = k_lengths[b];
    if (!c.k_valid_len.empty()) valid = std::min(valid, c.k_valid_len[b]);
    if (valid > 0) continue;
    for (int64_t t = q_offsets[b]; t < q_offsets[b + 1]; ++t) {
      for (int64_t col = 0; col < width; ++col) {
        ASSERT_EQ(out[t * o_stride + col], 0.f) << "sequence " << b << " has no keys";
      }
    }
  }
}

// bf16 operands and output with float32 accumulation: the output rounding
// alone is 2^-9 relative and P is rounded to bf16 before P V; float32 lands
// near 1e-6 (ex2.approx has 2 ulp).
constexpr double kBf16Tolerance = 2e-2;
constexpr double kFp32Tolerance = 1e-4;

double Tolerance(DType dtype) { return dtype == DType::kBFloat16 ? kBf16Tolerance : kFp32Tolerance; }

class FlashAttentionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(FlashAttentionGpuTest, SelfAttentionEveryHeadDimAndDtype) {
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    for (int head_dim : {32, 64, 128}) {
      for (int num_heads : {1, 3}) {
        Case c;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.num_heads = num_heads;
        c.q_lengths = RandomLengths(rng, 9, 300);  // includes 0, 1 and 300
        c.fused_qkv = num_heads > 1;
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " D=" + std::to_string(head_dim) +
                     " H=" + std::to_string(num_heads));
        RunCase(c, rng(), Tolerance(dtype));
      }
    }
  }
}

TEST_F(FlashAttentionGpuTest, LongSequencesSpanManyTiles) {
  Case c;
  c.dtype = DType::kBFloat16;
  c.num_heads = 2;
  c.head_dim = 64;
  c.q_lengths = {1500, 0, 700, 1, 129};
  RunCase(c, 7, kBf16Tolerance);
  c.dtype = DType::kFloat32;
  c.head_dim = 32;
  RunCase(c, 8, kFp32Tolerance);
}

TEST_F(FlashAttentionGpuTest, BatchOfOne) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    Case c;
    c.dtype = dtype;
    c.num_heads = 4;
    c.head_dim = 32;
    c.q_lengths = {257};
    RunCase(c, 9, Tolerance(dtype));
  }
}

TEST_F(FlashAttentionGpuTest, TargetAttentionCandidatesOverHistory) {
  std::mt19937_64 rng(21);
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    Case c;
    c.dtype = dtype;
    c.num_heads = 1;
    c.head_dim = 64;
    c.q_lengths = RandomLengths(rng, 12, 200);  // candidates per request
    for (int32_t& n : c.q_lengths) n = std::max(n, 1);
    c.k_lengths = RandomLengths(rng, 12, 600);  // histories, including empty ones
    c.shared_kv = true;
    c.o_extra_columns = 0;
    SCOPED_TRACE(DTypeName(dtype));
    RunCase(c, rng(), Tolerance(dtype));
  }
}

TEST_F(FlashAttentionGpuTest, PaddedFlashMasksKeysPastValidLength) {
  std::mt19937_64 rng(31);
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    const int batch = 8, padded_len = 150;
    Case c;
    c.dtype = dtype;
    c.num_heads = 2;
    c.head_dim = 64;
    c.q_lengths.assign(batch, padded_len);
    c.k_valid_len = {0, 1, padded_len, padded_len + 50, 64, 65, 129, 3};
    std::shuffle(c.k_valid_len.begin(), c.k_valid_len.end(), rng);
    SCOPED_TRACE(DTypeName(dtype));
    RunCase(c, rng(), Tolerance(dtype));
  }
}

TEST_F(FlashAttentionGpuTest, LargeScoresStayFinite) {
  // A large scale makes exp overflow without the running max subtraction.
  Case c;
  c.dtype = DType::kBFloat16;
  c.num_heads = 2;
  c.head_dim = 128;
  c.q_lengths = {200, 70};
  c.scale = 4.f;
  RunCase(c, 41, kBf16Tolerance);
}

// Batches large enough (batch x heads x max_q_len x max_k_len x head_dim >=
// 3e10) for the launcher to order the sequences longest first through its
// workspace: every sequence must still land in its own rows.
TEST_F(FlashAttentionGpuTest, LongestFirstOrderKeepsEachSequenceInPlace) {
  std::mt19937_64 rng(51);
  {
    Case c;  // self-attention: 80 x 2048^2 x 128 = 4.3e10
    c.head_dim = 128;
    c.q_lengths = RandomLengths(rng, 80, 64);  // includes 0 and 1
    c.q_lengths[17] = 2048;
    c.q_lengths[60] = 700;
    c.q_lengths[61] = 700;  // a tie
    SCOPED_TRACE("self");
    RunCase(c, rng(), kBf16Tolerance);
  }
  {
    Case c;  // target attention: 160 x 1024 x 4096 x 64 = 4.3e10
    c.head_dim = 64;
    c.q_lengths = RandomLengths(rng, 160, 40);
    for (int32_t& n : c.q_lengths) n = std::max(n, 1);
    c.k_lengths = RandomLengths(rng, 160, 300);  // includes empty histories
    c.q_lengths[3] = 1024;
    c.k_lengths[3] = 200;
    c.q_lengths[150] = 16;
    c.k_lengths[150] = 4096;
    c.shared_kv = true;
    c.o_extra_columns = 0;
    SCOPED_TRACE("target");
    RunCase(c, rng(), kBf16Tolerance);
  }
  {
    Case c;  // padded flash: 256 x 1024^2 x 128 = 3.4e10; the order follows the valid lengths
    c.head_dim = 128;
    c.q_lengths.assign(256, 1024);
    c.k_valid_len = RandomLengths(rng, 256, 16);  // includes 0 and 1
    c.k_valid_len[5] = 1024;
    c.k_valid_len[200] = 1100;  // past the padded length
    SCOPED_TRACE("padded");
    RunCase(c, rng(), kBf16Tolerance);
  }
}

// Every bf16 kernel ChooseFlashKernel (flash_tile_size.h) can pick on this
// device, each on shapes that select it: short and long self-attention,
// target attention over long histories with many or few candidates, and
// D = 32 below the wgmma key bound. The long shapes also take the
// longest-first order.
TEST_F(FlashAttentionGpuTest, EveryChosenKernelMatchesReference) {
  struct Shape {
    const char* name;
    int32_t max_queries;
    int32_t max_keys;  // 0: self-attention
  };
  const Shape shapes[] = {
      {"self, short", 100, 0},                    // <= 128 queries: mma.sync
      {"self, long", 1100, 0},                    // > 1024 keys, queries > keys / 2
      {"target, long histories", 300, 2048},      // queries <= keys / 2
      {"target, few candidates", 100, 1500},      // mma.sync over long keys, on any device
      {"self, below 768 keys", 700, 0},           // D = 32 stays on mma.sync
  };
  const bool wgmma = FlashWgmmaAvailable();
  std::set<std::string> seen;
  std::mt19937_64 rng(61);
  for (int head_dim : kFlashSupportedHeadDims) {
    for (const Shape& shape : shapes) {
      Case c;
      c.head_dim = head_dim;
      c.q_lengths = RandomLengths(rng, 9, shape.max_queries);  // includes 0, 1 and the maximum
      if (shape.max_keys > 0) {
        c.k_lengths = RandomLengths(rng, 9, shape.max_keys);
        c.shared_kv = true;
        c.o_extra_columns = 0;
      } else {
        c.num_heads = 2;
        c.fused_qkv = true;
      }
      const int32_t max_keys = shape.max_keys > 0 ? shape.max_keys : shape.max_queries;
      const flash::FlashKernel kernel = flash::ChooseFlashKernel(wgmma, head_dim, shape.max_queries, max_keys);
      const std::string name = std::string(kernel.arch == flash::FlashArch::kSm90 ? "sm90" : "sm80") + " D=" +
                               std::to_string(head_dim) + (kernel.long_keys ? " long keys" : "");
      seen.insert(name);
      SCOPED_TRACE(std::string(shape.name) + ": " + name);
      RunCase(c, rng(), kBf16Tolerance);
    }
  }
  for (int head_dim : kFlashSupportedHeadDims) {
    for (flash::FlashArch arch : {flash::FlashArch::kSm80, flash::FlashArch::kSm90}) {
      if (arch == flash::FlashArch::kSm90 && !wgmma) continue;
      for (bool long_keys : {false, true}) {
        if (long_keys && !flash::FlashHasLongKeysTile(arch, head_dim)) continue;
        const std::string name = std::string(arch == flash::FlashArch::kSm90 ? "sm90" : "sm80") + " D=" +
                                 std::to_string(head_dim) + (long_keys ? " long keys" : "");
        EXPECT_EQ(seen.count(name), 1u) << name << " was never chosen";
      }
    }
  }
}

// The wgmma kernel copies whole key tiles by TMA and a sequence's last,
// partial tile by zero-filling cp.async (flash_traits.h, kTmaKv). Sequence 0
// ends inside a tile (1000 keys: 40 or 104 past the last whole tile of 64 or
// 128) and sequence 1, right after it in memory, has NaN values: a box read
// past sequence 0's end would pull NaN rows in, and NaN times a zero
// probability is NaN. Sequence 0's rows must match the reference of
// sequence 0 alone, and both copy paths must give the same bits.
TEST_F(FlashAttentionGpuTest, KvTilesNeverReadTheNextSequence) {
  std::mt19937_64 rng(71);
  for (int head_dim : kFlashSupportedHeadDims) {
    SCOPED_TRACE("D=" + std::to_string(head_dim));
    const int heads = 2;
    const int64_t width = int64_t{heads} * head_dim;
    const int64_t stride = 3 * width;  // fused QKV, as the model's projection writes it
    const std::vector<int32_t> lengths = {1000, 192};
    const std::vector<int32_t> offsets = OffsetsFromLengths(lengths);
    const int64_t tokens = offsets.back();
    std::vector<float> qkv = RandomOperand(rng, tokens * stride, DType::kBFloat16);
    for (int64_t t = offsets[1]; t < tokens; ++t) {
      for (int64_t col = 2 * width; col < 3 * width; ++col) qkv[t * stride + col] = NAN;
    }
    AttentionParams params = {};
    params.dtype = DType::kBFloat16;
    params.q_row_stride = params.k_row_stride = params.v_row_stride = stride;
    params.o_row_stride = width;
    params.num_heads = heads;
    params.head_dim = head_dim;
    params.max_q_len = params.max_k_len = 1000;
    params.softmax_scale = 1.f / std::sqrt(static_cast<float>(head_dim));

    // Reference: sequence 0 alone.
    std::vector<float> ref(lengths[0] * width);
    {
      const std::vector<int32_t> first = {0, lengths[0]};
      AttentionParams cpu = params;
      cpu.dtype = DType::kFloat32;
      cpu.batch = 1;
      cpu.q = qkv.data();
      cpu.k = qkv.data() + width;
      cpu.v = qkv.data() + 2 * width;
      cpu.o = ref.data();
      cpu.q_offsets = cpu.k_offsets = first.data();
      const Status status = JaggedAttentionReferenceCpu(cpu);
      ASSERT_TRUE(status.ok()) << status.ToString();
    }
    const std::vector<unsigned char> bytes = ToDeviceBytes(qkv, DType::kBFloat16);
    DeviceBuffer d_qkv(bytes.size()), d_o(tokens * width * 2), d_off(offsets.size() * 4);
    ASSERT_CUDA(cudaMemcpy(d_qkv.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_off.get(), offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    auto* base = static_cast<unsigned char*>(d_qkv.get());
    params.batch = 2;
    params.q = base;
    params.k = base + width * 2;
    params.v = base + 2 * width * 2;
    params.o = d_o.get();
    params.q_offsets = params.k_offsets = static_cast<const int32_t*>(d_off.get());

    std::vector<std::vector<float>> outputs;
    for (const char* copy : {"tma", "cp_async"}) {
      ASSERT_EQ(setenv("JAGRANK_FLASH_KV_COPY", copy, 1), 0);
      ASSERT_CUDA(cudaMemset(d_o.get(), 0xff, d_o.bytes()));
      const Status status = JaggedAttentionCuda(params, nullptr);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::vector<unsigned char> out(lengths[0] * width * 2);
      ASSERT_CUDA(cudaMemcpy(out.data(), d_o.get(), out.size(), cudaMemcpyDeviceToHost));
      outputs.push_back(FromDeviceBytes(out, DType::kBFloat16));
      SCOPED_TRACE(copy);
      EXPECT_EQ(testing::CountNonFinite(outputs.back()), 0) << "NaN from the next sequence, or unwritten rows";
      EXPECT_LE(testing::RelativeError(outputs.back(), ref), kBf16Tolerance);
    }
    ASSERT_EQ(unsetenv("JAGRANK_FLASH_KV_COPY"), 0);
    EXPECT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), outputs[0].size() * sizeof(float)), 0)
        << "TMA and cp.async copies gave different outputs";
  }
}

// Where the longest-first schedule runs, the wgmma kernel's persistent CTAs
// take the listed tiles one after another (flash_wgmma_kernel.cuh), carrying
// the TMA barriers' phases from tile to tile. Heavy-tailed lengths (most
// sequences one tile, a few of many, some without queries) on one stream:
// two persistent launches in a row (the second reuses the list's counter),
// the grid launch (JAGRANK_FLASH_SCHEDULE=grid) and the launcher's own
// choice ("auto") must give the same bits in every row, and every row
// finite. LongestFirstOrderKeepsEachSequenceInPlace checks the persistent
// launch against the reference.
TEST_F(FlashAttentionGpuTest, PersistentTilesMatchTheGridLaunch) {
  if (!FlashWgmmaAvailable()) GTEST_SKIP() << "the persistent launch is the wgmma kernel's";
  std::mt19937_64 rng(83);
  for (int head_dim : kFlashSupportedHeadDims) {
    SCOPED_TRACE("D=" + std::to_string(head_dim));
    const int heads = 2;
    const int64_t width = int64_t{heads} * head_dim;
    const int64_t stride = 3 * width;
    std::vector<int32_t> lengths(300);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int32_t& n : lengths) n = static_cast<int32_t>(std::min(3000.0, 20.0 / std::pow(1.0 - unit(rng), 1.2)));
    lengths[7] = 3000;
    lengths[100] = lengths[101] = 0;
    const std::vector<int32_t> offsets = OffsetsFromLengths(lengths);
    const int64_t tokens = offsets.back();
    const std::vector<unsigned char> bytes =
        ToDeviceBytes(RandomOperand(rng, tokens * stride, DType::kBFloat16), DType::kBFloat16);
    DeviceBuffer d_qkv(bytes.size()), d_o(tokens * width * 2), d_off(offsets.size() * 4);
    ASSERT_CUDA(cudaMemcpy(d_qkv.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_off.get(), offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    auto* base = static_cast<unsigned char*>(d_qkv.get());
    AttentionParams params = {};
    params.dtype = DType::kBFloat16;
    params.q_row_stride = params.k_row_stride = params.v_row_stride = stride;
    params.o_row_stride = width;
    params.num_heads = heads;
    params.head_dim = head_dim;
    params.max_q_len = params.max_k_len = 3000;
    params.softmax_scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    params.batch = static_cast<int>(lengths.size());
    params.q = base;
    params.k = base + width * 2;
    params.v = base + 2 * width * 2;
    params.o = d_o.get();
    params.q_offsets = params.k_offsets = static_cast<const int32_t*>(d_off.get());

    // The automatic choice three times: no token count, the true one (this
    // batch's fill, ~0.01: persistent), and a batch * max_q_len that claims
    // full length (the grid where its kernel fits more CTAs per SM, D = 64).
    // The count is a hint: every value must give the same bits.
    const int64_t full = int64_t{params.batch} * params.max_q_len;
    const std::pair<const char*, int64_t> runs[] = {{"persistent", 0}, {"persistent", 0}, {"grid", 0},
                                                    {"auto", 0},       {"auto", tokens},  {"auto", full}};
    std::vector<std::vector<unsigned char>> outputs;
    for (const auto& [schedule, hint] : runs) {
      ASSERT_EQ(setenv("JAGRANK_FLASH_SCHEDULE", schedule, 1), 0);
      params.q_tokens_hint = hint;
      ASSERT_CUDA(cudaMemset(d_o.get(), 0xff, d_o.bytes()));
      const Status status = JaggedAttentionCuda(params, nullptr);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ASSERT_CUDA(cudaDeviceSynchronize());
      outputs.emplace_back(d_o.bytes());
      ASSERT_CUDA(cudaMemcpy(outputs.back().data(), d_o.get(), d_o.bytes(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(testing::CountNonFinite(FromDeviceBytes(outputs.back(), DType::kBFloat16)), 0)
          << schedule << " (token count " << hint << "): unwritten (poisoned) rows";
    }
    // A value the launcher does not know fails the call, naming the variable.
    ASSERT_EQ(setenv("JAGRANK_FLASH_SCHEDULE", "Grid", 1), 0);
    const Status misspelt = JaggedAttentionCuda(params, nullptr);
    ASSERT_EQ(unsetenv("JAGRANK_FLASH_SCHEDULE"), 0);
    EXPECT_EQ(misspelt.code(), Status::Code::kInvalidArgument) << misspelt.ToString();
    EXPECT_NE(misspelt.message().find("JAGRANK_FLASH_SCHEDULE='Grid'"), std::string::npos) << misspelt.ToString();
    EXPECT_EQ(outputs[0], outputs[1]) << "two persistent launches in a row differ";
    EXPECT_EQ(outputs[0], outputs[2]) << "the persistent and the grid launch differ";
    EXPECT_EQ(outputs[0], outputs[3]) << "the launcher's own choice differs";
    EXPECT_EQ(outputs[0], outputs[4]) << "the launcher's choice with the token count differs";
    EXPECT_EQ(outputs[0], outputs[5]) << "the launcher's choice with a full-length token count differs";
  }
}

// Argument errors are found on the host, before any CUDA call: these run
// without a device too.
AttentionParams ValidLookingParams() {
  static const int32_t kFakeDevice[16] __attribute__((aligned(16))) = {};
  AttentionParams p = {};
  p.q = p.k = p.v = kFakeDevice;
  p.o = const_cast<int32_t*>(kFakeDevice);
  p.dtype = DType::kBFloat16;
  p.num_heads = 2;
  p.head_dim = 64;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = 128;
  p.q_offsets = p.k_offsets = kFakeDevice;
  p.batch = 1;
  p.max_q_len = p.max_k_len = 4;
  p.softmax_scale = 0.125f;
  return p;
}

TEST(FlashAttentionArgsTest, UnsupportedHeadDimIsUnimplemented) {
  AttentionParams p = ValidLookingParams();
  p.head_dim = 48;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = 96;
  const Status status = JaggedAttentionCuda(p, nullptr);
  EXPECT_EQ(status.code(), Status::Code::kUnimplemented);
  EXPECT_NE(status.message().find("head_dim 48"), std::string::npos) << status.message();
}

TEST(FlashAttentionArgsTest, BadFieldsAreNamed) {
  struct BadCase {
    const char* field;
    void (*apply)(AttentionParams*);
  };
  const BadCase cases[] = {
      {"q is null", [](AttentionParams* p) { p->q = nullptr; }},
      {"k_offsets", [](AttentionParams* p) { p->k_offsets = nullptr; }},
      {"o_row_stride", [](AttentionParams* p) { p->o_row_stride = 64; }},
      {"k_row_stride", [](AttentionParams* p) { p->k_row_stride = 130; }},  // not 16-byte rows
      {"num_heads", [](AttentionParams* p) { p->num_heads = 0; }},
      {"batch", [](AttentionParams* p) { p->batch = -1; }},
      {"softmax_scale", [](AttentionParams* p) { p->softmax_scale = NAN; }},
      {"q_tokens_hint", [](AttentionParams* p) { p->q_tokens_hint = -3; }},
      {"v must be 16-byte aligned",
       [](AttentionParams* p) { p->v = static_cast<const char*>(p->v) + 2; }},
  };
  for (const BadCase& bad : cases) {
    AttentionParams p = ValidLookingParams();
    bad.apply(&p);
    const Status status = JaggedAttentionCuda(p, nullptr);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << bad.field << ": " << status.ToString();
    EXPECT_NE(status.message().find(bad.field), std::string::npos) << status.message();
  }
}

TEST(FlashAttentionArgsTest, EmptyBatchIsANoOp) {
  AttentionParams p = ValidLookingParams();
  p.batch = 0;
  p.q = p.k = p.v = nullptr;
  p.o = nullptr;
  EXPECT_TRUE(JaggedAttentionCuda(p, nullptr).ok());
}

}  // namespace
}  // namespace jagrank
