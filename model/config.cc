#include "model/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace jagrank {
namespace {

// Bounds that keep every size product far from int64 overflow and every
// table addressable; far above any model this server is meant to run.
constexpr int64_t kMaxTableElements = int64_t{1} << 36;  // 256 GiB of float32
constexpr int kMaxWidth = 1 << 16;
constexpr int kMaxSparseFeatures = 256;

const std::set<std::string>& KnownKeys() {
  static const std::set<std::string> keys = {
      "name",           "embedding_dim",   "num_dense_features", "sparse_features", "item_rows",
      "max_history_len", "attention_heads", "bottom_mlp",         "top_mlp",         "seed"};
  return keys;
}

bool IsValidFeatureName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// The offset of the first byte of `text` that is not part of a well-formed
// UTF-8 sequence (overlong forms, surrogates and code points past U+10FFFF
// included), or npos.
size_t FirstInvalidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3, cp = c & 0x07;
    } else {
      return i;
    }
    if (text.size() - i <= static_cast<size_t>(extra)) return i;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const uint32_t min_cp = extra == 1 ? 0x80 : extra == 2 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += extra + 1;
  }
  return std::string::npos;
}

Status CheckWidths(const char* key, const std::vector<int>& widths) {
  if (widths.empty()) return Status::InvalidArgument(std::string(key) + ": must list at least one layer width");
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] <= 0 || widths[i] > kMaxWidth) {
      return Status::InvalidArgument(std::string(key) + "[" + std::to_string(i) + "] = " +
                                     std::to_string(widths[i]) + ": must be in [1, " +
                                     std::to_string(kMaxWidth) + "]");
    }
  }
  return Status::Ok();
}

// Scalar readers: yaml-cpp throws on conversion errors; turn them into a
// Status that names the key.
template <typename T>
Status ReadScalar(const YAML::Node& node, const std::string& key, T* out) {
  if (!node.IsScalar()) return Status::InvalidArgument(key + ": expected a scalar");
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(key + ": cannot read '" + node.Scalar() + "' as " +
                                   (std::is_integral<T>::value ? "an integer" : "a string"));
  }
  return Status::Ok();
}

Status ReadIntList(const YAML::Node& node, const std::string& key, std::vector<int>* out) {
  if (!node.IsSequence()) return Status::InvalidArgument(key + ": expected a list of integers");
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    int v = 0;
    RETURN_IF_ERROR(ReadScalar(node[i], key + "[" + std::to_string(i) + "]", &v));
    out->push_back(v);
  }
  return Status::Ok();
}

}  // namespace

Status ValidateModelConfig(const ModelConfig& c) {
  if (c.name.empty()) return Status::InvalidArgument("name: must not be empty");
  const size_t bad_byte = FirstInvalidUtf8(c.name);
  if (bad_byte != std::string::npos) {
    // YAML text is Unicode: such a name would not survive ModelConfigToYaml.
    return Status::InvalidArgument("name: byte " + std::to_string(bad_byte) + " is not valid UTF-8");
  }
  const int d = c.embedding_dim;
  if (d <= 0 || d > kMaxWidth) {
    return Status::InvalidArgument("embedding_dim = " + std::to_string(d) + ": must be in [1, " +
                                   std::to_string(kMaxWidth) + "]");
  }
  if (c.num_dense_features <= 0 || c.num_dense_features > kMaxWidth) {
    return Status::InvalidArgument("num_dense_features = " + std::to_string(c.num_dense_features) +
                                   ": must be in [1, " + std::to_string(kMaxWidth) + "]");
  }
  if (static_cast<int>(c.sparse_features.size()) > kMaxSparseFeatures) {
    return Status::InvalidArgument("sparse_features: " + std::to_string(c.sparse_features.size()) +
                                   " features, at most " + std::to_string(kMaxSparseFeatures));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < c.sparse_features.size(); ++i) {
    const SparseFeatureConfig& f = c.sparse_features[i];
    const std::string key = "sparse_features[" + std::to_string(i) + "]";
    if (!IsValidFeatureName(f.name)) {
      return Status::InvalidArgument(key + ".name = '" + f.name +
                                     "': must be 1-128 characters of [A-Za-z0-9_]");
    }
    if (f.name == "item") {
      return Status::InvalidArgument(key + ".name = 'item': reserved (embeddings.item is the item table)");
    }
    if (!seen.insert(f.name).second) {
      return Status::InvalidArgument(key + ".name = '" + f.name + "': duplicate feature name");
    }
    if (f.num_rows <= 0 || f.num_rows > kMaxTableElements / d) {
      return Status::InvalidArgument(key + ".num_rows = " + std::to_string(f.num_rows) + " (feature '" +
                                     f.name + "'): must be in [1, " + std::to_string(kMaxTableElements / d) +
                                     "]");
    }
  }
  if (c.item_rows <= 0 || c.item_rows > kMaxTableElements / d) {
    return Status::InvalidArgument("item_rows = " + std::to_string(c.item_rows) + ": must be in [1, " +
                                   std::to_string(kMaxTableElements / d) + "]");
  }
  if (c.max_history_len <= 0 || c.max_history_len > (1 << 20)) {
    return Status::InvalidArgument("max_history_len = " + std::to_string(c.max_history_len) +
                                   ": must be in [1, 1048576]");
  }
  if (c.attention_heads <= 0 || d % c.attention_heads != 0) {
    return Status::InvalidArgument("attention_heads = " + std::to_string(c.attention_heads) +
                                   ": must be positive and divide embedding_dim = " + std::to_string(d));
  }
  RETURN_IF_ERROR(CheckWidths("bottom_mlp", c.bottom_mlp));
  if (c.bottom_mlp.back() != d) {
    return Status::InvalidArgument("bottom_mlp: last width " + std::to_string(c.bottom_mlp.back()) +
                                   " must equal embedding_dim = " + std::to_string(d));
  }
  RETURN_IF_ERROR(CheckWidths("top_mlp", c.top_mlp));
  if (c.top_mlp.back() != 1) {
    return Status::InvalidArgument("top_mlp: last width " + std::to_string(c.top_mlp.back()) +
                                   " must be 1 (one logit per candidate)");
  }
  return Status::Ok();
}

