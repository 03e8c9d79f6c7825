// Weights: deterministic random init, safetensors round trip, and hostile or
// mismatched files rejected with an error that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
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

// Writes `weights` as safetensors with every tensor in `dtype` ("F32",
// "BF16" or "F16"), each value encoded by `encode` (float -> 2 or 4 bytes,
// little-endian). Tensors in name order, packed.
std::string WriteTyped(const std::string& tag, const ModelWeights& weights, const std::string& dtype,
                       const std::function<std::vector<unsigned char>(float)>& encode) {
  std::string header = "{";
  std::vector<char> data;
  for (const auto& kv : weights.tensors()) {
    const size_t begin = data.size();
    for (int64_t i = 0; i < kv.second.num_elements(); ++i) {
      for (unsigned char b : encode(kv.second.data[i])) data.push_back(static_cast<char>(b));
    }
    std::string shape;
    for (int64_t d : kv.second.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += std::string(header.size() > 1 ? "," : "") + "\"" + kv.first + "\":{\"dtype\":\"" + dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(data.size()) + "]}";
  }
  header += "}";
  return WriteRaw(tag, header, data);
}

std::vector<unsigned char> Bytes(uint32_t word, int n) {
  std::vector<unsigned char> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<unsigned char>(word >> (8 * i)));
  return out;
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// binary16 bits of a float that binary16 holds exactly (normal numbers and
// zero only; the tests pick such values).
uint16_t ExactHalfBits(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  if ((u & 0x7FFFFFFFu) == 0) return static_cast<uint16_t>(sign);
  const int exponent = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) | ((u >> 13) & 0x3FFu));
}

// TinyConfig's tensors with values that BF16 and F16 both hold exactly:
// multiples of 1/8 in [-1, 1].
ModelWeights ExactlyRepresentableWeights() {
  ModelWeights w;
  int k = 0;
  for (const auto& kv : ExpectedWeightShapes(TinyConfig())) {
    int64_t n = 1;
    for (int64_t d : kv.second) n *= d;
    std::vector<float> values(n);
    for (float& v : values) v = static_cast<float>((k++ % 17) - 8) / 8.0f;
    w.Add(kv.first, kv.second, std::move(values));
  }
  w.ComputeVersion();
  return w;
}

TEST(ModelWeightsTest, Bf16AndF16FilesLoadAsTheSameFloat32Values) {
  const ModelWeights reference = ExactlyRepresentableWeights();
  const std::string f32 = WriteTyped("f32", reference, "F32", [](float f) { return Bytes(FloatBits(f), 4); });
  const std::string bf16 =
      WriteTyped("bf16", reference, "BF16", [](float f) { return Bytes(FloatBits(f) >> 16, 2); });
  const std::string f16 = WriteTyped("f16", reference, "F16", [](float f) { return Bytes(ExactHalfBits(f), 2); });
  for (const std::string& path : {f32, bf16, f16}) {
    ModelWeights loaded;
    Status s = LoadSafetensors(path, TinyConfig(), &loaded);
    ASSERT_TRUE(s.ok()) << path << ": " << s.ToString();
    EXPECT_EQ(loaded.version(), reference.version()) << path;
    for (const auto& kv : reference.tensors()) {
      const WeightTensor* t = loaded.Find(kv.first);
      ASSERT_NE(t, nullptr) << kv.first;
      EXPECT_EQ(0, std::memcmp(t->data, kv.second.data, kv.second.num_elements() * sizeof(float)))
          << path << " " << kv.first;
    }
    std::remove(path.c_str());
  }
}

