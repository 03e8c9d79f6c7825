// EmbeddingBagCpu, GatherRowsCpu, HistoryGatherCpu against double references
// written here from docs/model.md steps 2, 3 and 5.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/embedding/embedding.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

using testing::IsInvalidArgumentNaming;

// A [rows, dim] table kept as float and as bf16 bits; `Value` is what either
// dtype stores (the bf16 value rounded from the float one).
struct Table {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  int64_t rows;
  int dim;
  const void* data(DType dtype) const {
    return dtype == DType::kFloat32 ? static_cast<const void*>(f32.data()) : bf16.data();
  }
  double Value(DType dtype, int64_t row, int i) const {
    const size_t at = static_cast<size_t>(row) * dim + i;
    return dtype == DType::kFloat32 ? f32[at] : BFloat16ToFloat(bf16[at]);
  }
};

Table MakeTable(std::mt19937_64& rng, int64_t rows, int dim) {
  Table t{testing::RandomFloats(rng, rows * dim), {}, rows, dim};
  for (float x : t.f32) t.bf16.push_back(FloatToBFloat16(x));
  return t;
}

int64_t Row(int64_t id, int64_t rows) { return static_cast<int64_t>(static_cast<uint64_t>(id) % rows); }

class EmbeddingBagTest : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingBagTest, MatchesReferenceOnRandomJaggedBatches) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(1);
  const Table table = MakeTable(rng, 1009, 24);
  for (int batch : {1, 2, 37}) {
    for (int32_t max_len : {1, 50, 2000}) {
      const auto offsets = testing::OffsetsFromLengths(testing::RandomLengths(rng, batch, max_len));
      const auto ids = testing::RandomIds(rng, offsets.back());
      std::vector<float> out(static_cast<size_t>(batch) * table.dim);
      testing::FillPoison(out);
      EmbeddingBagParams p = {};
      p.ids = ids.data();
      p.offsets = offsets.data();
      p.batch = batch;
      p.table = table.data(dtype);
      p.table_dtype = dtype;
      p.num_rows = table.rows;
      p.dim = table.dim;
      p.out = out.data();
      ASSERT_TRUE(EmbeddingBagCpu(p).ok());

      std::vector<double> ref(out.size(), 0.0);
      for (int b = 0; b < batch; ++b) {
        for (int32_t i = offsets[b]; i < offsets[b + 1]; ++i) {
          for (int x = 0; x < table.dim; ++x) ref[b * table.dim + x] += table.Value(dtype, Row(ids[i], table.rows), x);
        }
      }
      EXPECT_EQ(testing::CountNonFinite(out), 0);
      EXPECT_LT(testing::RelativeError(out, ref), 1e-5) << "batch " << batch << " max_len " << max_len;
      for (int b = 0; b < batch; ++b) {  // empty bags are exact zeros
        if (offsets[b + 1] == offsets[b]) {
          for (int x = 0; x < table.dim; ++x) EXPECT_EQ(out[b * table.dim + x], 0.0f);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingBagTest, ::testing::Values(DType::kFloat32, DType::kBFloat16));

TEST(EmbeddingBagTest, NegativeAndHugeIdsUseTheUnsignedCast) {
  // uint64(-1) % 1000 = 18446744073709551615 % 1000 = 615; INT64_MIN -> 2^63 % 1000 = 808.
  std::vector<float> table(1000);
  for (int r = 0; r < 1000; ++r) table[r] = static_cast<float>(r);
  const std::vector<int64_t> ids = {-1, INT64_MIN, 1234};
  const std::vector<int32_t> offsets = {0, 1, 2, 3};
  std::vector<float> out(3, -1.0f);
  EmbeddingBagParams p = {};
  p.ids = ids.data();
  p.offsets = offsets.data();
  p.batch = 3;
  p.table = table.data();
  p.table_dtype = DType::kFloat32;
  p.num_rows = 1000;
  p.dim = 1;
  p.out = out.data();
  ASSERT_TRUE(EmbeddingBagCpu(p).ok());
  EXPECT_EQ(out, (std::vector<float>{615.0f, 808.0f, 234.0f}));
}

TEST(EmbeddingBagTest, RejectsBadArguments) {
  std::vector<float> table(10 * 4, 1.0f), out(2 * 4);
  std::vector<int64_t> ids = {1, 2, 3};
  std::vector<int32_t> offsets = {0, 2, 3};
  auto valid = [&] {
    EmbeddingBagParams p = {};
    p.ids = ids.data();
    p.offsets = offsets.data();
    p.batch = 2;
    p.table = table.data();
    p.table_dtype = DType::kFloat32;
    p.num_rows = 10;
    p.dim = 4;
    p.out = out.data();
    return p;
  };
  ASSERT_TRUE(EmbeddingBagCpu(valid()).ok());
  EmbeddingBagParams p = valid();
  p.batch = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "batch"));
  p = valid();
  p.dim = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "dim"));
  p = valid();
  p.num_rows = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "num_rows"));
  p = valid();
  p.offsets = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "offsets"));
  p = valid();
  p.ids = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "ids"));
  p = valid();
  p.table = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "table"));
  p = valid();
  p.out = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "out"));
  const std::vector<int32_t> decreasing = {0, 3, 2};
  p = valid();
  p.offsets = decreasing.data();
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "offsets"));
  const std::vector<int32_t> bad_start = {1, 2, 3};
  p = valid();
  p.offsets = bad_start.data();
  EXPECT_TRUE(IsInvalidArgumentNaming(EmbeddingBagCpu(p), "offsets[0]"));
}

