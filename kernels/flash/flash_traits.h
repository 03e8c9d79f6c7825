// Tile sizes of the jagged flash attention kernels. Device-independent
// constants only; included by the kernel and launcher sources.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_
#define JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_

namespace jagrank {
namespace flash {

// bf16 tensor-core kernel (mma.sync m16n8k16). Each warp owns kMTiles x 16
// query rows of the CTA's query tile and walks all key tiles of its
// sequence; K/V tiles are shared by the CTA's warps through shared memory,
// double-buffered with cp.async. FlashBf16Config below holds the shipped
// choice per head dim; the benchmark instantiates others to compare.
template <int kHeadDim_, int kWarps_, int kMTiles_, int kBlockN_, int kMinBlocksPerSm_, bool kPackedExp_,
          bool kSkipUnchangedRescale_ = true, int kRescaleThreshold_ = 0>
struct FlashBf16Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  // Two m16 tiles per warp feed every K/V fragment read from shared memory
  // into two MMAs: at 16 rows per warp the ldmatrix traffic (16 flop/byte)
  // caps the MMAs below the tensor-core rate at D >= 64.
  static constexpr int kMTiles = kMTiles_;
  static constexpr int kBlockM = kWarps * kMTiles * 16;
  static constexpr bool kQInRegisters = kMTiles == 1;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = 2;
  // Registers per thread are capped at 64K / (kThreads * kMinBlocksPerSm).
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // Exponentials two at a time in bf16x2 (ex2.approx.ftz.bf16x2), P's row
  // sums by an MMA against ones: fewer instructions per score where the
  // softmax, not the MMAs, is the limit (D = 32).
  static constexpr bool kPackedExp = kPackedExp_;
  // Skip O *= alpha when no row max of the warp changed (a warp-uniform
  // branch between S and P V); false: always rescale, one basic block.
  static constexpr bool kSkipUnchangedRescale = kSkipUnchangedRescale_;
  // Lazy rescaling (log2 units): a row's running max, the reference of its
  // exponentials, moves only when a tile's max exceeds it by more than this
  // (0: whenever it grows). O and the sums are then rescaled less often;
  // the result is the same up to rounding, exponentials reach 2^threshold.
  // Meant for fp32 exponentials: packed ones round their input to bf16,
  // whose spacing grows with |x|.
  static constexpr int kRescaleThreshold = kRescaleThreshold_;
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix then fall in
  // 8 different 4-bank groups (no bank conflicts) for every D here.
  static constexpr int kSmemStride = kHeadDim + 8;  // elements
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kSmemStride * 2;

  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kBlockN % 16 == 0, "key tile must be a multiple of 16 (two n8 MMA tiles per ldmatrix.x4)");
  static_assert(kMTiles == 1 || kMTiles == 2, "one or two m16 tiles per warp");
  static_assert(kSmemBytes <= 227 * 1024, "tiles exceed the H100/H200 shared memory per CTA");
};

// The shipped tile choice per head dim (bench/NOTES.md has the variants
// measured on the H200 and why these won): Traits, and LongTraits for
// batches whose longest key sequence exceeds kLongKeysAbove.
template <int kHeadDim>
struct FlashBf16Config;
// Further tiles for A/B runs only (JAGRANK_FLASH_KERNEL=mma_sync_v<i>). On
// sm_90 builds the default path runs wgmma at D = 64/128 and at D = 32
// above 768 keys (FlashWgmmaConfig); mma.sync serves the rest and every
// other device.
template <typename... Traits>
struct FlashBf16List {};
// D = 32: softmax-bound; 4 warps x 32 rows, 4 CTAs per SM (16 warps) to hide
// the MUFU/MMA latencies, packed bf16x2 exponentials.
template <>
struct FlashBf16Config<32> {
  using Traits = FlashBf16Traits<32, /*warps=*/4, /*m_tiles=*/2, /*block_n=*/64, /*min_blocks=*/4, /*packed_exp=*/true>;
  using LongTraits = Traits;
  static constexpr int kLongKeysAbove = 1 << 30;
  using Candidates = FlashBf16List<FlashBf16Traits<32, 4, 2, 64, /*min_blocks=*/3, true>,
                                   FlashBf16Traits<32, 4, 2, /*block_n=*/32, 4, true>,
                                   FlashBf16Traits<32, 4, 2, 64, 4, /*packed_exp=*/false, true, /*threshold=*/8>,
                                   FlashBf16Traits<32, 4, 2, 64, 3, /*packed_exp=*/false, true, /*threshold=*/8>>;
};
// D = 64: up to 1K keys, 4 warps x 16 rows (64-row tiles), 4 CTAs per SM
// (v6; was 8 warps x 16 rows, 2 CTAs/SM): self N = 512 0.561 -> 0.504 ms
// (1.21x -> 1.27x varlen FA2), target Lmax 1024 0.043 -> 0.033 ms and
// 0.048 -> 0.034 ms (1.04x -> 1.35x, 1.32x -> 1.85x; with the lower
// longest-first bound) in one H200 call, bench/NOTES.md v6. Past 1K keys,
// 2 m-tiles per warp and 128-key tiles (1.373 -> 1.301 ms at N = 4096 in
// the variant harness; not confirmed by the full benchmark, see
// bench/NOTES.md v4).
template <>
struct FlashBf16Config<64> {
  using Traits = FlashBf16Traits<64, /*warps=*/4, /*m_tiles=*/1, /*block_n=*/64, /*min_blocks=*/4, /*packed_exp=*/true>;
  using LongTraits = FlashBf16Traits<64, 4, 2, 128, 2, true>;
  static constexpr int kLongKeysAbove = 1024;
  using Candidates = FlashBf16List<>;
};
// D = 128: MMA-bound; two m-tiles per warp halve shared-memory reads per flop.
template <>
struct FlashBf16Config<128> {
  using Traits = FlashBf16Traits<128, /*warps=*/4, /*m_tiles=*/2, /*block_n=*/64, /*min_blocks=*/2, /*packed_exp=*/true>;
  using LongTraits = Traits;
  static constexpr int kLongKeysAbove = 1 << 30;
  using Candidates = FlashBf16List<>;
};