TEST(ModelWeightsTest, F16ConversionCoversSubnormalsAndExtremes) {
  // history.attn.q [4, 4] from raw binary16 words; the rest F32 zeros.
  const std::vector<uint16_t> words = {0x3C00, 0xC000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF,
                                       0x0000, 0x8000, 0x3555, 0x3E00, 0x1400, 0x5640, 0xB800, 0x2E66};
  const std::vector<float> expected = {1.0f,       -2.0f,    std::ldexp(1.0f, -24), -std::ldexp(1.0f, -24),
                                       std::ldexp(1023.0f, -24), std::ldexp(1.0f, -14), 65504.0f, -65504.0f,
                                       0.0f,       -0.0f,    0.333251953125f,       1.5f,
                                       0.0009765625f, 100.0f, -0.5f,                0.0999755859375f};
  std::string header = "{";
  std::vector<char> data;
  for (const auto& kv : ExpectedWeightShapes(TinyConfig())) {
    const size_t begin = data.size();
    int64_t n = 1;
    for (int64_t d : kv.second) n *= d;
    const bool half = kv.first == "history.attn.q";
    for (int64_t i = 0; i < n; ++i) {
      for (unsigned char b : half ? Bytes(words[i], 2) : Bytes(0, 4)) data.push_back(static_cast<char>(b));
    }
    std::string shape;
    for (int64_t d : kv.second) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += std::string(header.size() > 1 ? "," : "") + "\"" + kv.first + "\":{\"dtype\":\"" +
              (half ? "F16" : "F32") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  const std::string path = WriteRaw("f16bits", header, data);
  ModelWeights loaded;
  Status s = LoadSafetensors(path, TinyConfig(), &loaded);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const WeightTensor* q = loaded.Find("history.attn.q");
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(FloatBits(q->data[i]), FloatBits(expected[i])) << "element " << i << ": " << q->data[i];
  }
  std::remove(path.c_str());
}

TEST(ModelWeightsTest, NanOrInfIsRefusedNamingTheTensor) {
  struct Case {
    std::string dtype;
    float value;
    std::string word;
    std::function<std::vector<unsigned char>(float)> encode;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"F32", std::nanf(""), "NaN", [](float f) { return Bytes(FloatBits(f), 4); }},
      {"F32", -inf, "-Inf", [](float f) { return Bytes(FloatBits(f), 4); }},
      {"BF16", inf, "+Inf", [](float f) { return Bytes(FloatBits(f) >> 16, 2); }},
      {"BF16", std::nanf(""), "NaN", [](float f) { return Bytes(FloatBits(f) >> 16, 2); }},
      {"F16", inf, "+Inf",
       [](float f) { return Bytes(std::isinf(f) ? 0x7C00u : std::isnan(f) ? 0x7E00u : ExactHalfBits(f), 2); }},
      {"F16", std::nanf(""), "NaN",
       [](float f) { return Bytes(std::isinf(f) ? 0x7C00u : std::isnan(f) ? 0x7E00u : ExactHalfBits(f), 2); }},
  };
  for (const Case& c : cases) {
    ModelWeights w = ExactlyRepresentableWeights();
    std::vector<float> values(6 * 4, 0.5f);
    values[13] = c.value;
    w.Add("embeddings.item", {6, 4}, values);
    const std::string path = WriteTyped("nan", w, c.dtype, c.encode);
    ModelWeights loaded;
    Status s = LoadSafetensors(path, TinyConfig(), &loaded);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.dtype;
    EXPECT_NE(s.message().find("tensor 'embeddings.item': element 13 is " + c.word), std::string::npos)
        << c.dtype << ": " << s.message();
    std::remove(path.c_str());
  }
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
  // Wrong dtype (F32, BF16 and F16 are the accepted ones).
  s = LoadRaw("dtype", R"({"history.attn.q":{"dtype":"F64","shape":[4,4],"data_offsets":[0,128]}})", 128);
  EXPECT_NE(s.message().find("tensor 'history.attn.q': dtype F64 is not supported"), std::string::npos)
      << s.message();
  s = LoadRaw("dtype8", R"({"history.attn.q":{"dtype":"I8","shape":[4,4],"data_offsets":[0,16]}})", 64);
  EXPECT_NE(s.message().find("dtype I8"), std::string::npos) << s.message();
  // A 2-byte dtype's size is checked against 2 bytes per element.
  s = LoadRaw("size16", R"({"history.attn.q":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,64]}})", 64);
  EXPECT_NE(s.message().find("x BF16 needs 32"), std::string::npos) << s.message();
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
