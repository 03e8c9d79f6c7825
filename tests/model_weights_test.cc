// Weights: deterministic random init, safetensors round trip, and hostile or
// mismatched files rejected with an error that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace jagrank {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c;
  c.name = "tiny";
  c.embedding_dim = 4;
  c.num_dense_features = 2;
  c.sparse_features = {{"country", 5}};
  c.item_rows = 6;
  c.max_history_len = 3;
  c.attention_heads = 2;
  c.bottom_mlp = {4};
  c.top_mlp = {1};
  c.seed = 11;
  return c;
}

std::string TempPath(const std::string& tag) {
  return (testing::TempDir().empty() ? std::string("/tmp/") : testing::TempDir()) + "jagrank_weights_" + tag + "_" +
         std::to_string(getpid()) + ".safetensors";
}

// Writes [u64 header length][header][data]; `declared_len` overrides the length field.
std::string WriteRaw(const std::string& tag, const std::string& header, const std::vector<char>& data,
                     int64_t declared_len = -1) {
  const std::string path = TempPath(tag);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return path;
}

// A single-tensor config-free check: the loader must reject before (or
// regardless of) the config comparison. Returns the status message.
Status LoadRaw(const std::string& tag, const std::string& header, size_t data_bytes, int64_t declared_len = -1) {
  const std::string path = WriteRaw(tag, header, std::vector<char>(data_bytes, 0), declared_len);
  ModelWeights w;
  Status s = LoadSafetensors(path, TinyConfig(), &w);
  std::remove(path.c_str());
  return s;
}

TEST(ModelWeightsTest, RandomInitIsDeterministicAndScaled) {
  ModelWeights a, b;
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &a).ok());
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &b).ok());
  ASSERT_TRUE(ValidateWeights(TinyConfig(), a).ok());
  EXPECT_EQ(a.version(), b.version());
  EXPECT_EQ(a.version().size(), 16u);
  const WeightTensor* item = a.Find("embeddings.item");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(0, std::memcmp(item->data, b.Find("embeddings.item")->data, 24 * sizeof(float)));
  for (int64_t i = 0; i < 24; ++i) EXPECT_LE(std::abs(item->data[i]), 0.5f);  // 1/sqrt(4)
  const WeightTensor* w0 = a.Find("bottom_mlp.0.weight");
  for (int64_t i = 0; i < w0->num_elements(); ++i) EXPECT_LE(std::abs(w0->data[i]), 1.0f / std::sqrt(2.0f));

  ModelConfig other = TinyConfig();
  other.seed = 12;
  ModelWeights c;
  ASSERT_TRUE(MakeRandomWeights(other, &c).ok());
  EXPECT_NE(a.version(), c.version());
}

TEST(ModelWeightsTest, RandomModelVersionIsPinned) {
  // The seeded model (and so its version) must not change between builds,
  // machines or thread counts: servers started with the same seed agree.
  ModelWeights tiny;
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &tiny).ok());
  EXPECT_EQ(tiny.version(), "c1b0af420e6cd240");
  ModelConfig big = TinyConfig();  // a table above the parallel-fill threshold (2^20 values)
  big.embedding_dim = 64;
  big.bottom_mlp = {64};
  big.item_rows = 20000;
  ModelWeights w;
  ASSERT_TRUE(MakeRandomWeights(big, &w).ok());
  EXPECT_EQ(w.version(), "0d688b953b30ec0a");
  EXPECT_FLOAT_EQ(w.Find("embeddings.item")->data[0], -0.0652714372f);
  EXPECT_FLOAT_EQ(w.Find("embeddings.item")->data[20000 * 64 - 1], 0.00631509721f);
}

