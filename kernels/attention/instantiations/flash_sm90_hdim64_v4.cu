// One instantiation per file: the 2-core build compiles them in parallel.
#include "kernels/attention/flash_wgmma_launch.cuh"

template jagrank::Status jagrank::flash::LaunchFlashSm90Experiment<64, 4>(const jagrank::AttentionParams&,
                                                                           cudaStream_t);
