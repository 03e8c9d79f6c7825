// The jagged helpers every CPU kernel validates with, and the bf16 helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/layout/jagged.h"
#include "tests/test_util.h"

namespace jagrank {
namespace {

TEST(JaggedTest, IdToRowCastsToUnsignedFirst) {
  EXPECT_EQ(IdToRow(7, 5), 2);
  EXPECT_EQ(IdToRow(-1, 1000), 615);  // 2^64 - 1 = ...615
  EXPECT_EQ(IdToRow(std::numeric_limits<int64_t>::min(), 1000), 808);  // 2^63 = ...808
  EXPECT_EQ(IdToRow(std::numeric_limits<int64_t>::max(), 1000), 807);
}

TEST(JaggedTest, ValidateOffsetsNamesTheProblem) {
  const std::vector<int32_t> good = {0, 2, 2, 5};
  EXPECT_TRUE(ValidateOffsets(good.data(), 3, "offsets").ok());
  EXPECT_TRUE(ValidateOffsets(good.data(), 3, "offsets", 5, 3).ok());
  EXPECT_TRUE(testing::IsInvalidArgumentNaming(ValidateOffsets(good.data(), 3, "history_offsets", 6),
                                               "history_offsets[3] = 5"));
  EXPECT_TRUE(testing::IsInvalidArgumentNaming(ValidateOffsets(good.data(), 3, "offsets", -1, 2), "length 3 > max 2"));
  const std::vector<int32_t> decreasing = {0, 4, 3};
  EXPECT_TRUE(testing::IsInvalidArgumentNaming(ValidateOffsets(decreasing.data(), 2, "q_offsets"), "q_offsets[2] = 3"));
  const std::vector<int32_t> bad_start = {2, 4};
  EXPECT_TRUE(testing::IsInvalidArgumentNaming(ValidateOffsets(bad_start.data(), 1, "offsets"), "offsets[0] = 2"));
  EXPECT_TRUE(testing::IsInvalidArgumentNaming(ValidateOffsets(nullptr, 1, "k_offsets"), "k_offsets: null"));
  const std::vector<int32_t> empty = {0};
  EXPECT_TRUE(ValidateOffsets(empty.data(), 0, "offsets", 0).ok());
}

TEST(DTypeTest, BFloat16RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties go to the even (1.0).
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::infinity()))));
}

}  // namespace
}  // namespace jagrank
