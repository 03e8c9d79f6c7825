# CUDA sources of jagrank_kernels (non-flash families) and the C ABI library.
# Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA is ON, after
# the jagrank_kernels target exists. Owner: CUDA kernels.
target_sources(jagrank_kernels PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cublas_handles.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/embedding_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/interaction_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/padded_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/linear_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cast_launch.cu
)

# One CUDA runtime per process: the shared libcudart (the same one
# CUDA::cudart links, and the one on the GPU machines' images).
set_target_properties(jagrank_kernels PROPERTIES CUDA_RUNTIME_LIBRARY Shared)

# C ABI (kernels/jagrank_c.h) for ctypes and other languages. Exports only the
# jagrank_* C functions: --exclude-libs hides everything pulled in from the
# static jagrank_kernels, so a program may link both without clashes.
add_library(jagrank_kernels_c SHARED ${CMAKE_CURRENT_SOURCE_DIR}/cuda/jagrank_c.cc)
target_link_libraries(jagrank_kernels_c PRIVATE jagrank_kernels)
target_link_options(jagrank_kernels_c PRIVATE -Wl,--exclude-libs,ALL)
set_target_properties(jagrank_kernels_c PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  CUDA_RUNTIME_LIBRARY Shared)
jagrank_warnings(jagrank_kernels_c)
