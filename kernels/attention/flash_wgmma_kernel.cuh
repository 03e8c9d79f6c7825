// Device code of the Hopper (sm_90a) bf16 flash attention kernel: wgmma
// with shared-memory matrix descriptors. Included only by the sm_90a
// instantiation files (instantiations/flash_sm90_*.cu) through
// flash_wgmma_launch.cuh;
// the mma.sync kernel (flash_kernel.cuh) stays the path for every other
// device and build.
//
// Same grid, order and contract as FlashAttentionBf16Kernel: one CTA per
// (sequence, head, query tile) with the tile fastest, longest-first order
// when given, tiles past a sequence's end return at once, sequences without
// valid keys get zero rows.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_KERNEL_CUH_
#define JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_KERNEL_CUH_

#include <cuda_bf16.h>
#include <cstdint>

#include "kernels/attention/attention_params.h"
#include "kernels/attention/flash_kernel.cuh"
#include "kernels/attention/flash_tensor_maps.h"
#include "kernels/attention/flash_traits.h"

namespace jagrank {
namespace flash {

// ------------------------------------------------------------ wgmma helpers

// Shared-memory matrix descriptor (PTX ISA, "matrix descriptor format"):
// start address, leading and stride byte offsets (all >> 4), swizzle mode in
// bits 62-63 (1: 128-byte, 2: 64-byte). Base offset 0: every tile starts on
// the swizzle pattern's period.
template <int kSwizzleBytes>
__device__ __forceinline__ uint64_t SmemDescriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64, "128- or 64-byte swizzle");
  constexpr uint64_t kMode = kSwizzleBytes == 128 ? 1 : 2;
  return static_cast<uint64_t>((address & 0x3ffff) >> 4) | (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (kMode << 62);
}

// The same descriptor from its two 32-bit words: kernels keep the low word
// (start address >> 4, leading byte offset >> 4 in bits 16-29) of each
// tile's base and add compile-time offsets per k step, stage and column
// block; the high word (stride byte offset >> 4, swizzle mode in bits 30-31)
// is a constant.
template <int kSwizzleBytes>
__host__ __device__ constexpr uint32_t SmemDescriptorHigh(uint32_t stride_bytes) {
  return (stride_bytes >> 4) | ((kSwizzleBytes == 128 ? 1u : 2u) << 30);
}
__device__ __forceinline__ uint64_t SmemDescriptorFromWords(uint32_t low, uint32_t high) {
  return (static_cast<uint64_t>(high) << 32) | low;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows
// stored as column blocks of kSwizzleBytes-byte rows: the chunk index is
// XORed with address bits 7.. (Swizzle<3,4,3> for 128 bytes, <2,4,3> for 64),
// the permutation the descriptors' swizzle mode undoes. Also conflict-free
// for 8 lanes writing 8 chunks of one row.
template <int kSwizzleBytes>
__device__ __forceinline__ int SwizzledOffset(int row, int chunk, int rows) {
  constexpr int kChunksPerBlock = kSwizzleBytes / 16;
  const int block = chunk / kChunksPerBlock;
  const int offset = row * kSwizzleBytes + (chunk % kChunksPerBlock) * 16;
  return block * rows * kSwizzleBytes + (offset ^ (((offset >> 7) & (kChunksPerBlock - 1)) << 4));
}

// 16-byte global->shared copies to a shared-memory address (no generic ->
// shared conversion per copy); Zfill: when !valid, zeros and no global read.
__device__ __forceinline__ void CpAsync16Shared(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
__device__ __forceinline__ void CpAsync16SharedZfill(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// cp.async writes (generic proxy) must be made visible to the tensor cores'
// reads (async proxy) before the barrier that publishes them.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// mbarriers (PTX ISA, "mbarrier") for the TMA copies: one per K/V stage,
// one expected arrival (the issuing thread's arrive.expect_tx) plus the
// copies' transaction bytes per phase.
__device__ __forceinline__ void MbarrierInit(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the TMA unit).
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void MbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Returns once the barrier's phase of the given parity has completed.
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Box (column, row) of the 2D tensor map -> shared memory, completing on bar.
__device__ __forceinline__ void TmaLoad2d(uint32_t smem, const CUtensorMap* map, int column, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(bar)
      : "memory");
}

// Pins registers at this point of the program: the compiler may not move
// their reads or writes across it (wgmma reads and writes them
// asynchronously, which the compiler does not see).
template <int kN>
__device__ __forceinline__ void FenceRegisters(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void FenceRegisters(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Accumulator layout of m64nNk16 (per warp w of the warpgroup, lane l):
// d[4 j + e] holds row 16 w + l / 4 + 8 (e / 2), column 8 j + 2 (l % 4) + e % 2,
// the mma.sync m16n8 layout repeated over n8 tiles.
template <int kN>
__device__ __forceinline__ void WgmmaSS(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int accumulate);
template <int kN>
__device__ __forceinline__ void WgmmaRS(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b);

// d[64 x 64] (+)= A[64 x 16] B[16 x 64], A and B K-major in shared memory.
template <>
__device__ __forceinline__ void WgmmaSS<64>(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// d[64 x 128] (+)= A[64 x 16] B[16 x 128], A and B K-major in shared memory.
template <>
__device__ __forceinline__ void WgmmaSS<128>(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// d[64 x 32] += A[64 x 16] B[16 x 32], A from registers, B MN-major in shared memory.
template <>
__device__ __forceinline__ void WgmmaRS<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b)
      : "memory");
}

// d[64 x 64] += A[64 x 16] B[16 x 64], A from registers, B MN-major in shared memory.
template <>
__device__ __forceinline__ void WgmmaRS<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b)
      : "memory");
}

// ------------------------------------------------------------------ kernel

// Shared memory of the wgmma kernel: the dynamic base rounded up to 1024
// bytes (kSmemBytes holds the slack): the descriptors' swizzle is a function
// of the absolute shared-memory address. Q, then the K and V stages, the
// mbarriers and the next-tile slots (FlashWgmmaTraits::kSmemBytes).
template <typename Traits>
__device__ __forceinline__ unsigned char* FlashWgmmaSmem() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_address = SmemAddress(smem_raw);
  return smem_raw + ((1024 - (raw_address & 1023)) & 1023);
}

