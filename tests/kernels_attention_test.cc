// JaggedAttentionCpu (fast path, several thread counts) and
// JaggedAttentionReferenceCpu against a softmax reference in double written
// here: self-attention (separate and packed q/k/v), target attention, the
// padded-flash key mask, long sequences, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::IsInvalidArgumentNaming;

// Operands of one attention call laid out as AttentionParams describes.
struct Problem {
  std::vector<int32_t> q_offsets, k_offsets, k_valid;
  int heads = 1, head_dim = 1;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, o_stride = 0;
  std::vector<float> q, k, v, o;
};

Problem MakeProblem(std::mt19937_64& rng, const std::vector<int32_t>& q_lengths,
                    const std::vector<int32_t>& k_lengths, int heads, int head_dim, int64_t stride_pad) {
  Problem pr;
  pr.q_offsets = testing::OffsetsFromLengths(q_lengths);
  pr.k_offsets = testing::OffsetsFromLengths(k_lengths);
  pr.heads = heads;
  pr.head_dim = head_dim;
  const int64_t width = int64_t{heads} * head_dim;
  pr.q_stride = pr.k_stride = pr.v_stride = pr.o_stride = width + stride_pad;
  pr.q = testing::RandomFloats(rng, pr.q_offsets.back() * pr.q_stride, -2.0f, 2.0f);
  pr.k = testing::RandomFloats(rng, pr.k_offsets.back() * pr.k_stride, -2.0f, 2.0f);
  pr.v = testing::RandomFloats(rng, pr.k_offsets.back() * pr.v_stride);
  pr.o.resize(pr.q_offsets.back() * pr.o_stride);
  return pr;
}

int MaxLen(const std::vector<int32_t>& offsets) {
  int m = 0;
  for (size_t b = 0; b + 1 < offsets.size(); ++b) m = std::max(m, offsets[b + 1] - offsets[b]);
  return m;
}

AttentionParams ParamsFor(Problem& pr, int num_threads) {
  AttentionParams p = {};
  p.q = pr.q.data();
  p.k = pr.k.data();
  p.v = pr.v.data();
  p.o = pr.o.data();
  p.dtype = DType::kFloat32;
  p.q_row_stride = pr.q_stride;
  p.k_row_stride = pr.k_stride;
  p.v_row_stride = pr.v_stride;
  p.o_row_stride = pr.o_stride;
  p.q_offsets = pr.q_offsets.data();
  p.k_offsets = pr.k_offsets.data();
  p.batch = static_cast<int>(pr.q_offsets.size()) - 1;
  p.num_heads = pr.heads;
  p.head_dim = pr.head_dim;
  p.max_q_len = MaxLen(pr.q_offsets);
  p.max_k_len = MaxLen(pr.k_offsets);
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(pr.head_dim));
  p.maybe_k_valid_len = pr.k_valid.empty() ? nullptr : pr.k_valid.data();
  p.num_threads = num_threads;
  return p;
}

// The expected o in double, same layout (gap columns of a padded stride stay 0).
std::vector<double> Reference(const Problem& pr) {
  std::vector<double> o(pr.o.size(), 0.0);
  const int batch = static_cast<int>(pr.q_offsets.size()) - 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.head_dim));
  for (int b = 0; b < batch; ++b) {
    int keys = pr.k_offsets[b + 1] - pr.k_offsets[b];
    if (!pr.k_valid.empty()) keys = std::min(keys, pr.k_valid[b]);
    for (int h = 0; h < pr.heads; ++h) {
      for (int t = pr.q_offsets[b]; t < pr.q_offsets[b + 1]; ++t) {
        std::vector<double> s(keys);
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j < keys; ++j) {
          const int64_t kt = pr.k_offsets[b] + j;
          double dot = 0.0;
          for (int x = 0; x < pr.head_dim; ++x) {
            dot += double{pr.q[t * pr.q_stride + h * pr.head_dim + x]} * pr.k[kt * pr.k_stride + h * pr.head_dim + x];
          }
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        for (int j = 0; j < keys; ++j) sum += (s[j] = std::exp(s[j] - m));
        for (int j = 0; j < keys; ++j) {
          const int64_t kt = pr.k_offsets[b] + j;
          for (int x = 0; x < pr.head_dim; ++x) {
            o[t * pr.o_stride + h * pr.head_dim + x] += s[j] / sum * pr.v[kt * pr.v_stride + h * pr.head_dim + x];
          }
        }
      }
    }
  }
  return o;
}

