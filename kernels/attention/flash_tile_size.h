// The one place that picks a bf16 flash attention kernel: which kernel
// family runs a batch (mma.sync on any sm_80+ device, wgmma on compute
// capability 9.0 in an sm_90a build) and with which tiles, per head dim and
// batch shape. Plain C++ (no CUDA headers): the launchers, the traits and
// the tests read the same function.
//
// Figures: one H200, bf16, ms per call, against varlen FlashAttention-2 (FA2)
// on the same inputs; "self N" = self-attention over B sequences of up to N
// tokens, "target Lmax" = one head of candidates over histories of up to
// Lmax keys (bench/attention_vs_torch.py, kernels/NOTES.md).
#ifndef JAGRANK_KERNELS_ATTENTION_FLASH_TILE_SIZE_H_
#define JAGRANK_KERNELS_ATTENTION_FLASH_TILE_SIZE_H_

#include <cstdint>

namespace jagrank {
namespace flash {

// The bf16 kernel families.
enum class FlashArch {
  kSm80,  // mma.sync m16n8k16 + ldmatrix + cp.async (flash_kernel.cuh): every sm_80+ device
  kSm90,  // wgmma from shared-memory descriptors (flash_wgmma_kernel.cuh): sm_90a code, CC 9.0 only
};

// The tiles of one bf16 kernel.
struct FlashTile {
  int warps;        // kSm80: warps per CTA (each 16 * m_tiles query rows); kSm90: warpgroups (64 rows each)
  int m_tiles;      // kSm80: m16 MMA tiles per warp (1 or 2); kSm90: 1
  int block_n;      // keys per K/V tile
  int min_blocks;   // CTAs per SM the registers are capped for (__launch_bounds__)
  bool packed_exp;  // bf16x2 exponentials and row sums by an MMA against ones; false: fp32
                    // exponentials and adds, with lazy rescaling

