# Flash attention tests (owner: flash attention). CUDA builds only: the
# kernels exist only there. The device cases skip without a GPU; the
# argument checks run everywhere.
if(JAGRANK_WITH_CUDA)
  jagrank_add_test(NAME flash_attention_gpu_test
    SOURCES flash_attention_gpu_test.cc
    LIBS jagrank_kernels
    LABELS gpu
    TIMEOUT 300)
endif()
