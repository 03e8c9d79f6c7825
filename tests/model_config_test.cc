// Model config: parsing, validation messages that name the key, YAML round trip.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/config.h"

namespace jagrank {
namespace {

const char* kSmall = R"(
name: tiny
embedding_dim: 8
num_dense_features: 3
sparse_features:
  - {name: country, num_rows: 10}
  - {name: segments, num_rows: 7}
item_rows: 100
max_history_len: 5
attention_heads: 2
bottom_mlp: [16, 8]
top_mlp: [12, 1]
seed: 7
)";

// Parses kSmall with `from` replaced by `to`; returns the status.
Status ParseEdited(const std::string& from, const std::string& to) {
  std::string text = kSmall;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  ModelConfig c;
  return ParseModelConfig(text, &c);
}

TEST(ModelConfigTest, ParsesEveryKey) {
  ModelConfig c;
  ASSERT_TRUE(ParseModelConfig(kSmall, &c).ok());
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.embedding_dim, 8);
  EXPECT_EQ(c.num_dense_features, 3);
  ASSERT_EQ(c.sparse_features.size(), 2u);
  EXPECT_EQ(c.sparse_features[1].name, "segments");
  EXPECT_EQ(c.sparse_features[1].num_rows, 7);
  EXPECT_EQ(c.item_rows, 100);
  EXPECT_EQ(c.max_history_len, 5);
  EXPECT_EQ(c.attention_heads, 2);
  EXPECT_EQ(c.bottom_mlp, (std::vector<int>{16, 8}));
  EXPECT_EQ(c.top_mlp, (std::vector<int>{12, 1}));
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.top_mlp_input_width(), 8 + 5 * 4 / 2);
}

TEST(ModelConfigTest, EmbeddedDefaultIsValidAndMatchesDesign) {
  ModelConfig c;
  ASSERT_TRUE(DefaultModelConfig(&c).ok());
  EXPECT_EQ(c.name, "jagrank-dlrm");
  EXPECT_EQ(c.embedding_dim, 64);
  EXPECT_EQ(c.num_dense_features, 13);
  EXPECT_GE(c.sparse_features.size(), 4u);
  EXPECT_EQ(c.max_history_len, 1024);
  EXPECT_EQ(c.bottom_mlp.back(), 64);
  ModelConfig from_file;
  ASSERT_TRUE(LoadModelConfig("config/model.yaml", &from_file).ok());  // tests run from the repo root
  EXPECT_EQ(ModelConfigToYaml(from_file), ModelConfigToYaml(c));
}

TEST(ModelConfigTest, YamlRoundTrip) {
  ModelConfig c, back;
  ASSERT_TRUE(ParseModelConfig(kSmall, &c).ok());
  const std::string yaml = ModelConfigToYaml(c);
  Status s = ParseModelConfig(yaml, &back);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << yaml;
  EXPECT_EQ(ModelConfigToYaml(back), yaml);
  EXPECT_EQ(back.sparse_features[0].name, "country");
  EXPECT_EQ(back.seed, 7u);
}

struct BadCase {
  std::string from, to, must_mention;
};

TEST(ModelConfigTest, ErrorsNameTheBadKey) {
  const BadCase cases[] = {
      {"bottom_mlp: [16, 8]", "bottom_mlp: [16, 9]", "bottom_mlp"},
      {"bottom_mlp: [16, 8]", "bottom_mlp: []", "bottom_mlp"},
      {"bottom_mlp: [16, 8]", "bottom_mlp: [0, 8]", "bottom_mlp[0]"},
      {"top_mlp: [12, 1]", "top_mlp: [12, 2]", "top_mlp"},
      {"attention_heads: 2", "attention_heads: 3", "attention_heads"},
      {"attention_heads: 2", "attention_heads: 0", "attention_heads"},
      {"item_rows: 100", "item_rows: 0", "item_rows"},
      {"num_rows: 10", "num_rows: 0", "sparse_features[0].num_rows"},
      {"num_rows: 10", "num_rows: -4", "sparse_features[0].num_rows"},
      {"name: segments", "name: country", "duplicate"},
      {"name: segments", "name: item", "reserved"},
      {"name: segments", "name: \"bad name\"", "sparse_features[1].name"},
      {"embedding_dim: 8", "embedding_dim: 0", "embedding_dim"},
      {"embedding_dim: 8", "embedding_dim: eight", "embedding_dim"},
      {"max_history_len: 5", "max_history_len: 0", "max_history_len"},
      {"num_dense_features: 3", "num_dense_features: 0", "num_dense_features"},
      {"seed: 7", "sede: 7", "unknown key 'sede'"},
      {"seed: 7", "seed: 7\nembedding_dim: 16", "key 'embedding_dim' appears twice"},
      {"{name: country, num_rows: 10}", "{name: country, num_rows: 10, num_rows: 20}",
       "sparse_features[0]: key 'num_rows' appears twice"},
      {"{name: country, num_rows: 10}", "{name: country}", "num_rows"},
      {"{name: country, num_rows: 10}", "{name: country, num_rows: 10, size: 3}", "unknown key 'size'"},
      {"name: tiny", "name: [tiny", "YAML"},
      {"name: tiny", "name: \"ti\xfcny\"", "name: byte 2 is not valid UTF-8"},      // from fuzz_model_config
      {"name: tiny", "name: \"tin\xc3\"", "name: byte 3 is not valid UTF-8"},       // truncated sequence
      {"name: tiny", "name: \"t\xed\xa0\x80y\"", "name: byte 1 is not valid UTF-8"},  // a surrogate
  };
  for (const BadCase& bad : cases) {
    Status s = ParseEdited(bad.from, bad.to);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad.to;
    EXPECT_NE(s.message().find(bad.must_mention), std::string::npos)
        << "'" << bad.to << "' gave: " << s.message();
  }
}

TEST(ModelConfigTest, Utf8NamesRoundTrip) {
  ModelConfig c, back;
  ASSERT_TRUE(ParseEdited("name: tiny", "name: \"rang\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80\"").ok());
  ASSERT_TRUE(ParseModelConfig(kSmall, &c).ok());
  c.name = "rang\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80";
  ASSERT_TRUE(ParseModelConfig(ModelConfigToYaml(c), &back).ok());
  EXPECT_EQ(back.name, c.name);
}

// The shipped production-sized model (the benchmarks' main model): it parses
// and has the shape its header comment and the results page describe.
TEST(ModelConfigTest, ProductionModelParses) {
  ModelConfig c;
  const Status s = LoadModelConfig("config/models/production.yaml", &c);  // tests run in the repository root
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.embedding_dim, 128);
  EXPECT_EQ(c.attention_heads, 4);
  EXPECT_EQ(c.sparse_features.size(), 26u);
  for (const SparseFeatureConfig& f : c.sparse_features) {
    EXPECT_GE(f.num_rows, 50000) << f.name;
    EXPECT_LE(f.num_rows, 75000) << f.name;
  }
  EXPECT_EQ(c.item_rows, 1000000);
  EXPECT_EQ(c.max_history_len, 2048);
  EXPECT_EQ(c.bottom_mlp, (std::vector<int>{512, 256, 128}));
  EXPECT_EQ(c.top_mlp, (std::vector<int>{1024, 1024, 512, 256, 1}));
  EXPECT_EQ(c.top_mlp_input_width(), 128 + 29 * 28 / 2);
}

TEST(ModelConfigTest, MissingFileIsNotFound) {
  ModelConfig c;
  EXPECT_EQ(LoadModelConfig("/nonexistent/model.yaml", &c).code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace jagrank
