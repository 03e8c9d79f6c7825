// Hopper (wgmma) instantiation, compiled for sm_90a only (flash_sources.cmake).
#include "kernels/flash/flash_wgmma_launch.cuh"

namespace jagrank {
namespace flash {
template Status LaunchFlashWgmmaBf16<32>(const AttentionParams&, cudaStream_t, WgmmaTile, int);
template bool WgmmaIsDefault<32>(const AttentionParams&);
}  // namespace flash
}  // namespace jagrank