// bf16 Hopper kernel (wgmma, sm_90a only; flash_wgmma_kernel.cuh). Each
// warpgroup (4 warps, 128 threads) owns 64 query rows of the CTA's tile:
// S = Q K^T with Q and K read by the tensor cores straight from shared
// memory, P kept in registers as the A operand of O += P V, V read as a
// transposed (MN-major) B operand. Tiles live in shared memory in the
// swizzled layout the wgmma descriptors name (rows of kSwizzleBytes, 16-byte
// chunks XOR-permuted by row), filled by cp.async kStages deep.
template <int kHeadDim_, int kBlockN_, int kWarpGroups_, int kMinBlocksPerSm_, int kStages_ = 2,
          bool kOverlap_ = false, bool kPackedExp_ = true, int kRescaleThreshold_ = (kPackedExp_ ? 0 : 8),
          bool kWidePv_ = false>
struct FlashWgmmaTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpGroups = kWarpGroups_;
  static constexpr int kThreads = kWarpGroups * 128;
  static constexpr int kBlockM = kWarpGroups * 64;  // wgmma M is 64 per warpgroup
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // K/V tiles in shared memory; kPrefetch of them are loading while one is
  // computed on (and, with kOverlap, one more is still read by P V).
  static constexpr int kStages = kStages_;
  // Intra-warpgroup overlap (as FlashAttention-3): S_j = Q K_j^T and
  // O += P_(j-1) V_(j-1) are issued together; the softmax of S_j runs while
  // the tensor cores do P_(j-1) V_(j-1). Costs one more P in registers and
  // one more stage.
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kPrefetch = kOverlap ? kStages - 2 : kStages - 1;
  // true: exponentials by ex2.approx.bf16x2 and row sums by an mma.sync
  // against ones (as FlashBf16Traits); false: fp32 ex2 and fp32 row sums
  // (no mma.sync between the warpgroups' wgmmas on the tensor pipe).
  static constexpr bool kPackedExp = kPackedExp_;
  // Lazy rescaling, as FlashBf16Traits (by default with fp32 exponentials only).
  static constexpr int kRescaleThreshold = kRescaleThreshold_;
  // 128-byte swizzle where a row holds 64 columns; D = 32 rows are 64 bytes.
  static constexpr int kSwizzleBytes = kHeadDim * 2 >= 128 ? 128 : kHeadDim * 2;
  static constexpr int kColBlocks = kHeadDim * 2 / kSwizzleBytes;  // column blocks of kSwizzleBytes
  static constexpr int kChunksPerRow = kHeadDim / 8;                // 16-byte chunks
  // O += P V runs one wgmma per column block (N = 64, or 32 at D = 32), or
  // with kWidePv one over all of D (N = 128 at D = 128: half the P V
  // wgmmas, and their descriptor moves, per tile).
  static constexpr bool kWidePv = kWidePv_;
  static constexpr int kPvN = kWidePv ? kHeadDim : kSwizzleBytes / 2;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKvTileBytes = kBlockN * kHeadDim * 2;
  // + 1024: the dynamic shared memory base is rounded up to the swizzle
  // pattern's 1024-byte period.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKvTileBytes + 1024;

  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "wgmma kernel: head_dim 32, 64 or 128");
  static_assert(kBlockN == 64 || kBlockN == 128, "wgmma wrappers exist for N = 64 and 128 (S = Q K^T)");
  static_assert(!kWidePv || kHeadDim == 128, "the wide P V wgmma wrapper exists for N = 128");
  static_assert(kWarpGroups == 1 || kWarpGroups == 2, "one or two warpgroups per CTA");
  static_assert(kPrefetch >= 1 && kPrefetch <= 3, "1..3 tiles in flight (2..4 stages, one more with kOverlap)");
  static_assert(kSmemBytes <= 227 * 1024, "tiles exceed the H100/H200 shared memory per CTA");
};

