#include "server/rank_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace jagrank {
namespace {

ModelConfig TwoFeatureModel() {
  ModelConfig c;
  c.embedding_dim = 8;
  c.num_dense_features = 2;
  c.sparse_features = {{"country", 10}, {"segments", 100}};
  c.item_rows = 1000;
  c.max_history_len = 3;
  c.attention_heads = 1;
  c.bottom_mlp = {8};
  c.top_mlp = {4, 1};
  return c;
}

RequestLimits Limits() {
  RequestLimits limits;
  limits.max_candidates_per_request = 4;
  limits.max_request_bytes = 4096;
  return limits;
}

v1::RankRequest GoodRequest() {
  v1::RankRequest r;
  r.set_request_id("r1");
  r.add_dense_features(1.5f);
  r.add_dense_features(-2.0f);
  (*r.mutable_sparse_features())["segments"].add_ids(std::numeric_limits<int64_t>::min());
  (*r.mutable_sparse_features())["segments"].add_ids(5);
  for (int64_t id : {11, 12, 13, 14, 15}) r.add_history(id);
  r.add_candidate_item_ids(std::numeric_limits<int64_t>::max());
  r.add_candidate_item_ids(-1);
  return r;
}

TEST(RankRequestConverterTest, ConvertsToPlainArraysInModelOrder) {
  RankRequestConverter converter(TwoFeatureModel(), Limits());
  RankInput input;
  ASSERT_TRUE(converter.Convert(GoodRequest(), &input).ok());
  EXPECT_EQ(input.dense, (std::vector<float>{1.5f, -2.0f}));
  ASSERT_EQ(input.sparse.size(), 2u);
  EXPECT_TRUE(input.sparse[0].empty());  // country absent
  EXPECT_EQ(input.sparse[1], (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 5}));
  EXPECT_EQ(input.history, (std::vector<int64_t>{13, 14, 15}));  // the most recent max_history_len
  EXPECT_EQ(input.candidates, (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -1}));
  // A reused input is overwritten, not appended to.
  v1::RankRequest other = GoodRequest();
  other.mutable_sparse_features()->clear();
  (*other.mutable_sparse_features())["country"].add_ids(3);
  ASSERT_TRUE(converter.Convert(other, &input).ok());
  EXPECT_EQ(input.sparse[0], std::vector<int64_t>{3});
  EXPECT_TRUE(input.sparse[1].empty());
}

TEST(RankRequestConverterTest, EachErrorNamesTheFieldAndTheLimit) {
  RankRequestConverter converter(TwoFeatureModel(), Limits());
  RankInput input;
  auto expect_error = [&](const v1::RankRequest& r, const std::string& part) {
    const Status s = converter.Convert(r, &input);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << part;
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  v1::RankRequest r = GoodRequest();
  r.add_dense_features(0);
  expect_error(r, "dense_features has 3 values: expected exactly num_dense_features = 2");
  r = GoodRequest();
  r.set_dense_features(1, std::numeric_limits<float>::quiet_NaN());
  expect_error(r, "dense_features[1] is NaN or Inf");
  r = GoodRequest();
  r.clear_candidate_item_ids();
  expect_error(r, "candidate_item_ids is empty");
  r = GoodRequest();
  for (int i = 0; i < 3; ++i) r.add_candidate_item_ids(i);
  expect_error(r, "candidate_item_ids has 5 ids: exceeds max_candidates_per_request = 4");
  r = GoodRequest();
  (*r.mutable_sparse_features())["colour"].add_ids(1);
  expect_error(r, "unknown feature name 'colour': the model's features are [country, segments]");
  r = GoodRequest();
  for (int i = 0; i < 2000; ++i) r.add_history(int64_t{i} * 1000003);  // 3-4 bytes each
  expect_error(r, "exceeds max_request_bytes = 4096");
}

TEST(RankRequestConverterTest, AHugeUnknownNameIsNotEchoedWhole) {
  RankRequestConverter converter(TwoFeatureModel(), Limits());
  v1::RankRequest r = GoodRequest();
  (*r.mutable_sparse_features())[std::string(3000, 'x')].add_ids(1);
  RankInput input;
  const Status s = converter.Convert(r, &input);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_LT(s.message().size(), 300u) << s.message().size();
  EXPECT_NE(s.message().find("(3000 bytes)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace jagrank
