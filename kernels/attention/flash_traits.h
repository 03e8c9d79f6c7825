// Compile-time tile constants of the flash attention kernels, derived from
// FlashTileSize (flash_tile_size.h). Device-independent; included by the
// kernel and launcher sources.
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_TRAITS_H_
#define JAGRANK_KERNELS_ATTENTION_FLASH_TRAITS_H_

#include "kernels/attention/flash_tile_size.h"

namespace jagrank {
namespace flash {

// Lazy rescaling (log2 units) of the fp32-exponential path: a row's running
// max, the reference of its exponentials, moves only when a tile's max
// exceeds it by more than this, so O and the sums are rescaled less often;
// the result is the same up to rounding, exponentials reach 2^8. Off (0) on
// the packed path: it rounds the exponent input to bf16, whose spacing at
// x ~ 8 would cost ~1% per dominant term.
constexpr int RescaleThreshold(bool packed_exp) { return packed_exp ? 0 : 8; }

// bf16 tensor-core kernel (mma.sync m16n8k16, FlashArch::kSm80). Each warp
// owns kMTiles x 16 query rows of the CTA's query tile and walks all key
// tiles of its sequence; K/V tiles are shared by the CTA's warps through
// shared memory, double-buffered with cp.async.
template <int kHeadDim_, bool kLongKeys_>
struct FlashBf16Traits {
  static constexpr const char* kKernelName = "FlashAttentionBf16Kernel";
  static constexpr FlashTile kTile = FlashTileSize(FlashArch::kSm80, kHeadDim_, kLongKeys_);
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = kWarps * 32;
  // Two m16 tiles per warp feed every K/V fragment read from shared memory
  // into two MMAs: at 16 rows per warp the ldmatrix traffic (16 flop/byte)
  // caps the MMAs below the tensor-core rate at D >= 64.
  static constexpr int kMTiles = kTile.m_tiles;
  static constexpr int kBlockM = kWarps * kMTiles * 16;
  static constexpr bool kQInRegisters = kMTiles == 1;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = 2;
  // Registers per thread are capped at 64K / (kThreads * kMinBlocksPerSm).
  static constexpr int kMinBlocksPerSm = kTile.min_blocks;
  // Exponentials two at a time in bf16x2 (ex2.approx.ftz.bf16x2), P's row
  // sums by an MMA against ones: fewer instructions per score where the
  // softmax, not the MMAs, is the limit (D = 32).
  static constexpr bool kPackedExp = kTile.packed_exp;
  static constexpr int kRescaleThreshold = RescaleThreshold(kPackedExp);
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix then fall in
  // 8 different 4-bank groups (no bank conflicts) for every D here.
  static constexpr int kSmemStride = kHeadDim + 8;  // elements
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kSmemStride * 2;