TEST(ModelWeightsTest, ExpectedNamesFollowTheContract) {
  const auto shapes = ExpectedWeightShapes(TinyConfig());
  const std::vector<std::string> names = {"bottom_mlp.0.weight", "bottom_mlp.0.bias", "top_mlp.0.weight",
                                          "top_mlp.0.bias", "embeddings.country", "embeddings.item",
                                          "history.position", "history.attn.q", "history.attn.k",
                                          "history.attn.v", "history.attn.o"};
  EXPECT_EQ(shapes.size(), names.size());
  for (const auto& n : names) EXPECT_EQ(shapes.count(n), 1u) << n;
  EXPECT_EQ(shapes.at("top_mlp.0.weight"), (std::vector<int64_t>{1, 4 + 4 * 3 / 2}));  // n = F + 3 = 4
  EXPECT_EQ(shapes.at("bottom_mlp.0.weight"), (std::vector<int64_t>{4, 2}));
}

TEST(ModelWeightsTest, RoundTripKeepsEveryValueAndTheVersion) {
  ModelWeights a;
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &a).ok());
  const std::string path = TempPath("roundtrip");
  ASSERT_TRUE(WriteSafetensors(path, a, {{"format", "pt"}}).ok());
  ModelWeights b;
  Status s = LoadSafetensors(path, TinyConfig(), &b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(a.version(), b.version());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& kv : a.tensors()) {
    const WeightTensor* t = b.Find(kv.first);
    ASSERT_NE(t, nullptr) << kv.first;
    EXPECT_EQ(t->shape, kv.second.shape);
    EXPECT_EQ(0, std::memcmp(t->data, kv.second.data, kv.second.num_elements() * sizeof(float))) << kv.first;
  }
  std::remove(path.c_str());
}

TEST(ModelWeightsTest, ConfigMismatchNamesTheTensor) {
  ModelWeights a;
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &a).ok());
  const std::string path = TempPath("mismatch");
  ASSERT_TRUE(WriteSafetensors(path, a).ok());
  ModelWeights b;

  ModelConfig more_rows = TinyConfig();
  more_rows.item_rows = 7;
  Status s = LoadSafetensors(path, more_rows, &b);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'embeddings.item'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("shape"), std::string::npos) << s.message();

  ModelConfig extra_feature = TinyConfig();
  extra_feature.sparse_features.push_back({"device", 3});
  s = LoadSafetensors(path, extra_feature, &b);
  EXPECT_NE(s.message().find("missing tensor 'embeddings.device'"), std::string::npos) << s.message();
  std::remove(path.c_str());
}

TEST(ModelWeightsTest, ExtraTensorIsAnError) {
  ModelWeights a;
  ASSERT_TRUE(MakeRandomWeights(TinyConfig(), &a).ok());
  a.Add("history.attn.bias", {4}, std::vector<float>(4, 0.0f));
  Status s = ValidateWeights(TinyConfig(), a);
  EXPECT_NE(s.message().find("unexpected tensor 'history.attn.bias'"), std::string::npos) << s.message();
}

