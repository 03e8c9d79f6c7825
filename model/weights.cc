#include "model/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/process.h"

namespace jagrank {
namespace {

// A safetensors header is a few KiB for this model; anything near this is
// a corrupt or hostile length, not a real header.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr int kMaxRank = 8;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// values[i] = bound * (2 u_i - 1), u_i in [0, 1) from the i-th SplitMix64
// output of `seed`. SplitMix64 is counter-based (state_i = seed + i * gamma),
// so chunks are filled in parallel with exactly the sequential values: the
// model does not depend on the thread count.
void FillUniform(uint64_t seed, float bound, float* values, size_t n) {
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  auto fill = [&](size_t begin, size_t end) {
    uint64_t state = seed + begin * kGamma;
    for (size_t i = begin; i < end; ++i) {
      const float unit = static_cast<float>(SplitMix64(&state) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      values[i] = bound * (2.0f * unit - 1.0f);
    }
  };
  const size_t kParallelAbove = size_t{1} << 20;
  const unsigned threads = static_cast<unsigned>(std::min(16, UsableCores()));
  if (n < kParallelAbove || threads == 1) {
    fill(0, n);
    return;
  }
  std::vector<std::thread> workers;
  const size_t per = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const size_t begin = std::min(n, t * per), end = std::min(n, begin + per);
    workers.emplace_back(fill, begin, end);
  }
  for (std::thread& w : workers) w.join();
}

uint64_t HashBytes(uint64_t h, const void* data, size_t size) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h ^= w * 0x9E3779B97F4A7C15ull;
    h = ((h << 31) | (h >> 33)) * 0xBF58476D1CE4E5B9ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, size - i);
  h ^= (tail + size) * 0x9E3779B97F4A7C15ull;
  h = ((h << 31) | (h >> 33)) * 0xBF58476D1CE4E5B9ull;
  return h;
}

uint64_t HashString(const std::string& s) { return HashBytes(0x6A09E667F3BCC908ull, s.data(), s.size()); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Reads a non-negative JSON integer; false for anything else.
bool ReadUnsigned(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// The element types a weights file may hold; all become float32 at load.
enum class FileDType { kF32, kBF16, kF16 };

bool ParseFileDType(const std::string& name, FileDType* out) {
  if (name == "F32") {
    *out = FileDType::kF32;
  } else if (name == "BF16") {
    *out = FileDType::kBF16;
  } else if (name == "F16") {
    *out = FileDType::kF16;
  } else {
    return false;
  }
  return true;
}

// bfloat16 is the top half of a float32: exact.
float BFloat16ToFloat(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &word, sizeof(f));
  return f;
}

// IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits) to float32: exact,
// subnormals included; exponent 31 is Inf/NaN.
float Float16ToFloat(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  uint32_t word;
  if (exponent == 0x1F) {
    word = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    word = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal or zero
    return sign != 0 ? -magnitude : magnitude;
  }
  float f;
  std::memcpy(&f, &word, sizeof(f));
  return f;
}

// `n` elements of `dtype` at `p` (any alignment, little-endian) -> float32.
void ConvertToFloat(FileDType dtype, const unsigned char* p, uint64_t n, float* out) {
  if (dtype == FileDType::kF32) {
    std::memcpy(out, p, n * sizeof(float));
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t bits = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    out[i] = dtype == FileDType::kBF16 ? BFloat16ToFloat(bits) : Float16ToFloat(bits);
  }
}

// Index of the first NaN or Inf among values[0..n), or n.
uint64_t FirstNonFinite(const float* values, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return n;
}

Status NonFiniteError(const std::string& where_tensor, uint64_t index, float value) {
  return Status::InvalidArgument(where_tensor + "element " + std::to_string(index) + " is " +
                                 (std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf") +
                                 ": weights must be finite");
}

struct MappedFile {
  void* addr = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (addr != nullptr) munmap(addr, size);
  }
};

}  // namespace

const WeightTensor* ModelWeights::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

