// DotInteractionCpu against a double reference of docs/model.md step 7, and
// DotInteractionSplitCpu against DotInteractionCpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/interaction/interaction.h"
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

// The split rows hold exactly DotInteraction's entries (same loops, so the
// same floats), at the columns DotInteractionSplitColumns names, and the two
// column lists partition the row.
TEST(DotInteractionSplitCpuTest, PartsAreTheFullRowsColumns) {
  std::mt19937_64 rng(22);
  // 60 requests of up to 150 candidates on 3 threads (a thread per 1024
  // candidates): requests shared out, each computed as on one thread.
  for (int sparse : {0, 1, 6}) {
    for (const auto& [requests, max_candidates, threads] :
         {std::tuple<int, int, int>{1, 30, 1}, {13, 30, 1}, {60, 150, 3}}) {
      SCOPED_TRACE("sparse " + std::to_string(sparse) + " requests " + std::to_string(requests) + " threads " +
                   std::to_string(threads));
      const int d = 16;
      const Inputs in = MakeInputs(rng, requests, sparse, d, max_candidates);
      const int width = DotInteractionOutputWidth(sparse, d);
      std::vector<float> full(static_cast<size_t>(in.candidates) * width);
      ASSERT_TRUE(DotInteractionCpu(ParamsFor(in, full)).ok());
      std::vector<int> request_columns, candidate_columns;
      DotInteractionSplitColumns(sparse, d, &request_columns, &candidate_columns);
      const int m = sparse + 1;
      ASSERT_EQ(request_columns.size(), static_cast<size_t>(d + m * (m - 1) / 2));
      ASSERT_EQ(candidate_columns.size(), static_cast<size_t>(2 * m + 1));
      std::vector<int> all = request_columns;
      all.insert(all.end(), candidate_columns.begin(), candidate_columns.end());
      std::sort(all.begin(), all.end());
      for (int c = 0; c < width; ++c) ASSERT_EQ(all[c], c);
      std::vector<float> request_part(static_cast<size_t>(requests) * request_columns.size());
      std::vector<float> candidate_part(static_cast<size_t>(in.candidates) * candidate_columns.size());
      testing::FillPoison(request_part);
      testing::FillPoison(candidate_part);
      std::vector<float> unused;
      DotInteractionParams split = ParamsFor(in, unused);
      split.num_threads = threads;
      ASSERT_TRUE(DotInteractionSplitCpu(split, request_part.data(), candidate_part.data()).ok());
      for (int r = 0; r < requests; ++r) {
        for (int32_t c = in.candidate_offsets[r]; c < in.candidate_offsets[r + 1]; ++c) {
          for (size_t j = 0; j < request_columns.size(); ++j) {
            ASSERT_EQ(request_part[r * request_columns.size() + j], full[c * width + request_columns[j]])
                << "request " << r << " candidate " << c << " column " << request_columns[j];
          }
          for (size_t j = 0; j < candidate_columns.size(); ++j) {
            ASSERT_EQ(candidate_part[c * candidate_columns.size() + j], full[c * width + candidate_columns[j]])
                << "candidate " << c << " column " << candidate_columns[j];
          }
        }
      }
    }
  }
  std::mt19937_64 bad_rng(23);
  const Inputs in = MakeInputs(bad_rng, 2, 1, 8, 4);
  std::vector<float> request_part(64), candidate_part(64), unused;
  DotInteractionParams p = ParamsFor(in, unused);
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, nullptr, candidate_part.data()), "request_out"));
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, request_part.data(), nullptr), "candidate_out"));
  p.u = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, request_part.data(), candidate_part.data()), "u"));
  p = ParamsFor(in, unused);
  p.vector_dtype = DType::kBFloat16;  // the CUDA split form's only
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, request_part.data(), candidate_part.data()),
                                      "vector_dtype"));
  p = ParamsFor(in, unused);
  p.num_threads = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(DotInteractionSplitCpu(p, request_part.data(), candidate_part.data()),
                                      "num_threads"));
}

}  // namespace
}  // namespace jagrank
