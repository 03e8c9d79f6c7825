// Device code of the jagged flash attention kernels (bf16 tensor cores and
// float32 CUDA cores). Included only by the per-instantiation .cu files
// through flash_launch.cuh.
//
// Grid: x = sequence * num_heads + head, y = query tile. Tiles are taken in
// reverse order (blockIdx.y = 0 is the LAST query tile), so the first CTAs
// the hardware dispatches belong to the longest sequences, which cost the
// most (longest-first without a sort or a workspace); tiles past a
// sequence's end return at once.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_KERNEL_CUH_
#define JAGRANK_KERNELS_FLASH_FLASH_KERNEL_CUH_

#include <cuda_bf16.h>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/flash/flash_traits.h"

namespace jagrank {
namespace flash {

// ---------------------------------------------------------------- PTX helpers

__device__ __forceinline__ uint32_t SmemAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte global->shared copy; when !valid the destination is zero-filled and
// global memory is not read (src-size 0).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(smem)), "l"(gmem),
               "r"(src_size));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}

// d[16x8] += a[16x16] * b[16x8], bf16 operands, float32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the special-function unit (exp2(-inf) = 0).
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA/ALU pipes: 2^x = 2^j 2^f, j = round(x), f in [-0.5, 0.5];
// 2^f by a cubic through the Chebyshev nodes (relative error 1e-4, under
// bf16's 2^-9 rounding of P). x is clamped at -126 so 2^j stays a normal
// exponent; the result there (~1e-38) is as good as 0 for softmax weights.
__device__ __forceinline__ float PolyExp2(float x) {
  x = fmaxf(x, -126.f);
  const float shifted = x + 12582912.f;  // 1.5 * 2^23: round(x) lands in the low mantissa bits
  const float j = shifted - 12582912.f;
  const float f = x - j;
  const float p = fmaf(fmaf(fmaf(0.05583828f, f, 0.24263948f), f, 0.69313673f), f, 0.99992456f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}

__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Valid key count of sequence b: its length, capped by maybe_k_valid_len.
__device__ __forceinline__ int ValidKeyCount(const AttentionParams& p, int b, int k_len) {
  if (p.maybe_k_valid_len != nullptr) k_len = min(k_len, max(p.maybe_k_valid_len[b], 0));
  return k_len;
}

// ------------------------------------------------------- bf16 tensor-core kernel

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    FlashAttentionBf16Kernel(const AttentionParams p, const float scale_log2) {
  constexpr int kD = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStride = Traits::kSmemStride;
  constexpr int kChunks = Traits::kChunksPerRow;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kNTiles = kBlockN / 8;   // n8 MMA tiles of S per warp
  constexpr int kDTiles = kD / 8;        // n8 MMA tiles of O per warp

  const int b = blockIdx.x / p.num_heads;
  const int h = blockIdx.x - b * p.num_heads;
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int q_start = p.q_offsets[b];
  const int q_len = p.q_offsets[b + 1] - q_start;
  const int m0 = m_block * kBlockM;
  if (m0 >= q_len) return;
  const int rows = min(kBlockM, q_len - m0);  // valid query rows of this tile
  const int k_start = p.k_offsets[b];
  const int k_len = ValidKeyCount(p, b, p.k_offsets[b + 1] - k_start);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  __nv_bfloat16* o_tile = static_cast<__nv_bfloat16*>(p.o) + (q_start + m0) * p.o_row_stride + h * kD;

  if (k_len <= 0) {  // no valid keys: the rows are zeros
    for (int i = tid; i < rows * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      *reinterpret_cast<uint4*>(o_tile + r * p.o_row_stride + c * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBlockM][kStride]
  __nv_bfloat16* s_k = s_q + kBlockM * kStride;                        // [kStages][kBlockN][kStride]
  __nv_bfloat16* s_v = s_k + Traits::kStages * kBlockN * kStride;      // [kStages][kBlockN][kStride]

  const __nv_bfloat16* q_tile =
      static_cast<const __nv_bfloat16*>(p.q) + (q_start + m0) * p.q_row_stride + h * kD;
  const __nv_bfloat16* k_seq = static_cast<const __nv_bfloat16*>(p.k) + k_start * p.k_row_stride + h * kD;
  const __nv_bfloat16* v_seq = static_cast<const __nv_bfloat16*>(p.v) + k_start * p.v_row_stride + h * kD;

  // Q tile -> shared; rows past the sequence are zero-filled (computed, never stored).
#pragma unroll
  for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows;
    CpAsync16(s_q + r * kStride + c * 8, q_tile + (valid ? r : 0) * p.q_row_stride + c * 8, valid);
  }
  auto load_kv = [&](int n_block, int stage) {
    const int n0 = n_block * kBlockN;
    __nv_bfloat16* sk = s_k + stage * kBlockN * kStride;
    __nv_bfloat16* sv = s_v + stage * kBlockN * kStride;
#pragma unroll
    for (int i = tid; i < kBlockN * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      // Keys past the valid length are zero-filled: a garbage V row times a
      // zero probability would still give NaN if it held Inf/NaN.
      const bool valid = n0 + r < k_len;
      const int row = valid ? n0 + r : 0;
      CpAsync16(sk + r * kStride + c * 8, k_seq + row * p.k_row_stride + c * 8, valid);
      CpAsync16(sv + r * kStride + c * 8, v_seq + row * p.v_row_stride + c * 8, valid);
    }
  };
  load_kv(0, 0);
  CpAsyncCommit();

  // Warps whose 16 rows all lie past the sequence's end only help with copies.
  const bool warp_active = warp * Traits::kRowsPerWarp < rows;
  const int group = lane / 4;   // MMA row within the 8-row half
  const int quad = lane % 4;    // MMA column pair

  uint32_t q_frag[kD / 16][4];
  float acc_o[kDTiles][4];
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) acc_o[j][0] = acc_o[j][1] = acc_o[j][2] = acc_o[j][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows group and group + 8, log2 domain
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums

  const int n_blocks = (k_len + kBlockN - 1) / kBlockN;
  for (int n_block = 0; n_block < n_blocks; ++n_block) {
    const int stage = n_block & 1;
    if (n_block + 1 < n_blocks) load_kv(n_block + 1, stage ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();  // everything but the tile just issued has landed
    __syncthreads();

    if (warp_active) {
      if (n_block == 0) {
        const __nv_bfloat16* base = s_q + (warp * 16 + (lane & 15)) * kStride + (lane >> 4) * 8;
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) LdMatrixX4(q_frag[kk], base + kk * 16);
      }
      const __nv_bfloat16* sk = s_k + stage * kBlockN * kStride;
      const __nv_bfloat16* sv = s_v + stage * kBlockN * kStride;

      // S = Q K^T for this warp's 16 rows and kBlockN keys.
      float s[kNTiles][4];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
          uint32_t kb[4];  // b fragments of key tiles 2np and 2np+1
          LdMatrixX4(kb, sk + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kStride + kk * 16 +
                             ((lane >> 3) & 1) * 8);
          MmaBf16(s[2 * np], q_frag[kk], kb[0], kb[1]);
          MmaBf16(s[2 * np + 1], q_frag[kk], kb[2], kb[3]);
        }
      }
      // Mask keys past the valid length (only the last tile can have them).
      const int n0 = n_block * kBlockN;
      if (n0 + kBlockN > k_len) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (n0 + j * 8 + 2 * quad + (e & 1) >= k_len) s[j][e] = -INFINITY;
          }
        }
      }
      // Online softmax in the log2 domain: p = 2^(s * scale_log2 - max).
      // Every tile holds at least one valid key, so the new max is finite.
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
        tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
      }
      float neg_max[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float new_max = fmaxf(row_max[r], QuadMax(tile_max[r]) * scale_log2);
        const float alpha = FastExp2(row_max[r] - new_max);
        row_max[r] = new_max;
        row_sum[r] *= alpha;
#pragma unroll
        for (int j = 0; j < kDTiles; ++j) {
          acc_o[j][2 * r] *= alpha;
          acc_o[j][2 * r + 1] *= alpha;
        }
        neg_max[r] = -new_max;
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = fmaf(s[j][e], scale_log2, neg_max[e >> 1]);
          s[j][e] = j < Traits::kPolyExpTiles ? PolyExp2(x) : FastExp2(x);
          row_sum[e >> 1] += s[j][e];
        }
      }
      // O += P V; P's accumulator layout is the A-fragment layout of the next MMA.
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) {
        uint32_t a[4];
        a[0] = PackBf16x2(s[2 * kc][0], s[2 * kc][1]);
        a[1] = PackBf16x2(s[2 * kc][2], s[2 * kc][3]);
        a[2] = PackBf16x2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        a[3] = PackBf16x2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          uint32_t vb[4];  // b fragments of output columns 16dp..+7 and 16dp+8..+15
          LdMatrixX4Trans(vb, sv + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + dp * 16 +
                                  (lane >> 4) * 8);
          MmaBf16(acc_o[2 * dp], a, vb[0], vb[1]);
          MmaBf16(acc_o[2 * dp + 1], a, vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // the stage just read is overwritten by the next iteration's copy
  }

  if (!warp_active) return;
  // Normalise, stage this warp's 16 rows through its own (now unused) rows of
  // s_q, then store 16-byte chunks of whole rows.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv_sum[r] = 1.f / QuadSum(row_sum[r]);
  __nv_bfloat16* s_o = s_q + warp * 16 * kStride;
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
    const int col = j * 8 + 2 * quad;
    *reinterpret_cast<uint32_t*>(s_o + group * kStride + col) =
        PackBf16x2(acc_o[j][0] * inv_sum[0], acc_o[j][1] * inv_sum[0]);
    *reinterpret_cast<uint32_t*>(s_o + (group + 8) * kStride + col) =
        PackBf16x2(acc_o[j][2] * inv_sum[1], acc_o[j][3] * inv_sum[1]);
  }
  __syncwarp();
  const int warp_rows = min(16, rows - warp * 16);
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < warp_rows) {
      *reinterpret_cast<uint4*>(o_tile + (warp * 16 + r) * p.o_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(s_o + r * kStride + c * 8);
    }
  }
}