int64_t ModelWeights::total_bytes() const {
  int64_t bytes = 0;
  for (const auto& kv : tensors_) bytes += kv.second.num_elements() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

void ModelWeights::Add(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
  auto buffer = std::make_shared<std::vector<float>>(std::move(values));
  const float* data = buffer->data();
  storage_.push_back(std::move(buffer));
  AddView(name, std::move(shape), data);
}

void ModelWeights::AddView(const std::string& name, std::vector<int64_t> shape, const float* data) {
  WeightTensor t;
  t.shape = std::move(shape);
  t.data = data;
  tensors_[name] = std::move(t);
}

void ModelWeights::ComputeVersion() {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const auto& kv : tensors_) {  // std::map: sorted by name
    h = HashBytes(h, kv.first.data(), kv.first.size());
    h = HashBytes(h, kv.second.shape.data(), kv.second.shape.size() * sizeof(int64_t));
    h = HashBytes(h, kv.second.data, static_cast<size_t>(kv.second.num_elements()) * sizeof(float));
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  version_ = buf;
}

std::map<std::string, std::vector<int64_t>> ExpectedWeightShapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> shapes;
  const int64_t d = c.embedding_dim;
  int64_t in = c.num_dense_features;
  for (size_t i = 0; i < c.bottom_mlp.size(); ++i) {
    const std::string p = "bottom_mlp." + std::to_string(i);
    shapes[p + ".weight"] = {c.bottom_mlp[i], in};
    shapes[p + ".bias"] = {c.bottom_mlp[i]};
    in = c.bottom_mlp[i];
  }
  in = c.top_mlp_input_width();
  for (size_t i = 0; i < c.top_mlp.size(); ++i) {
    const std::string p = "top_mlp." + std::to_string(i);
    shapes[p + ".weight"] = {c.top_mlp[i], in};
    shapes[p + ".bias"] = {c.top_mlp[i]};
    in = c.top_mlp[i];
  }
  for (const SparseFeatureConfig& f : c.sparse_features) shapes["embeddings." + f.name] = {f.num_rows, d};
  shapes["embeddings.item"] = {c.item_rows, d};
  shapes["history.position"] = {c.max_history_len, d};
  for (const char* m : {"q", "k", "v", "o"}) shapes[std::string("history.attn.") + m] = {d, d};
  return shapes;
}

Status ValidateWeights(const ModelConfig& config, const ModelWeights& weights) {
  const auto expected = ExpectedWeightShapes(config);
  for (const auto& kv : expected) {
    const WeightTensor* t = weights.Find(kv.first);
    if (t == nullptr) return Status::InvalidArgument("weights: missing tensor '" + kv.first + "'");
    if (t->shape != kv.second) {
      return Status::InvalidArgument("weights: tensor '" + kv.first + "' has shape " + ShapeString(t->shape) +
                                     ", the config needs " + ShapeString(kv.second));
    }
  }
  for (const auto& kv : weights.tensors()) {
    if (expected.count(kv.first) == 0) {
      return Status::InvalidArgument("weights: unexpected tensor '" + kv.first + "' (not in the model config)");
    }
  }
  return Status::Ok();
}

