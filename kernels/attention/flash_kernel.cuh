// Device code of the jagged flash attention kernels (bf16 tensor cores with
// mma.sync, and float32 CUDA cores). Included only by the instantiation .cu
// files through flash_launch.cuh.
//
// Grid: one CTA per (sequence, head, query tile), flattened into x with the
// query tile fastest: the CTAs of one (sequence, head) run side by side and
// share its K/V through L2 (-2% at D = 32, -5% at D = 128 against
// (sequence, head) fastest). Tiles past a sequence's end return at once.
// With an order (flash_schedule.cu) the sequences are taken longest first, so
// that the longest ones do not start last and form the tail (target
// attention -18 to -24%, self D = 128 -2.7%).
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_KERNEL_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_KERNEL_CUH_

#include <cuda_bf16.h>
#include <cstdint>

#include "kernels/attention/attention_params.h"
#include "kernels/attention/flash_traits.h"

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
// The same, to a shared-memory address (no generic -> shared conversion).
__device__ __forceinline__ void CpAsync16ToShared(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
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

// What one CTA computes: query rows m0 .. m0 + rows - 1 of sequence b, head h.
struct FlashCtaWork {
  int b, h;
  int q_start, m0, rows;  // the sequence's first query row; the tile's first row; valid rows in the tile
  int k_start, k_len;     // the sequence's first key row; valid keys
};

// Locates tile `index` of FlashGrid (a CTA's blockIdx.x there): the index
// runs over query blocks of kBlockM rows within (sequence, head), sequences
// in maybe_order (null = batch order). False when the block starts past the
// sequence's end (nothing to do).
template <int kBlockM>
__device__ __forceinline__ bool LocateFlashTile(const AttentionParams& p, const int* maybe_order, int index,
                                                FlashCtaWork* t) {
  const int m_blocks = (p.max_q_len + kBlockM - 1) / kBlockM;
  const int bh = index / m_blocks;
  const int m_block = index - bh * m_blocks;
  const int rank = bh / p.num_heads;
  t->h = bh - rank * p.num_heads;
  t->b = maybe_order != nullptr ? maybe_order[rank] : rank;
  t->q_start = p.q_offsets[t->b];
  const int q_len = p.q_offsets[t->b + 1] - t->q_start;
  t->m0 = m_block * kBlockM;
  if (t->m0 >= q_len) return false;
  t->rows = min(kBlockM, q_len - t->m0);
  t->k_start = p.k_offsets[t->b];
  t->k_len = ValidKeyCount(p, t->b, p.k_offsets[t->b + 1] - t->k_start);
  return true;
}

// Rows of a sequence without valid keys are zeros: writes this CTA's rows of
// a bf16 o in 16-byte chunks.
template <int kHeadDim, int kThreads>
__device__ __forceinline__ void StoreZeroRowsBf16(const AttentionParams& p, const FlashCtaWork& t) {
  constexpr int kChunks = kHeadDim / 8;
  __nv_bfloat16* o_tile = static_cast<__nv_bfloat16*>(p.o) + (t.q_start + t.m0) * p.o_row_stride + t.h * kHeadDim;
  for (int i = threadIdx.x; i < t.rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(o_tile + r * p.o_row_stride + c * 8) = make_uint4(0, 0, 0, 0);
  }
}

// Online softmax of one row in the log2 domain: the row's reference max moves
// to the tile's max (over the row's quad) when that exceeds it by more than
// kThreshold (lazy rescaling; 0: whenever it grows). Returns 2^(old - new),
// the factor of the row's accumulators, and sets *changed when the max moved.
template <int kThreshold>
__device__ __forceinline__ float UpdateRowMax(float tile_max, float scale_log2, float* row_max, bool* changed) {
  const float seen_max = QuadMax(tile_max) * scale_log2;
  const float new_max = seen_max > *row_max + kThreshold ? seen_max : *row_max;
  const float alpha = FastExp2(*row_max - new_max);
  *changed |= new_max != *row_max;
  *row_max = new_max;
  return alpha;
}

// ------------------------------------------------------- bf16 tensor-core kernel

// bf16 (1, 8, 7 bits) 1.0 in both halves: the B operand of the row-sum MMA.
constexpr uint32_t kBf16x2One = 0x3f803f80u;

// 2^x for two values at once on the special-function unit, rounded to bf16
// on the way in and out (P is rounded to bf16 for the P V MMA anyway).
// ex2.bf16x2 needs sm_90; sm_80-89 take two fp32 exponentials of the
// bf16-rounded inputs (the tiles were measured on sm_90 only).
__device__ __forceinline__ uint32_t FastExp2Bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  const __nv_bfloat162 x = __floats2bfloat162_rn(lo, hi);
  return PackBf16x2(FastExp2(__low2float(x)), FastExp2(__high2float(x)));
#else
  uint32_t y;
  asm("ex2.approx.ftz.bf16x2 %0, %1;\n" : "=r"(y) : "r"(PackBf16x2(lo, hi)));
  return y;
#endif
}

