# CUDA sources of the flash attention kernels (jagged self/target attention,
# padded flash). Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA
# is ON, after the jagrank_kernels target exists. Owner: flash attention.
# One .cu per bf16 head dim so that the 2-core build compiles them in parallel
# and a change to one dispatch does not rebuild the others. mma.sync,
# ldmatrix and cp.async need sm_80+; plain sm_90 is enough (no wgmma).
# flash_schedule.cu: the longest-first order kernel and its workspace.
target_sources(jagrank_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim32.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim64.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim128.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fp32.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_schedule.cu
)
