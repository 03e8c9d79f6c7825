// Jagged <-> padded conversions and PaddedDenseAttentionCpu: the padded
// baseline must give the jagged answer (checked against a double reference)
// and zeros in every padded output row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/layout/layout.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::IsInvalidArgumentNaming;

TEST(JaggedPaddedTest, RoundTripZeroPadsBothDtypes) {
  std::mt19937_64 rng(40);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int batch : {1, 19}) {
      const int max_len = 33, width = 6;
      const auto offsets = testing::OffsetsFromLengths(testing::RandomLengths(rng, batch, max_len));
      const size_t elem = DTypeSize(dtype);
      // Random bytes are fine: the conversions move elements, they never read them.
      std::vector<uint8_t> values(offsets.back() * width * elem);
      for (auto& byte : values) byte = static_cast<uint8_t>(rng());
      std::vector<uint8_t> padded(static_cast<size_t>(batch) * max_len * width * elem, 0xAB);
      JaggedToPaddedParams to = {};
      to.values = values.data();
      to.offsets = offsets.data();
      to.batch = batch;
      to.max_len = max_len;
      to.width = width;
      to.dtype = dtype;
      to.padded = padded.data();
      ASSERT_TRUE(JaggedToPaddedCpu(to).ok());
      for (int b = 0; b < batch; ++b) {
        const int len = offsets[b + 1] - offsets[b];
        for (int i = 0; i < max_len; ++i) {
          for (size_t byte = 0; byte < width * elem; ++byte) {
            const uint8_t got = padded[((static_cast<size_t>(b) * max_len + i) * width) * elem + byte];
            const uint8_t want = i < len ? values[(static_cast<size_t>(offsets[b] + i) * width) * elem + byte] : 0;
            ASSERT_EQ(got, want) << "b " << b << " i " << i;
          }
        }
      }
      std::vector<uint8_t> back(values.size(), 0xCD);
      PaddedToJaggedParams from = {};
      from.padded = padded.data();
      from.offsets = offsets.data();
      from.batch = batch;
      from.max_len = max_len;
      from.width = width;
      from.dtype = dtype;
      from.values = back.data();
      ASSERT_TRUE(PaddedToJaggedCpu(from).ok());
      EXPECT_EQ(back, values);
    }
  }
}

TEST(JaggedPaddedTest, RejectsSequenceLongerThanMaxLen) {
  const std::vector<int32_t> offsets = {0, 5};
  std::vector<float> values(5), padded(4);
  JaggedToPaddedParams p = {};
  p.values = values.data();
  p.offsets = offsets.data();
  p.batch = 1;
  p.max_len = 4;
  p.width = 1;
  p.dtype = DType::kFloat32;
  p.padded = padded.data();
  EXPECT_TRUE(IsInvalidArgumentNaming(JaggedToPaddedCpu(p), "offsets"));
  p.max_len = 5;
  p.width = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(JaggedToPaddedCpu(p), "width"));
  p.width = 1;
  p.padded = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(JaggedToPaddedCpu(p), "padded"));
}

// Self-attention over random jagged lengths, run padded: expected output from
// a double softmax over each sequence's true keys.
// Each request's row repeated over its candidates: lengths 2, 0, 3.
TEST(RepeatRowsTest, RepeatsEachRowOverItsSequence) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // [3, 2]
  const std::vector<int32_t> offsets = {0, 2, 2, 5};
  std::vector<float> values(10, -1.0f);
  RepeatRowsParams p = {};
  p.rows = rows.data();
  p.offsets = offsets.data();
  p.batch = 3;
  p.max_len = 3;
  p.width = 2;
  p.dtype = DType::kFloat32;
  p.values = values.data();
  ASSERT_TRUE(RepeatRowsCpu(p).ok());
  EXPECT_EQ(values, (std::vector<float>{1, 2, 1, 2, 5, 6, 5, 6, 5, 6}));
  p.max_len = 2;  // a sequence of 3
  EXPECT_TRUE(IsInvalidArgumentNaming(RepeatRowsCpu(p), "offsets"));
  p.max_len = 3;
  p.rows = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(RepeatRowsCpu(p), "rows"));
}