Status ParseModelConfig(const std::string& yaml_text, ModelConfig* out) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("model config: YAML syntax error: ") + e.what());
  }
  if (!root.IsMap()) return Status::InvalidArgument("model config: expected a YAML mapping at the top level");
  ModelConfig c;  // keys that are absent keep their defaults
  // yaml-cpp keeps both copies of a repeated key and a lookup finds the
  // first: a second `embedding_dim:` further down would be ignored silently.
  std::set<std::string> seen;
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument("model config: a key is not a string");
    }
    if (KnownKeys().count(key) == 0) {
      return Status::InvalidArgument("model config: unknown key '" + key + "'");
    }
    if (!seen.insert(key).second) return Status::InvalidArgument("model config: key '" + key + "' appears twice");
  }
  if (root["name"]) RETURN_IF_ERROR(ReadScalar(root["name"], "name", &c.name));
  if (root["embedding_dim"]) RETURN_IF_ERROR(ReadScalar(root["embedding_dim"], "embedding_dim", &c.embedding_dim));
  if (root["num_dense_features"]) {
    RETURN_IF_ERROR(ReadScalar(root["num_dense_features"], "num_dense_features", &c.num_dense_features));
  }
  if (root["item_rows"]) RETURN_IF_ERROR(ReadScalar(root["item_rows"], "item_rows", &c.item_rows));
  if (root["max_history_len"]) {
    RETURN_IF_ERROR(ReadScalar(root["max_history_len"], "max_history_len", &c.max_history_len));
  }
  if (root["attention_heads"]) {
    RETURN_IF_ERROR(ReadScalar(root["attention_heads"], "attention_heads", &c.attention_heads));
  }
  if (root["seed"]) RETURN_IF_ERROR(ReadScalar(root["seed"], "seed", &c.seed));
  if (root["bottom_mlp"]) RETURN_IF_ERROR(ReadIntList(root["bottom_mlp"], "bottom_mlp", &c.bottom_mlp));
  if (root["top_mlp"]) RETURN_IF_ERROR(ReadIntList(root["top_mlp"], "top_mlp", &c.top_mlp));
  if (root["sparse_features"]) {
    const YAML::Node list = root["sparse_features"];
    if (!list.IsSequence()) return Status::InvalidArgument("sparse_features: expected a list of {name, num_rows}");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string key = "sparse_features[" + std::to_string(i) + "]";
      const YAML::Node item = list[i];
      if (!item.IsMap()) return Status::InvalidArgument(key + ": expected a mapping {name, num_rows}");
      std::set<std::string> item_keys;
      for (const auto& kv : item) {
        const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
        if (k != "name" && k != "num_rows") return Status::InvalidArgument(key + ": unknown key '" + k + "'");
        if (!item_keys.insert(k).second) return Status::InvalidArgument(key + ": key '" + k + "' appears twice");
      }
      if (!item["name"]) return Status::InvalidArgument(key + ".name: missing");
      if (!item["num_rows"]) return Status::InvalidArgument(key + ".num_rows: missing");
      SparseFeatureConfig f;
      RETURN_IF_ERROR(ReadScalar(item["name"], key + ".name", &f.name));
      RETURN_IF_ERROR(ReadScalar(item["num_rows"], key + ".num_rows", &f.num_rows));
      c.sparse_features.push_back(std::move(f));
    }
  }
  RETURN_IF_ERROR(ValidateModelConfig(c));
  *out = std::move(c);
  return Status::Ok();
}

Status LoadModelConfig(const std::string& path, ModelConfig* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("model config: cannot open '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  Status s = ParseModelConfig(text.str(), out);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return Status::Ok();
}

std::string ModelConfigToYaml(const ModelConfig& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << c.name;
  e << YAML::Key << "embedding_dim" << YAML::Value << c.embedding_dim;
  e << YAML::Key << "num_dense_features" << YAML::Value << c.num_dense_features;
  e << YAML::Key << "sparse_features" << YAML::Value << YAML::BeginSeq;
  for (const SparseFeatureConfig& f : c.sparse_features) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << f.name << YAML::Key << "num_rows"
      << YAML::Value << f.num_rows << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "item_rows" << YAML::Value << c.item_rows;
  e << YAML::Key << "max_history_len" << YAML::Value << c.max_history_len;
  e << YAML::Key << "attention_heads" << YAML::Value << c.attention_heads;
  e << YAML::Key << "bottom_mlp" << YAML::Value << YAML::Flow << c.bottom_mlp;
  e << YAML::Key << "top_mlp" << YAML::Value << YAML::Flow << c.top_mlp;
  e << YAML::Key << "seed" << YAML::Value << c.seed;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace jagrank