// ------------------------------------------------------------ float32 kernel

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads)
    FlashAttentionFp32Kernel(const AttentionParams p, const float scale_log2) {
  constexpr int kD = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kRows = Traits::kRowsPerWarp;
  constexpr int kCols = Traits::kColsPerLane;
  constexpr int kKStride = Traits::kKStride;

  const int b = blockIdx.x / p.num_heads;
  const int h = blockIdx.x - b * p.num_heads;
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int q_start = p.q_offsets[b];
  const int q_len = p.q_offsets[b + 1] - q_start;
  const int m0 = m_block * kBlockM;
  if (m0 >= q_len) return;
  const int rows = min(kBlockM, q_len - m0);
  const int k_start = p.k_offsets[b];
  const int k_len = ValidKeyCount(p, b, p.k_offsets[b + 1] - k_start);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const float* q_tile = static_cast<const float*>(p.q) + (q_start + m0) * p.q_row_stride + h * kD;
  const float* k_seq = static_cast<const float*>(p.k) + k_start * p.k_row_stride + h * kD;
  const float* v_seq = static_cast<const float*>(p.v) + k_start * p.v_row_stride + h * kD;
  float* o_tile = static_cast<float*>(p.o) + (q_start + m0) * p.o_row_stride + h * kD;

  __shared__ float s_q[kBlockM * kD];
  __shared__ float s_k[kBlockN * kKStride];
  __shared__ float s_v[kBlockN * kD];
  for (int i = tid; i < kBlockM * kD; i += Traits::kThreads) {
    const int r = i / kD, c = i % kD;
    s_q[i] = r < rows ? q_tile[r * p.q_row_stride + c] : 0.f;
  }

  float acc[kRows][kCols];
  float row_max[kRows], row_sum[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.f;
  }

  for (int n0 = 0; n0 < k_len; n0 += kBlockN) {
    __syncthreads();  // previous tile fully consumed (and s_q written, first time)
    for (int i = tid; i < kBlockN * kD; i += Traits::kThreads) {
      const int r = i / kD, c = i % kD;
      const bool valid = n0 + r < k_len;
      s_k[r * kKStride + c] = valid ? k_seq[(n0 + r) * p.k_row_stride + c] : 0.f;
      s_v[i] = valid ? v_seq[(n0 + r) * p.v_row_stride + c] : 0.f;
    }
    __syncthreads();
    const bool key_valid = n0 + lane < k_len;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float* q_row = s_q + (warp * kRows + r) * kD;
      float score = 0.f;
#pragma unroll 8
      for (int d = 0; d < kD; ++d) score = fmaf(q_row[d], s_k[lane * kKStride + d], score);
      score = key_valid ? score * scale_log2 : -INFINITY;
      float tile_max = score;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float new_max = fmaxf(row_max[r], tile_max);
      const float alpha = exp2f(row_max[r] - new_max);
      const float prob = exp2f(score - new_max);
      float tile_sum = prob;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, off);
      row_max[r] = new_max;
      row_sum[r] = row_sum[r] * alpha + tile_sum;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] *= alpha;
      for (int j = 0; j < kBlockN; ++j) {
        const float pj = __shfl_sync(0xffffffffu, prob, j);
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[r][c] = fmaf(pj, s_v[j * kD + c * 32 + lane], acc[r][c]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = warp * kRows + r;
    if (row >= rows) continue;
    const float inv = k_len > 0 ? 1.f / row_sum[r] : 0.f;  // no valid keys: zeros
#pragma unroll
    for (int c = 0; c < kCols; ++c) o_tile[row * p.o_row_stride + c * 32 + lane] = acc[r][c] * inv;
  }
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_FLASH_FLASH_KERNEL_CUH_