Status LoadSafetensors(const std::string& path, const ModelConfig& config, ModelWeights* out) {
  const std::string where = "weights file '" + path + "': ";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(where + "cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument(where + "not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    close(fd);
    return Status::InvalidArgument(where + "file of " + std::to_string(file_size) +
                                   " bytes is shorter than the 8-byte header length");
  }
  auto mapping = std::make_shared<MappedFile>();
  mapping->addr = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapping->addr == MAP_FAILED) {
    mapping->addr = nullptr;
    return Status::Internal(where + "mmap failed: " + std::strerror(errno));
  }
  mapping->size = file_size;
  const unsigned char* base = static_cast<const unsigned char*>(mapping->addr);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian u64
  if (header_len > file_size - 8 || header_len > kMaxHeaderBytes) {
    return Status::InvalidArgument(where + "header length " + std::to_string(header_len) +
                                   " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  const nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::InvalidArgument(where + "header is not a JSON object");
  }
  const unsigned char* data = base + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  ModelWeights weights;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const std::string tensor = "tensor '" + name + "': ";
    const nlohmann::json& info = it.value();
    if (!info.is_object()) return Status::InvalidArgument(where + tensor + "header entry is not an object");
    auto dtype = info.find("dtype");
    auto shape_json = info.find("shape");
    auto offsets = info.find("data_offsets");
    if (dtype == info.end() || !dtype->is_string()) {
      return Status::InvalidArgument(where + tensor + "missing or non-string 'dtype'");
    }
    const std::string dtype_name = dtype->get<std::string>();
    FileDType file_dtype;
    if (!ParseFileDType(dtype_name, &file_dtype)) {
      return Status::InvalidArgument(where + tensor + "dtype " + dtype_name +
                                     " is not supported (weights must be F32, BF16 or F16)");
    }
    const uint64_t element_bytes = file_dtype == FileDType::kF32 ? 4 : 2;
    if (shape_json == info.end() || !shape_json->is_array() || shape_json->size() > kMaxRank) {
      return Status::InvalidArgument(where + tensor + "missing or invalid 'shape'");
    }
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (const auto& dim : *shape_json) {
      uint64_t v = 0;
      if (!ReadUnsigned(dim, &v) || v > (uint64_t{1} << 48)) {
        return Status::InvalidArgument(where + tensor + "shape entry is not a non-negative integer below 2^48");
      }
      if (__builtin_mul_overflow(elements, v, &elements) || elements > (uint64_t{1} << 60)) {
        return Status::InvalidArgument(where + tensor + "shape " + shape_json->dump() + " is too large");
      }
      shape.push_back(static_cast<int64_t>(v));
    }
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
      return Status::InvalidArgument(where + tensor + "missing or invalid 'data_offsets'");
    }
    uint64_t begin = 0, end = 0;
    if (!ReadUnsigned((*offsets)[0], &begin) || !ReadUnsigned((*offsets)[1], &end) || begin > end) {
      return Status::InvalidArgument(where + tensor + "data_offsets " + offsets->dump() + " are not [begin <= end]");
    }
    if (end > data_size) {
      return Status::InvalidArgument(where + tensor + "data_offsets " + offsets->dump() +
                                     " run past the end of the data (" + std::to_string(data_size) + " bytes)");
    }
    if (end - begin != elements * element_bytes) {
      return Status::InvalidArgument(where + tensor + "data_offsets cover " + std::to_string(end - begin) +
                                     " bytes, shape " + shape_json->dump() + " x " + dtype_name + " needs " +
                                     std::to_string(elements * element_bytes));
    }
    ranges.push_back({begin, end, name});
    const unsigned char* p = data + begin;
    if (file_dtype == FileDType::kF32 && reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
      const float* values = reinterpret_cast<const float*>(p);
      const uint64_t bad = FirstNonFinite(values, elements);
      if (bad < elements) return NonFiniteError(where + tensor, bad, values[bad]);
      weights.AddView(name, std::move(shape), values);
    } else {  // BF16/F16 (converted), or unaligned F32 (the format does not promise alignment): a float32 copy
      std::vector<float> values(elements);
      ConvertToFloat(file_dtype, p, elements, values.data());
      const uint64_t bad = FirstNonFinite(values.data(), elements);
      if (bad < elements) return NonFiniteError(where + tensor, bad, values[bad]);
      weights.Add(name, std::move(shape), std::move(values));
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return Status::InvalidArgument(where + "tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name +
                                     "' overlap in the data section");
    }
  }
  Status s = ValidateWeights(config, weights);
  if (!s.ok()) return Status(s.code(), where + s.message());
  weights.KeepAlive(mapping);
  weights.ComputeVersion();
  *out = std::move(weights);
  return Status::Ok();
}

Status WriteSafetensors(const std::string& path, const ModelWeights& weights,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& kv : weights.tensors()) {
    const uint64_t bytes = static_cast<uint64_t>(kv.second.num_elements()) * sizeof(float);
    header[kv.first] = {{"dtype", "F32"}, {"shape", kv.second.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // data section 8-byte aligned
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::NotFound("cannot create '" + tmp + "'");
    unsigned char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& kv : weights.tensors()) {
      out.write(reinterpret_cast<const char*>(kv.second.data),
                static_cast<std::streamsize>(kv.second.num_elements() * sizeof(float)));
    }
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Internal("writing '" + tmp + "' failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Internal("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

Status MakeRandomWeights(const ModelConfig& config, ModelWeights* out) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  ModelWeights weights;
  const float embedding_bound = 1.0f / std::sqrt(static_cast<float>(config.embedding_dim));
  const auto shapes = ExpectedWeightShapes(config);
  for (const auto& kv : shapes) {
    const std::string& name = kv.first;
    const std::vector<int64_t>& shape = kv.second;
    float bound = embedding_bound;  // embeddings.*, history.*
    const bool is_mlp = name.rfind("bottom_mlp.", 0) == 0 || name.rfind("top_mlp.", 0) == 0;
    if (is_mlp) {
      // PyTorch nn.Linear: weight and bias both U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      const std::string weight_name = name.substr(0, name.rfind('.')) + ".weight";
      const int64_t fan_in = shapes.at(weight_name)[1];
      bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    }
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    FillUniform(config.seed ^ HashString(name), bound, values.data(), values.size());
    weights.Add(name, shape, std::move(values));
  }
  weights.ComputeVersion();
  *out = std::move(weights);
  return Status::Ok();
}

}  // namespace jagrank