// maybe_order (optional, [batch]): the sequences in the order their CTAs
// should start, longest first (LongestFirstOrderKernel); null = batch order.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    FlashAttentionBf16Kernel(const AttentionParams p, const float scale_log2, const int* __restrict__ maybe_order) {
  constexpr int kD = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStride = Traits::kSmemStride;
  constexpr int kChunks = Traits::kChunksPerRow;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kMTiles = Traits::kMTiles;      // m16 MMA tiles per warp
  constexpr int kRowsPerWarp = 16 * kMTiles;
  constexpr int kNTiles = kBlockN / 8;         // n8 MMA tiles of S
  constexpr int kDTiles = kD / 8;              // n8 MMA tiles of O
  constexpr bool kPackedExp = Traits::kPackedExp;

  FlashCtaWork tile;
  if (!LocateFlashTile<kBlockM>(p, maybe_order, blockIdx.x, &tile)) return;
  const int h = tile.h, q_start = tile.q_start, m0 = tile.m0, rows = tile.rows;  // rows: valid query rows
  const int k_start = tile.k_start, k_len = tile.k_len;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  __nv_bfloat16* o_tile = static_cast<__nv_bfloat16*>(p.o) + (q_start + m0) * p.o_row_stride + h * kD;

  if (k_len <= 0) return StoreZeroRowsBf16<kD, kThreads>(p, tile);

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
  // K/V copies: thread tid always copies 16-byte chunk column tid % kChunks
  // of rows tid / kChunks + j kRowStep of a tile, so its shared and global
  // addresses are computed once and each tile only adds its base (the
  // per-chunk index arithmetic cost registers, and spills at D = 32).
  constexpr int kRowStep = kThreads / kChunks;
  constexpr int kKvCopies = kBlockN / kRowStep;
  static_assert(kThreads % kChunks == 0 && kBlockN % kRowStep == 0, "K/V copy rows must tile the key tile");
  const int copy_row = tid / kChunks;
  const uint32_t copy_smem = SmemAddress(s_k) + (copy_row * kStride + (tid % kChunks) * 8) * 2;
  constexpr uint32_t kKvStageBytes = kBlockN * kStride * 2;
  constexpr uint32_t kVOffsetBytes = Traits::kStages * kKvStageBytes;  // s_v - s_k
  const int copy_col = (tid % kChunks) * 8;
  auto load_kv = [&](int n_block, int stage) {
    const int n0 = n_block * kBlockN;
    const uint32_t sk = copy_smem + stage * kKvStageBytes;
    const __nv_bfloat16* kg = k_seq + (n0 + copy_row) * p.k_row_stride + copy_col;
    const __nv_bfloat16* vg = v_seq + (n0 + copy_row) * p.v_row_stride + copy_col;
#pragma unroll
    for (int j = 0; j < kKvCopies; ++j) {
      // Keys past the valid length are zero-filled: a garbage V row times a
      // zero probability would still give NaN if it held Inf/NaN.
      const bool valid = n0 + copy_row + j * kRowStep < k_len;
      CpAsync16ToShared(sk + j * kRowStep * kStride * 2, valid ? kg + j * kRowStep * p.k_row_stride : k_seq, valid);
      CpAsync16ToShared(sk + kVOffsetBytes + j * kRowStep * kStride * 2,
                        valid ? vg + j * kRowStep * p.v_row_stride : v_seq, valid);
    }
  };
  load_kv(0, 0);
  CpAsyncCommit();

  // Warps whose rows all lie past the sequence's end only help with copies.
  const bool warp_active = warp * kRowsPerWarp < rows;
  const int group = lane / 4;   // MMA row within the 8-row half
  const int quad = lane % 4;    // MMA column pair
  // ldmatrix row address of this lane for the A operand (Q) of m-tile mt.
  const __nv_bfloat16* q_frag_base = s_q + (warp * kRowsPerWarp + (lane & 15)) * kStride + (lane >> 4) * 8;

  // One m-tile per warp keeps Q's fragments in registers for the whole loop;
  // with two, registers go to the second accumulator and Q is re-read from
  // shared memory per k step (cheap next to K and V: each K/V fragment now
  // feeds two MMAs, halving shared-memory reads per flop).
  uint32_t q_frag_held[Traits::kQInRegisters ? kD / 16 : 1][4];
  float acc_o[kMTiles][kDTiles][4];
  float acc_l[kMTiles][4];                  // row sums by MMA (packed-exp path)
  float row_max[kMTiles][2];                // rows group and group + 8, log2 domain
  float row_sum[kMTiles][2];                // this thread's partial sums (fp32-exp path)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) acc_o[mt][j][0] = acc_o[mt][j][1] = acc_o[mt][j][2] = acc_o[mt][j][3] = 0.f;
    acc_l[mt][0] = acc_l[mt][1] = acc_l[mt][2] = acc_l[mt][3] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  const int n_blocks = (k_len + kBlockN - 1) / kBlockN;
  for (int n_block = 0; n_block < n_blocks; ++n_block) {
    const int stage = n_block & 1;
    if (n_block + 1 < n_blocks) load_kv(n_block + 1, stage ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();  // everything but the tile just issued has landed
    __syncthreads();

    if (warp_active) {
      if constexpr (Traits::kQInRegisters) {
        if (n_block == 0) {
#pragma unroll
          for (int kk = 0; kk < kD / 16; ++kk) LdMatrixX4(q_frag_held[kk], q_frag_base + kk * 16);
        }
      }
      const __nv_bfloat16* sk = s_k + stage * kBlockN * kStride;
      const __nv_bfloat16* sv = s_v + stage * kBlockN * kStride;

      // S = Q K^T for this warp's rows and kBlockN keys.
      float s[kMTiles][kNTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t q_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if constexpr (Traits::kQInRegisters) {
#pragma unroll
            for (int i = 0; i < 4; ++i) q_frag[mt][i] = q_frag_held[kk][i];
          } else {
            LdMatrixX4(q_frag[mt], q_frag_base + mt * 16 * kStride + kk * 16);
          }
        }
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
          uint32_t kb[4];  // b fragments of key tiles 2np and 2np+1
          LdMatrixX4(kb, sk + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kStride + kk * 16 +
                             ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            MmaBf16(s[mt][2 * np], q_frag[mt], kb[0], kb[1]);
            MmaBf16(s[mt][2 * np + 1], q_frag[mt], kb[2], kb[3]);
          }
        }
      }
      // Mask keys past the valid length (only the last tile can have them).
      const int n0 = n_block * kBlockN;
      if (n0 + kBlockN > k_len) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (n0 + j * 8 + 2 * quad + (e & 1) >= k_len) s[mt][j][e] = -INFINITY;
            }
          }
        }
      }
      // Online softmax in the log2 domain: p = 2^(s * scale_log2 - max).
      // Every tile holds at least one valid key, so the new max is finite.
      uint32_t p_frag[kMTiles][kNTiles][2];  // P as bf16x2: the A operand of P V
      float neg_max[kMTiles][2];
      float alpha[kMTiles][2];
      bool max_changed = false;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          tile_max[0] = fmaxf(tile_max[0], fmaxf(s[mt][j][0], s[mt][j][1]));
          tile_max[1] = fmaxf(tile_max[1], fmaxf(s[mt][j][2], s[mt][j][3]));
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          alpha[mt][r] =
              UpdateRowMax<Traits::kRescaleThreshold>(tile_max[r], scale_log2, &row_max[mt][r], &max_changed);
          neg_max[mt][r] = -row_max[mt][r];
        }
      }
      // Rescale the accumulators only when some row of the warp found a new
      // maximum: otherwise every alpha is exactly 2^0 = 1. Past the first
      // few tiles of a long sequence that skips kMTiles * kD / 2 FMULs per
      // thread and tile (within the spread at D = 128, never slower).
      if (__any_sync(0xffffffffu, max_changed)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            row_sum[mt][r] *= alpha[mt][r];
            acc_l[mt][2 * r] *= alpha[mt][r];
            acc_l[mt][2 * r + 1] *= alpha[mt][r];
#pragma unroll
            for (int j = 0; j < kDTiles; ++j) {
              acc_o[mt][j][2 * r] *= alpha[mt][r];
              acc_o[mt][j][2 * r + 1] *= alpha[mt][r];
            }
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const float x0 = fmaf(s[mt][j][0], scale_log2, neg_max[mt][0]);
          const float x1 = fmaf(s[mt][j][1], scale_log2, neg_max[mt][0]);
          const float x2 = fmaf(s[mt][j][2], scale_log2, neg_max[mt][1]);
          const float x3 = fmaf(s[mt][j][3], scale_log2, neg_max[mt][1]);
          if constexpr (kPackedExp) {
            p_frag[mt][j][0] = FastExp2Bf16x2(x0, x1);
            p_frag[mt][j][1] = FastExp2Bf16x2(x2, x3);
          } else {
            const float p0 = FastExp2(x0), p1 = FastExp2(x1), p2 = FastExp2(x2), p3 = FastExp2(x3);
            row_sum[mt][0] += p0 + p1;
            row_sum[mt][1] += p2 + p3;
            p_frag[mt][j][0] = PackBf16x2(p0, p1);
            p_frag[mt][j][1] = PackBf16x2(p2, p3);
          }
        }
      }
      // O += P V; P's accumulator layout is the A-fragment layout of this MMA.
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          a[mt][0] = p_frag[mt][2 * kc][0];
          a[mt][1] = p_frag[mt][2 * kc][1];
          a[mt][2] = p_frag[mt][2 * kc + 1][0];
          a[mt][3] = p_frag[mt][2 * kc + 1][1];
          // Packed path: row sums of the bf16 P by one more MMA against ones
          // (replaces an FADD per score; the sums match the P that V sees).
          if constexpr (kPackedExp) MmaBf16(acc_l[mt], a[mt], kBf16x2One, kBf16x2One);
        }
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          uint32_t vb[4];  // b fragments of output columns 16dp..+7 and 16dp+8..+15
          LdMatrixX4Trans(vb, sv + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + dp * 16 +
                                  (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            MmaBf16(acc_o[mt][2 * dp], a[mt], vb[0], vb[1]);
            MmaBf16(acc_o[mt][2 * dp + 1], a[mt], vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage just read is overwritten by the next iteration's copy
  }

  if (!warp_active) return;
  // Normalise, stage this warp's rows through its own (no longer read) rows
  // of s_q, then store 16-byte chunks of whole rows.
  __nv_bfloat16* s_o = s_q + warp * kRowsPerWarp * kStride;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    float inv_sum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      inv_sum[r] = 1.f / (kPackedExp ? acc_l[mt][2 * r] : QuadSum(row_sum[mt][r]));
    }
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
      const int col = j * 8 + 2 * quad;
      *reinterpret_cast<uint32_t*>(s_o + (mt * 16 + group) * kStride + col) =
          PackBf16x2(acc_o[mt][j][0] * inv_sum[0], acc_o[mt][j][1] * inv_sum[0]);
      *reinterpret_cast<uint32_t*>(s_o + (mt * 16 + group + 8) * kStride + col) =
          PackBf16x2(acc_o[mt][j][2] * inv_sum[1], acc_o[mt][j][3] * inv_sum[1]);
    }
  }
  __syncwarp();
  const int warp_rows = min(kRowsPerWarp, rows - warp * kRowsPerWarp);
#pragma unroll
  for (int i = lane; i < kRowsPerWarp * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < warp_rows) {
      *reinterpret_cast<uint4*>(o_tile + (warp * kRowsPerWarp + r) * p.o_row_stride + c * 8) =
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

  FlashCtaWork tile;
  if (!LocateFlashTile<kBlockM>(p, nullptr, blockIdx.x, &tile)) return;
  const int h = tile.h, q_start = tile.q_start, m0 = tile.m0, rows = tile.rows;  // rows: valid query rows
  const int k_start = tile.k_start, k_len = tile.k_len;

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

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_KERNEL_CUH_
