// Hopper (wgmma) instantiation, compiled for sm_90a only (flash_sources.cmake).
#include "kernels/flash/flash_wgmma_launch.cuh"

namespace jagrank {
namespace flash {
template Status LaunchFlashWgmmaBf16<128>(const AttentionParams&, cudaStream_t, WgmmaTile, int);
template bool WgmmaIsDefault<128>(const AttentionParams&);
}  // namespace flash
}  // namespace jagrank