  constexpr bool operator==(const FlashTile& o) const {
    return warps == o.warps && m_tiles == o.m_tiles && block_n == o.block_n && min_blocks == o.min_blocks &&
           packed_exp == o.packed_exp;
  }
  constexpr bool operator!=(const FlashTile& o) const { return !(*this == o); }
};

// Keys above which a batch counts as "long keys" (and, on kSm90, queries at
// most half the keys: target attention over long histories).
inline constexpr int kFlashLongKeysAbove = 1024;

// Tiles per (kernel family, head dim, long keys). head_dim is 32, 64 or 128
// (kFlashSupportedHeadDims); anything else gets {0, ...}, which the traits'
// static_asserts reject.
constexpr FlashTile FlashTileSize(FlashArch arch, int head_dim, bool long_keys) {
  if (arch == FlashArch::kSm80) {
    // D = 32 is softmax-bound: 4 warps x 2 m-tiles (128 rows), 64-key tiles,
    // 4 CTAs/SM to hide the MUFU/MMA latencies, packed exponentials. 64- over
    // 128-key tiles: 1.168 vs 1.201 ms at self N = 1024; the whole tile 1.105
    // ms. Packed exponentials alone: -1 to -4%.
    if (head_dim == 32) return {4, 2, 64, 4, true};
    if (head_dim == 64) {
      // Above 1K keys: 2 m-tiles per warp, 128-key tiles (1.373 -> 1.301 ms
      // at self N = 4096 on the same inputs; the full benchmark measured the
      // two alike, 1.403 vs 1.405).
      if (long_keys) return {4, 2, 128, 2, true};
      // 4 warps x 16 rows (64-row tiles), 4 CTAs/SM instead of 8 warps x 16
      // rows, 2 CTAs/SM: self N = 512 0.561 -> 0.504 ms (1.21x -> 1.27x FA2);
      // target Lmax 1024 0.043 -> 0.033 ms; fewer padding rows in the last
      // tile of a short sequence.
      return {4, 1, 64, 4, true};
    }
    // D = 128 is MMA-bound: two m-tiles per warp halve the shared-memory
    // reads per flop (1.468 vs 1.843 ms at self N = 1024).
    if (head_dim == 128) return {4, 2, 64, 2, true};
    return {0, 0, 0, 0, false};
  }
  // kSm90. The kernel is bound by its own integer instructions (ncu: ALU the
  // busiest pipe) and, with 1 CTA/SM, by each CTA's start and end; more
  // cp.async stages and FlashAttention-3's intra-warpgroup overlap never
  // helped (D = 128: 2 stages 1.448 ms, 3 stages + overlap 1.456-1.563).
  if (head_dim == 32) {
    // 1 warpgroup x 128-key tiles, 3 CTAs/SM, packed exponentials (fp32 ones
    // lost here: the FADDs cost issue slots while the row-sum MMAs sit on an
    // idle tensor pipe; N = 2048 1.826 vs 1.675 ms). Used above 768 keys
    // only, see ChooseFlashKernel.
    return {1, 1, 128, 3, true};
  }
  if (head_dim == 64) {
    // Target attention over long histories: 64-row tiles give the few query
    // tiles of the longest histories twice the CTAs (Lmax 2048 0.054 ->
    // 0.045 ms, Lmax 4096 0.094 -> 0.075 against the main tile).
    if (long_keys) return {1, 1, 128, 2, true};
    // 1 warpgroup x 64-key tiles, fp32 exponentials with lazy rescaling:
    // self N = 512 0.406 ms (1.57x FA2), N = 4096 1.021 (1.37x) at 4 CTAs/SM;
    // 2 warpgroups x 2 CTAs packed: 0.490 / 1.142. 5 CTAs/SM (96 registers,
    // 8 bytes spilled): the exponentials are as much MUFU work as the MMAs are
    // tensor work, and a fifth resident warpgroup interleaves them further
    // (grid launch 1.06-1.15x the 4-CTA tile over the D = 64 self shapes,
    // kernels/NOTES.md).
    return {1, 1, 64, 5, false};
  }
  if (head_dim == 128) {
    // 2 warpgroups x 64-key tiles, 2 CTAs/SM (128 registers, no spill), fp32
    // exponentials with lazy rescaling: self N = 1024 0.899 ms against
    // mma.sync 1.334 and FA2 1.268; 1 CTA/SM with 128-key tiles 1.25-1.30.
    return {2, 1, 64, 2, false};
  }
  return {0, 0, 0, 0, false};
}

// Whether (arch, head_dim) has a separate long-keys tile (only then is a
// long-keys kernel compiled).
constexpr bool FlashHasLongKeysTile(FlashArch arch, int head_dim) {
  return FlashTileSize(arch, head_dim, true) != FlashTileSize(arch, head_dim, false);
}

// The kernel one batch runs on.
struct FlashKernel {
  FlashArch arch;
  bool long_keys;  // the (arch, head dim)'s long-keys tile; false where it has none
};

// Picks the bf16 kernel of a batch. `wgmma_available`: the build has the
// sm_90a kernels and the current device has compute capability 9.0.
//
// wgmma needs more than 128 queries in the longest sequence: below that the
// mma.sync kernel's 64-row tiles (D = 64) pad less than wgmma's 128 rows
// (target 1024 x 16-128 candidates: mma.sync 0.033 ms vs wgmma 0.035-0.041;
// never slower). At D = 32, wgmma only above 768 keys: N = 1024 0.945 ms vs
// mma.sync 0.988, N = 2048 1.627 vs 1.770, while mma.sync leads on short
// sequences (N = 256 0.112 vs 0.130; fill 0.1 0.087 vs 0.110).
//
// Long keys: on kSm80 any batch with more than kFlashLongKeysAbove keys; on
// kSm90 only target attention over such histories (queries at most half the
// keys): at Lmax 1024 the main tile measured faster or equal (0.031 vs 0.036
// ms; 0.041 vs 0.042), and self-attention keeps it.
inline FlashKernel ChooseFlashKernel(bool wgmma_available, int head_dim, int max_q_len, int max_k_len) {
  constexpr int kWgmmaMinQueries = 128;
  const int wgmma_min_keys = head_dim == 32 ? 768 : 0;
  const bool long_keys = max_k_len > kFlashLongKeysAbove;
  if (wgmma_available && max_q_len > kWgmmaMinQueries && max_k_len > wgmma_min_keys) {
    const bool target_long = long_keys && static_cast<int64_t>(max_q_len) * 2 <= max_k_len;
    return {FlashArch::kSm90, target_long && FlashHasLongKeysTile(FlashArch::kSm90, head_dim)};
  }
  return {FlashArch::kSm80, long_keys && FlashHasLongKeysTile(FlashArch::kSm80, head_dim)};
}

// How a wgmma launch finds its tiles: one CTA per FlashGrid tile, or
// persistent CTAs (as many as are resident at once) over the list of the
// tiles that have rows, longest first (flash_wgmma_kernel.cuh).
//
// A grid of under kFlashPersistentMinWaves waves launches few empty tiles,
// and there the persistent loop measured slower (one H100, same process,
// device time: target attention over log-normal histories, 4-5 waves, 0.029
// vs 0.023 ms at Lmax 1024, 0.072 vs 0.058 at Lmax 4096). Above it the
// persistent CTAs win where most grid tiles are empty (heavy tails: Zipf
// s = 1.5 to 8192 0.52-0.60 vs 0.80-0.83 ms, Pareto 0.78-0.84 vs 1.09-1.17 at
// D = 64). Where the one-tile kernel fits more CTAs per SM than the
// persistent one (D = 64: 5 against 4) and at least kFlashGridMinFill of
// the grid's rows are tokens, the grid wins instead: full length B = 128
// N = 4096 5.54-5.59 vs 6.06-6.13 ms, B = 1024 N = 1024 2.87-3.09 vs
// 3.26-3.47, uniform fill 0.5 0.38 vs 0.41-0.42, log-normal (fill 0.2)
// 0.85-1.00x the persistent time; at fills of 0.05-0.06 (Zipf s = 1.1-1.2)
// the two measured alike.
//
// grid_tiles: FlashGrid's tiles; resident: persistent CTAs resident at
// once; grid_fits_more_ctas: the one-tile kernel's CTAs per SM exceed the
// persistent kernel's; fill: query tokens over batch * max_q_len, negative
// when the caller did not say (AttentionParams::q_tokens_hint).
inline constexpr int kFlashPersistentMinWaves = 8;
inline constexpr double kFlashGridMinFill = 0.1;

inline bool ChooseFlashPersistent(int64_t grid_tiles, int64_t resident, bool grid_fits_more_ctas, double fill) {
  if (grid_tiles < int64_t{kFlashPersistentMinWaves} * resident) return false;
  return !(grid_fits_more_ctas && fill >= kFlashGridMinFill);
}

}  // namespace flash
}  // namespace jagrank

#endif  // JAGRANK_KERNELS_ATTENTION_FLASH_TILE_SIZE_H_