TEST(PaddedDenseAttentionCpuTest, MatchesJaggedMathAndZeroesPadding) {
  std::mt19937_64 rng(41);
  const int batch = 11, heads = 2, dh = 32, n = 70;
  const auto lengths = testing::RandomLengths(rng, batch, n);
  const int64_t token = heads * dh;
  const size_t padded_size = static_cast<size_t>(batch) * n * token;
  auto q = testing::RandomFloats(rng, padded_size, -2.0f, 2.0f);
  auto k = testing::RandomFloats(rng, padded_size, -2.0f, 2.0f);
  auto v = testing::RandomFloats(rng, padded_size);
  for (int b = 0; b < batch; ++b) {  // padding holds garbage: the mask must make it irrelevant
    for (int i = lengths[b]; i < n; ++i) {
      for (int64_t x = 0; x < token; ++x) k[(b * n + i) * token + x] = v[(b * n + i) * token + x] = 1e3f;
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<double> ref(padded_size, 0.0);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < lengths[b]; ++i) {
        std::vector<double> s(lengths[b]);
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j < lengths[b]; ++j) {
          double dot = 0.0;
          for (int x = 0; x < dh; ++x) dot += double{q[(b * n + i) * token + h * dh + x]} * k[(b * n + j) * token + h * dh + x];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        for (double& e : s) sum += (e = std::exp(e - m));
        for (int j = 0; j < lengths[b]; ++j) {
          for (int x = 0; x < dh; ++x) ref[(b * n + i) * token + h * dh + x] += s[j] / sum * v[(b * n + j) * token + h * dh + x];
        }
      }
    }
  }
  PaddedDenseAttentionParams p = {};
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_len = lengths.data();
  p.k_len = lengths.data();
  p.batch = batch;
  p.max_q_len = n;
  p.max_k_len = n;
  p.num_heads = heads;
  p.head_dim = dh;
  p.softmax_scale = scale;
  p.dtype = DType::kFloat32;
  std::vector<float> workspace(PaddedDenseAttentionWorkspaceBytes(p) / sizeof(float));
  EXPECT_EQ(workspace.size(), static_cast<size_t>(batch) * heads * n * n);
  std::vector<float> one_thread;  // PaddedDenseAttentionCpu's output on one thread
  for (auto fn : {PaddedDenseAttentionCpu, PaddedDenseAttentionReferenceCpu}) {
    for (const auto& [with_workspace, threads] : {std::pair<bool, int>{false, 1}, {false, 3}, {true, 1}, {true, 3}}) {
      SCOPED_TRACE(std::string(with_workspace ? "workspace, " : "no workspace, ") + std::to_string(threads) +
                   " threads");
      std::vector<float> o(padded_size);
      testing::FillPoison(o);
      testing::FillPoison(workspace);
      p.o = o.data();
      p.workspace = with_workspace ? workspace.data() : nullptr;
      p.num_threads = threads;
      ASSERT_TRUE(fn(p).ok());
      EXPECT_EQ(testing::CountNonFinite(o), 0);
      EXPECT_LT(testing::RelativeError(o, ref), 1e-5);
      if (fn == PaddedDenseAttentionCpu) {
        // Each (b, h) pair runs the same code on whichever thread takes it.
        if (one_thread.empty()) one_thread = o;
        EXPECT_EQ(o, one_thread);
      }
      if (!with_workspace || fn != PaddedDenseAttentionCpu) continue;
      // The baseline materialised P there: head 1's real query rows sum to 1.
      for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < lengths[b]; ++i) {
          const float* row = &workspace[((static_cast<size_t>(b) * heads + 1) * n + i) * n];
          double sum = 0.0;
          for (int j = 0; j < n; ++j) sum += row[j];
          EXPECT_NEAR(sum, 1.0, 1e-5) << "b " << b << " i " << i;
        }
      }
    }
  }
}

TEST(PaddedDenseAttentionCpuTest, RejectsBadArguments) {
  std::vector<float> q(2 * 4 * 8), o(q.size());
  const std::vector<int32_t> len = {4, 5};  // 5 > max
  PaddedDenseAttentionParams p = {};
  p.q = p.k = p.v = q.data();
  p.o = o.data();
  p.q_len = len.data();
  p.k_len = len.data();
  p.batch = 2;
  p.max_q_len = p.max_k_len = 4;
  p.num_heads = 1;
  p.head_dim = 8;
  p.softmax_scale = 1.0f;
  p.dtype = DType::kFloat32;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCpu(p), "q_len"));
  p.max_q_len = 5;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCpu(p), "k_len"));
  p.max_q_len = 4;
  p.dtype = DType::kBFloat16;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCpu(p), "dtype"));
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionReferenceCpu(p), "dtype"));
  p.dtype = DType::kFloat32;
  p.num_heads = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCpu(p), "num_heads"));
  p.num_heads = 1;
  p.num_threads = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(PaddedDenseAttentionCpu(p), "num_threads"));
}

}  // namespace
}  // namespace jagrank
