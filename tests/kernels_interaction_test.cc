// DotInteractionCpu against a double reference of DESIGN.md step 7.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/interaction.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::IsInvalidArgumentNaming;

struct Inputs {
  int requests, sparse, dim, candidates;
  std::vector<int32_t> candidate_offsets;
  std::vector<float> x, pooled, u, e;
};

Inputs MakeInputs(std::mt19937_64& rng, int requests, int sparse, int dim, int32_t max_candidates) {
  Inputs in{requests, sparse, dim, 0, {}, {}, {}, {}, {}};
  in.candidate_offsets = testing::OffsetsFromLengths(testing::RandomLengths(rng, requests, max_candidates));
  in.candidates = in.candidate_offsets.back();
  in.x = testing::RandomFloats(rng, static_cast<size_t>(requests) * dim);
  in.pooled = testing::RandomFloats(rng, static_cast<size_t>(sparse) * requests * dim);
  in.u = testing::RandomFloats(rng, static_cast<size_t>(in.candidates) * dim);
  in.e = testing::RandomFloats(rng, static_cast<size_t>(in.candidates) * dim);
  return in;
}

DotInteractionParams ParamsFor(const Inputs& in, std::vector<float>& out) {
  DotInteractionParams p = {};
  p.x = in.x.data();
  p.pooled = in.sparse > 0 ? in.pooled.data() : nullptr;
  p.num_sparse = in.sparse;
  p.u = in.u.data();
  p.e = in.e.data();
  p.candidate_offsets = in.candidate_offsets.data();
  p.num_requests = in.requests;
  p.num_candidates = in.candidates;
  p.dim = in.dim;
  p.out = out.data();
  return p;
}

std::vector<double> Reference(const Inputs& in) {
  const int n = in.sparse + 3, d = in.dim, width = d + n * (n - 1) / 2;
  std::vector<double> out(static_cast<size_t>(in.candidates) * width);
  for (int r = 0; r < in.requests; ++r) {
    for (int c = in.candidate_offsets[r]; c < in.candidate_offsets[r + 1]; ++c) {
      auto vec = [&](int a, int i) -> double {
        if (a == 0) return in.x[r * d + i];
        if (a <= in.sparse) return in.pooled[((a - 1) * in.requests + r) * d + i];
        if (a == n - 2) return in.u[c * d + i];
        return in.e[c * d + i];
      };
      double* row = &out[static_cast<size_t>(c) * width];
      for (int i = 0; i < d; ++i) row[i] = vec(0, i);
      int t = d;
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          double dot = 0.0;
          for (int i = 0; i < d; ++i) dot += vec(a, i) * vec(b, i);
          row[t++] = dot;
        }
      }
    }
  }
  return out;
}

TEST(DotInteractionCpuTest, MatchesReference) {
  std::mt19937_64 rng(20);
  for (int sparse : {0, 1, 4}) {
    for (int requests : {1, 17}) {
      const Inputs in = MakeInputs(rng, requests, sparse, 64, 40);
      EXPECT_EQ(DotInteractionOutputWidth(sparse, 64), 64 + (sparse + 3) * (sparse + 2) / 2);
      std::vector<float> out(static_cast<size_t>(in.candidates) * DotInteractionOutputWidth(sparse, 64));
      testing::FillPoison(out);
      ASSERT_TRUE(DotInteractionCpu(ParamsFor(in, out)).ok());
      EXPECT_EQ(testing::CountNonFinite(out), 0);
      EXPECT_LT(testing::RelativeError(out, Reference(in)), 1e-5) << "sparse " << sparse << " requests " << requests;
    }
  }
}

TEST(DotInteractionCpuTest, RejectsBadArguments) {
  std::mt19937_64 rng(21);
  const Inputs in = MakeInputs(rng, 3, 2, 8, 4);
  std::vector<float> out(static_cast<size_t>(in.candidates) * DotInteractionOutputWidth(2, 8));
  ASSERT_TRUE(DotInteractionCpu(ParamsFor(in, out)).ok());
  DotInteractionParams p = ParamsFor(in, out);
  p.num_candidates += 1;  // offsets no longer end at the count
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCpu(p), "candidate_offsets"));
  p = ParamsFor(in, out);
  p.num_requests = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCpu(p), "num_requests"));
  p = ParamsFor(in, out);
  p.pooled = nullptr;
  ASSERT_GT(in.candidates, 0);
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCpu(p), "pooled"));
  p = ParamsFor(in, out);
  p.dim = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCpu(p), "dim"));
  p = ParamsFor(in, out);
  p.num_sparse = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionCpu(p), "num_sparse"));
}

}  // namespace
}  // namespace jagrank
