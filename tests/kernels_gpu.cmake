# GPU tests of the CUDA launchers (kernels/<family>/) and the C ABI
# (kernels/c_api/jagrank_c.h) against the CPU kernels. Label gpu; the device
# tests skip without a CUDA device, the bad-argument tests run everywhere.
# Owner: CUDA kernels.
if(JAGRANK_WITH_CUDA)
  jagrank_add_test(NAME jagrank_kernels_gpu_test
    SOURCES kernels_gpu_test.cc
    LIBS jagrank_kernels jagrank_kernels_c
    LABELS gpu
    TIMEOUT 300)
endif()
