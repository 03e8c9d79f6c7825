# Benchmark binaries (owner: benchmarks): run briefly on the CPU backend so
# that they build, run and report what they claim. Timing targets live in the
# benchmark results, not here.
if(JAGRANK_BUILD_BENCH)
  jagrank_add_test(NAME bench_model_test SOURCES bench_model_test.cc
                   LIBS nlohmann_json::nlohmann_json TIMEOUT 120)
  target_compile_definitions(bench_model_test PRIVATE
    JAGRANK_BENCH_MODEL_BINARY="$<TARGET_FILE:jagrank-bench-model>"
    JAGRANK_SERVER_BINARY="$<TARGET_FILE:jagrank-server>"
    JAGRANK_LOADGEN_BINARY="$<TARGET_FILE:jagrank-loadgen>"
    JAGRANK_HOST_CPU_SCRIPT="${PROJECT_SOURCE_DIR}/bench/host_cpu_per_call.sh")
  add_dependencies(bench_model_test jagrank-bench-model jagrank-server jagrank-loadgen)
endif()
