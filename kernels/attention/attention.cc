#include "kernels/attention/attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/layout/jagged.h"

namespace jagrank {
namespace {

Status ValidateAttention(const AttentionParams& p) {
  RETURN_IF_ERROR(cpu::CheckFloat32(p.dtype, "dtype"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_heads, 1, "num_heads"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.head_dim, 1, "head_dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_q_len, 0, "max_q_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_k_len, 0, "max_k_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  const int64_t width = int64_t{p.num_heads} * p.head_dim;
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.q_row_stride, width, "q_row_stride"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.k_row_stride, width, "k_row_stride"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.v_row_stride, width, "v_row_stride"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.o_row_stride, width, "o_row_stride"));
  RETURN_IF_ERROR(ValidateOffsets(p.q_offsets, p.batch, "q_offsets", -1, p.max_q_len));
  RETURN_IF_ERROR(ValidateOffsets(p.k_offsets, p.batch, "k_offsets", -1, p.max_k_len));
  if (p.maybe_k_valid_len != nullptr) {
    for (int b = 0; b < p.batch; ++b) {
      if (p.maybe_k_valid_len[b] < 0) {
        return Status::InvalidArgument("maybe_k_valid_len[" + std::to_string(b) +
                                       "] = " + std::to_string(p.maybe_k_valid_len[b]) + ", must be >= 0");
      }
    }
  }
  if (p.q_offsets[p.batch] > 0) {
    RETURN_IF_ERROR(cpu::CheckNotNull(p.q, "q"));
    RETURN_IF_ERROR(cpu::CheckNotNull(p.o, "o"));
  }
  if (p.k_offsets[p.batch] > 0) {
    RETURN_IF_ERROR(cpu::CheckNotNull(p.k, "k"));
    RETURN_IF_ERROR(cpu::CheckNotNull(p.v, "v"));
  }
  if (p.o == p.q || p.o == p.k || p.o == p.v) {
    if (p.q_offsets[p.batch] > 0) return Status::InvalidArgument("o: must not alias q, k or v");
  }
  return Status::Ok();
}

// Keys of sequence b that take part: all of them, or the first maybe_k_valid_len[b].
int ValidKeys(const AttentionParams& p, int b) {
  const int len = JaggedLen(p.k_offsets, b);
  return p.maybe_k_valid_len == nullptr ? len : std::min(len, p.maybe_k_valid_len[b]);
}

void ZeroRows(const AttentionParams& p, int b, int h, float* o) {
  for (int32_t t = p.q_offsets[b]; t < p.q_offsets[b + 1]; ++t) {
    float* out = o + t * p.o_row_stride + int64_t{h} * p.head_dim;
    std::fill(out, out + p.head_dim, 0.0f);
  }
}

// The two matrix products of a (sequence, head) are OpenBLAS sgemm calls on
// the calling thread (OpenBLAS kept to one thread: UseSingleThreadedBlas);
// the softmax between them is hand-vectorised, since scalar expf took most
// of the time. An earlier version avoided sgemm because several threads'
// calls fought OpenBLAS's own pool (B=64, N=1024, H=2, dh=32: 256 ms on one
// thread, 3530 ms on two) and used hand-tiled products instead: on the same
// shape, one thread, they ran at 48 GFLOP/s (355 ms), the sgemm path at 71
// with OpenBLAS's AVX2 kernels and 100 with its AVX-512 ones (2-core box).
// The softmax uses GCC vector types (8 floats; on the baseline
// target they lower to SSE pairs) and is compiled twice, for the x86-64
// AVX2+FMA level (dispatched on features, unlike arch=haswell which checks
// the CPU model) and baseline x86-64 (JAGRANK_TARGET_CLONES, cpu_common.h: one
// version in sanitizer builds). Leaving it to the auto-vectoriser gave
// shuffle-heavy code 10x slower.
typedef float Vec8 __attribute__((vector_size(32)));
typedef int32_t Vec8i __attribute__((vector_size(32)));
constexpr int kSoftmaxRows = 4;  // rows per SoftmaxRows call
constexpr int kKeysAlign = 16;   // score rows are padded to a multiple of this

int RoundUp(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

#define JAGRANK_LOAD8(v, ptr) std::memcpy(&(v), (ptr), sizeof(Vec8))
#define JAGRANK_STORE8(ptr, v) std::memcpy((ptr), &(v), sizeof(Vec8))

// Turns each score row into exp(s - max) over the first `keys` entries
// (entries past `keys` become 0) and returns 1 / sum in inv_sums[r].
// exp: x = n ln2 + r with |r| <= ln2/2, degree-6 Taylor for e^r (relative
// error < 2e-7), 2^n through the exponent bits; n is rounded by adding
// 1.5 * 2^23 so that it also sits in the low mantissa bits. x is clamped at
// -87 (exp = 1.6e-38, negligible beside the max's weight of 1).
JAGRANK_TARGET_CLONES("arch=x86-64-v3", "default")
void SoftmaxRows(float* scores, int keys, int keys_pad, float* inv_sums) {
  const Vec8 zero = {};
  for (int r = 0; r < kSoftmaxRows; ++r) {
    float* row = scores + static_cast<int64_t>(r) * keys_pad;
    for (int j = keys; j < keys_pad; ++j) row[j] = -3.0e38f;  // never the max
    Vec8 lane_max = zero - 3.0e38f;
    for (int j = 0; j < keys_pad; j += 8) {
      Vec8 s;
      JAGRANK_LOAD8(s, row + j);
      lane_max = s > lane_max ? s : lane_max;
    }
    float row_max = lane_max[0];
    for (int c = 1; c < 8; ++c) row_max = std::max(row_max, lane_max[c]);
    Vec8 lane_sum = zero;
    for (int j = 0; j < keys_pad; j += 8) {
      Vec8 x;
      JAGRANK_LOAD8(x, row + j);
      x -= row_max;
      x = x < -87.0f ? zero - 87.0f : x;
      const Vec8 shifted = x * 1.44269504f + 12582912.0f;
      const Vec8 n = shifted - 12582912.0f;
      const Vec8 f = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln2 split in two
      Vec8 poly = zero + 1.0f / 720.0f;
      poly = poly * f + 1.0f / 120.0f;
      poly = poly * f + 1.0f / 24.0f;
      poly = poly * f + 1.0f / 6.0f;
      poly = poly * f + 0.5f;
      poly = poly * f + 1.0f;
      poly = poly * f + 1.0f;
      const Vec8i exponent = ((Vec8i)shifted - 0x4B400000 + 127) << 23;
      Vec8 e = poly * (Vec8)exponent;  // a cast between vector types of one size keeps the bits
      JAGRANK_STORE8(row + j, e);
    }
    for (int j = keys; j < keys_pad; ++j) row[j] = 0.0f;
    for (int j = 0; j < keys_pad; j += 8) {
      Vec8 e;
      JAGRANK_LOAD8(e, row + j);
      lane_sum += e;
    }
    float sum = 0.0f;
    for (int c = 0; c < 8; ++c) sum += lane_sum[c];
    inv_sums[r] = 1.0f / sum;
  }
}

#undef JAGRANK_LOAD8
#undef JAGRANK_STORE8

// Per-thread buffers, reused across (sequence, head) items.
struct Scratch {
  std::vector<float> scores;    // [queries rounded up to kSoftmaxRows, keys_pad]
  std::vector<float> inv_sums;  // [queries rounded up to kSoftmaxRows]: 1 / softmax sum per row
};

// Sequence b, head h: scores = scale Q K^T (one sgemm), the softmax rows
// (vectorised exp, 4 rows at a time), O = P V (one sgemm), each row scaled
// by its 1 / sum.
void AttendOneHead(const AttentionParams& p, int b, int h, Scratch& scratch) {
  float* o = static_cast<float*>(p.o);
  const int keys = ValidKeys(p, b);
  if (keys == 0) return ZeroRows(p, b, h, o);
  const int queries = JaggedLen(p.q_offsets, b);
  if (queries == 0) return;
  const int dh = p.head_dim;
  const int keys_pad = RoundUp(keys, kKeysAlign);
  const int rows_pad = RoundUp(queries, kSoftmaxRows);
  const int64_t head = int64_t{h} * dh;
  const float* q = static_cast<const float*>(p.q) + p.q_offsets[b] * p.q_row_stride + head;
  const float* k = static_cast<const float*>(p.k) + p.k_offsets[b] * p.k_row_stride + head;
  const float* v = static_cast<const float*>(p.v) + p.k_offsets[b] * p.v_row_stride + head;
  float* out = o + p.q_offsets[b] * p.o_row_stride + head;
  scratch.scores.resize(static_cast<size_t>(rows_pad) * keys_pad);
  float* scores = scratch.scores.data();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, queries, keys, dh, p.softmax_scale, q, p.q_row_stride, k,
              p.k_row_stride, 0.0f, scores, keys_pad);
  // Rows past `queries` only fill the last group of 4; their results are dropped.
  std::fill(scores + static_cast<size_t>(queries) * keys_pad, scores + static_cast<size_t>(rows_pad) * keys_pad, 0.0f);
  scratch.inv_sums.resize(rows_pad);
  for (int r0 = 0; r0 < rows_pad; r0 += kSoftmaxRows) {
    SoftmaxRows(scores + static_cast<size_t>(r0) * keys_pad, keys, keys_pad, scratch.inv_sums.data() + r0);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, queries, dh, keys, 1.0f, scores, keys_pad, v,
              p.v_row_stride, 0.0f, out, p.o_row_stride);
  for (int r = 0; r < queries; ++r) {
    float* row = out + r * p.o_row_stride;
    const float inv_sum = scratch.inv_sums[r];
    for (int x = 0; x < dh; ++x) row[x] *= inv_sum;
  }
}

}  // namespace

Status JaggedAttentionCpu(const AttentionParams& params) {
  const AttentionParams& p = params;
  RETURN_IF_ERROR(ValidateAttention(p));
  // Work items are (sequence, head) pairs taken from a shared counter, so a
  // long sequence does not leave the other threads idle behind a static split.
  const int64_t items = int64_t{p.batch} * p.num_heads;
  int64_t threads = CpuThreads(p.num_threads);
  // Waking a pooled worker is cheap, but each one has its first item to
  // finish: ask for one only per kMinFlopsPerThread of work (~60 us at the
  // 70 GFLOP/s one thread does with OpenBLAS's AVX2 kernels).
  constexpr double kMinFlopsPerThread = 4e6;
  double flops = 0.0;
  for (int b = 0; b < p.batch; ++b) flops += 4.0 * JaggedLen(p.q_offsets, b) * ValidKeys(p, b);
  flops *= double{1.0} * p.num_heads * p.head_dim;
  threads = std::min<int64_t>(threads, static_cast<int64_t>(flops / kMinFlopsPerThread) + 1);
  threads = std::max<int64_t>(1, std::min(threads, items));
  std::atomic<int64_t> next{0};
  UseSingleThreadedBlas();
  auto worker = [&p, &next, items]() {
    Scratch scratch;
    for (int64_t item = next++; item < items; item = next++) {
      AttendOneHead(p, static_cast<int>(item / p.num_heads), static_cast<int>(item % p.num_heads), scratch);
    }
  };
  if (threads == 1) {
    worker();
  } else {
    CpuThreadPool::Shared().Run(static_cast<int>(threads - 1), worker);
  }
  return Status::Ok();
}

Status JaggedAttentionReferenceCpu(const AttentionParams& params) {
  const AttentionParams& p = params;
  RETURN_IF_ERROR(ValidateAttention(p));
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  float* o = static_cast<float*>(p.o);
  const int dh = p.head_dim;
  std::vector<float> s;
  for (int b = 0; b < p.batch; ++b) {
    const int keys = ValidKeys(p, b);
    s.resize(keys);
    for (int h = 0; h < p.num_heads; ++h) {
      const int64_t head = int64_t{h} * dh;
      for (int32_t t = p.q_offsets[b]; t < p.q_offsets[b + 1]; ++t) {
        const float* qt = q + t * p.q_row_stride + head;
        float* out = o + t * p.o_row_stride + head;
        std::fill(out, out + dh, 0.0f);
        if (keys == 0) continue;
        float row_max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < keys; ++j) {
          const float* kj = k + (p.k_offsets[b] + j) * p.k_row_stride + head;
          float dot = 0.0f;
          for (int x = 0; x < dh; ++x) dot += qt[x] * kj[x];
          s[j] = dot * p.softmax_scale;
          row_max = std::max(row_max, s[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < keys; ++j) {
          s[j] = std::exp(s[j] - row_max);
          sum += s[j];
        }
        for (int j = 0; j < keys; ++j) {
          const float w = s[j] / sum;
          const float* vj = v + (p.k_offsets[b] + j) * p.v_row_stride + head;
          for (int x = 0; x < dh; ++x) out[x] += w * vj[x];
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace jagrank
