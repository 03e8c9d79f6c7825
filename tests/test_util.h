// Shared helpers for the GoogleTest suites: random jagged batches whose
// lengths include 0, 1 and long ones; random ids including negative and huge
// values; poison fill; relative error. Header-only, small on purpose.
#ifndef JAGRANK_TESTS_TEST_UTIL_H_
#define JAGRANK_TESTS_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"

namespace jagrank {
namespace testing {

// Offsets [lengths.size() + 1] of the given lengths.
inline std::vector<int32_t> OffsetsFromLengths(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> offsets(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); ++b) offsets[b + 1] = offsets[b] + lengths[b];
  return offsets;
}

// `batch` lengths in [0, max_len]: the first ones are 0, 1 and max_len (when
// batch allows), the rest uniform, so every draw covers the edge cases.
inline std::vector<int32_t> RandomLengths(std::mt19937_64& rng, int batch, int32_t max_len) {
  std::vector<int32_t> lengths(batch);
  std::uniform_int_distribution<int32_t> pick(0, max_len);
  for (int b = 0; b < batch; ++b) lengths[b] = pick(rng);
  const int32_t edges[] = {0, std::min<int32_t>(1, max_len), max_len};
  for (int i = 0; i < 3 && i < batch; ++i) lengths[i] = edges[i];
  std::shuffle(lengths.begin(), lengths.end(), rng);
  return lengths;
}

// Ids that exercise the uint64 cast: small, negative, near the int64 limits.
inline std::vector<int64_t> RandomIds(std::mt19937_64& rng, int64_t count) {
  std::vector<int64_t> ids(count);
  std::uniform_int_distribution<int64_t> small(-1000, 1000000);
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max());
  for (int64_t i = 0; i < count; ++i) {
    switch (i % 4) {
      case 0: ids[i] = small(rng); break;
      case 1: ids[i] = any(rng); break;
      case 2: ids[i] = -1 - static_cast<int64_t>(rng() % 1000); break;
      default: ids[i] = std::numeric_limits<int64_t>::max() - static_cast<int64_t>(rng() % 1000); break;
    }
  }
  return ids;
}

// Uniform floats in [lo, hi).
inline std::vector<float> RandomFloats(std::mt19937_64& rng, size_t count, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(count);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Poison: a NaN that a kernel which forgets to write an element leaves behind.
inline float PoisonFloat() { return std::numeric_limits<float>::quiet_NaN(); }
inline void FillPoison(std::vector<float>& v) { std::fill(v.begin(), v.end(), PoisonFloat()); }

// max_i |a_i - b_i| / max(max_i |b_i|, floor): error relative to the
// reference's scale. Returns +inf on size mismatch or any NaN/Inf in `a`.
inline double RelativeError(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-6) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double max_diff = 0.0, max_ref = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, std::fabs(double{a[i]} - b[i]));
    max_ref = std::max(max_ref, std::fabs(b[i]));
  }
  return max_diff / max_ref;
}
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-6) {
  return RelativeError(a, std::vector<double>(b.begin(), b.end()), floor);
}

// Number of non-finite values (poison left behind, NaN, Inf).
inline int64_t CountNonFinite(const std::vector<float>& v) {
  return std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
}

// True when `status` is InvalidArgument and its message names `field`.
inline bool IsInvalidArgumentNaming(const Status& status, const std::string& field) {
  return status.code() == Status::Code::kInvalidArgument && status.message().find(field) != std::string::npos;
}

}  // namespace testing
}  // namespace jagrank

#endif  // JAGRANK_TESTS_TEST_UTIL_H_