  static_assert(kWarps >= 1, "no mma.sync tile for this head dim (FlashTileSize)");
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kBlockN % 16 == 0, "key tile must be a multiple of 16 (two n8 MMA tiles per ldmatrix.x4)");
  static_assert(kMTiles == 1 || kMTiles == 2, "one or two m16 tiles per warp");
  static_assert(kSmemBytes <= 227 * 1024, "tiles exceed the H100/H200 shared memory per CTA");
};

// bf16 Hopper kernel (wgmma, FlashArch::kSm90, sm_90a only;
// flash_wgmma_kernel.cuh). Each warpgroup (4 warps, 128 threads) owns 64
// query rows of the CTA's tile: S = Q K^T with Q and K read by the tensor
// cores straight from shared memory, P kept in registers as the A operand of
// O += P V, V read as a transposed (MN-major) B operand. Tiles live in shared
// memory in the swizzled layout the wgmma descriptors name (rows of
// kSwizzleBytes, 16-byte chunks XOR-permuted by row), double-buffered with
// cp.async, or by TMA (kTmaKv_).
template <int kHeadDim_, bool kLongKeys_, bool kTmaKv_>
struct FlashWgmmaTraits {
  static constexpr const char* kKernelName = "FlashAttentionWgmmaKernel";
  static constexpr FlashTile kTile = FlashTileSize(FlashArch::kSm90, kHeadDim_, kLongKeys_);
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpGroups = kTile.warps;
  static constexpr int kThreads = kWarpGroups * 128;
  static constexpr int kBlockM = kWarpGroups * 64;  // wgmma M is 64 per warpgroup
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kMinBlocksPerSm = kTile.min_blocks;
  // K/V tiles in shared memory; one is loading while the other is computed on.
  static constexpr int kStages = 2;
  // Whole key tiles go to shared memory by TMA: one thread issues a bulk
  // tensor copy per column block of K and V, completing on the stage's
  // mbarrier, instead of every thread issuing a cp.async per 16 bytes (the
  // copies' address and issue instructions were a large part of a kernel
  // bound by its integer instructions). A sequence's last, partial tile
  // keeps the zero-filling cp.async copies, so no key row of another
  // sequence is ever read.
  static constexpr bool kTmaKv = kTmaKv_;
  // Tile 0's K/V copies are issued behind a check that always passes
  // (n_blocks >= 1), so the compiler does not carry the prologue's per-thread
  // copy addresses through the key loop in vector registers: each tile
  // recomputes them from the shared-memory base in uniform registers. At
  // D = 32 that is 126 registers instead of 132, and at most 128 fit a 4th
  // CTA on each SM (the tile asks for 3): self N = 1024 0.989 vs 1.065 ms,
  // N = 2048 1.682 vs 1.802. D = 64/128 keep the carried addresses: their
  // CTAs per SM are the same either way.
  static constexpr bool kRecomputeCopyAddresses = kHeadDim == 32;
  // The persistent kernel's tile loop holds a few registers more: at D = 32
  // that is 136-138 against 126-128 of the one-tile kernel, one CTA per SM
  // fewer, so it asks for the 4 CTAs per SM the one-tile kernel reaches (no
  // spills with TMA copies, 8 bytes with cp.async). Elsewhere it asks for at
  // most 4: capped for the D = 64 one-tile kernel's 5 it spills 48 bytes.
  static constexpr int kPersistentMinBlocksPerSm = kHeadDim == 32 ? 4 : (kMinBlocksPerSm < 4 ? kMinBlocksPerSm : 4);
  // true: exponentials by ex2.approx.bf16x2 and row sums by an mma.sync
  // against ones (as FlashBf16Traits); false: fp32 ex2 and fp32 row sums
  // (no mma.sync between the warpgroups' wgmmas on the tensor pipe).
  static constexpr bool kPackedExp = kTile.packed_exp;
  static constexpr int kRescaleThreshold = RescaleThreshold(kPackedExp);
  // 128-byte swizzle where a row holds 64 columns; D = 32 rows are 64 bytes.
  static constexpr int kSwizzleBytes = kHeadDim * 2 >= 128 ? 128 : kHeadDim * 2;
  static constexpr int kColBlocks = kHeadDim * 2 / kSwizzleBytes;  // column blocks of kSwizzleBytes
  static constexpr int kChunksPerRow = kHeadDim / 8;                // 16-byte chunks
  // O += P V runs one wgmma per column block (N = 64, or 32 at D = 32). One
  // N = 128 wgmma over all of D = 128 measured the same (0.929 vs 0.928 ms):
  // the descriptor moves it saves are not the limit.
  static constexpr int kPvN = kSwizzleBytes / 2;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKvTileBytes = kBlockN * kHeadDim * 2;
  // + 1024: the dynamic shared memory base is rounded up to the swizzle
  // pattern's 1024-byte period.
  // After the V stages: the TMA variant's mbarriers (8 bytes per stage),
  // then the persistent launch's two next-tile slots (FlashAttentionWgmmaKernel).
  static constexpr int kBarrierBytes = 8 * kStages;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKvTileBytes + 1024 + kBarrierBytes + 8;

  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "wgmma kernel: head_dim 32, 64 or 128");
  static_assert(kBlockN == 64 || kBlockN == 128, "wgmma wrappers exist for N = 64 and 128 (S = Q K^T)");
  static_assert(kWarpGroups == 1 || kWarpGroups == 2, "one or two warpgroups per CTA");
  static_assert(kTile.m_tiles == 1, "a warpgroup owns 64 rows (one wgmma M)");
  static_assert(kSmemBytes <= 227 * 1024, "tiles exceed the H100/H200 shared memory per CTA");
};

// float32 kernel (CUDA cores): each warp owns kRowsPerWarp query rows; a lane
// scores one key of a 32-key tile, then owns head_dim / 32 output columns.
template <int kHeadDim_>
struct FlashFp32Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 4;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;
  static constexpr int kBlockN = 32;  // one key per lane
  static constexpr int kColsPerLane = kHeadDim / 32;
  // K rows padded by one float: lanes reading K[lane][d] hit 32 different banks.
  static constexpr int kKStride = kHeadDim + 1;
  static constexpr int kSmemBytes = (kBlockM * kHeadDim + kBlockN * kKStride + kBlockN * kHeadDim) * 4;

  static_assert(kHeadDim % 32 == 0, "float32 kernel gives each lane head_dim / 32 output columns");
  static_assert(kSmemBytes <= 48 * 1024, "float32 kernel uses static-size shared memory (<= 48 KiB)");
};

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_TRAITS_H_