// The wgmma tiles per head dim and whether the default ("auto") path uses
// them: above kMinKeys keys and kWgmmaMinQueries queries
// (flash_wgmma_launch.cuh). bench/NOTES.md v7/v8 has the measurements ("same
// call" = same inputs, same process, JAGRANK_FLASH_KERNEL switched per call).
// Traits, and AltTraits for target attention over long histories
// (PreferAltWgmmaTile). Candidates: further tiles kept for A/B runs only
// (JAGRANK_FLASH_KERNEL=wgmma_v<i>). v8 (ncu): the kernel was bound by its
// own integer instructions and, at D = 128, by 1 CTA/SM; kStages > 2 and
// kOverlap never helped (v7b).
template <int kHeadDim>
struct FlashWgmmaConfig;
template <typename... Traits>
struct FlashWgmmaList {};
// D = 32: the default above 768 keys (mma.sync below). v8, call at ~18:34
// UTC, same call: N = 1024 0.945 ms vs mma.sync 0.988, N = 2048 1.627 vs
// 1.770; mma.sync ahead on the shorter shapes (N = 256 0.112 vs 0.130,
// fill 0.1 0.087 vs 0.110). Packed exponentials: fp32 ones lost here (FADD
// issue slots; the row-sum HMMAs sit on an idle tensor pipe).
template <>
struct FlashWgmmaConfig<32> {
  using Traits = FlashWgmmaTraits<32, /*block_n=*/128, /*warp_groups=*/1, /*min_blocks=*/3>;
  using AltTraits = Traits;
  using Candidates = FlashWgmmaList<FlashWgmmaTraits<32, 128, 1, 4>, FlashWgmmaTraits<32, 128, 2, 2>,
                                    FlashWgmmaTraits<32, 64, 1, 5>,
                                    FlashWgmmaTraits<32, 128, 1, 3, 2, false, true, /*threshold=*/1>>;
  static constexpr bool kDefault = true;
  static constexpr int kMinKeys = 768;
};
// D = 64: the default. v8: 1 warpgroup x 64-key tiles, 4 CTAs/SM, fp32
// exponentials + lazy rescaling: self N = 512 0.402 ms (A/B row; v7 tile,
// 2 warpgroups x 2 CTAs packed, 0.490 in the call before), N = 4096 1.037
// (1.142). Target attention over histories above 1024 keys: AltTraits, 1
// warpgroup, 128-key tiles (v7b: Lmax 2048 0.059 -> 0.045 ms vs mma.sync;
// v8 call: its fp32 variant, Candidates[1], measured 0.036 vs 0.046 and 0.056
// vs 0.067 as A/B rows, not yet switched).
template <>
struct FlashWgmmaConfig<64> {
  using Traits = FlashWgmmaTraits<64, /*block_n=*/64, /*warp_groups=*/1, /*min_blocks=*/4, 2, false, /*packed_exp=*/false>;
  using AltTraits = FlashWgmmaTraits<64, /*block_n=*/128, /*warp_groups=*/1, /*min_blocks=*/2>;
  using Candidates = FlashWgmmaList<FlashWgmmaTraits<64, 128, 1, 3, 2, false, /*packed_exp=*/false>,
                                    FlashWgmmaTraits<64, 128, 1, 2, 2, false, /*packed_exp=*/false>,
                                    FlashWgmmaTraits<64, 64, 2, 2, 2, false, /*packed_exp=*/false>>;
  static constexpr bool kDefault = true;
  static constexpr int kMinKeys = 0;
};

// D = 128: the default. v8: 2 warpgroups x 64-key tiles, 2 CTAs/SM (128
// registers, no spill), fp32 exponentials + lazy rescaling: 0.899 ms (A/B
// row 0.928) vs mma.sync 1.334 and varlen FA2 1.268 in the same call; the
// 1-CTA 128-key tile (v7's best) 1.251-1.300 in the call before. One N = 128
// P V wgmma per 16 keys (Candidates[0]) measured the same (0.929).
template <>
struct FlashWgmmaConfig<128> {
  using Traits = FlashWgmmaTraits<128, /*block_n=*/64, /*warp_groups=*/2, /*min_blocks=*/2, 2, false, /*packed_exp=*/false>;
  using AltTraits = Traits;
  using Candidates = FlashWgmmaList<FlashWgmmaTraits<128, 64, 2, 2, 2, false, false, 8, /*wide_pv=*/true>,
                                    FlashWgmmaTraits<128, 64, 2, 2>>;
  static constexpr bool kDefault = true;
  static constexpr int kMinKeys = 0;
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

#endif  // JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_
