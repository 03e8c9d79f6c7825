# CUDA sources of jagrank_kernels (non-flash families) and the C ABI library.
# Included by kernels/CMakeLists.txt only when JAGRANK_WITH_CUDA is ON, after
# the jagrank_kernels target exists. Owner: CUDA kernels.
target_sources(jagrank_kernels PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_check.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cublas_handles.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/embedding_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/interaction_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/padded_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/linear_launch.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cast_launch.cu
)
