// Tile sizes of the jagged flash attention kernels. Device-independent
// constants only; included by the kernel and launcher sources.
#ifndef JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_
#define JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_

namespace jagrank {
namespace flash {

// bf16 tensor-core kernel (mma.sync m16n8k16). Each warp owns 16 query rows
// of the CTA's query tile and walks all key tiles of its sequence; K/V tiles
// are shared by the CTA's warps through shared memory, double-buffered with
// cp.async. The defaults after kHeadDim are the shipped choice per head dim;
// bench/NOTES.md has the measurements behind them (the benchmark instantiates
// other values to compare).
template <int kHeadDim_,
          int kBlockN_ = (kHeadDim_ <= 32 ? 128 : 64),
          int kMinBlocksPerSm_ = (kHeadDim_ <= 64 ? 2 : 1),
          int kPolyExpTiles_ = 0>
struct FlashBf16Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16;  // one m16 MMA tile
  static constexpr int kBlockM = kWarps * kRowsPerWarp;
  // D = 32: 128 keys per tile halves the barriers and softmax bookkeeping per
  // score, which dominate there (the MMAs are short); larger D keeps 64 to
  // hold S + O in registers without spilling.
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = 2;
  // How many of the kBlockN / 8 score tiles take their exponentials from a
  // polynomial on the FMA pipe (PolyExp2) instead of the special-function
  // unit, whose ~4e12 ex2/s are the floor at D = 32.
  static constexpr int kPolyExpTiles = kPolyExpTiles_;
  // Two CTAs (16 warps) per SM cap registers at 128 per thread; D = 128 needs
  // ~210 for its 16x128 O accumulator and Q fragments, so it runs one.
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix then fall in
  // 8 different 4-bank groups (no bank conflicts) for every D here.
  static constexpr int kSmemStride = kHeadDim + 8;  // elements
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kSmemStride * 2;

  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kBlockN % 16 == 0, "key tile must be a multiple of 16 (two n8 MMA tiles per ldmatrix.x4)");
  static_assert((kBlockM * kChunksPerRow) % kThreads == 0, "Q tile copy must divide evenly over the threads");
  static_assert(kPolyExpTiles >= 0 && kPolyExpTiles <= kBlockN / 8, "poly-exp tiles must be among the n8 tiles");
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

#endif  // JAGRANK_KERNELS_FLASH_FLASH_TRAITS_H_
