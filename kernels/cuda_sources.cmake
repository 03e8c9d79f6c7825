# CUDA sources of jagrank_kernels (non-flash families) and the C ABI library.
# Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA is ON, after
# the jagrank_kernels target exists. Owner: CUDA kernels.