// Runs the fast path at 1, 2 and 3 threads and the plain reference; each must
// write every head slot (poison elsewhere), leave stride gaps alone, and match.
void CheckAllPaths(Problem& pr, double tolerance) {
  const std::vector<double> ref = Reference(pr);
  const int64_t width = int64_t{pr.heads} * pr.head_dim;
  using Fn = std::function<Status(const AttentionParams&)>;
  const std::vector<std::pair<Fn, int>> runs = {
      {JaggedAttentionCpu, 1}, {JaggedAttentionCpu, 2}, {JaggedAttentionCpu, 3}, {JaggedAttentionReferenceCpu, 1}};
  for (size_t i = 0; i < runs.size(); ++i) {
    testing::FillPoison(pr.o);
    ASSERT_TRUE(runs[i].first(ParamsFor(pr, runs[i].second)).ok()) << "run " << i;
    std::vector<float> written;
    std::vector<double> expected;
    for (size_t e = 0; e < pr.o.size(); ++e) {
      if (static_cast<int64_t>(e % pr.o_stride) < width) {
        written.push_back(pr.o[e]);
        expected.push_back(ref[e]);
      } else {
        ASSERT_TRUE(std::isnan(pr.o[e])) << "run " << i << " wrote the stride gap at " << e;
      }
    }
    EXPECT_EQ(testing::CountNonFinite(written), 0) << "run " << i;
    EXPECT_LT(testing::RelativeError(written, expected), tolerance) << "run " << i;
  }
}

TEST(JaggedAttentionCpuTest, SelfAttentionRandomLengths) {
  std::mt19937_64 rng(10);
  for (int head_dim : {32, 64, 128}) {
    const auto lengths = testing::RandomLengths(rng, 23, 150);
    Problem pr = MakeProblem(rng, lengths, lengths, 2, head_dim, 0);
    CheckAllPaths(pr, 1e-5);
  }
}

TEST(JaggedAttentionCpuTest, PackedQkvWithRowStrideAndOddHeadDim) {
  // q, k, v as column blocks of one [T, 3 * H * dh] buffer, o with a gap.
  std::mt19937_64 rng(11);
  const int heads = 3, head_dim = 5, width = heads * head_dim;
  const auto lengths = testing::RandomLengths(rng, 9, 40);
  Problem pr = MakeProblem(rng, lengths, lengths, heads, head_dim, 0);
  const int64_t tokens = pr.q_offsets.back();
  std::vector<float> qkv = testing::RandomFloats(rng, tokens * 3 * width, -2.0f, 2.0f);
  pr.q_stride = pr.k_stride = pr.v_stride = 3 * width;
  pr.q.assign(qkv.begin(), qkv.end());
  pr.k.assign(qkv.begin() + width, qkv.end());
  pr.k.resize(qkv.size());
  pr.v.assign(qkv.begin() + 2 * width, qkv.end());
  pr.v.resize(qkv.size());
  pr.o_stride = width + 7;
  pr.o.resize(tokens * pr.o_stride);
  CheckAllPaths(pr, 1e-5);
}

TEST(JaggedAttentionCpuTest, TargetAttentionEmptyHistoriesGiveZeros) {
  std::mt19937_64 rng(12);
  const int batch = 30, dim = 64;
  const auto candidates = testing::RandomLengths(rng, batch, 20);
  auto histories = testing::RandomLengths(rng, batch, 300);
  histories[0] = 0;  // with candidates: must produce zeros
  Problem pr = MakeProblem(rng, std::vector<int32_t>(candidates.begin(), candidates.end()), histories, 1, dim, 0);
  pr.v = pr.k;  // k = v = z
  CheckAllPaths(pr, 1e-5);
  ASSERT_TRUE(JaggedAttentionCpu(ParamsFor(pr, 2)).ok());
  for (int32_t t = pr.q_offsets[0]; t < pr.q_offsets[1]; ++t) {
    for (int x = 0; x < dim; ++x) EXPECT_EQ(pr.o[t * dim + x], 0.0f);
  }
}

TEST(JaggedAttentionCpuTest, LongSequenceBatchOfOne) {
  std::mt19937_64 rng(13);
  Problem pr = MakeProblem(rng, {2000}, {2000}, 2, 32, 0);
  CheckAllPaths(pr, 1e-5);
}

TEST(JaggedAttentionCpuTest, LargeScoresStayFiniteAndAccurate) {
  // Scores in the thousands: the softmax must subtract the row max (a plain
  // exp overflows) and the clamped fast exp must not lose the winning keys.
  std::mt19937_64 rng(16);
  const auto lengths = testing::RandomLengths(rng, 6, 90);
  Problem pr = MakeProblem(rng, lengths, lengths, 1, 64, 0);
  for (float& x : pr.q) x *= 15.0f;
  for (float& x : pr.k) x *= 15.0f;
  CheckAllPaths(pr, 1e-4);
}

TEST(JaggedAttentionCpuTest, KeyValidLengthMasksPaddedKeys) {
  // The padded-flash layout: every sequence padded to N, true lengths in k_valid.
  std::mt19937_64 rng(14);
  const int batch = 7, n = 64;
  Problem pr = MakeProblem(rng, std::vector<int32_t>(batch, n), std::vector<int32_t>(batch, n), 2, 32, 0);
  pr.k_valid = testing::RandomLengths(rng, batch, n);
  pr.k_valid[0] = n + 5;  // above the length: all keys valid
  CheckAllPaths(pr, 1e-5);
}

