// The bf16 flash kernel choice (kernels/attention/flash_tile_size.h): which
// kernel family and tile each head dim and batch shape gets. Plain C++: runs
// without CUDA. The tiles are the measured ones the header's comments
// justify; a change here is a change of the shipped kernels.
#include <gtest/gtest.h>

#include "kernels/attention/flash_tile_size.h"

namespace jagrank {
namespace flash {
namespace {

constexpr bool kWgmma = true;
constexpr bool kNoWgmma = false;

void ExpectKernel(FlashKernel got, FlashArch arch, bool long_keys) {
  EXPECT_EQ(got.arch, arch);
  EXPECT_EQ(got.long_keys, long_keys);
}

TEST(FlashTileTest, EverySupportedHeadDimHasATilePerFamily) {
  for (int head_dim : {32, 64, 128}) {
    for (FlashArch arch : {FlashArch::kSm80, FlashArch::kSm90}) {
      for (bool long_keys : {false, true}) {
        const FlashTile tile = FlashTileSize(arch, head_dim, long_keys);
        EXPECT_GE(tile.warps, 1) << head_dim;
        EXPECT_GE(tile.m_tiles, 1) << head_dim;
        EXPECT_EQ(tile.block_n % 16, 0) << head_dim;
        EXPECT_GE(tile.min_blocks, 1) << head_dim;
      }
    }
  }
  EXPECT_EQ(FlashTileSize(FlashArch::kSm80, 48, false).warps, 0);
  // Only D = 64 has a separate long-keys tile, on both families.
  EXPECT_FALSE(FlashHasLongKeysTile(FlashArch::kSm80, 32));
  EXPECT_TRUE(FlashHasLongKeysTile(FlashArch::kSm80, 64));
  EXPECT_FALSE(FlashHasLongKeysTile(FlashArch::kSm80, 128));
  EXPECT_FALSE(FlashHasLongKeysTile(FlashArch::kSm90, 32));
  EXPECT_TRUE(FlashHasLongKeysTile(FlashArch::kSm90, 64));
  EXPECT_FALSE(FlashHasLongKeysTile(FlashArch::kSm90, 128));
}

TEST(FlashTileTest, ShippedTiles) {
  // {warps (warpgroups on sm90), m_tiles, block_n, min_blocks, packed_exp}
  EXPECT_EQ(FlashTileSize(FlashArch::kSm80, 32, false), (FlashTile{4, 2, 64, 4, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm80, 64, false), (FlashTile{4, 1, 64, 4, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm80, 64, true), (FlashTile{4, 2, 128, 2, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm80, 128, false), (FlashTile{4, 2, 64, 2, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm90, 32, false), (FlashTile{1, 1, 128, 3, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm90, 64, false), (FlashTile{1, 1, 64, 5, false}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm90, 64, true), (FlashTile{1, 1, 128, 2, true}));
  EXPECT_EQ(FlashTileSize(FlashArch::kSm90, 128, false), (FlashTile{2, 1, 64, 2, false}));
}

TEST(FlashTileTest, WithoutWgmmaEveryBatchRunsMmaSync) {
  ExpectKernel(ChooseFlashKernel(kNoWgmma, 64, 4096, 4096), FlashArch::kSm80, true);
  ExpectKernel(ChooseFlashKernel(kNoWgmma, 64, 1, 1024), FlashArch::kSm80, false);
  ExpectKernel(ChooseFlashKernel(kNoWgmma, 64, 1, 1025), FlashArch::kSm80, true);
  // No long-keys tile at D = 32 and 128: the one tile serves every length.
  ExpectKernel(ChooseFlashKernel(kNoWgmma, 32, 4096, 4096), FlashArch::kSm80, false);
  ExpectKernel(ChooseFlashKernel(kNoWgmma, 128, 4096, 4096), FlashArch::kSm80, false);
}

TEST(FlashTileTest, WgmmaOnlyAbove128Queries) {
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 128, 512), FlashArch::kSm80, false);
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 129, 512), FlashArch::kSm90, false);
  ExpectKernel(ChooseFlashKernel(kWgmma, 128, 129, 129), FlashArch::kSm90, false);
  // Few candidates over long histories: mma.sync with its long-keys tile.
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 100, 2048), FlashArch::kSm80, true);
}

TEST(FlashTileTest, WgmmaAtHeadDim32OnlyAbove768Keys) {
  ExpectKernel(ChooseFlashKernel(kWgmma, 32, 768, 768), FlashArch::kSm80, false);
  ExpectKernel(ChooseFlashKernel(kWgmma, 32, 769, 769), FlashArch::kSm90, false);
  ExpectKernel(ChooseFlashKernel(kWgmma, 32, 200, 4096), FlashArch::kSm90, false);
}

TEST(FlashTileTest, WgmmaLongKeysTileOnlyForTargetAttentionOverLongHistories) {
  // Queries at most half the keys, more than 1024 keys: the long-keys tile.
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 1024, 2048), FlashArch::kSm90, true);
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 300, 2048), FlashArch::kSm90, true);
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 300, 1024), FlashArch::kSm90, false);
  // Self-attention (queries = keys) keeps the main tile.
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 4096, 4096), FlashArch::kSm90, false);
  ExpectKernel(ChooseFlashKernel(kWgmma, 64, 1025, 2048), FlashArch::kSm90, false);
}

// 660 resident CTAs (132 SMs x 5): 8 waves are 5280 grid tiles.
TEST(FlashTileTest, PersistentTilesFromEightWavesUnlessAFullBatchRunsMoreCtasOnTheGrid) {
  constexpr int64_t kResident = 660;
  constexpr double kUnknown = -1.0;
  // Under 8 waves: one CTA per tile, whatever the fill.
  EXPECT_FALSE(ChooseFlashPersistent(5279, kResident, false, kUnknown));
  EXPECT_FALSE(ChooseFlashPersistent(5279, kResident, true, 0.01));
  // From 8 waves with the same CTAs per SM in both kernels: persistent, full or not.
  EXPECT_TRUE(ChooseFlashPersistent(5280, kResident, false, kUnknown));
  EXPECT_TRUE(ChooseFlashPersistent(5280, kResident, false, 1.0));
  // The grid's kernel fits more CTAs per SM: the grid at fills from 0.1,
  // persistent below it and when the caller gave no token count.
  EXPECT_FALSE(ChooseFlashPersistent(16384, kResident, true, 1.0));
  EXPECT_FALSE(ChooseFlashPersistent(16384, kResident, true, kFlashGridMinFill));
  EXPECT_TRUE(ChooseFlashPersistent(16384, kResident, true, 0.09));
  EXPECT_TRUE(ChooseFlashPersistent(16384, kResident, true, kUnknown));
}

}  // namespace
}  // namespace flash
}  // namespace jagrank
