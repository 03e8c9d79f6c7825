# Sanitizer and fuzzing builds. Every target of the project (our code and the
# generated protobuf code) is compiled and linked with the sanitizer; the
# system libraries (gRPC, protobuf, Abseil, yaml-cpp, OpenBLAS) are not
# instrumented. CPU only, each in its own build directory:
#   JAGRANK_SANITIZER=address  AddressSanitizer (with LeakSanitizer) and
#                              UndefinedBehaviorSanitizer; -fno-sanitize-recover
#                              makes every UBSan report fatal (make test-asan).
#   JAGRANK_SANITIZER=thread   ThreadSanitizer (make test-tsan).
#   JAGRANK_FUZZ=ON            clang only: libFuzzer coverage instrumentation,
#                              ASan and UBSan; the targets of fuzz/ (make fuzz).
if(NOT JAGRANK_SANITIZER AND NOT JAGRANK_FUZZ)
  return()
endif()
if(JAGRANK_WITH_CUDA)
  message(FATAL_ERROR "JAGRANK_SANITIZER / JAGRANK_FUZZ are for CPU builds: configure with -DJAGRANK_ENABLE_CUDA=OFF")
endif()
if(JAGRANK_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "JAGRANK_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(JAGRANK_SANITIZER)
    message(FATAL_ERROR "JAGRANK_FUZZ brings its own sanitizers (address, undefined): leave JAGRANK_SANITIZER empty")
  endif()
  set(_jagrank_san_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
  add_compile_options(-fsanitize=fuzzer-no-link)
elseif(JAGRANK_SANITIZER STREQUAL "address")
  set(_jagrank_san_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
else()
  set(_jagrank_san_flags -fsanitize=thread)
  # The map field layout of the uninstrumented libprotobuf (see the header).
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include ${CMAKE_CURRENT_LIST_DIR}/tsan_protobuf_abi.h>")
endif()
add_compile_options(${_jagrank_san_flags} -fno-omit-frame-pointer -g)
add_link_options(${_jagrank_san_flags})
# (The kernels drop target_clones in these builds: kernels/cpu_common.h.)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # The runtimes linked into each executable (clang's default). As two shared
  # libraries, GCC's libubsan keeps its own report file and ignores
  # log_path: scripts/sanitizer-ctest.sh needs every report in a file.
  if(JAGRANK_SANITIZER STREQUAL "address")
    add_link_options(-static-libasan -static-libubsan)
  else()
    add_link_options(-static-libtsan)
  endif()
  # GCC 12 with -fsanitize=address reports a false -Wmaybe-uninitialized
  # inside libstdc++'s <regex> (std::__detail::_Executor, used by two tests):
  # the sanitizer's instrumentation hides the initialisation from the
  # warning's flow analysis (GCC's manual warns that -fsanitize may cause such
  # false positives). Normal builds keep the warning as an error.
  list(APPEND JAGRANK_CXX_WARNINGS -Wno-maybe-uninitialized)
endif()
if(JAGRANK_FUZZ)
  message(STATUS "jagrank: fuzz build (libFuzzer, address, undefined)")
else()
  message(STATUS "jagrank: sanitizer ${JAGRANK_SANITIZER}")
endif()
