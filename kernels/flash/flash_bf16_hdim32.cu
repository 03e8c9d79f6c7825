// One instantiation per file keeps the 2-core build parallel and incremental.
#include "kernels/flash/flash_launch.cuh"

namespace jagrank {
namespace flash {
template Status LaunchFlashBf16<32>(const AttentionParams&, cudaStream_t);
template Status LaunchFlashBf16Candidate<32>(const AttentionParams&, cudaStream_t, int);
}  // namespace flash
}  // namespace jagrank
