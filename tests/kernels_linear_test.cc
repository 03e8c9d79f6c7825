// LinearCpu (OpenBLAS, rows shared over threads) and LinearReferenceCpu
// against a double reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/linear/linear.h"
#include "tests/test_util.h"

// OpenBLAS's thread query, declared weak: null when the BLAS is another.
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace jagrank {
namespace {

using testing::IsInvalidArgumentNaming;

// y = x W^T (+ bias) for the given shapes; relu, accumulate and threads as set after.
LinearParams Params(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int m, int n, int k,
                    std::vector<float>* y) {
  LinearParams p = {};
  p.x = x.data();
  p.weight = w.data();
  p.maybe_bias = bias;
  p.m = m;
  p.n = n;
  p.k = k;
  p.y = y->data();
  return p;
}

TEST(LinearCpuTest, MatchesReferenceWithAndWithoutBiasAndRelu) {
  std::mt19937_64 rng(30);
  for (int m : {1, 7, 300, 1001}) {
    for (const auto& nk : {std::pair<int, int>{1, 13}, {64, 256}, {512, 71}}) {
      const int n = nk.first, k = nk.second;
      const auto x = testing::RandomFloats(rng, static_cast<size_t>(m) * k);
      const auto w = testing::RandomFloats(rng, static_cast<size_t>(n) * k);
      const auto bias = testing::RandomFloats(rng, n);
      for (bool use_bias : {false, true}) {
        for (bool relu : {false, true}) {
          std::vector<double> ref(static_cast<size_t>(m) * n);
          for (int r = 0; r < m; ++r) {
            for (int c = 0; c < n; ++c) {
              double acc = use_bias ? bias[c] : 0.0;
              for (int i = 0; i < k; ++i) acc += double{x[r * k + i]} * w[c * k + i];
              ref[r * n + c] = relu ? std::max(acc, 0.0) : acc;
            }
          }
          // LinearCpu on 1 and 3 threads (1001 x 512 x 71 splits into three
          // blocks of 334 rows, the last short) and on all cores (0).
          for (const auto& [fn, threads] : {std::pair<Status (*)(const LinearParams&), int>{LinearCpu, 1},
                                            {LinearCpu, 3}, {LinearCpu, 0}, {LinearReferenceCpu, 0}}) {
            SCOPED_TRACE(std::to_string(threads) + " threads");
            std::vector<float> y(ref.size());
            testing::FillPoison(y);
            LinearParams p = Params(x, w, use_bias ? bias.data() : nullptr, m, n, k, &y);
            p.relu = relu;
            p.num_threads = threads;
            ASSERT_TRUE(fn(p).ok());
            EXPECT_EQ(testing::CountNonFinite(y), 0);
            EXPECT_LT(testing::RelativeError(y, ref), 1e-5) << m << "x" << n << "x" << k;
            if (relu) {
              EXPECT_GE(*std::min_element(y.begin(), y.end()), 0.0f);
            }
          }
        }
      }
    }
  }
}

// accumulate: y += x W^T (+ b), ReLU on the sum; on 1 and 3 threads and in
// the reference.
TEST(LinearCpuTest, AccumulateAddsToWhatYHolds) {
  std::mt19937_64 rng(31);
  const int m = 3001, n = 96, k = 15;  // 8.6 MFLOP: three blocks on 3 threads, the last short
  const auto x = testing::RandomFloats(rng, static_cast<size_t>(m) * k);
  const auto w = testing::RandomFloats(rng, static_cast<size_t>(n) * k);
  const auto bias = testing::RandomFloats(rng, n);
  const auto start = testing::RandomFloats(rng, static_cast<size_t>(m) * n);
  for (bool use_bias : {false, true}) {
    for (bool relu : {false, true}) {
      std::vector<double> ref(start.size());
      for (int r = 0; r < m; ++r) {
        for (int c = 0; c < n; ++c) {
          double acc = double{start[r * n + c]} + (use_bias ? bias[c] : 0.0);
          for (int i = 0; i < k; ++i) acc += double{x[r * k + i]} * w[c * k + i];
          ref[r * n + c] = relu ? std::max(acc, 0.0) : acc;
        }
      }
      for (const auto& [fn, threads] : {std::pair<Status (*)(const LinearParams&), int>{LinearCpu, 1},
                                        {LinearCpu, 3}, {LinearReferenceCpu, 0}}) {
        SCOPED_TRACE(std::string(use_bias ? "bias " : "") + (relu ? "relu " : "") + std::to_string(threads) +
                     " threads");
        std::vector<float> y = start;
        LinearParams p = Params(x, w, use_bias ? bias.data() : nullptr, m, n, k, &y);
        p.relu = relu;
        p.accumulate = true;
        p.num_threads = threads;
        ASSERT_TRUE(fn(p).ok());
        EXPECT_LT(testing::RelativeError(y, ref), 1e-5);
      }
    }
  }
}

TEST(LinearCpuTest, RejectsBadArguments) {
  std::vector<float> x(4 * 3), w(2 * 3), y(4 * 2);
  const LinearParams p = Params(x, w, nullptr, 4, 2, 3, &y);
  ASSERT_TRUE(LinearCpu(p).ok());
  LinearParams bad = p;
  bad.k = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCpu(bad), "k"));
  bad = p;
  bad.m = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCpu(bad), "m"));
  bad = p;
  bad.weight = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCpu(bad), "weight"));
  bad = p;
  bad.y = x.data();
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCpu(bad), "y"));
  bad = p;
  bad.num_threads = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(LinearCpu(bad), "num_threads"));
  bad = p;
  bad.m = 0;
  bad.x = nullptr;  // nothing to compute
  EXPECT_TRUE(LinearCpu(bad).ok());
}

// LinearCpu shares rows over its own threads, so OpenBLAS must not start
// its pool beside them (its idle workers spin): after a call it runs on one.
TEST(LinearCpuTest, LeavesOpenBlasSingleThreaded) {
  if (openblas_get_num_threads == nullptr) GTEST_SKIP() << "the BLAS linked is not OpenBLAS";
  std::vector<float> x(64 * 32, 1.0f), w(16 * 32, 1.0f), y(64 * 16);
  ASSERT_TRUE(LinearCpu(Params(x, w, nullptr, 64, 16, 32, &y)).ok());
  EXPECT_EQ(openblas_get_num_threads(), 1);
  EXPECT_EQ(y[0], 32.0f);
}

}  // namespace
}  // namespace jagrank