TEST(GatherRowsTest, MatchesReferenceBothDtypes) {
  std::mt19937_64 rng(2);
  const Table table = MakeTable(rng, 777, 16);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // 5000 rows on 3 threads: blocks of 1667 (a thread per 1024 rows).
    for (const auto& [count, threads] : {std::pair<int64_t, int>{0, 1}, {1, 1}, {300, 1}, {5000, 1}, {5000, 3}}) {
      const auto ids = testing::RandomIds(rng, count);
      std::vector<float> out(count * table.dim);
      testing::FillPoison(out);
      GatherRowsParams p = {};
      p.ids = ids.data();
      p.count = count;
      p.table = table.data(dtype);
      p.table_dtype = dtype;
      p.num_rows = table.rows;
      p.dim = table.dim;
      p.out = out.data();
      p.num_threads = threads;
      ASSERT_TRUE(GatherRowsCpu(p).ok());
      std::vector<double> ref(out.size());
      for (int64_t c = 0; c < count; ++c) {
        for (int x = 0; x < table.dim; ++x) ref[c * table.dim + x] = table.Value(dtype, Row(ids[c], table.rows), x);
      }
      EXPECT_EQ(testing::RelativeError(out, ref), 0.0);
    }
  }
  GatherRowsParams p = {};
  p.count = -1;
  p.dim = 4;
  p.num_rows = 1;
  EXPECT_TRUE(IsInvalidArgumentNaming(GatherRowsCpu(p), "count"));
  p.count = 3;
  EXPECT_TRUE(IsInvalidArgumentNaming(GatherRowsCpu(p), "ids"));
  p.num_threads = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(GatherRowsCpu(p), "num_threads"));
  // bf16 rows out are the CUDA gather's only.
  const std::vector<int64_t> ids = {0, 0, 0};
  std::vector<float> rows(4), out(12);
  p.num_threads = 0;
  p.ids = ids.data();
  p.table = rows.data();
  p.out = out.data();
  p.out_dtype = DType::kBFloat16;
  EXPECT_TRUE(IsInvalidArgumentNaming(GatherRowsCpu(p), "out_dtype"));
  p.out_dtype = DType::kFloat32;
  EXPECT_TRUE(GatherRowsCpu(p).ok());
}

TEST(HistoryGatherTest, AddsPositionFromTheMostRecentItem) {
  std::mt19937_64 rng(3);
  const int dim = 32, max_len = 2000;
  const Table items = MakeTable(rng, 5003, dim);
  const Table positions = MakeTable(rng, max_len, dim);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // 25 histories of up to 2000 ids on 3 threads: requests shared out.
    for (const auto& [batch, threads] : {std::pair<int, int>{1, 1}, {25, 1}, {25, 3}}) {
      const auto offsets = testing::OffsetsFromLengths(testing::RandomLengths(rng, batch, max_len));
      const auto ids = testing::RandomIds(rng, offsets.back());
      std::vector<float> out(static_cast<size_t>(offsets.back()) * dim);
      testing::FillPoison(out);
      HistoryGatherParams p = {};
      p.ids = ids.data();
      p.offsets = offsets.data();
      p.batch = batch;
      p.item_table = items.data(dtype);
      p.table_dtype = dtype;
      p.item_rows = items.rows;
      p.position_table = positions.data(dtype);
      p.max_len = max_len;
      p.dim = dim;
      p.out = out.data();
      p.num_threads = threads;
      ASSERT_TRUE(HistoryGatherCpu(p).ok());
      std::vector<double> ref(out.size());
      for (int b = 0; b < batch; ++b) {
        const int len = offsets[b + 1] - offsets[b];
        for (int j = 0; j < len; ++j) {
          const int64_t t = offsets[b] + j;
          for (int x = 0; x < dim; ++x) {
            ref[t * dim + x] = items.Value(dtype, Row(ids[t], items.rows), x) + positions.Value(dtype, len - 1 - j, x);
          }
        }
      }
      EXPECT_EQ(testing::CountNonFinite(out), 0);
      EXPECT_LT(testing::RelativeError(out, ref), 1e-6);
    }
  }
}

TEST(HistoryGatherTest, RejectsHistoryLongerThanPositionTable) {
  std::vector<float> items(10 * 2), positions(2 * 2), out(3 * 2);
  const std::vector<int64_t> ids = {1, 2, 3};
  const std::vector<int32_t> offsets = {0, 3};
  HistoryGatherParams p = {};
  p.ids = ids.data();
  p.offsets = offsets.data();
  p.batch = 1;
  p.item_table = items.data();
  p.table_dtype = DType::kFloat32;
  p.item_rows = 10;
  p.position_table = positions.data();
  p.max_len = 2;
  p.dim = 2;
  p.out = out.data();
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCpu(p), "offsets"));
  p.max_len = 3;
  p.position_table = nullptr;
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCpu(p), "position_table"));
  p.max_len = 0;
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCpu(p), "max_len"));
  p.max_len = 3;
  p.position_table = positions.data();
  p.num_threads = -1;
  EXPECT_TRUE(IsInvalidArgumentNaming(HistoryGatherCpu(p), "num_threads"));
}

}  // namespace
}  // namespace jagrank