template <typename Traits>
__device__ __forceinline__ unsigned char* FlashWgmmaBarriers() {
  return FlashWgmmaSmem<Traits>() + Traits::kQBytes + 2 * Traits::kStages * Traits::kKvTileBytes;
}

// threadIdx.x, read by an instruction the compiler may not move: in a
// persistent CTA's tile loop it would otherwise hoist every per-thread value
// derived from it (copy addresses, swizzled offsets) out of the loop and keep
// them live across tiles, in registers the tile needs.
__device__ __forceinline__ int ThreadIndexHere() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

// One query tile (`tile`, with rows) of the wgmma kernel, by all kThreads
// threads of the CTA. phase_bits: bit s is the parity stage s's mbarrier
// completes next (kTmaKv; the barriers carry on across the tiles of a
// persistent CTA). Leaves shared memory to be reused after a __syncthreads.
template <typename Traits>
__device__ __forceinline__ void FlashWgmmaTile(const AttentionParams& p, const float scale_log2,
                                               const FlashKvMaps& maps, const FlashCtaWork& tile,
                                               uint32_t* phase_bits) {
  constexpr int kD = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kChunks = Traits::kChunksPerRow;
  constexpr int kSw = Traits::kSwizzleBytes;
  constexpr int kPvN = Traits::kPvN;
  constexpr int kPvBlocks = kD / kPvN;       // P V wgmmas per 16 keys
  constexpr int kNTiles = kBlockN / 8;       // n8 column tiles of S per thread
  constexpr int kKSteps = kD / 16;           // k16 steps of Q K^T
  constexpr int kStepsPerBlock = kSw / 32;   // k16 steps inside one swizzled row
  constexpr uint32_t kAtomBytes = 8 * kSw;   // 8 rows: the swizzle pattern's period
  constexpr int kStages = Traits::kStages;

  const int h = tile.h, q_start = tile.q_start, m0 = tile.m0, rows = tile.rows;  // rows: valid query rows
  const int k_start = tile.k_start, k_len = tile.k_len;

  const int tid = ThreadIndexHere();
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wg = warp / 4;          // warpgroup: query rows 64 wg .. 64 wg + 63
  const int wg_warp = warp % 4;     // rows 16 wg_warp .. + 15 of the warpgroup's 64
  const int group = lane / 4;
  const int quad = lane % 4;
  __nv_bfloat16* o_tile = static_cast<__nv_bfloat16*>(p.o) + (q_start + m0) * p.o_row_stride + h * kD;

  if (k_len <= 0) return StoreZeroRowsBf16<kD, kThreads>(p, tile);

  unsigned char* s_q = FlashWgmmaSmem<Traits>();                     // kColBlocks x [kBlockM][kSw]
  unsigned char* s_k = s_q + Traits::kQBytes;                              // kStages x kColBlocks x [kBlockN][kSw]
  unsigned char* s_v = s_k + Traits::kStages * Traits::kKvTileBytes;       // same
  const uint32_t q_address = SmemAddress(s_q);
  const uint32_t k_address = SmemAddress(s_k);
  const uint32_t v_address = SmemAddress(s_v);
  const uint32_t bar_address = v_address + Traits::kStages * Traits::kKvTileBytes;  // kTmaKv: 8 bytes per stage

  const __nv_bfloat16* q_tile =
      static_cast<const __nv_bfloat16*>(p.q) + (q_start + m0) * p.q_row_stride + h * kD;
  const __nv_bfloat16* k_seq = static_cast<const __nv_bfloat16*>(p.k) + k_start * p.k_row_stride + h * kD;
  const __nv_bfloat16* v_seq = static_cast<const __nv_bfloat16*>(p.v) + k_start * p.v_row_stride + h * kD;

  // Q tile -> shared; rows past the sequence are zero-filled (computed, never stored).
#pragma unroll
  for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows;
    CpAsync16(s_q + SwizzledOffset<kSw>(r, c, kBlockM), q_tile + (valid ? r : 0) * p.q_row_stride + c * 8, valid);
  }
  // K/V copies: thread tid always copies 16-byte chunk column tid % kChunks
  // of rows tid / kChunks + j kRowStep (j < kKvCopies) of a tile. kRowStep
  // is a multiple of the swizzle period (8 rows), so the chunk's swizzled
  // shared-memory offset in row j is the offset in row 0 plus j kRowStep
  // rows: the per-thread addresses are computed once here and each tile only
  // adds its base (the per-chunk index and swizzle arithmetic was a third of
  // the kernel's instructions in ncu: -19% at D = 128).
  constexpr int kRowStep = kThreads / kChunks;
  constexpr int kKvCopies = kBlockN / kRowStep;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kBlockN % kRowStep == 0,
                "K/V copy rows must repeat the swizzle pattern");
  const int copy_row = tid / kChunks;
  const uint32_t copy_smem = SwizzledOffset<kSw>(copy_row, tid % kChunks, kBlockN);
  const int copy_col = (tid % kChunks) * 8;
  auto load_kv = [&](int n_block, int stage) {
    const int n0 = n_block * kBlockN;
    const uint32_t sk = k_address + stage * Traits::kKvTileBytes + copy_smem;
    const uint32_t sv = v_address + stage * Traits::kKvTileBytes + copy_smem;
    const __nv_bfloat16* kg = k_seq + (n0 + copy_row) * p.k_row_stride + copy_col;
    const __nv_bfloat16* vg = v_seq + (n0 + copy_row) * p.v_row_stride + copy_col;
    const int64_t k_copy_step = kRowStep * p.k_row_stride;
    const int64_t v_copy_step = kRowStep * p.v_row_stride;
    if (n0 + kBlockN <= k_len) {  // every tile but a sequence's last
#pragma unroll
      for (int j = 0; j < kKvCopies; ++j) {
        CpAsync16Shared(sk + j * kRowStep * kSw, kg + j * k_copy_step);
        CpAsync16Shared(sv + j * kRowStep * kSw, vg + j * v_copy_step);
      }
    } else {
      // Keys past the valid length are zero-filled: a garbage V row times a
      // zero probability would still give NaN if it held Inf/NaN.
#pragma unroll
      for (int j = 0; j < kKvCopies; ++j) {
        const bool valid = n0 + copy_row + j * kRowStep < k_len;
        CpAsync16SharedZfill(sk + j * kRowStep * kSw, valid ? kg + j * k_copy_step : k_seq, valid);
        CpAsync16SharedZfill(sv + j * kRowStep * kSw, valid ? vg + j * v_copy_step : v_seq, valid);
      }
    }
  };
  const int n_blocks = (k_len + kBlockN - 1) / kBlockN;
  // kTmaKv: tiles 0 .. n_full - 1 lie wholly inside the sequence and go by
  // TMA, tile n_block into stage n_block % kStages, completing that stage's
  // barrier's next phase. A last, partial tile goes by cp.async like every
  // tile of the other variant.
  const int n_full = k_len / kBlockN;
  auto issue_tile = [&](int n_block, int stage) {
    if constexpr (Traits::kTmaKv) {
      if (n_block < n_full) {
        if (tid == 0) {
          const uint32_t bar = bar_address + stage * 8;
          MbarrierArriveExpectTx(bar, 2 * Traits::kKvTileBytes);
          const int row = k_start + n_block * kBlockN;
#pragma unroll
          for (int cb = 0; cb < Traits::kColBlocks; ++cb) {
            const uint32_t offset = stage * Traits::kKvTileBytes + cb * kBlockN * kSw;
            TmaLoad2d(k_address + offset, &maps.k, h * kD + cb * (kSw / 2), row, bar);
            TmaLoad2d(v_address + offset, &maps.v, h * kD + cb * (kSw / 2), row, bar);
          }
        }
        return;
      }
    }
    load_kv(n_block, stage);
  };
  // Prologue: tile 0 in one cp.async group (Q rides with it); behind an
  // always-true check where Traits::kRecomputeCopyAddresses (see there).
  if (!Traits::kRecomputeCopyAddresses || 0 < n_blocks) issue_tile(0, 0);
  CpAsyncCommit();

  // Warpgroups whose rows all lie past the sequence's end only help with copies.
  const bool wg_active = wg * 64 < rows;

  float acc_o[kPvBlocks][kPvN / 2];  // O, columns kPvN pb .. + kPvN - 1 in acc_o[pb]
  float acc_l[4] = {0.f, 0.f, 0.f, 0.f};  // row sums (mma.sync against ones, or fp32 adds)
  float row_max[2] = {-INFINITY, -INFINITY};  // rows group and group + 8, log2 domain
