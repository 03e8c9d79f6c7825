// The float32 kernels are small (CUDA cores, no tensor-core tiles): all head
// dims in one file.
#include "kernels/flash/flash_launch.cuh"

namespace jagrank {
namespace flash {
template Status LaunchFlashFp32<32>(const AttentionParams&, cudaStream_t);
template Status LaunchFlashFp32<64>(const AttentionParams&, cudaStream_t);
template Status LaunchFlashFp32<128>(const AttentionParams&, cudaStream_t);
}  // namespace flash
}  // namespace jagrank
