# CUDA sources of the flash attention kernels (jagged self/target attention,
# padded flash). Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA
# is ON, after the jagrank_kernels target exists. Owner: flash attention.