#pragma unroll
  for (int pb = 0; pb < kPvBlocks; ++pb) {
#pragma unroll
    for (int i = 0; i < kPvN / 2; ++i) acc_o[pb][i] = 0.f;
  }
  // P as bf16x2 in the A-fragment layout of the P V wgmma.
  uint32_t p_frag[kBlockN / 16][4];

  // O += P V for the tile in `stage`: V [kBlockN keys x kD] is the MN-major
  // B operand, one wgmma per 16 keys and column block (the leading byte
  // offset, the next column block, is then never used).
  struct PvDescriptors {
    uint64_t v[kBlockN / 16][kPvBlocks];
  };
  constexpr uint32_t kDescHigh = SmemDescriptorHigh<kSw>(kAtomBytes);
  // Low descriptor words at the tiles' bases; V's leading byte offset is
  // never used (one wgmma per column block) and set to the swizzle period.
  const uint32_t q_desc = (q_address + wg * 64 * kSw) >> 4;
  const uint32_t k_desc = k_address >> 4;
  const uint32_t v_desc = (v_address >> 4) | ((kAtomBytes >> 4) << 16);
  auto pv_descriptors = [&](int stage) {
    PvDescriptors d;
    const uint32_t v_stage = v_desc + stage * (Traits::kKvTileBytes >> 4);
#pragma unroll
    for (int kc = 0; kc < kBlockN / 16; ++kc) {
#pragma unroll
      for (int pb = 0; pb < kPvBlocks; ++pb) {
        d.v[kc][pb] =
            SmemDescriptorFromWords(v_stage + ((pb * kBlockN * kSw + kc * 2 * kAtomBytes) >> 4), kDescHigh);
      }
    }
    return d;
  };
  auto issue_pv = [&](uint32_t (&p)[kBlockN / 16][4], const PvDescriptors& d) {
#pragma unroll
    for (int kc = 0; kc < kBlockN / 16; ++kc) {
#pragma unroll
      for (int pb = 0; pb < kPvBlocks; ++pb) WgmmaRS<kPvN>(acc_o[pb], p[kc], d.v[kc][pb]);
    }
  };

  // Waits for tile n_block, publishes it to every warp, and starts the copy
  // of the next tile into the stage no warpgroup reads any more (tile
  // n_block - 1's: its P V was waited for before this barrier).
  auto next_tile = [&](int n_block) {
    CpAsyncWait<0>();  // this thread's copies of tile n_block (and Q) have landed
    if constexpr (Traits::kTmaKv) {
      if (n_block < n_full) {
        const int stage = n_block % kStages;
        MbarrierWait(bar_address + stage * 8, (*phase_bits >> stage) & 1);
        *phase_bits ^= 1u << stage;
      }
    }
    FenceProxyAsyncShared();
    __syncthreads();
    if (n_block + 1 < n_blocks) issue_tile(n_block + 1, (n_block + 1) % kStages);
    CpAsyncCommit();
  };
  // S = Q K^T: [64 x kBlockN] per warpgroup, kKSteps wgmmas of k16. The
  // descriptors are made before the wgmma.fence: ptxas serialises wgmmas
  // whose input registers are defined inside their pipeline stage.
  struct SDescriptors {
    uint64_t q[kKSteps], k[kKSteps];
  };
  auto s_descriptors = [&](int stage) {
    SDescriptors d;
    const uint32_t k_stage = k_desc + stage * (Traits::kKvTileBytes >> 4);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const uint32_t in_row = (kk % kStepsPerBlock) * 32;
      const uint32_t block = kk / kStepsPerBlock;
      d.q[kk] = SmemDescriptorFromWords(q_desc + ((block * kBlockM * kSw + in_row) >> 4), kDescHigh);
      d.k[kk] = SmemDescriptorFromWords(k_stage + ((block * kBlockN * kSw + in_row) >> 4), kDescHigh);
    }
    return d;
  };
  auto issue_s = [&](float (&s)[kBlockN / 2], const SDescriptors& d) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) WgmmaSS<kBlockN>(s, d.q[kk], d.k[kk], kk > 0 ? 1 : 0);
  };
  // Online softmax of tile n_block in the log2 domain, p = 2^(s * scale_log2
  // - max), into p_frag; row sums into acc_l. Returns whether O must be
  // multiplied by alpha (false when no row of the warp found a new maximum:
  // every alpha is exactly 1 then).
  auto softmax = [&](float (&s)[kBlockN / 2], int n_block, float (&alpha)[2], uint32_t (&p)[kBlockN / 16][4]) {
    // Mask keys past the valid length (only the last tile can have them).
    const int n0 = n_block * kBlockN;
    if (n0 + kBlockN > k_len) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (n0 + j * 8 + 2 * quad + (e & 1) >= k_len) s[4 * j + e] = -INFINITY;
        }
      }
    }
    // Every tile holds at least one valid key, so the new max is finite.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * j], s[4 * j + 1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float neg_max[2];
    bool max_changed = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      alpha[r] = UpdateRowMax<Traits::kRescaleThreshold>(tile_max[r], scale_log2, &row_max[r], &max_changed);
      neg_max[r] = -row_max[r];
    }
    const bool rescale = __any_sync(0xffffffffu, max_changed);
    if (rescale) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        acc_l[2 * r] *= alpha[r];
        acc_l[2 * r + 1] *= alpha[r];
      }
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const float x0 = fmaf(s[4 * j], scale_log2, neg_max[0]);
      const float x1 = fmaf(s[4 * j + 1], scale_log2, neg_max[0]);
      const float x2 = fmaf(s[4 * j + 2], scale_log2, neg_max[1]);
      const float x3 = fmaf(s[4 * j + 3], scale_log2, neg_max[1]);
      if constexpr (Traits::kPackedExp) {
        p[j / 2][2 * (j % 2)] = FastExp2Bf16x2(x0, x1);
        p[j / 2][2 * (j % 2) + 1] = FastExp2Bf16x2(x2, x3);
      } else {
        const float p0 = FastExp2(x0), p1 = FastExp2(x1), p2 = FastExp2(x2), p3 = FastExp2(x3);
        acc_l[0] += p0 + p1;  // this thread's part of row group's sum
        acc_l[2] += p2 + p3;  // and of row group + 8's
        p[j / 2][2 * (j % 2)] = PackBf16x2(p0, p1);
        p[j / 2][2 * (j % 2) + 1] = PackBf16x2(p2, p3);
      }
    }
    // Packed path: row sums of the bf16 P (the values V sees) by one
    // mma.sync per 16 keys against ones, instead of unpacking P for float
    // adds (sm_90 runs ex2.bf16x2 as two MUFU.EX2.BF16 and a PRMT).
    if constexpr (Traits::kPackedExp) {
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) MmaBf16(acc_l, p[kc], kBf16x2One, kBf16x2One);
    }
    return rescale;
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int pb = 0; pb < kPvBlocks; ++pb) {
#pragma unroll
        for (int j = 0; j < kPvN / 8; ++j) {
          acc_o[pb][4 * j + 2 * r] *= alpha[r];
          acc_o[pb][4 * j + 2 * r + 1] *= alpha[r];
        }
      }
    }
  };
  auto fence_o = [&]() {
#pragma unroll
    for (int pb = 0; pb < kPvBlocks; ++pb) FenceRegisters(acc_o[pb]);
  };
  auto fence_p = [&](uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
    for (int kc = 0; kc < kBlockN / 16; ++kc) FenceRegisters(p[kc]);
  };

  for (int n_block = 0; n_block < n_blocks; ++n_block) {
    const int stage = n_block % kStages;
    next_tile(n_block);
    if (wg_active) {
      float s[kBlockN / 2];
      const SDescriptors s_desc = s_descriptors(stage);
      WgmmaFence();
      issue_s(s, s_desc);
      WgmmaCommit();
      WgmmaWait<0>();
      FenceRegisters(s);
      float alpha[2];
      if (softmax(s, n_block, alpha, p_frag)) rescale_o(alpha);
      const PvDescriptors pv_desc = pv_descriptors(stage);
      fence_o();
      fence_p(p_frag);
      WgmmaFence();
      issue_pv(p_frag, pv_desc);
      WgmmaCommit();
      WgmmaWait<0>();
      fence_o();
    }
  }

  // Normalise, stage the warpgroup's rows in its own (no longer read) rows of
  // s_q in the same swizzled layout (conflict-free 4-byte writes), then store
  // 16-byte chunks of whole rows.
  if (wg_active) {
    // Packed path: the row-sum MMA left the full sums in every quad lane;
    // fp32 path: each lane holds a quarter of its rows' sums.
    const float inv_sum[2] = {1.f / (Traits::kPackedExp ? acc_l[0] : QuadSum(acc_l[0])),
                              1.f / (Traits::kPackedExp ? acc_l[2] : QuadSum(acc_l[2]))};
    const int row0 = wg * 64 + wg_warp * 16 + group;
#pragma unroll
    for (int pb = 0; pb < kPvBlocks; ++pb) {
#pragma unroll
      for (int j = 0; j < kPvN / 8; ++j) {
        const int col = pb * kPvN + j * 8 + 2 * quad;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          *reinterpret_cast<uint32_t*>(s_q + SwizzledOffset<kSw>(row0 + 8 * r, col / 8, kBlockM) + (col % 8) * 2) =
              PackBf16x2(acc_o[pb][4 * j + 2 * r] * inv_sum[r], acc_o[pb][4 * j + 2 * r + 1] * inv_sum[r]);
        }
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < rows) {
      *reinterpret_cast<uint4*>(o_tile + r * p.o_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(s_q + SwizzledOffset<kSw>(r, c, kBlockM));
    }
  }
}

