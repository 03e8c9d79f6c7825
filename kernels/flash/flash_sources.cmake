# CUDA sources of the flash attention kernels (jagged self/target attention,
# padded flash). Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA
# is ON, after the jagrank_kernels target exists. Owner: flash attention.
# One .cu per bf16 head dim so that the 2-core build compiles them in parallel
# and a change to one dispatch does not rebuild the others. mma.sync,
# ldmatrix and cp.async need sm_80+; plain sm_90 is enough for them.
# flash_schedule.cu: the longest-first order kernel and its workspace.
target_sources(jagrank_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim32.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim64.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_bf16_hdim128.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fp32.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_schedule.cu
)

# Hopper kernel (wgmma): sm_90a only, so built only when the architectures
# name 90 (90, 90a, 90-real, ...), in an object library with its own
# -gencode instead of the target's architecture list (a plain sm_90 pass
# rejects wgmma). flash_attention.cu picks it at run time on compute
# capability 9.0 devices; everything else keeps the mma.sync kernel.
set(_jagrank_flash_wgmma OFF)
foreach(_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(_arch MATCHES "^90")
    set(_jagrank_flash_wgmma ON)
  endif()
endforeach()
if(_jagrank_flash_wgmma)
  add_library(jagrank_flash_sm90a OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/flash_wgmma_hdim32.cu
    ${CMAKE_CURRENT_LIST_DIR}/flash_wgmma_hdim64.cu
    ${CMAKE_CURRENT_LIST_DIR}/flash_wgmma_hdim128.cu
  )
  set_target_properties(jagrank_flash_sm90a PROPERTIES
    CUDA_ARCHITECTURES OFF
    CUDA_RUNTIME_LIBRARY Shared
    POSITION_INDEPENDENT_CODE ON)
  target_compile_options(jagrank_flash_sm90a PRIVATE -gencode=arch=compute_90a,code=sm_90a)
  target_compile_definitions(jagrank_flash_sm90a PRIVATE JAGRANK_WITH_CUDA=1)
  target_include_directories(jagrank_flash_sm90a PRIVATE ${PROJECT_SOURCE_DIR})
  jagrank_warnings(jagrank_flash_sm90a)
  target_sources(jagrank_kernels PRIVATE $<TARGET_OBJECTS:jagrank_flash_sm90a>)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/flash_attention.cu PROPERTIES
    COMPILE_DEFINITIONS JAGRANK_FLASH_WGMMA=1)
endif()