TEST(JaggedAttentionCpuTest, ConcurrentCallersGetTheirOwnAnswers) {
  // Two executors calling at once share the worker pool; both must be right.
  std::mt19937_64 rng(17);
  const auto lengths_a = testing::RandomLengths(rng, 12, 200);
  const auto lengths_b = testing::RandomLengths(rng, 9, 300);
  Problem a = MakeProblem(rng, lengths_a, lengths_a, 2, 32, 0);
  Problem b = MakeProblem(rng, lengths_b, lengths_b, 1, 64, 0);
  const std::vector<double> ref_a = Reference(a), ref_b = Reference(b);
  auto run = [](Problem* pr, const std::vector<double>* ref) {
    for (int rep = 0; rep < 5; ++rep) {
      testing::FillPoison(pr->o);
      if (!JaggedAttentionCpu(ParamsFor(*pr, 0)).ok()) return false;
      if (testing::RelativeError(pr->o, *ref) > 1e-5) return false;
    }
    return true;
  };
  auto fa = std::async(std::launch::async, run, &a, &ref_a);
  auto fb = std::async(std::launch::async, run, &b, &ref_b);
  ASSERT_EQ(fa.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_EQ(fb.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(fa.get());
  EXPECT_TRUE(fb.get());
}

TEST(JaggedAttentionCpuTest, EmptyBatchIsANoOp) {
  Problem pr;
  pr.q_offsets = pr.k_offsets = {0};
  pr.heads = 1;
  pr.head_dim = 8;
  pr.q_stride = pr.k_stride = pr.v_stride = pr.o_stride = 8;
  AttentionParams p = ParamsFor(pr, 0);
  EXPECT_TRUE(JaggedAttentionCpu(p).ok());
  EXPECT_TRUE(JaggedAttentionReferenceCpu(p).ok());
}

TEST(JaggedAttentionCpuTest, RejectsBadArguments) {
  std::mt19937_64 rng(15);
  Problem pr = MakeProblem(rng, {3, 0, 4}, {3, 0, 4}, 2, 8, 0);
  const std::vector<int32_t> decreasing = {0, 3, 2, 7};
  const std::vector<int32_t> bad_start = {1, 3, 3, 7};
  const std::vector<int32_t> negative_valid = {1, -1, 2};
  struct Case {
    const char* field;
    std::function<void(AttentionParams&)> mutate;
  };
  const std::vector<Case> cases = {
      {"dtype", [](AttentionParams& p) { p.dtype = DType::kBFloat16; }},
      {"batch", [](AttentionParams& p) { p.batch = -1; }},
      {"num_heads", [](AttentionParams& p) { p.num_heads = 0; }},
      {"head_dim", [](AttentionParams& p) { p.head_dim = 0; }},
      {"q_row_stride", [](AttentionParams& p) { p.q_row_stride = 15; }},
      {"o_row_stride", [](AttentionParams& p) { p.o_row_stride = 8; }},
      {"q_offsets", [&](AttentionParams& p) { p.q_offsets = decreasing.data(); }},
      {"k_offsets", [&](AttentionParams& p) { p.k_offsets = bad_start.data(); }},
      {"k_offsets", [](AttentionParams& p) { p.k_offsets = nullptr; }},
      {"max_q_len", [](AttentionParams& p) { p.max_q_len = -1; }},
      {"q_offsets", [](AttentionParams& p) { p.max_q_len = 3; }},  // a length 4 sequence
      {"k_offsets", [](AttentionParams& p) { p.max_k_len = 2; }},
      {"q", [](AttentionParams& p) { p.q = nullptr; }},
      {"v", [](AttentionParams& p) { p.v = nullptr; }},
      {"o", [](AttentionParams& p) { p.o = nullptr; }},
      {"maybe_k_valid_len", [&](AttentionParams& p) { p.maybe_k_valid_len = negative_valid.data(); }},
      {"num_threads", [](AttentionParams& p) { p.num_threads = -2; }},
  };
  ASSERT_TRUE(JaggedAttentionCpu(ParamsFor(pr, 1)).ok());
  for (const Case& c : cases) {
    AttentionParams p = ParamsFor(pr, 1);
    c.mutate(p);
    const Status fast = JaggedAttentionCpu(p);
    EXPECT_TRUE(IsInvalidArgumentNaming(fast, c.field)) << c.field << ": " << fast.ToString();
    const Status ref = JaggedAttentionReferenceCpu(p);
    EXPECT_TRUE(IsInvalidArgumentNaming(ref, c.field)) << c.field << ": " << ref.ToString();
  }
}

}  // namespace
}  // namespace jagrank