// Initialises the K/V stages' mbarriers (kTmaKv) before any thread waits on them.
template <typename Traits>
__device__ __forceinline__ void InitKvBarriers() {
  if constexpr (Traits::kTmaKv) {
    if (threadIdx.x == 0) {
      const uint32_t bar_address = SmemAddress(FlashWgmmaBarriers<Traits>());
#pragma unroll
      for (int stage = 0; stage < Traits::kStages; ++stage) MbarrierInit(bar_address + stage * 8, 1);
      FenceMbarrierInit();
    }
    __syncthreads();
  }
}

// The CTAs' work, one of two launches (LaunchFlashWgmmaTiles), each its own
// kernel, so that the grid launch's registers are not those of the
// persistent loop:
// - !kPersistent: one CTA per tile of FlashGrid (its blockIdx.x), the
//   sequences in maybe_order (optional [batch], longest first; null = batch
//   order). CTAs of tiles past their sequence's end exit at once.
// - kPersistent (a launch of at most as many CTAs as are resident at once):
//   tiles[0] tiles listed longest first from tiles[2], each as its FlashGrid
//   index in batch order, and tiles[1] the count of tiles taken (0 at
//   launch). CTA i computes tile i, then the next untaken one, until none is
//   left: no CTA is spent on an empty tile, and each takes the longest tile
//   left when it frees up.
// maps: K and V tensor maps (read only where Traits::kTmaKv).
template <typename Traits, bool kPersistent>
__global__ void __launch_bounds__(Traits::kThreads,
                                  kPersistent ? Traits::kPersistentMinBlocksPerSm : Traits::kMinBlocksPerSm)
    FlashAttentionWgmmaKernel(const AttentionParams p, const float scale_log2, const int* __restrict__ maybe_order,
                              int* tiles, const __grid_constant__ FlashKvMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBlockM = Traits::kBlockM;
  uint32_t phase_bits = 0;
  if constexpr (!kPersistent) {
    FlashCtaWork tile;
    if (!LocateFlashTile<kBlockM>(p, maybe_order, blockIdx.x, &tile)) return;
    InitKvBarriers<Traits>();
    FlashWgmmaTile<Traits>(p, scale_log2, maps, tile, &phase_bits);
  } else {
    const int count = tiles[0];
    int work = blockIdx.x;
    if (work >= count) return;
    InitKvBarriers<Traits>();
    // Thread 0 takes the next tile as tile i starts and publishes it in slot
    // i & 1 only as tile i ends: the atomic's latency (all CTAs start on the
    // same counter) then overlaps the tile instead of holding warp 0 at its
    // start. Two slots: tile i's slot is written after every thread read
    // slot i - 1 (past the barrier that ended tile i - 1).
    int* s_next = reinterpret_cast<int*>(FlashWgmmaBarriers<Traits>() + Traits::kBarrierBytes);
    for (int i = 0;; ++i) {
      const int taken = ThreadIndexHere() == 0 ? atomicAdd(&tiles[1], 1) : 0;
      FlashCtaWork tile;
      LocateFlashTile<kBlockM>(p, nullptr, tiles[2 + work], &tile);  // a listed tile has rows
      FlashWgmmaTile<Traits>(p, scale_log2, maps, tile, &phase_bits);
      if (ThreadIndexHere() == 0) s_next[i & 1] = static_cast<int>(gridDim.x) + taken;
      __syncthreads();  // the tile's shared memory is read, the next index published
      work = s_next[i & 1];
      if (work >= count) break;
    }
  }
#else
  __trap();  // compiled for sm_90a only (attention/CMakeLists.txt); never launched elsewhere
#endif
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_WGMMA_KERNEL_CUH_
