#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu_common.h"
#include "kernels/jagged.h"

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

// Queries per block of the fast path: the [kQueryBlock, L] score block of a
// 2000-key sequence is 500 KiB, within L2; larger blocks gained nothing.
constexpr int kQueryBlock = 64;

// Sequence b, head h through two sgemm calls per query block; the softmax
// normalisation is applied to the [rows, dh] output, not the scores.
void AttendOneHead(const AttentionParams& p, int b, int h, std::vector<float>& scores,
                   std::vector<float>& inv_sums) {
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  float* o = static_cast<float*>(p.o);
  const int keys = ValidKeys(p, b);
  if (keys == 0) return ZeroRows(p, b, h, o);
  const int dh = p.head_dim;
  const int64_t head = int64_t{h} * dh;
  const float* kb = k + p.k_offsets[b] * p.k_row_stride + head;
  const float* vb = v + p.k_offsets[b] * p.v_row_stride + head;
  scores.resize(static_cast<size_t>(kQueryBlock) * keys);
  inv_sums.resize(kQueryBlock);
  for (int32_t t0 = p.q_offsets[b]; t0 < p.q_offsets[b + 1]; t0 += kQueryBlock) {
    const int rows = std::min<int>(kQueryBlock, p.q_offsets[b + 1] - t0);
    float* s = scores.data();
    // s[rows, keys] = scale * Q K^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, dh, p.softmax_scale,
                q + t0 * p.q_row_stride + head, static_cast<int>(p.q_row_stride), kb,
                static_cast<int>(p.k_row_stride), 0.0f, s, keys);
    for (int r = 0; r < rows; ++r) {
      float* row = s + static_cast<int64_t>(r) * keys;
      const float row_max = *std::max_element(row, row + keys);
      float sum = 0.0f;
      for (int j = 0; j < keys; ++j) {
        row[j] = std::exp(row[j] - row_max);
        sum += row[j];
      }
      inv_sums[r] = 1.0f / sum;
    }
    // O[rows, dh] = P V, then each row / its sum
    float* ob = o + t0 * p.o_row_stride + head;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dh, keys, 1.0f, s, keys, vb,
                static_cast<int>(p.v_row_stride), 0.0f, ob, static_cast<int>(p.o_row_stride));
    for (int r = 0; r < rows; ++r) {
      float* out = ob + r * p.o_row_stride;
      for (int x = 0; x < dh; ++x) out[x] *= inv_sums[r];
    }
  }
}

}  // namespace

Status JaggedAttentionCpu(const AttentionParams& params) {
  const AttentionParams& p = params;
  RETURN_IF_ERROR(ValidateAttention(p));
  // Work items are (sequence, head) pairs taken from a shared counter, so a
  // long sequence does not leave the other threads idle behind a static split.
  const int64_t items = int64_t{p.batch} * p.num_heads;
  int64_t threads = p.num_threads > 0 ? p.num_threads : std::thread::hardware_concurrency();
  threads = std::max<int64_t>(1, std::min(threads, items));
  std::atomic<int64_t> next{0};
  auto worker = [&p, &next, items]() {
    std::vector<float> scores, inv_sums;
    for (int64_t item = next++; item < items; item = next++) {
      AttendOneHead(p, static_cast<int>(item / p.num_heads), static_cast<int>(item % p.num_heads), scores, inv_sums);
    }
  };
  if (threads == 1) {
    worker();
    return Status::Ok();
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int i = 0; i < threads - 1; ++i) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
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
