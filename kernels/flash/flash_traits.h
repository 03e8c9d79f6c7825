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
          bool kSkipUnchangedRescale_ = true>
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
// D = 32: softmax-bound; 4 warps x 32 rows, 4 CTAs per SM (16 warps) to hide
// the MUFU/MMA latencies, packed bf16x2 exponentials.
template <>
struct FlashBf16Config<32> {
  using Traits = FlashBf16Traits<32, /*warps=*/4, /*m_tiles=*/2, /*block_n=*/64, /*min_blocks=*/4, /*packed_exp=*/true>;
  using LongTraits = Traits;
  static constexpr int kLongKeysAbove = 1 << 30;
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
};
// D = 128: MMA-bound; two m-tiles per warp halve shared-memory reads per flop.
template <>
struct FlashBf16Config<128> {
  using Traits = FlashBf16Traits<128, /*warps=*/4, /*m_tiles=*/2, /*block_n=*/64, /*min_blocks=*/2, /*packed_exp=*/true>;
  using LongTraits = Traits;
  static constexpr int kLongKeysAbove = 1 << 30;
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
