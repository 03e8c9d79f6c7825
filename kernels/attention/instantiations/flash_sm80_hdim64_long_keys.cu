// One instantiation per file: the 2-core build compiles them in parallel.
#include "kernels/attention/flash_launch.cuh"

template jagrank::Status jagrank::flash::LaunchFlashSm80<64, true>(const jagrank::AttentionParams&, cudaStream_t);