TEST(ModelWeightsTest, HostileFilesAreRejectedByName) {
  // Header length beyond the end of the file.
  Status s = LoadRaw("hdrlen", "{}", 0, 1 << 20);
  EXPECT_NE(s.message().find("header length"), std::string::npos) << s.message();
  s = LoadRaw("hdrhuge", "{}", 0, int64_t{1} << 62);
  EXPECT_NE(s.message().find("header length"), std::string::npos) << s.message();
  // Shorter than the length field.
  {
    const std::string path = TempPath("short");
    std::ofstream(path, std::ios::binary) << "abc";
    ModelWeights w;
    s = LoadSafetensors(path, TinyConfig(), &w);
    EXPECT_NE(s.message().find("shorter than"), std::string::npos) << s.message();
    std::remove(path.c_str());
  }
  // Not JSON.
  s = LoadRaw("notjson", "{\"a\": [1,", 0);
  EXPECT_NE(s.message().find("not a JSON object"), std::string::npos) << s.message();
  // Offsets past the data.
  s = LoadRaw("oob", R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})", 32);
  EXPECT_NE(s.message().find("'history.attn.q'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s.message();
  // begin > end, negative offsets.
  s = LoadRaw("rev", R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[64,0]}})", 64);
  EXPECT_NE(s.message().find("data_offsets"), std::string::npos) << s.message();
  s = LoadRaw("neg", R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[-8,56]}})", 64);
  EXPECT_NE(s.message().find("data_offsets"), std::string::npos) << s.message();
  // Size disagrees with the shape.
  s = LoadRaw("size", R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[0,60]}})", 64);
  EXPECT_NE(s.message().find("needs 64"), std::string::npos) << s.message();
  // Huge shape: product overflows.
  s = LoadRaw("huge",
              R"({"history.attn.q":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,64]}})", 64);
  EXPECT_NE(s.message().find("too large"), std::string::npos) << s.message();
  s = LoadRaw("hugedim", R"({"history.attn.q":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,64]}})",
              64);
  EXPECT_NE(s.message().find("'history.attn.q'"), std::string::npos) << s.message();
  // Wrong dtype.
  s = LoadRaw("dtype", R"({"history.attn.q":{"dtype":"F16","shape":[4,4],"data_offsets":[0,32]}})", 64);
  EXPECT_NE(s.message().find("dtype F16"), std::string::npos) << s.message();
  // Overlapping tensors.
  s = LoadRaw("overlap",
              R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},)"
              R"("history.attn.k":{"dtype":"F32","shape":[4,4],"data_offsets":[32,96]}})",
              96);
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.message();
  // Malformed entries.
  s = LoadRaw("noshape", R"({"history.attn.q":{"dtype":"F32","data_offsets":[0,64]}})", 64);
  EXPECT_NE(s.message().find("'shape'"), std::string::npos) << s.message();
  s = LoadRaw("floatshape", R"({"history.attn.q":{"dtype":"F32","shape":[4.5,4],"data_offsets":[0,64]}})", 64);
  EXPECT_NE(s.message().find("shape"), std::string::npos) << s.message();
  // Well-formed but incomplete: names the first missing tensor.
  s = LoadRaw("missing", R"({"history.attn.q":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})", 64);
  EXPECT_NE(s.message().find("missing tensor"), std::string::npos) << s.message();
  // Missing file.
  ModelWeights w;
  EXPECT_EQ(LoadSafetensors("/nonexistent/x.safetensors", TinyConfig(), &w).code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace jagrank

namespace jagrank {
namespace {

// jagrank-export-model writes the same model Model::Create builds without a
// weights file, and a config that reads back equal.
TEST(ModelExportTest, ExportedModelLoadsWithTheRandomModelsVersion) {
  const std::string base = TempPath("export");
  const std::string yaml_in = base + ".in.yaml";
  {
    std::ofstream out(yaml_in);
    out << ModelConfigToYaml(TinyConfig());
  }
  const std::string out_path = base + ".safetensors";
  const std::string command = std::string(JAGRANK_EXPORT_BIN) + " --model-config " + yaml_in + " --output " +
                              out_path + " --seed 99 > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ModelConfig written;
  const std::string yaml_out = out_path.substr(0, out_path.size() - 12) + ".yaml";
  Status s = LoadModelConfig(yaml_out, &written);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(written.seed, 99u);
  ModelConfig expected = TinyConfig();
  expected.seed = 99;
  EXPECT_EQ(ModelConfigToYaml(written), ModelConfigToYaml(expected));
  ModelWeights loaded, random;
  s = LoadSafetensors(out_path, written, &loaded);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(MakeRandomWeights(expected, &random).ok());
  EXPECT_EQ(loaded.version(), random.version());
  // A bad config is reported, not written.
  const std::string bad = "printf 'embedding_dim: 0\\n' > " + yaml_in + " && " + JAGRANK_EXPORT_BIN +
                          " --model-config " + yaml_in + " --output " + base + ".bad.safetensors 2> /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
  for (const std::string& p : {yaml_in, out_path, yaml_out}) std::remove(p.c_str());
}

}  // namespace
}  // namespace jagrank
