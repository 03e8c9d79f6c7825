// CPU padded dense attention: the padded-dense strategy's CPU backend and the
// oracle of its CUDA launcher.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/cpu_common.h"
#include "kernels/cpu_thread_pool.h"

namespace jagrank {
namespace {

// Checks 0 <= len[b] <= max_len for a [batch] length array.
Status ValidateLengths(const int32_t* len, int batch, int max_len, const char* field) {
  if (batch > 0) RETURN_IF_ERROR(cpu::CheckNotNull(len, field));
  for (int b = 0; b < batch; ++b) {
    if (len[b] < 0 || len[b] > max_len) {
      return Status::InvalidArgument(std::string(field) + "[" + std::to_string(b) + "] = " + std::to_string(len[b]) +
                                     ", must be in [0, " + std::to_string(max_len) + "]");
    }
  }
  return Status::Ok();
}

Status ValidatePaddedDense(const PaddedDenseAttentionParams& p) {
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.batch, 0, "batch"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_q_len, 0, "max_q_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.max_k_len, 0, "max_k_len"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_heads, 1, "num_heads"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.head_dim, 1, "head_dim"));
  RETURN_IF_ERROR(cpu::CheckAtLeast(p.num_threads, 0, "num_threads"));
  RETURN_IF_ERROR(cpu::CheckFloat32(p.dtype, "dtype"));
  RETURN_IF_ERROR(ValidateLengths(p.q_len, p.batch, p.max_q_len, "q_len"));
  RETURN_IF_ERROR(ValidateLengths(p.k_len, p.batch, p.max_k_len, "k_len"));
  if (int64_t{p.batch} * p.max_q_len == 0) return Status::Ok();  // nothing to read or write
  RETURN_IF_ERROR(cpu::CheckNotNull(p.q, "q"));
  RETURN_IF_ERROR(cpu::CheckNotNull(p.o, "o"));
  if (p.max_k_len > 0) {
    RETURN_IF_ERROR(cpu::CheckNotNull(p.k, "k"));
    RETURN_IF_ERROR(cpu::CheckNotNull(p.v, "v"));
  }
  return Status::Ok();
}

}  // namespace

Status PaddedDenseAttentionCpu(const PaddedDenseAttentionParams& params) {
  const PaddedDenseAttentionParams& p = params;
  RETURN_IF_ERROR(ValidatePaddedDense(p));
  if (int64_t{p.batch} * p.max_q_len == 0) return Status::Ok();
  UseSingleThreadedBlas();
  const int H = p.num_heads, dh = p.head_dim, Nq = p.max_q_len, Nk = p.max_k_len;
  const int token = H * dh;  // elements per token in q, k, v, o (the sgemm leading dimension)
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  float* o = static_cast<float*>(p.o);
  // One (b, h) pair: the same work on whichever thread takes it.
  auto attend = [&](int b, int h, float* s) {
    const int64_t head = int64_t{b} * Nq * token + int64_t{h} * dh;     // of q and o
    const int64_t k_head = int64_t{b} * Nk * token + int64_t{h} * dh;   // of k and v
    const int valid = p.k_len[b];
    if (valid == 0) {
      for (int i = 0; i < Nq; ++i) std::fill(o + head + int64_t{i} * token, o + head + int64_t{i} * token + dh, 0.0f);
      return;
    }
    // s[Nq, Nk] = scale * Q K^T over the whole padded block, as the baseline does.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Nq, Nk, dh, p.softmax_scale, q + head, token, k + k_head,
                token, 0.0f, s, Nk);
    for (int i = 0; i < Nq; ++i) {
      float* row = s + int64_t{i} * Nk;
      const float row_max = *std::max_element(row, row + valid);
      float sum = 0.0f;
      for (int j = 0; j < valid; ++j) sum += (row[j] = std::exp(row[j] - row_max));
      const float inv_sum = 1.0f / sum;
      for (int j = 0; j < valid; ++j) row[j] *= inv_sum;
      std::fill(row + valid, row + Nk, 0.0f);  // masked keys
    }
    // o[Nq, dh] = P V, then the padded query rows back to zeros.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Nq, dh, Nk, 1.0f, s, Nk, v + k_head, token, 0.0f, o + head,
                token);
    for (int i = p.q_len[b]; i < Nq; ++i) {
      std::fill(o + head + int64_t{i} * token, o + head + int64_t{i} * token + dh, 0.0f);
    }
  };
  const int64_t items = int64_t{p.batch} * H;
  const size_t scores = static_cast<size_t>(Nq) * Nk;
  if (p.workspace != nullptr) {  // each pair has its own scores in the workspace
    ParallelFor(items, CpuThreads(p.num_threads), [&](int64_t item) {
      attend(static_cast<int>(item / H), static_cast<int>(item % H), p.workspace + item * scores);
    });
    return Status::Ok();
  }
  // Without one, a scores buffer per thread: blocks of pairs, each with its own.
  const int threads = static_cast<int>(std::min<int64_t>(CpuThreads(p.num_threads), items));
  const int64_t per_block = (items + threads - 1) / threads;
  ParallelFor((items + per_block - 1) / per_block, threads, [&](int64_t block) {
    std::vector<float> local(scores);
    for (int64_t item = block * per_block; item < std::min(items, (block + 1) * per_block); ++item) {
      attend(static_cast<int>(item / H), static_cast<int>(item % H), local.data());
    }
  });
  return Status::Ok();
}

Status PaddedDenseAttentionReferenceCpu(const PaddedDenseAttentionParams& params) {
  const PaddedDenseAttentionParams& p = params;
  RETURN_IF_ERROR(ValidatePaddedDense(p));
  if (int64_t{p.batch} * p.max_q_len == 0) return Status::Ok();
  const int H = p.num_heads, dh = p.head_dim, Nq = p.max_q_len, Nk = p.max_k_len;
  const int64_t token = int64_t{H} * dh;  // elements per token in q, k, v, o
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  float* o = static_cast<float*>(p.o);
  std::vector<float> local_scores(p.workspace == nullptr ? Nk : 0);
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < Nq; ++i) {
        float* out = o + (int64_t{b} * Nq + i) * token + int64_t{h} * dh;
        std::fill(out, out + dh, 0.0f);
        if (i >= p.q_len[b] || p.k_len[b] == 0) continue;
        float* s = p.workspace != nullptr ? p.workspace + ((int64_t{b} * H + h) * Nq + i) * Nk : local_scores.data();
        const float* qi = q + (int64_t{b} * Nq + i) * token + int64_t{h} * dh;
        for (int j = 0; j < Nk; ++j) {  // the full padded row, as the dense baseline does
          const float* kj = k + (int64_t{b} * Nk + j) * token + int64_t{h} * dh;
          float dot = 0.0f;
          for (int x = 0; x < dh; ++x) dot += qi[x] * kj[x];
          s[j] = dot * p.softmax_scale;
        }
        const int valid = p.k_len[b];
        float row_max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < valid; ++j) row_max = std::max(row_max, s[j]);
        float sum = 0.0f;
        for (int j = 0; j < valid; ++j) {
          s[j] = std::exp(s[j] - row_max);
          sum += s[j];
        }
        for (int j = valid; j < Nk; ++j) s[j] = 0.0f;  // masked keys
        const float inv_sum = 1.0f / sum;
        for (int j = 0; j < valid; ++j) {
          const float w = s[j] * inv_sum;
          const float* vj = v + (int64_t{b} * Nk + j) * token + int64_t{h} * dh;
          for (int x = 0; x < dh; ++x) out[x] += w * vj[x];
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace jagrank
